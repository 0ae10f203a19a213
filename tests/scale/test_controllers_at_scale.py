"""Every controller the project ships, at prod-7500's size, under the memory limit its manifest sets.

The fleet is on a real API server (tests/scale/conftest.py: 7,510 nodes, every agent pod Running in the ``fleet`` tests). Each
controller is its rendered workload's pod, created as its controller would create it (the CronJob's Job
pod, the Deployment's pod) and bound to a system node, its container run by the stand-in runtime
(tests/controlplane/containers.py) with the pod's service account and its memory limit as a cgroup (v1
memory controller, as a kubelet sets it): over the limit the kernel kills it, as on a node.
"""

from __future__ import annotations

import concurrent.futures
import copy
import datetime as dt
import gzip
import ipaddress
import json
import os
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from modules.cluster.manifests import render_manifests
from modules.cluster.objects import gang, serving_certs
from modules.cluster.scripts import approve_serving
from tests.cluster.fake_azure import FakeAzure
from tests.controlplane import policy_agent
from tests.controlplane.cluster import ControlPlane, StartFailed, wait
from tests.controlplane.containers import Running, Runtime, quantity_bytes
from tests.controlplane.test_node_join import csr_object

from .conftest import Fleet
from .load import Loader, kubelet_status, node_body

HEALTH = "gpu-health"
FATAL_XID_TAINT = "gpu.example.com/gpu-fatal-xid"
"""The rendered rule's taint (stack config: the label domain)."""


def rendered(fleet: Fleet, kind: str, name: str) -> dict[str, Any]:
    (obj,) = [o for o in render_manifests(fleet.prep.addons) if o["kind"] == kind and o["metadata"]["name"] == name]
    return obj


def pod_of(fleet: Fleet, workload: dict[str, Any], name: str) -> dict[str, Any]:
    """The pod ``workload``'s controller would create, bound to the first system node, as the API server
    stores it (its admission adds the service-account volume)."""
    template = (
        workload["spec"]["jobTemplate"]["spec"]["template"]
        if workload["kind"] == "CronJob"
        else workload["spec"]["template"]
    )
    spec = copy.deepcopy(template["spec"])
    system = next(n for n in fleet.nodes if n.pool == "system")
    spec["nodeName"] = system.name
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": workload["metadata"]["namespace"],
            "labels": template["metadata"].get("labels", {}),
        },
        "spec": spec,
    }
    code, made = fleet.cp.call("POST", f"/api/v1/namespaces/{body['metadata']['namespace']}/pods", body)
    assert code == 201, made
    return dict(made)


def limit_of(pod: dict[str, Any], container: str) -> int:
    (c,) = [c for c in pod["spec"]["containers"] if c["name"] == container]
    return quantity_bytes(c["resources"]["limits"]["memory"])


def within_limit(run: Running, pod: dict[str, Any], container: str, what: str) -> None:
    """The run's peak memory, printed for the record (docs/scale.md), is under the manifest's limit."""
    peak, limit = run.peak_bytes(), limit_of(pod, container)
    print(f"\n{what}: peak {peak / 2**20:.0f} MiB of {limit / 2**20:.0f} MiB")
    assert not run.oom_killed() and peak < limit, f"{what}: peak {peak} of {limit} bytes"


def finish(run: Running, timeout: float = 600) -> str:
    code = run.wait(timeout)
    out = run.output()
    assert not run.oom_killed(), f"{run.name} was killed at its memory limit ({run.limit} bytes):\n{out[-2000:]}"
    assert code == 0, out[-3000:]
    return out


@pytest.fixture(scope="module")
def runtime(fleet_api: Fleet, tmp_path_factory: pytest.TempPathFactory) -> Any:
    rt = Runtime(fleet_api.cp, tmp_path_factory.mktemp("scale-containers"))
    yield rt
    rt.stop()


def xid(cp: ControlPlane, node: str) -> None:
    """node-problem-detector's condition on ``node`` (its stand-in: no GPU here)."""
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    current = cp.get(f"/api/v1/nodes/{node}")["status"]["conditions"]
    condition = {
        "type": "GPUFatalXid",
        "status": "True",
        "reason": "FatalXid",
        "message": "XID 79",
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }
    code, out = cp.call_patch(f"/api/v1/nodes/{node}/status", {"status": {"conditions": [*current, condition]}})
    assert code == 200, out


def test_xid_remediation_fences_within_its_limit_at_fleet_size(fleet_api: Fleet, runtime: Runtime) -> None:
    bad = [n.name for n in fleet_api.nodes if n.pool == "h100-c"][:3]
    for name in bad:
        xid(fleet_api.cp, name)
    pod = pod_of(fleet_api, rendered(fleet_api, "CronJob", "gpu-remediation"), "xid-at-scale")
    run = runtime.start(pod, "remediate")
    out = finish(run)
    assert f"fenced (cordon + gpu.example.com/gpu-fatal-xid:NoExecute): {', '.join(sorted(bad))}" in out, out
    within_limit(run, pod, "remediate", f"xid remediation at {len(fleet_api.nodes)} nodes")


def test_xid_remediation_survives_a_fleet_wide_xid_within_its_limit(fleet_api: Fleet, runtime: Runtime) -> None:
    """A driver bug reports a fatal XID on every node of two pools at once (3,750): the job fences up to its cap,
    holds the rest back (exit non-zero, naming them), and stays under its memory limit: it keeps a few fields
    of each failing node, not the Node. Put back afterwards, so the other tests see a healthy fleet."""
    cp, key = fleet_api.cp, FATAL_XID_TAINT
    # Measured: whole Nodes took 121 MiB of the 128 MiB limit at 1,875 failing nodes; at 3,750 they do not fit.
    pool = [(i, n) for i, n in enumerate(fleet_api.nodes) if n.pool in ("h100-a", "h100-b")]
    preflight = fleet_api.prep.addons.preflight_key
    loader = Loader(cp)

    def conditions(xid: bool) -> Iterator[tuple[str, str, dict[str, Any]]]:
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        condition = {
            "type": "GPUFatalXid",
            "status": "True",
            "reason": "FatalXid",
            "message": "XID 79",
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }
        for i, node in pool:
            kept = kubelet_status(node, i)["conditions"]
            yield (
                "PATCH",
                f"/api/v1/nodes/{node.name}/status",
                {"status": {"conditions": [*kept, *([condition] if xid else [])]}},
            )

    loader.run(conditions(xid=True))
    pod = pod_of(fleet_api, rendered(fleet_api, "CronJob", "gpu-remediation"), "xid-fleet-wide")
    run = runtime.start(pod, "remediate")
    try:
        code = run.wait(600)
        out = run.output()
        assert not run.oom_killed(), f"killed at its memory limit ({run.limit} bytes):\n{out[-2000:]}"
        assert code != 0 and "not fenced, over the cap" in out, out[-3000:]
        within_limit(run, pod, "remediate", f"xid remediation, {len(pool):,} nodes failing at once")
    finally:
        run.stop()
        loader.run(conditions(xid=False))
        loader.run(
            (
                "PATCH",
                f"/api/v1/nodes/{node.name}",
                {
                    "metadata": {"annotations": {f"{key}-since": None, f"{key}-message": None}},
                    "spec": {"unschedulable": None, "taints": node_body(node, i, preflight)["spec"]["taints"]},
                },
            )
            for i, node in pool
        )


def test_idle_retest_with_the_fleets_pods_stays_within_its_limit(fleet_with_pods: Fleet, runtime: Runtime) -> None:
    """The re-test also lists every running pod (~45,000 agent pods): ~300 MB unpaginated."""
    _retest(fleet_with_pods, runtime, "retest-with-pods")


def test_idle_retest_picks_nodes_within_its_limit_at_fleet_size(fleet_api: Fleet, runtime: Runtime) -> None:
    _retest(fleet_api, runtime, "retest-at-scale")


def _retest(fleet_api: Fleet, runtime: Runtime, name: str) -> None:
    pod = pod_of(fleet_api, rendered(fleet_api, "CronJob", "gpu-preflight-retest"), name)
    run = runtime.start(pod, "retest")
    out = finish(run)
    (line,) = [x for x in out.splitlines() if "sent to preflight:" in x]
    sent = line.split("sent to preflight: ", 1)[1].split(", ")
    wanted = int(next(e["value"] for e in pod["spec"]["containers"][0]["env"] if e["name"] == "MAX_NODES"))
    assert len(sent) == wanted, out
    within_limit(run, pod, "retest", f"idle re-test at {len(fleet_api.nodes)} nodes, {fleet_api.pods} pods")


def serving_csrs(fleet: Fleet) -> list[dict[str, Any]]:
    """Every node's kubelet serving CSR, as a kubelet with ``serverTLSBootstrap: true`` files it: O=system:nodes,
    CN=system:node:<name>, its Node's addresses as subjectAltNames (one key for all: signing 7,510 requests is
    the test's cost, not the approver's)."""
    key = ec.generate_private_key(ec.SECP256R1())
    out = []
    for i, node in enumerate(fleet.nodes):
        body = node_body(node, i, fleet.prep.addons.preflight_key)
        dns, ips = approve_serving.node_addresses(body)
        names: list[x509.GeneralName] = [x509.DNSName(d) for d in sorted(dns)]
        names += [x509.IPAddress(ipaddress.ip_address(a)) for a in sorted(ips)]
        subject = x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, approve_serving.NODES_GROUP),
                x509.NameAttribute(NameOID.COMMON_NAME, f"{approve_serving.NODE_PREFIX}{node.name}"),
            ]
        )
        request = (
            x509.CertificateSigningRequestBuilder()
            .subject_name(subject)
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .sign(key, hashes.SHA256())
        )
        csr = csr_object(request, approve_serving.SIGNER, ["digital signature", "server auth"])
        csr["metadata"] = {"name": f"serving-{node.name}"}
        out.append(csr)
    return out


def as_node(csr: dict[str, Any]) -> dict[str, str]:
    """The CSR filed as its node: the API server fills ``spec.username``/``groups`` from the (impersonated)
    requester, as it does from a kubelet's client certificate."""
    node = csr["metadata"]["name"].removeprefix("serving-")
    return {
        "Impersonate-User": f"{approve_serving.NODE_PREFIX}{node}",
        "Impersonate-Group": approve_serving.NODES_GROUP,
    }


def approved(cp: ControlPlane) -> tuple[int, int]:
    """(approved, denied) kubelet-serving CSRs, counted page by page."""
    yes = no = 0
    token = ""
    while True:
        page = cp.get(
            f"{approve_serving.CSRS}?limit=1000&fieldSelector=spec.signerName%3D{approve_serving.SIGNER}"
            + (f"&continue={token}" if token else "")
        )
        for csr in page["items"]:
            types = {c["type"] for c in csr.get("status", {}).get("conditions") or []}
            yes += "Approved" in types
            no += "Denied" in types
        token = page["metadata"].get("continue", "")
        if not token:
            return yes, no


def test_the_serving_approver_approves_every_nodes_csr_within_its_limit(fleet_api: Fleet, runtime: Runtime) -> None:
    """A mass boot: every node's kubelet files its serving CSR, half before the approver starts (its paged
    sweep finds them) and half while it watches. Each is checked against its Node and approved, with the
    approver under its manifest's memory limit throughout."""
    cp = fleet_api.cp
    csrs = serving_csrs(fleet_api)
    half = len(csrs) // 2
    loader = Loader(cp)
    loader.run((("POST", approve_serving.CSRS, c) for c in csrs[:half]), as_user=as_node)
    pod = pod_of(fleet_api, rendered(fleet_api, "Deployment", serving_certs.APP), "approver-at-scale")
    run = runtime.start(pod, "approve")
    try:
        loader.run((("POST", approve_serving.CSRS, c) for c in csrs[half:]), as_user=as_node)
        began = time.monotonic()

        def done() -> bool:
            assert run.alive() and not run.oom_killed(), f"approver died (limit {run.limit}):\n{run.output()[-2000:]}"
            return sum(approved(cp)) >= len(csrs)

        wait(f"the approver to decide {len(csrs):,} CSRs", done, [], timeout=1200)
        took = time.monotonic() - began
        yes, no = approved(cp)
        assert (yes, no) == (len(csrs), 0), run.output()[-3000:]
        what = f"kubelet-serving approver at {len(fleet_api.nodes)} nodes: {yes:,} CSRs approved, the last {took:.0f} s"
        within_limit(run, pod, "approve", f"{what} after the last was filed")
    finally:
        run.stop()


def test_the_preflight_reporter_releases_its_node_within_its_limit_at_fleet_size(
    fleet_api: Fleet, runtime: Runtime
) -> None:
    """One GPU node back in preflight (label and taint, as a re-test or a new node has them) among 7,510: the
    rendered gpu-preflight DaemonSet's ``report`` container, under its limit, releases that node and only it.
    It reads one Node (never a list), so its memory does not follow the fleet; this proves it at that size."""
    cp, key = fleet_api.cp, fleet_api.prep.addons.preflight_key
    node = next(n for n in fleet_api.nodes if n.pool == "h100-d")
    held = cp.get(f"/api/v1/nodes/{node.name}")
    taint = {"key": key, "value": "pending", "effect": "NoSchedule"}
    code, out = cp.call_patch(
        f"/api/v1/nodes/{node.name}",
        {"metadata": {"labels": {key: "pending"}}, "spec": {"taints": [*(held["spec"].get("taints") or []), taint]}},
    )
    assert code == 200, out
    (ds,) = [
        d
        for d in render_manifests(fleet_api.prep.addons)
        if d["kind"] == "DaemonSet" and d["metadata"]["name"] == "gpu-preflight"
    ]
    template = ds["spec"]["template"]
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"preflight-{node.name}",
            "namespace": ds["metadata"]["namespace"],
            "labels": template["metadata"]["labels"],
        },
        "spec": copy.deepcopy(template["spec"]) | {"nodeName": node.name},
    }
    code, pod = cp.call("POST", f"/api/v1/namespaces/{ds['metadata']['namespace']}/pods", body)
    assert code == 201, pod
    # Both checks' verdicts, written for the init containers (no GPU or InfiniBand here; ib-check itself runs in
    # tests/controlplane's preflight).
    for verdict in ("infiniband", "status"):
        (runtime.volume(pod, "results") / verdict).write_text("pass\n")
    run = runtime.start(pod, "report")
    try:
        wait(
            f"the reporter to release {node.name}",
            lambda: key not in cp.get(f"/api/v1/nodes/{node.name}")["metadata"]["labels"],
            [],
            timeout=120,
        )
        after = cp.get(f"/api/v1/nodes/{node.name}")
        assert not [t for t in after["spec"].get("taints") or [] if t["key"] == key], after["spec"]
        assert after["metadata"]["annotations"][f"{key}-result"] == "passed"
        assert run.alive()
        within_limit(run, pod, "report", f"preflight reporter at {len(fleet_api.nodes)} nodes")
    finally:
        run.stop()


def test_kube_state_metrics_serves_every_node_within_its_limit(fleet_api: Fleet, runtime: Runtime) -> None:
    """In `make test`: every Node (the fleet's agent Pods are the ``fleet`` run's); with the run below, the two
    points of its memory (formulas.kube_state_metrics)."""
    serve_state_metrics(fleet_api, runtime, "ksm-nodes-at-scale")


def test_kube_state_metrics_serves_the_fleet_within_its_limit(fleet_with_pods: Fleet, runtime: Runtime) -> None:
    serve_state_metrics(fleet_with_pods, runtime, "ksm-at-scale")


def serve_state_metrics(fleet_api: Fleet, runtime: Runtime, name: str) -> None:
    """kube-state-metrics' rendered pod serves every Node and Pod of the API server to the stack's Prometheus
    hosts scraping at once, under its memory limit; its series and the CPU of the round printed."""
    pod = pod_of(fleet_api, rendered(fleet_api, "Deployment", "kube-state-metrics"), name)
    run = runtime.start(pod, "kube-state-metrics")
    port = 8080

    def series() -> list[str]:
        assert run.alive(), run.output()[-3000:]
        # As Prometheus asks (enable_compression defaults to true, prometheus/prometheus#13166); kube-state-metrics
        # answers plain text all the same, without --enable-gzip-encoding (off here, as by default).
        req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers={"Accept-Encoding": "gzip"})
        try:
            with urllib.request.urlopen(req, timeout=300) as resp:
                raw = resp.read()
                text = (gzip.decompress(raw) if resp.headers.get("Content-Encoding") == "gzip" else raw).decode()
        except OSError:
            return []
        return [line for line in text.splitlines() if line and not line.startswith("#")]

    def every_node_and_pod() -> bool:
        lines = series()
        nodes = sum(1 for line in lines if line.startswith("kube_node_info{"))
        pods = sum(1 for line in lines if line.startswith("kube_pod_info{"))
        return nodes == len(fleet_api.nodes) and pods >= fleet_api.pods

    try:
        # Both caches full (its Node and Pod reflectors list separately): only then is its memory the fleet's.
        wait("kube-state-metrics to serve every node and pod", every_node_and_pod, [], timeout=600)
        assert run.alive()
        # Every Prometheus host scrapes kube-state-metrics whole (it is not sharded): its series, for the record
        # (modules/vm_sizing/formulas.py KSM_SERIES_*).
        lines = series()
        node_series = sum(1 for line in lines if line.startswith("kube_node_"))
        pod_series = sum(1 for line in lines if line.startswith("kube_pod_"))
        # Then the stack's hosts scrape it at the same moment, the worst case (each host's scrape offsets are
        # seeded by its external labels, so they usually spread over the interval): its peak is the caches plus
        # that many responses in flight, and the CPU a round takes is what its request covers within the scrape
        # timeout (formulas.kube_state_metrics).
        hosts = len(fleet_api.prep.bootstrap.prometheus.hosts)
        cpu, start = run.cpu_seconds(), time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(hosts) as pool:
            rounds = list(pool.map(lambda _: len(series()), range(hosts)))
        took, used = time.monotonic() - start, run.cpu_seconds() - cpu
        assert rounds == [len(lines)] * hosts, rounds
        what = (
            f"kube-state-metrics at {len(fleet_api.nodes)} nodes, {fleet_api.pods} pods"
            f" ({len(lines)} series: kube_node_* {node_series}, kube_pod_* {pod_series};"
            f" {hosts} scrapes at once: {took:.1f} s, {used:.1f} CPU-s)"
        )
        within_limit(run, pod, "kube-state-metrics", what)
    finally:
        run.stop()


def test_the_policy_agent_holds_the_fleets_pods_within_its_limit(
    fleet_with_pods: Fleet, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """kube-network-policies' agent, on every node, lists every Pod of the cluster (its informer, the basis of each
    verdict): one agent on a GPU node of the fleet, with every agent pod Running, under its DaemonSet's limit
    (formulas.policy_agent, sized for the Pods at maxPods)."""
    fleet = fleet_with_pods
    spec = fleet.prep.addons
    node = next(n for n in fleet.nodes if n.pool != "system")
    with policy_agent.node_netns(f"sc{os.getpid() % 100000}") as netns:
        agent = policy_agent.start(fleet.cp, spec, netns, node.name, tmp_path_factory.mktemp("policy-agent"))
        try:
            start = time.monotonic()
            policy_agent.synced(agent)
            took = time.monotonic() - start
            assert agent.alive() and not agent.oom_killed(), agent.output()[-3000:]
            peak, limit = agent.peak_bytes(), agent.limit or 0
            print(
                f"\nkube-network-policies at {len(fleet.nodes)} nodes, {fleet.pods} pods: every Pod cached {took:.0f} s"
                f" after start; peak {peak / 2**20:.0f} MiB of {limit / 2**20:.0f} MiB"
            )
            assert peak < limit, (peak, limit)
        finally:
            agent.remove()


def test_the_gang_scheduler_places_a_99_node_gang_within_its_limit(fleet_with_pods: Fleet, runtime: Runtime) -> None:
    fleet_api = fleet_with_pods
    cp = fleet_api.cp
    deployment = rendered(fleet_api, "Deployment", "scheduler-plugins-scheduler")
    pod = pod_of(fleet_api, deployment, "gang-scheduler-at-scale")
    run = runtime.start(pod, "kube-scheduler")
    lease = (
        f"/apis/coordination.k8s.io/v1/namespaces/scheduler-plugins/leases/{fleet_api.prep.addons.gang.scheduler_name}"
    )

    def leading() -> bool:
        assert run.alive(), f"gang scheduler exited:\n{run.output()[-3000:]}"
        return cp.call("GET", lease)[0] == 200

    try:
        # kube-scheduler lists every Node and Pod into its cache before it campaigns for the lease
        # (cmd/kube-scheduler/app/server.go: WaitForCacheSync, then leader election).
        began = time.perf_counter()
        try:
            wait("the gang scheduler's leader election", leading, [], timeout=600)
        except StartFailed as err:
            raise AssertionError(f"{err}\n{run.output()[-3000:]}") from None
        print(
            f"\ngang scheduler at {len(fleet_api.nodes)} nodes: cache filled and leading after {time.perf_counter() - began:.0f} s"
        )
        # A 99-member gang (one island: a scale set holds 99 VMs), its pods as the StatefulSet would make them.
        team = fleet_api.prep.addons.teams[0] if fleet_api.prep.addons.teams else None
        group, statefulset = (
            gang.example(fleet_api.prep.addons, team, name="island", nodes=99)
            if team
            else _gang_without_team(fleet_api)
        )
        assert cp.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(group)).returncode == 0
        template = statefulset["spec"]["template"]
        ns = statefulset["metadata"]["namespace"]
        began = time.perf_counter()
        for i in range(99):
            body = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"island-{i}", "namespace": ns, "labels": template["metadata"]["labels"]},
                "spec": copy.deepcopy(template["spec"]),
            }
            code, out = cp.call("POST", f"/api/v1/namespaces/{ns}/pods", body)
            assert code == 201, out
        selector = f"{gang.POD_GROUP_LABEL}=island"

        def bound() -> dict[str, str]:
            _, body = cp.call("GET", f"/api/v1/namespaces/{ns}/pods?labelSelector={selector}")
            return {p["metadata"]["name"]: p["spec"]["nodeName"] for p in body["items"] if p["spec"].get("nodeName")}

        def all_bound() -> bool:
            assert run.alive(), f"gang scheduler exited (memory limit {run.limit}):\n{run.output()[-2000:]}"
            return len(bound()) == 99

        wait("the 99-node gang to be bound", all_bound, [], timeout=600)
        placed = time.perf_counter() - began
        islands = {
            cp.get(f"/api/v1/nodes/{n}")["metadata"]["labels"].get("gpu.example.com/ib-island")
            for n in bound().values()
        }
        assert len(islands) == 1, islands
        what = f"gang scheduler at {len(fleet_api.nodes)} nodes, {fleet_api.pods} pods: 99-node gang bound in {placed:.1f} s"
        within_limit(run, pod, "kube-scheduler", what)
    finally:
        run.stop()


def _gang_without_team(fleet: Fleet) -> tuple[dict[str, Any], dict[str, Any]]:
    """prod-7500 has no teams: the documented gang for a first team that owns no taint (namespace default)."""
    from modules.cluster.spec import TeamSpec

    team = TeamSpec("default", 8 * 99, tuple(p.name for p in fleet.prep.addons.pools))
    group, sts = gang.example(fleet.prep.addons, team, name="island", nodes=99)
    sts["spec"]["template"]["spec"].pop("tolerations", None)
    return group, sts


def test_the_pool_roll_walks_the_fleet_within_its_limit(fleet_api: Fleet, runtime: Runtime, azure: Any) -> None:
    """The roll lists every GPU node and asks Azure which of the 76 scale sets' instances are behind their model
    (the stand-in: two instances of one set are): it rolls exactly those two, under its memory limit. The two
    Nodes it deleted register again afterwards, released, as the other tests expect the fleet."""
    cp, prep = fleet_api.cp, fleet_api.prep
    gpu = [n for n in fleet_api.nodes if n.pool != "system"]
    sets = {n.scale_set: 0 for n in gpu}
    for n in gpu:
        sets[n.scale_set] += 1
    cloud = FakeAzure(
        dict(sets),
        {s: {str(i) for i in range(c)} for s, c in sets.items()},
        subscription="0" * 8 + "-0000-0000-0000-" + "0" * 12,
        group="agk-prod-7500",
    )
    cloud.page_size = 100  # Azure's own List VMs pages; a client still follows nextLink past the first
    behind = gpu[-2:]  # the last scale set's (h100-c's first nodes are the XID tests')
    cloud.outdated = {behind[0].scale_set: {str(n.instance) for n in behind}}
    assert {n.scale_set for n in behind} == {behind[0].scale_set}
    azure(cloud)
    path = f"/api/v1/namespaces/{HEALTH}/configmaps/gpu-roll"
    original = json.loads(cp.get(path)["data"]["roll.json"])
    wired = original | {"azure": original["azure"] | {"arm_endpoint": cloud.base, "imds_endpoint": cloud.base}}
    assert cp.call_patch(path, {"data": {"roll.json": json.dumps(wired)}})[0] == 200
    try:
        pod = pod_of(fleet_api, rendered(fleet_api, "CronJob", "gpu-roll"), "roll-at-scale")
        run = runtime.start(pod, "roll")
        out = finish(run)
        for n in behind:
            assert f"{n.name}: drained; Node deleted" in out, out
        assert out.count("joins the roll") == 2, out
        assert sorted(cloud.upgraded) == sorted((n.scale_set, str(n.instance)) for n in behind)
        listed = {
            p.split("/virtualMachineScaleSets/")[1].split("/")[0]
            for m, p, _ in cloud.calls
            if p.endswith("/virtualMachines")
        }
        assert len(listed) == len(sets), "every scale set was asked which instances are behind"
        within_limit(run, pod, "roll", f"pool roll at {len(fleet_api.nodes)} nodes")
    finally:
        assert cp.call_patch(path, {"data": {"roll.json": json.dumps(original)}})[0] == 200
        cp.call("DELETE", f"/api/v1/namespaces/{HEALTH}/configmaps/gpu-roll-state")
        key = prep.addons.preflight_key
        for n in behind:
            if cp.call("GET", f"/api/v1/nodes/{n.name}")[0] == 404:
                code, made = cp.call("POST", "/api/v1/nodes", node_body(n, fleet_api.nodes.index(n), key))
                assert code == 201, made
            cp.call_patch(f"/api/v1/nodes/{n.name}", {"spec": {"unschedulable": False}})
