"""Queues on the real API server: Kueue admits whole jobs per team, lends idle GPUs across the cohort,
takes them back by preemption, and keeps each job inside one InfiniBand island.

Real: etcd, kube-apiserver, kube-controller-manager (its Job controller makes the pods), kube-scheduler
(binds them once Kueue lifts its gate) and Kueue, built from its Go module (tools/components/kueue), run
with the rendered Configuration as the rendered ServiceAccount (a token for it: the rendered ClusterRole
is all it may do), behind the rendered webhook configurations and the team-toleration admission policy.
Kueue's webhooks are registered with a URL client config and a test CA instead of its internal
certificate management, which needs the webhook Service reachable over a pod network (none here).

Stand-ins: kwok for the kubelets (prod-7500's H100 nodes, three islands of two pools at their real size,
297 nodes); the preflight release, patched onto the nodes as the reporter patches it
(modules/cluster/scripts/preflight_report.py node_patch); kwok without its pod-complete stage, since a
training job's pods run until stopped.

prod-7500 ships no teams; this test gives pool h100-a to team alpha and h100-b to team beta with 1,024
GPUs each (128 nodes: less than a pool, so that the quota and not the pool's size decides borrowing).
A separate control plane (one API server host): dev's add-ons would put their DaemonSets on these nodes.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import socket
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from ipaddress import IPv4Address
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from modules.cluster.objects import admission, priorities, queues
from modules.cluster.objects.teams import team_objects
from modules.cluster.scripts.preflight_report import node_patch
from modules.stackplan.config import load_stack
from modules.stackplan.prepare import ClusterPrep, prepare_cluster
from tests.bootstrap.conftest import STACKS, context, tool

from .cluster import ControlPlane, Process, build, kubeconfig, start, wait
from .kwok import STAGES, FakeNode, Kwok, initialize, pool_nodes, register
from .kwok import ready as kwok_ready

STACK = "prod-7500"
TEAMS = {"alpha": "h100-a", "beta": "h100-b"}
QUOTA = 1024
ISLANDS = {"h100-a": 1, "h100-b": 2}
"""Scale sets (InfiniBand islands) registered per pool, each at its planned size (99 nodes): the lender's
pool needs two, one for the borrowed job and one for the lender's own."""
GPUS = 8
"""An ND96isr_H100_v5 node's GPUs: each pod of a job takes one node."""
JOB_COMPLETED = "pod/fast/pod-complete.yaml"


def with_teams(root: Path) -> ClusterPrep:
    """prod-7500 as planned, with pools h100-a and h100-b given to teams alpha and beta."""
    stacks = root / "stacks"
    shutil.copytree(STACKS, stacks)
    path = stacks / f"Pulumi.{STACK}.yaml"
    doc = yaml.safe_load(path.read_text())
    for team, pool in TEAMS.items():
        doc["config"]["azure-gpu-k8s:cluster"]["gpu_pools"][pool]["team"] = team
    doc["config"]["azure-gpu-k8s:addons"] = {"teams": {t: {"gpu_quota": QUOTA} for t in TEAMS}}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return prepare_cluster(STACK, load_stack(stacks, STACK), stacks)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serving_pair(root: Path) -> str:
    """A test CA and a serving certificate for 127.0.0.1 under ``root`` (tls.crt, tls.key); the CA's PEM."""
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kueue-test-ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(hours=6))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kueue-webhook")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(hours=6))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(IPv4Address("127.0.0.1"))]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    root.mkdir(parents=True, exist_ok=True)
    (root / "tls.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (root / "tls.key").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return ca.public_bytes(serialization.Encoding.PEM).decode()


def _on_url(objs: list[dict[str, Any]], port: int, ca: str) -> list[dict[str, Any]]:
    """The rendered webhook configurations and CRD conversion, pointed at Kueue on loopback with the test CA."""
    import base64

    bundle = base64.b64encode(ca.encode()).decode()
    out = []
    for obj in objs:
        obj = json.loads(json.dumps(obj))
        if obj["kind"] in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            for hook in obj["webhooks"]:
                path = hook["clientConfig"]["service"]["path"]
                hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": bundle}
        if obj["kind"] == "CustomResourceDefinition" and "conversion" in obj["spec"]:
            obj["spec"]["conversion"]["webhook"]["clientConfig"] = {
                "url": f"https://127.0.0.1:{port}/convert",
                "caBundle": bundle,
            }
        out.append(obj)
    return out


def apply(cp: ControlPlane, objs: list[dict[str, Any]], *, kubeconfig_path: Path | None = None) -> None:
    text = "\n---\n".join(json.dumps(o) for o in objs)
    run = cp.kubectl(
        "apply",
        "--server-side",
        "--force-conflicts",
        "--field-manager=agk",
        "-f",
        "-",
        input=text,
        kubeconfig=kubeconfig_path,
    )
    assert run.returncode == 0, run.stdout + run.stderr


@dataclass
class Queues:
    cp: ControlPlane
    prep: ClusterPrep
    kueue: Process
    nodes: list[FakeNode]

    @property
    def island_key(self) -> str:
        return self.prep.addons.ib_island_key

    def islands(self) -> dict[str, str]:
        return {n.name: n.scale_set for n in self.nodes}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Queues]:
    root = tmp_path_factory.mktemp("queues")
    prep = with_teams(root)
    spec = prep.addons
    cp = build(context("dev"), root / "plane")
    kwok: Kwok | None = None
    kueue: Process | None = None
    try:
        start(cp, hosts=1)
        # What the add-ons stack applies that queues rely on: priority classes, team namespaces, the
        # team-toleration policy, and Kueue with the queues (webhooks on loopback, below).
        port, health = _free_port(), _free_port()
        ca = _serving_pair(root / "certs")
        install = _on_url(queues.install(spec), port, ca)
        team_ns = [o for t in spec.teams for o in team_objects(spec, t)]
        apply(cp, priorities.priority_classes() + team_ns + admission.validating(spec))
        apply(cp, [o for o in install if o["kind"] in ("Namespace", "CustomResourceDefinition")])
        wait(
            "Kueue's CRDs established",
            lambda: all(
                any(
                    c["type"] == "Established" and c["status"] == "True"
                    for c in (
                        cp.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{n}").get("status") or {}
                    ).get("conditions")
                    or []
                )
                for n in ("workloads.kueue.x-k8s.io", "clusterqueues.kueue.x-k8s.io", "topologies.kueue.x-k8s.io")
            ),
            cp.processes(),
        )
        apply(cp, [o for o in install if o["kind"] not in ("Namespace", "CustomResourceDefinition", "Deployment")])
        token = cp.kubectl("create", "token", queues.MANAGER, "-n", queues.NS, "--duration=6h")
        assert token.returncode == 0, token.stderr
        as_kueue = kubeconfig(
            root / "kueue.kubeconfig", cp.url, cp.root / "admin" / "ca.crt", token=token.stdout.strip()
        )
        config = queues.configuration(spec)
        config["webhook"] = {"port": port, "host": "127.0.0.1", "certDir": str(root / "certs")}
        config["internalCertManagement"] = {"enable": False}
        config["health"] = {"healthProbeBindAddress": f"127.0.0.1:{health}"}
        config["metrics"] = {"bindAddress": "0"}
        # The shipped lease (its name, namespace and RBAC: checked below), with longer timings: on a loaded machine
        # (the suite runs a 7,576-node plane beside this one) a renewal past the 10 s default made Kueue exit
        # ("leader election lost") in the middle of a test.
        config["leaderElection"] |= {"leaseDuration": "120s", "renewDeadline": "100s", "retryPeriod": "10s"}
        (root / "kueue.yaml").write_text(yaml.safe_dump(config))
        # Without its internal certificate management Kueue reads a metrics certificate from a fixed path
        # (cmd/kueue/main.go: /etc/kueue/metrics/certs), where its pod would mount a Secret: here a private
        # mount namespace with a tmpfs /etc holding the test pair (nothing else of /etc is read by it).
        certs = root / "certs"
        mount = (
            "mount -t tmpfs tmpfs /etc && mkdir -p /etc/kueue/metrics/certs && "
            f'cp {certs}/tls.crt {certs}/tls.key /etc/kueue/metrics/certs/ && exec "$@"'
        )
        argv = [
            tool("unshare"),
            "--mount",
            "--propagation=private",
            "--",
            "sh",
            "-c",
            mount,
            "kueue",
            tool("kueue"),
            f"--config={root / 'kueue.yaml'}",
            f"--kubeconfig={as_kueue}",
            f"--feature-gates={queues.FEATURE_GATES}",
            "--zap-log-level=2",
        ]
        kueue = Process("kueue", argv, root / "kueue.log")
        kueue.start()
        wait("Kueue ready", lambda: _ok(f"http://127.0.0.1:{health}/readyz"), [kueue], timeout=180)
        nodes = [n for pool in TEAMS.values() for n in pool_nodes(prep, pool)]
        sets = {p: sorted({n.scale_set for n in nodes if n.pool == p})[: ISLANDS[p]] for p in TEAMS.values()}
        nodes = [n for n in nodes if n.scale_set in sets[n.pool]]
        kwok = Kwok(cp, root / "kwok", stages=[s for s in STAGES if s != JOB_COMPLETED])
        register(cp, nodes)
        initialize(cp, nodes)
        release(cp, nodes, spec.preflight_key)
        kwok_ready(cp, [n.name for n in nodes])
        # The queue objects last: Kueue's webhooks validate them.
        apply(cp, queues.team_queues(spec))
        wait("every ClusterQueue active", lambda: all(_active(cp, t.name) for t in spec.teams), [kueue], timeout=120)
        lease = config["leaderElection"]
        held = cp.get(
            f"/apis/coordination.k8s.io/v1/namespaces/{lease['resourceNamespace']}/leases/{lease['resourceName']}"
        )
        assert held["spec"].get("holderIdentity"), f"Kueue leads without holding its lease: {held}"
        yield Queues(cp, prep, kueue, nodes)
    finally:
        if kueue is not None:
            kueue.stop()
        if kwok is not None:
            kwok.stop()
        cp.stop()


def _ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def _active(cp: ControlPlane, cq: str) -> bool:
    code, body = cp.call("GET", f"/apis/kueue.x-k8s.io/v1beta2/clusterqueues/{cq}")
    conditions = ((body.get("status") or {}).get("conditions") or []) if code == 200 else []
    return any(c["type"] == "Active" and c["status"] == "True" for c in conditions)


def release(cp: ControlPlane, nodes: list[FakeNode], key: str) -> None:
    """The preflight result the reporter writes for a node that passed (its diagnostics cannot run here). The
    patch carries the Node's resourceVersion, so a write by kwok or the controller-manager in between is a 409:
    read again and retry, as the reporter does (preflight_report.report)."""
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    for n in nodes:
        for _ in range(5):
            node = cp.get(f"/api/v1/nodes/{n.name}")
            code, body = cp.call_patch(f"/api/v1/nodes/{n.name}", node_patch(node, True, key, now))
            if code != 409:
                break
        assert code == 200, body


def job(q: Queues, team: str, name: str, pods: int) -> dict[str, Any]:
    """The multi-node job docs/queues.md has researchers write (queues.example_job): a whole node per pod,
    every pod inside one InfiniBand island, in the team's LocalQueue."""
    spec = q.prep.addons
    return queues.example_job(spec, next(t for t in spec.teams if t.name == team), name=name, nodes=pods)


def workload(q: Queues, team: str, name: str) -> dict[str, Any]:
    code, body = q.cp.call("GET", f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{team}/workloads")
    assert code == 200, body
    mine = [w for w in body["items"] if any(o["name"] == name for o in w["metadata"].get("ownerReferences", []))]
    assert len(mine) <= 1, mine
    return mine[0] if mine else {}


def condition(wl: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in (wl.get("status") or {}).get("conditions") or [] if c["type"] == kind), {})


def until(q: Queues, what: str, probe: Callable[[], Any], timeout: float = 120) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = probe()
        if got:
            return got
        if not q.kueue.alive():
            raise AssertionError(f"Kueue exited while waiting for {what}:\n{q.kueue.tail(40)}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; Kueue's log:\n{q.kueue.tail(20)}")
        time.sleep(0.5)


def placed(q: Queues, team: str, name: str, pods: int) -> dict[str, str]:
    """Pod -> node once all ``pods`` of job ``name`` are bound (Kueue lifted its gate, the scheduler bound them)."""

    def probe() -> dict[str, str]:
        code, body = q.cp.call("GET", f"/api/v1/namespaces/{team}/pods?labelSelector=job-name={name}")
        assert code == 200, body
        got = {p["metadata"]["name"]: p["spec"].get("nodeName", "") for p in body["items"]}
        return got if len(got) == pods and all(got.values()) else {}

    return dict(until(q, f"{pods} pods of {team}/{name} bound", probe))


def submit(q: Queues, team: str, name: str, pods: int) -> None:
    apply(q.cp, [job(q, team, name, pods)])


def remove(q: Queues, team: str, name: str) -> None:
    run = q.cp.kubectl("delete", "job", name, "-n", team, "--cascade=foreground", "--wait=true", timeout=180)
    assert run.returncode == 0, run.stderr


def test_job_larger_than_any_island_is_refused_with_the_reason(world: Queues) -> None:
    """120 nodes fit the team's quota (960 of 1,024 GPUs) but no island (each under 100 nodes): Kueue does not
    admit it, and the Workload says why."""
    sizes = {s: sum(1 for n in world.nodes if n.scale_set == s) for s in set(world.islands().values())}
    assert max(sizes.values()) < 120 <= QUOTA // GPUS, sizes
    submit(world, "alpha", "too-big", 120)
    wl = until(world, "a Workload for too-big", lambda: workload(world, "alpha", "too-big"))
    reserved = until(
        world,
        "too-big's QuotaReserved=False with a message",
        lambda: condition(workload(world, "alpha", "too-big"), "QuotaReserved").get("message") or "",
    )
    assert condition(workload(world, "alpha", "too-big"), "Admitted").get("status") != "True", wl
    assert "topology" in reserved.lower(), reserved
    code, body = world.cp.call("GET", "/api/v1/namespaces/alpha/pods?labelSelector=job-name=too-big")
    assert code == 200, body
    assert [p for p in body["items"] if p["spec"].get("nodeName")] == [], "pods of a refused job were bound"
    remove(world, "alpha", "too-big")


def pretrain(q: Queues) -> dict[str, str]:
    """alpha's 64-node job (512 GPUs, within its 1,024), submitted unless it runs already: pod -> node."""
    if not workload(q, "alpha", "pretrain"):
        submit(q, "alpha", "pretrain", 64)
    return placed(q, "alpha", "pretrain", 64)


def test_team_within_quota_lands_in_one_island(world: Queues) -> None:
    """A 64-node job (512 GPUs, within alpha's 1,024) is admitted on alpha's own pool, all pods in one island."""
    pods = pretrain(world)
    islands = {world.islands()[node] for node in pods.values()}
    assert len(islands) == 1, islands
    assert {n.pool for n in world.nodes if n.name in pods.values()} == {"h100-a"}
    wl = workload(world, "alpha", "pretrain")
    assert condition(wl, "Admitted")["status"] == "True", wl
    assert wl["status"]["admission"]["clusterQueue"] == "alpha"


def test_borrowing_from_an_idle_team_then_the_lender_reclaims(world: Queues) -> None:
    """alpha (512 GPUs running) submits 96 more nodes (768 GPUs): over its quota, so Kueue admits it on beta's
    idle pool, borrowing. When beta submits within its own quota, Kueue preempts alpha's borrowed job."""
    pretrain(world)  # the 512 GPUs (this test on its own, or on another xdist worker than the one before)
    submit(world, "alpha", "borrowed", 96)
    pods = placed(world, "alpha", "borrowed", 96)
    assert {n.pool for n in world.nodes if n.name in pods.values()} == {"h100-b"}, "not on the lender's pool"
    assert len({world.islands()[node] for node in pods.values()}) == 1
    wl = workload(world, "alpha", "borrowed")
    (assignment,) = wl["status"]["admission"]["podSetAssignments"]
    assert assignment["flavors"]["nvidia.com/gpu"] == "h100-b", wl
    # beta returns: 64 nodes within its 1,024 GPUs; only 256 are unlent, so alpha's borrowed job must go.
    submit(world, "beta", "returns", 64)
    evicted = until(
        world,
        "alpha's borrowed job preempted",
        lambda: (
            condition(workload(world, "alpha", "borrowed"), "Preempted").get("status") == "True"
            and condition(workload(world, "alpha", "borrowed"), "Preempted")
        ),
    )
    assert "reclaim" in json.dumps(evicted).lower() or "InCohortReclamation" in json.dumps(evicted), evicted
    beta = placed(world, "beta", "returns", 64)
    assert {n.pool for n in world.nodes if n.name in beta.values()} == {"h100-b"}
    assert len({world.islands()[node] for node in beta.values()}) == 1
    assert condition(workload(world, "beta", "returns"), "Admitted")["status"] == "True"


def test_vendored_kueue_install_is_the_built_release() -> None:
    """The CRDs, RBAC rules and webhooks the add-ons render are the release the tests build and run."""
    import gzip
    import subprocess

    go = shutil.which("go")
    assert go is not None, "go is not installed: the Kueue component is built from its Go module (make components)"
    module = Path(__file__).resolve().parents[2] / "tools" / "components" / "kueue"
    done = subprocess.run([go, "list", "-m", "-json", "sigs.k8s.io/kueue"], cwd=module, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    source = Path(json.loads(done.stdout)["Dir"]) / "config" / "components"
    crds = sorted((source / "crd" / "bases").glob("*.yaml"))
    want = [queues.strip_descriptions(yaml.safe_load(p.read_text())) for p in crds]
    assert json.loads(gzip.decompress((queues.VENDORED / "crds.json.gz").read_bytes())) == want
    assert (queues.VENDORED / "role.yaml").read_text() == (source / "rbac" / "role.yaml").read_text()
    assert (queues.VENDORED / "webhooks.yaml").read_text() == (source / "webhook" / "manifests.yaml").read_text()
