"""Scheduling on dev's pools as kwok nodes, by the real schedulers with the rendered configurations.

The gang scheduler is the rendered scheduler-plugins Deployment's pod, its container run by the
stand-in runtime (tests/controlplane/containers.py) on the binary built from scheduler-plugins'
module (tools/components: the release the proxy serves, named by `make components`), with the
rendered ConfigMap, service account and RBAC. The API server hosts' own kube-schedulers place
everything else (DaemonSets, balloons, plain pods). One of the Deployment's replicas runs: two on
one machine would share its network namespace and contend for port 10259.

dev's shape: team research owns pool a100 (4 nodes, one InfiniBand island, team-tainted); pool h100
(4 nodes, its own island, no team) is open to every team; one h100 node is still in preflight.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from modules.cluster.objects import gang

from .cluster import ControlPlane, wait
from .conftest import Released, prepared, wait_for_default_service_account
from .containers import Running, pods_of, wait_pods

NAMESPACE = "research"


@pytest.fixture(scope="module")
def gang_scheduler(dev_cluster: ControlPlane, released: Released) -> Iterator[Running]:
    spec = prepared("dev").addons
    (pod, *_) = wait_pods(dev_cluster, "scheduler-plugins", "app.kubernetes.io/name=scheduler-plugins", 1)
    run = released.nodes.runtime.start(pod, "kube-scheduler")
    lease = f"/apis/coordination.k8s.io/v1/namespaces/scheduler-plugins/leases/{spec.gang.scheduler_name}"

    def leading() -> bool:
        assert run.alive(), f"the gang scheduler exited:\n{run.output()[-4000:]}"
        return dev_cluster.call("GET", lease)[0] == 200

    try:
        wait("the gang scheduler's leader election", leading, [], timeout=90)
    except AssertionError as err:
        raise AssertionError(f"{err}\n--- gang scheduler log:\n{run.output()[-4000:]}") from None
    yield run
    run.stop()


def apply(cp: ControlPlane, objs: list[dict[str, Any]]) -> None:
    for obj in objs:
        run = cp.kubectl("apply", "--server-side", "--field-manager=test", "-f", "-", input=_json(obj))
        assert run.returncode == 0, run.stderr


def delete(cp: ControlPlane, objs: list[dict[str, Any]]) -> None:
    for obj in objs:
        cp.kubectl("delete", "--wait=false", "--ignore-not-found", "-f", "-", input=_json(obj))


def _json(obj: dict[str, Any]) -> str:
    import json

    return json.dumps(obj)


def bound(cp: ControlPlane, selector: str, namespace: str = NAMESPACE) -> dict[str, str]:
    """Pod -> node, for the pods of ``selector`` the scheduler has bound."""
    return {
        p["metadata"]["name"]: p["spec"]["nodeName"]
        for p in pods_of(cp, namespace, selector)
        if p["spec"].get("nodeName")
    }


def island_of(cp: ControlPlane, node: str) -> str:
    key = f"{prepared('dev').bootstrap.label_domain}/ib-island"
    return str(cp.get(f"/api/v1/nodes/{node}")["metadata"]["labels"][key])


def unschedulable(cp: ControlPlane, name: str, namespace: str = NAMESPACE) -> str:
    """The scheduler's reason a pod is pending (its PodScheduled condition), '' while it has none."""
    pod = cp.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
    for c in pod.get("status", {}).get("conditions") or []:
        if c["type"] == "PodScheduled" and c["status"] == "False":
            return str(c.get("message", ""))
    return ""


def test_a_gang_that_fits_lands_all_or_nothing_inside_one_island(
    dev_cluster: ControlPlane, released: Released, gang_scheduler: Running
) -> None:
    spec = prepared("dev").addons
    objs = gang.example(spec, spec.teams[0], name="fits", nodes=4)
    apply(dev_cluster, objs)
    try:
        selector = f"{gang.POD_GROUP_LABEL}=fits"
        wait("the gang of 4 to be bound", lambda: len(bound(dev_cluster, selector)) == 4, [], timeout=120)
        placed = bound(dev_cluster, selector)
        islands = {island_of(dev_cluster, n) for n in placed.values()}
        assert len(islands) == 1 and len(set(placed.values())) == 4, placed
        assert released.held.name not in placed.values()
    finally:
        delete(dev_cluster, objs)
        wait("the gang's pods to go", lambda: not pods_of(dev_cluster, NAMESPACE, f"{gang.POD_GROUP_LABEL}=fits"), [])


def test_a_gang_that_does_not_fit_lands_nowhere(
    dev_cluster: ControlPlane, released: Released, gang_scheduler: Running
) -> None:
    """4 whole-node members outside any team (no team toleration, in ``default``): only pool h100 takes
    them, and it has 3 free nodes (the fourth is in preflight). Any 3 could be placed; none may be."""
    spec = prepared("dev").addons
    group, statefulset = gang.example(spec, spec.teams[0], name="no-fit", nodes=4)
    for obj in (group, statefulset):
        obj["metadata"]["namespace"] = "default"
    statefulset["spec"]["template"]["spec"].pop("tolerations")
    statefulset["spec"]["template"]["spec"]["priorityClassName"] = "default"
    objs = [group, statefulset]
    apply(dev_cluster, objs)
    try:
        selector = f"{gang.POD_GROUP_LABEL}=no-fit"
        wait("the StatefulSet's 4 pods", lambda: len(pods_of(dev_cluster, "default", selector)) == 4, [], timeout=60)
        # Watched for 20 s, long enough for every member to have been tried and sent back several times.
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            assert bound(dev_cluster, selector, "default") == {}, bound(dev_cluster, selector, "default")
            time.sleep(1)
        assert gang_scheduler.alive()
        # The gang scheduler tried every member and sent it back (not a scheduler that never saw them): each
        # pod carries its PodScheduled=False condition, Unschedulable.
        conditions = {
            p["metadata"]["name"]: [
                (c.get("status"), c.get("reason"))
                for c in p["status"].get("conditions", [])
                if c.get("type") == "PodScheduled"
            ]
            for p in pods_of(dev_cluster, "default", selector)
        }
        assert all(got == [("False", "Unschedulable")] for got in conditions.values()), conditions
    finally:
        delete(dev_cluster, objs)
        wait("the gang's pods to go", lambda: not pods_of(dev_cluster, "default", f"{gang.POD_GROUP_LABEL}=no-fit"), [])


def whole_node_pod(name: str, pool: str, *, team: str | None, priority: str, **spec: Any) -> dict[str, Any]:
    """A pod that takes a whole GPU node of ``pool`` (8 GPUs), tolerating ``team``'s taint if given."""
    domain = prepared("dev").bootstrap.label_domain
    body: dict[str, Any] = {
        "priorityClassName": priority,
        "nodeSelector": {f"{domain}/pool": pool},
        "containers": [{"name": "c", "image": "registry.example.com/x", "resources": {"limits": {gang.GPU: "8"}}}],
    }
    if team:
        body["tolerations"] = [{"key": f"{domain}/team", "operator": "Equal", "value": team, "effect": "NoSchedule"}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NAMESPACE}, "spec": body | spec}


def test_balloons_hold_the_pool_and_yield_to_training(dev_cluster: ControlPlane, released: Released) -> None:
    """The rendered balloon Deployment, scaled to the pool (as its replicas setting does), takes every a100
    node; a training pod then preempts one balloon (priority -1) and takes its node."""
    domain = prepared("dev").bootstrap.label_domain
    scale = dev_cluster.kubectl("scale", "deployment/balloon-a100", "-n", "balloons", "--replicas=4")
    assert scale.returncode == 0, scale.stderr
    trainer = whole_node_pod("trainer", "a100", team="research", priority="training")
    try:
        wait(
            "4 balloons on a100",
            lambda: len(bound(dev_cluster, f"{domain}/pool=a100", "balloons")) == 4,
            [],
            timeout=90,
        )
        assert len(set(bound(dev_cluster, f"{domain}/pool=a100", "balloons").values())) == 4  # one per node
        code, body = dev_cluster.call("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", trainer)
        assert code == 201, body
        wait(
            "the trainer to preempt a balloon",
            lambda: bool(bound(dev_cluster, "", NAMESPACE).get("trainer")),
            [],
            timeout=90,
        )
        node = bound(dev_cluster, "", NAMESPACE)["trainer"]
        assert island_of(dev_cluster, node) == "a100-00"
        # The preempted balloon's replacement cannot find a node: the pool is full, balloons never preempt.
        wait(
            "a balloon left pending",
            lambda: any(
                "Insufficient nvidia.com/gpu" in unschedulable(dev_cluster, p["metadata"]["name"], "balloons")
                for p in pods_of(dev_cluster, "balloons", f"{domain}/pool=a100")
            ),
            [],
            timeout=60,
        )
    finally:
        dev_cluster.kubectl("scale", "deployment/balloon-a100", "-n", "balloons", "--replicas=0")
        dev_cluster.call("DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods/trainer?gracePeriodSeconds=0")
        wait("balloons and trainer to go", lambda: not bound(dev_cluster, f"{domain}/pool=a100", "balloons"), [])


def test_team_taints_hold(dev_cluster: ControlPlane, released: Released) -> None:
    """A pod of no team (a namespace no team owns) gets no a100 node, research's pool, free as they are. In
    research's own namespace a pod that names no toleration gets research's from the MutatingAdmissionPolicy on
    the minors that have it (the default 1.36; on 1.35 the user writes it)."""
    spec = prepared("dev").addons
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "no-team"}}
    assert dev_cluster.call("POST", "/api/v1/namespaces", body)[0] in (201, 409)
    wait_for_default_service_account(dev_cluster, ["no-team"])
    pod = whole_node_pod("no-toleration", "a100", team=None, priority="training")
    pod["metadata"]["namespace"] = "no-team"
    code, body = dev_cluster.call("POST", "/api/v1/namespaces/no-team/pods", pod)
    assert code == 201, body
    try:
        verdict = lambda: unschedulable(dev_cluster, "no-toleration", "no-team")  # noqa: E731
        wait("the scheduler's verdict", lambda: bool(verdict()), [], timeout=60)
        assert "untolerated taint(s)" in verdict()
        assert "no-toleration" not in bound(dev_cluster, "", "no-team")
    finally:
        dev_cluster.call("DELETE", "/api/v1/namespaces/no-team/pods/no-toleration?gracePeriodSeconds=0")
    # The admission chain's answer without storing the pod (dryRun): what a researcher's pod would become.
    code, admitted = dev_cluster.call(
        "POST",
        f"/api/v1/namespaces/{NAMESPACE}/pods?dryRun=All",
        whole_node_pod("mine", "a100", team=None, priority="training"),
    )
    assert code == 201, admitted
    research = {"key": spec.team_key, "operator": "Equal", "value": "research", "effect": "NoSchedule"}
    assert (research in (admitted["spec"].get("tolerations") or [])) is spec.mutating_admission, admitted["spec"]


def test_a_node_in_preflight_takes_no_workload(dev_cluster: ControlPlane, released: Released) -> None:
    """The held node keeps its preflight taint and label; a pod that may only go there stays pending, and
    the preflight DaemonSet's pod stays on it (on the released nodes, the DaemonSet let its pods go)."""
    held = released.held.name
    key = prepared("dev").addons.preflight_key
    node = dev_cluster.get(f"/api/v1/nodes/{held}")
    assert node["metadata"]["labels"][key] == "pending"
    assert any(t["key"] == key for t in node["spec"]["taints"])
    pod = whole_node_pod("onto-held", "h100", team=None, priority="training")
    pod["spec"]["nodeSelector"]["kubernetes.io/hostname"] = held
    code, body = dev_cluster.call("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", pod)
    assert code == 201, body
    try:
        wait("the scheduler's verdict", lambda: bool(unschedulable(dev_cluster, "onto-held")), [], timeout=60)
        # Only the held node matches the pod's selector; Kubernetes 1.35's summary no longer names the taint.
        assert "had untolerated taint(s)" in unschedulable(dev_cluster, "onto-held")
        preflight = {
            p["spec"]["nodeName"] for p in pods_of(dev_cluster, "gpu-health", "app.kubernetes.io/name=gpu-preflight")
        }
        assert preflight == {held}, preflight
    finally:
        dev_cluster.call("DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods/onto-held?gracePeriodSeconds=0")
