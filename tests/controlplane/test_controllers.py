"""The in-cluster controllers the add-ons ship, run against dev's real control plane and kwok nodes.

Each is its rendered workload's own pod: the CronJob's Job (``kubectl create job --from=cronjob/...``,
as the CronJob controller would at its schedule), created by the real Job controller and bound by the
real scheduler, its container run by the stand-in runtime with the pod's service account (so the
add-ons' RBAC is what lets it act) and its memory limit as a cgroup. Azure's ARM and IMDS stay
stand-ins (tests/cluster/fake_azure.py); node-problem-detector's condition is set as it would set it.
Every test leaves the nodes as it found them (released, schedulable), as later tests of the tier share them.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from modules.cluster.scripts.azure import instance_of
from tests.cluster.fake_azure import FakeAzure

from .cluster import ControlPlane, wait
from .conftest import Released, prepared, run_preflight
from .containers import Running, pods_of, wait_pods
from .kwok import FakeNode, initialize, register

HEALTH = "gpu-health"


def job_pod(cp: ControlPlane, cronjob: str, job: str) -> dict[str, Any]:
    """A Job from ``cronjob`` (what its schedule would create), and its pod once bound."""
    made = cp.kubectl("create", "job", f"--from=cronjob/{cronjob}", job, "-n", HEALTH)
    assert made.returncode == 0, made.stderr
    (pod,) = wait_pods(cp, HEALTH, f"job-name={job}", 1)
    return pod


def finish(cp: ControlPlane, run: Running, job: str, timeout: float = 120) -> str:
    """The container's exit (it must succeed) and output; the Job is deleted afterwards."""
    try:
        code = run.wait(timeout)
    finally:
        cp.kubectl("delete", "job", job, "-n", HEALTH, "--wait=false")
    out = run.output()
    assert code == 0, out[-3000:]
    return out


def rule(cp: ControlPlane) -> dict[str, Any]:
    cm = cp.get(f"/api/v1/namespaces/{HEALTH}/configmaps/gpu-remediation")
    return dict(json.loads(cm["data"]["remediation.json"]))


def set_rule(cp: ControlPlane, value: dict[str, Any]) -> None:
    body = {"data": {"remediation.json": json.dumps(value, indent=2)}}
    code, out = cp.call_patch(f"/api/v1/namespaces/{HEALTH}/configmaps/gpu-remediation", body)
    assert code == 200, out


def xid_condition(cp: ControlPlane, node: str, status: str) -> None:
    """node-problem-detector's GPUFatalXid condition (its custom plugin's stand-in: no GPU here)."""
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    condition = {
        "type": rule(cp)["condition"],
        "status": status,
        "reason": "FatalXid" if status == "True" else "NoFatalXid",
        "message": "XID 79: GPU has fallen off the bus" if status == "True" else "no fatal XID",
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }
    node_obj = cp.get(f"/api/v1/nodes/{node}")
    conditions = [c for c in node_obj["status"].get("conditions", []) if c["type"] != condition["type"]]
    code, out = cp.call_patch(f"/api/v1/nodes/{node}/status", {"status": {"conditions": [*conditions, condition]}})
    assert code == 200, out


def test_xid_remediation_fences_evicts_and_replaces_the_vm(
    dev_cluster: ControlPlane, released: Released, azure: Any
) -> None:
    nodes = released.nodes
    victim: FakeNode = next(n for n in nodes.pools["a100"] if n.instance == 0)
    pool = [n for n in nodes.pools["a100"]]
    cloud = FakeAzure(
        {victim.scale_set: len(pool)},
        {victim.scale_set: {str(n.instance) for n in pool}},
        subscription="00000000-0000-0000-0000-000000000000",
        group=f"agk-{dev_cluster.ctx.cluster}",
        sku=prepared("dev").pools.pools["a100"].vm_size,
    )
    azure(cloud)
    original = rule(dev_cluster)
    # The rule's Azure endpoints lead to the stand-in; everything else is the rendered rule.
    set_rule(
        dev_cluster, original | {"azure": original["azure"] | {"arm_endpoint": cloud.base, "imds_endpoint": cloud.base}}
    )
    key, domain = original["taint"]["key"], prepared("dev").bootstrap.label_domain
    work = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "on-the-bad-gpu", "namespace": "research"},
        "spec": {
            "priorityClassName": "training",
            "nodeSelector": {"kubernetes.io/hostname": victim.name},
            "tolerations": [
                {"key": f"{domain}/team", "operator": "Equal", "value": "research", "effect": "NoSchedule"}
            ],
            "containers": [
                {"name": "c", "image": "registry.example.com/x", "resources": {"limits": {"nvidia.com/gpu": "8"}}}
            ],
        },
    }
    try:
        assert dev_cluster.call("POST", "/api/v1/namespaces/research/pods", work)[0] == 201
        wait("work on the victim", lambda: bool(pods_of(dev_cluster, "research", "")), [], timeout=60)
        xid_condition(dev_cluster, victim.name, "True")

        out = finish(
            dev_cluster, nodes.runtime.start(job_pod(dev_cluster, "gpu-remediation", "xid-1"), "remediate"), "xid-1"
        )
        assert f"fenced (cordon + {key}:NoExecute): {victim.name}" in out, out
        node = dev_cluster.get(f"/api/v1/nodes/{victim.name}")
        assert node["spec"]["unschedulable"] is True
        assert {"key": key, "value": "true", "effect": "NoExecute"}.items() <= next(
            t for t in node["spec"]["taints"] if t["key"] == key
        ).items()
        # The real controller-manager's taint eviction takes the work off the node.
        wait(
            "NoExecute eviction",
            lambda: not [p for p in pods_of(dev_cluster, "research", "") if p["metadata"]["name"] == "on-the-bad-gpu"],
            [],
            timeout=90,
        )

        # The grace period passes (the fence is dated back by it, as the next run would find it).
        since = (dt.datetime.now(dt.UTC) - dt.timedelta(minutes=original["replace_after_minutes"] + 1)).strftime(
            "%Y-%m-%dT%H:%M:%SZ"
        )
        assert (
            dev_cluster.call_patch(
                f"/api/v1/nodes/{victim.name}", {"metadata": {"annotations": {f"{key}-since": since}}}
            )[0]
            == 200
        )
        out = finish(
            dev_cluster, nodes.runtime.start(job_pod(dev_cluster, "gpu-remediation", "xid-2"), "remediate"), "xid-2"
        )
        assert f"replaced (scale-set instance deleted): {victim.name}" in out, out
        vm = instance_of(node["spec"]["providerID"])
        assert vm is not None
        writes = [(m, p.rsplit("/", 1)[-1]) for m, p, _ in cloud.calls if m in ("POST", "PATCH")]
        assert writes == [("POST", "delete"), ("PATCH", victim.scale_set)], cloud.calls
        assert (
            cloud.capacity == {victim.scale_set: len(pool)}
            and str(victim.instance) not in cloud.instances[victim.scale_set]
        )
        assert dev_cluster.call("GET", f"/api/v1/nodes/{victim.name}")[0] == 404
    finally:
        set_rule(dev_cluster, original)
        dev_cluster.call("DELETE", "/api/v1/namespaces/research/pods/on-the-bad-gpu?gracePeriodSeconds=0")
    # The scale set's fresh VM registers (same name: a reimaged or replaced instance keeps its computer name
    # in this stand-in) into preflight, and is released by it like any new node.
    register(dev_cluster, [victim])
    initialize(dev_cluster, [victim])
    run_preflight(dev_cluster, nodes, [victim.name], expect=2)


def test_the_idle_retest_sends_idle_gpu_nodes_back_to_preflight(dev_cluster: ControlPlane, released: Released) -> None:
    nodes = released.nodes
    key = prepared("dev").addons.preflight_key
    pod = job_pod(dev_cluster, "gpu-preflight-retest", "retest-1")
    limit = int(next(e["value"] for e in pod["spec"]["containers"][0]["env"] if e["name"] == "MAX_NODES"))
    out = finish(dev_cluster, nodes.runtime.start(pod, "retest"), "retest-1")
    sent = [
        n["metadata"]["name"]
        for n in dev_cluster.get("/api/v1/nodes")["items"]
        if n["metadata"]["labels"].get(key) == "pending"
    ]
    sent = [n for n in sent if n != released.held.name]
    assert len(sent) == limit and all(n in out for n in sent), (out, sent)
    for name in sent:
        taints = dev_cluster.get(f"/api/v1/nodes/{name}")["spec"]["taints"]
        assert any(t["key"] == key and t["effect"] == "NoSchedule" for t in taints)
    # The rendered DaemonSet follows the label: each node sent back gets a preflight pod, which releases it.
    run_preflight(dev_cluster, nodes, sent, expect=len(sent) + 1)
    for name in sent:
        assert key not in dev_cluster.get(f"/api/v1/nodes/{name}")["metadata"]["labels"]


def test_a_node_whose_infiniband_port_is_down_fails_preflight(dev_cluster: ControlPlane, released: Released) -> None:
    """The preflight pod's ib-check (its real script, its Node read with the pod's token) over a stand-in sysfs
    with one HCA port down: the node fails preflight though DCGM passed, keeps its taint, and the log names the
    port. Sent back to preflight healthy afterwards, as the tier expects its nodes."""
    nodes = released.nodes
    key = prepared("dev").addons.preflight_key
    node = nodes.pools["h100"][0]
    code, out = dev_cluster.call_patch(f"/api/v1/nodes/{node.name}", {"metadata": {"labels": {key: "pending"}}})
    assert code == 200, out
    taints = dev_cluster.get(f"/api/v1/nodes/{node.name}")["spec"].get("taints") or []
    pending = {"key": key, "value": "pending", "effect": "NoSchedule"}
    assert dev_cluster.call_patch(f"/api/v1/nodes/{node.name}", {"spec": {"taints": [*taints, pending]}})[0] == 200
    reports = run_preflight(dev_cluster, nodes, [node.name], expect=2, ib_faults={"down": (6,)})
    report = reports[node.name]
    assert "FAIL mlx5_ib6/1: state 1: DOWN, expected 4: ACTIVE" in report, report
    assert "InfiniBand FAILED: 8 ports, pool h100" in report and f"preflight FAILED on {node.name}" in report, report
    after = dev_cluster.get(f"/api/v1/nodes/{node.name}")
    assert after["metadata"]["labels"][key] == "failed"
    assert any(t["key"] == key for t in after["spec"]["taints"])
    # Repaired (the cable reseated): back to preflight, which now passes.
    assert dev_cluster.call_patch(f"/api/v1/nodes/{node.name}", {"metadata": {"labels": {key: "pending"}}})[0] == 200
    report = run_preflight(dev_cluster, nodes, [node.name], expect=2)[node.name]
    assert "InfiniBand passed: 8 ports, pool h100" in report, report
    assert key not in dev_cluster.get(f"/api/v1/nodes/{node.name}")["metadata"]["labels"]
