"""The pool roll (modules/cluster/scripts/roll_pool.py) as its rendered CronJob's pod, against dev's real
control plane and kwok nodes: the real Eviction API and PodDisruptionBudget controller hold the drain, the
real DaemonSet controller brings preflight to the returned node, and the real CronJob is what the roll
suspends. Azure's ARM (List VMs, Update Instances) and IMDS stay stand-ins (tests/cluster/fake_azure.py); the
reimaged VM's kubelet registering again is kwok's stand-in, as in the remediation test."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from modules.cluster.objects.roll import KUEUE_POD_SET_LABEL
from tests.cluster.fake_azure import FakeAzure

from .cluster import ControlPlane, wait
from .conftest import Released, prepared, run_preflight
from .containers import pods_of
from .kwok import FakeNode, initialize, register
from .test_controllers import HEALTH, finish, job_pod

RULE = "gpu-roll"


def roll_rule(cp: ControlPlane) -> dict[str, Any]:
    return dict(json.loads(cp.get(f"/api/v1/namespaces/{HEALTH}/configmaps/{RULE}")["data"]["roll.json"]))


def set_roll_rule(cp: ControlPlane, value: dict[str, Any]) -> None:
    code, out = cp.call_patch(
        f"/api/v1/namespaces/{HEALTH}/configmaps/{RULE}", {"data": {"roll.json": json.dumps(value)}}
    )
    assert code == 200, out


def pod(name: str, node: FakeNode, domain: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "research", "labels": labels},
        "spec": {
            "priorityClassName": "training",
            "nodeSelector": {"kubernetes.io/hostname": node.name},
            "tolerations": [
                {"key": f"{domain}/team", "operator": "Equal", "value": "research", "effect": "NoSchedule"}
            ],
            "containers": [
                {"name": "c", "image": "registry.example.com/x", "resources": {"limits": {"nvidia.com/gpu": "8"}}}
            ],
        },
    }


class Runs:
    def __init__(self, cp: ControlPlane, released: Released) -> None:
        self.cp, self.released, self.n = cp, released, 0

    def __call__(self, *, ok: bool = True) -> str:
        """One run of the rendered CronJob (what its schedule would start)."""
        self.n += 1
        job = f"roll-{self.n}"
        run = self.released.nodes.runtime.start(job_pod(self.cp, RULE, job), "roll")
        if ok:
            return finish(self.cp, run, job)
        try:
            code = run.wait(120)
        finally:
            self.cp.kubectl("delete", "job", job, "-n", HEALTH, "--wait=false")
        out = run.output()
        assert code != 0, out[-3000:]
        return out


def wired_cloud(cp: ControlPlane, azure: Any, outdated: dict[str, set[str]]) -> tuple[FakeAzure, dict[str, Any]]:
    """Azure's stand-in for dev's InfiniBand scale sets, ``outdated`` behind their model, and the rendered roll
    rule pointed at it; returns it and the rule as rendered (put back afterwards)."""
    prep = prepared("dev")
    sets = {s.name: s.capacity for p in prep.pools.pools.values() if p.infiniband for s in p.scale_sets}
    cloud = FakeAzure(
        dict(sets),
        {s: {str(i) for i in range(c)} for s, c in sets.items()},
        subscription="00000000-0000-0000-0000-000000000000",
        group=f"agk-{cp.ctx.cluster}",
        sku=prep.pools.pools["a100"].vm_size,
    )
    cloud.outdated = outdated
    azure(cloud)
    original = roll_rule(cp)
    set_roll_rule(
        cp, original | {"azure": original["azure"] | {"arm_endpoint": cloud.base, "imds_endpoint": cloud.base}}
    )
    return cloud, original


def guarded(cp: ControlPlane, name: str, node: FakeNode, domain: str) -> None:
    """A ReplicaSet's pod on ``node`` (the roll evicts only what a controller brings back, kubectl drain's rule)
    and a PodDisruptionBudget that keeps it, once the budget counts it."""
    spec = pod(name, node, domain, {"app": name})["spec"]
    replicas = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": name, "namespace": "research"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": spec},
        },
    }
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": "research"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": name}}},
    }
    assert cp.call("POST", "/apis/apps/v1/namespaces/research/replicasets", replicas)[0] == 201
    assert cp.call("POST", "/apis/policy/v1/namespaces/research/poddisruptionbudgets", budget)[0] == 201
    path = f"/apis/policy/v1/namespaces/research/poddisruptionbudgets/{name}"
    wait("the budget guards its pod", lambda: cp.get(path).get("status", {}).get("currentHealthy") == 1, [], timeout=60)


def restore(cp: ControlPlane, nodes: Any, pool: list[FakeNode], original: dict[str, Any], guards: list[str]) -> None:
    """Leave the pool as the tier found it: the rule, no roll state, the CronJob running, no test workload, every
    node registered, schedulable, unfenced and released."""
    prep = prepared("dev")
    key, fence = prep.addons.preflight_key, prep.addons.fatal_xid_key
    set_roll_rule(cp, original)
    cp.call_patch(f"/apis/batch/v1/namespaces/{HEALTH}/cronjobs/{RULE}", {"spec": {"suspend": False}})
    cp.call("DELETE", f"/api/v1/namespaces/{HEALTH}/configmaps/gpu-roll-state")
    for name in guards:
        cp.call("DELETE", f"/apis/policy/v1/namespaces/research/poddisruptionbudgets/{name}")
        cp.call("DELETE", f"/apis/apps/v1/namespaces/research/replicasets/{name}")
    for p in pods_of(cp, "research", ""):
        cp.call("DELETE", f"/api/v1/namespaces/research/pods/{p['metadata']['name']}?gracePeriodSeconds=0")
    missing = [n for n in pool if cp.call("GET", f"/api/v1/nodes/{n.name}")[0] == 404]
    register(cp, missing)
    initialize(cp, missing)
    for n in pool:
        taints = [t for t in cp.get(f"/api/v1/nodes/{n.name}")["spec"].get("taints") or [] if t["key"] != fence]
        cp.call_patch(f"/api/v1/nodes/{n.name}", {"spec": {"unschedulable": False, "taints": taints}})
    failed = [n.name for n in pool if cp.get(f"/api/v1/nodes/{n.name}")["metadata"]["labels"].get(key) is not None]
    for name in failed:
        cp.call_patch(f"/api/v1/nodes/{name}", {"metadata": {"labels": {key: "pending"}}})
    if failed:
        run_preflight(cp, nodes, failed, expect=len(failed) + 1)


def test_a_pool_rolls_one_node_at_a_time_drained_first_and_pauses_on_failures(
    dev_cluster: ControlPlane, released: Released, azure: Any
) -> None:
    cp, nodes = dev_cluster, released.nodes
    prep = prepared("dev")
    domain = prep.bootstrap.label_domain
    a100 = sorted(nodes.pools["a100"], key=lambda n: n.instance)
    assert len(a100) == 4  # one island; the pool's 5% is one node at a time
    island = a100[0].scale_set
    # A new image on the a100 scale set's model.
    cloud, original = wired_cloud(cp, azure, {island: {"0", "1", "2", "3"}})
    run = Runs(cp, released)
    busy, batch = a100[0], a100[1]
    try:
        # Training work (a Kueue workload's pod) on node 0; an ordinary pod guarded by a budget on node 1.
        assert (
            cp.call(
                "POST", "/api/v1/namespaces/research/pods", pod("training", busy, domain, {KUEUE_POD_SET_LABEL: "main"})
            )[0]
            == 201
        )
        guarded(cp, "batch", batch, domain)
        wait(
            "both pods bound",
            lambda: sum(bool(p["spec"].get("nodeName")) for p in pods_of(cp, "research", "")) == 2,
            [],
            timeout=60,
        )

        # Run 1: the node without training work goes first; the budget refuses its eviction.
        out = run()
        assert f"{batch.name}: cordoned, joins the roll (a100, island {island})" in out, out
        assert "1 pods left (1 refused by a disruption budget, 0 without a controller)" in out, out
        assert cp.get(f"/api/v1/nodes/{batch.name}")["spec"]["unschedulable"] is True
        on_node = [p for p in pods_of(cp, "research", "app=batch") if p["spec"].get("nodeName") == batch.name]
        assert len(on_node) == 1 and not on_node[0]["metadata"].get("deletionTimestamp")
        others = [n for n in a100 if n is not batch]
        assert not any(cp.get(f"/api/v1/nodes/{n.name}")["spec"].get("unschedulable") for n in others), "one at a time"
        assert cloud.upgraded == []

        # The team lifts its budget: the real Eviction API takes the pod, and a later run finds the node empty.
        assert cp.call("DELETE", "/apis/policy/v1/namespaces/research/poddisruptionbudgets/batch")[0] == 200
        wait("drained", lambda: "drained; Node deleted" in run(), [], timeout=120)
        assert cp.call("GET", f"/api/v1/nodes/{batch.name}")[0] == 404
        assert cloud.upgraded == [(island, str(batch.instance))]
        cloud.finish()

        # The reimaged VM's kubelet registers a new Node, into preflight; nothing else starts meanwhile.
        register(cp, [batch])
        initialize(cp, [batch])
        out = run()
        assert f"{batch.name}: registered again, in preflight" in out, out
        assert "joins the roll" not in out, out
        run_preflight(cp, nodes, [batch.name], expect=2)

        # Released: the roll moves on to the next idle node, which has nothing to evict.
        out = run()
        nxt = a100[2]
        assert f"{batch.name}: rolled (passed preflight)" in out, out
        assert f"{nxt.name}: cordoned, joins the roll" in out and f"{nxt.name}: drained; Node deleted" in out, out
        cloud.finish()
        register(cp, [nxt])
        initialize(cp, [nxt])
        run_preflight(cp, nodes, [nxt.name], result="fail", expect=2)

        # One failure is the threshold here: the roll records it, suspends its CronJob and fails the run.
        set_roll_rule(cp, roll_rule(cp) | {"pause_after_failed": 1})
        out = run()  # not a failed Job: GpuRollPaused says it
        assert f"FAILED {nxt.name}: failed preflight on the new model" in out, out
        assert "roll paused: 1 nodes failed the roll" in out and "suspend" in out, out
        assert cp.get(f"/apis/batch/v1/namespaces/{HEALTH}/cronjobs/{RULE}")["spec"]["suspend"] is True
        assert len(cloud.upgraded) == 2

        # A person resumes it: the failure is acknowledged and that node left alone; it is still out of service,
        # so it holds the pool's share and nothing new starts.
        code, body = cp.call_patch(f"/apis/batch/v1/namespaces/{HEALTH}/cronjobs/{RULE}", {"spec": {"suspend": False}})
        assert code == 200, body
        out = run()
        assert "resumed: 1 failed nodes are left out of the roll" in out, out
        assert "joins the roll" not in out, out
    finally:
        restore(cp, nodes, a100, original, ["batch"])


def test_a_roll_survives_an_azure_refusal_and_lets_remediation_have_a_fenced_node(
    dev_cluster: ControlPlane, released: Released, azure: Any
) -> None:
    """Azure refuses the first Update Instances (another operation on the set): the step was saved before the
    Node went, so the run fails, says so, and the next run asks again. A node fenced for a fatal XID while its
    drain waits on a budget leaves the roll: remediation owns it."""
    cp, nodes = dev_cluster, released.nodes
    prep = prepared("dev")
    domain, fence = prep.bootstrap.label_domain, prep.addons.fatal_xid_key
    a100 = sorted(nodes.pools["a100"], key=lambda n: n.instance)
    island, last, guarded_node = a100[0].scale_set, a100[3], a100[1]
    cloud, original = wired_cloud(cp, azure, {island: {str(last.instance)}})
    cloud.refuse_upgrades = 1
    run = Runs(cp, released)
    state_path = f"/api/v1/namespaces/{HEALTH}/configmaps/gpu-roll-state"
    try:
        out = run(ok=False)
        assert f"{last.name}: cordoned, joins the roll" in out, out
        assert f"{last.name}: AzureError" in out and "HTTP 409" in out, out
        assert f"errors on {last.name}" in out, out
        saved = json.loads(cp.get(state_path)["data"]["state.json"])["nodes"][last.name]
        assert (saved["step"], saved["requested"]) == ("upgrading", False), saved
        assert cp.call("GET", f"/api/v1/nodes/{last.name}")[0] == 404 and cloud.upgraded == []

        out = run()
        assert f"{last.name}: updating" in out, out
        assert cloud.upgraded == [(island, str(last.instance))]
        cloud.finish()
        # Azure reports the update applied, yet no Node comes (the change did not restart the VM): 25 minutes
        # on, the roll reimages it, once.
        state = json.loads(cp.get(state_path)["data"]["state.json"])
        earlier = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=25)
        state["nodes"][last.name]["since"] = earlier.strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {"data": {"state.json": json.dumps(state)}}
        assert cp.call_patch(state_path, body)[0] == 200
        out = run()
        assert f"{last.name}: no new Node 25 minutes after an update Azure reports applied: reimaged" in out, out
        assert cloud.reimaged == [(island, str(last.instance))]
        assert "reimaged" not in run(), "once"
        cloud.finish()
        register(cp, [last])
        initialize(cp, [last])
        run_preflight(cp, nodes, [last.name], expect=2)
        assert f"{last.name}: rolled (passed preflight)" in run()

        # Next: a node whose drain a budget holds, fenced meanwhile.
        cloud.outdated = {island: {str(guarded_node.instance)}}
        guarded(cp, "guarded", guarded_node, domain)
        out = run()
        assert f"{guarded_node.name}: draining, 1 pods left (1 refused by a disruption budget" in out, out
        taint = {"key": fence, "value": "true", "effect": "NoExecute"}
        taints = cp.get(f"/api/v1/nodes/{guarded_node.name}")["spec"].get("taints") or []
        code, body = cp.call_patch(f"/api/v1/nodes/{guarded_node.name}", {"spec": {"taints": [*taints, taint]}})
        assert code == 200, body
        out = run()
        assert f"{guarded_node.name}: left the roll (fenced for a fatal XID: remediation replaces it)" in out, out
        assert cp.call("GET", f"/api/v1/nodes/{guarded_node.name}")[0] == 200, "the fenced Node is remediation's"
        assert len(cloud.upgraded) == 1
    finally:
        restore(cp, nodes, a100, original, ["guarded"])
