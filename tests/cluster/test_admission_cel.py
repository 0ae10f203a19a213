"""CEL admission evaluated by a real CEL implementation (cel-python) on admitted and refused pods."""

from __future__ import annotations

from typing import Any

import celpy
import pytest
from celpy import celtypes

from modules.cluster.objects import admission, gang
from modules.cluster.spec import AddonsSpec

ENV = celpy.Environment()
TEAM = "gpu.example.com/team"
PREFLIGHT = "gpu.example.com/preflight"


def _eval(expr: str, activation: dict[str, Any]) -> Any:
    return ENV.program(ENV.compile(expr)).evaluate(activation)


def admit(policy: dict[str, Any], pod: dict[str, Any], team: str = "research") -> list[str]:
    """Messages of the failed validations (empty: admitted), as the API server computes them."""
    activation: dict[str, Any] = {
        "object": celpy.json_to_cel(pod),
        "namespaceObject": celpy.json_to_cel({"metadata": {"name": team, "labels": {TEAM: team}}}),
    }
    variables: dict[Any, Any] = {}
    for var in policy["spec"]["variables"]:
        activation["variables"] = celtypes.MapType(variables)
        variables[celtypes.StringType(var["name"])] = _eval(var["expression"], activation)
    activation["variables"] = celtypes.MapType(variables)
    return [
        str(_eval(v["messageExpression"], activation))
        for v in policy["spec"]["validations"]
        if not bool(_eval(v["expression"], activation))
    ]


def pod(tolerations: list[dict[str, str]] | None = None, priority: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "i"}]}
    if tolerations is not None:
        spec["tolerations"] = tolerations
    if priority:
        spec["priorityClassName"] = priority
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}


OWN = {"key": TEAM, "operator": "Equal", "value": "research", "effect": "NoSchedule"}
OTHER = {"key": TEAM, "operator": "Equal", "value": "vision", "effect": "NoSchedule"}
ALL_TEAMS = {"key": TEAM, "operator": "Exists"}

ADMITTED = {
    "no tolerations": pod(),
    "empty tolerations": pod([]),
    "own team": pod([OWN], "training"),
    "own team, value only (operator defaults to Equal)": pod([{"key": TEAM, "value": "research"}]),
    "unrelated taint": pod([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]),
    "borrow tolerates every team": pod([ALL_TEAMS], "borrow"),
    "borrow tolerates another team": pod([OTHER, OWN], "borrow"),
}
REFUSED_TEAM = {
    "another team": pod([OTHER]),
    "another team beside its own": pod([OWN, OTHER], "training"),
    "every team without borrow": pod([ALL_TEAMS], "training"),
    "team key without value": pod([{"key": TEAM, "operator": "Equal"}]),
}
REFUSED_PREFLIGHT = {
    "preflight taint": pod([{"key": PREFLIGHT, "operator": "Exists"}], "borrow"),
    "wildcard toleration, even borrowing": pod([{"operator": "Exists"}], "borrow"),
}


@pytest.fixture(scope="module")
def policy(dev_spec: AddonsSpec) -> dict[str, Any]:
    return admission.validating(dev_spec)[0]


@pytest.mark.parametrize("case", list(ADMITTED))
def test_admitted(policy: dict[str, Any], case: str) -> None:
    assert admit(policy, ADMITTED[case]) == []


@pytest.mark.parametrize("case", list(REFUSED_TEAM))
def test_refused_for_another_teams_taint(policy: dict[str, Any], case: str) -> None:
    assert admit(policy, REFUSED_TEAM[case]) == [
        "pod in team namespace research tolerates another team's taint: tolerate only team=research "
        "or set priorityClassName: borrow"
    ]


@pytest.mark.parametrize("case", list(REFUSED_PREFLIGHT))
def test_refused_for_the_preflight_taint(policy: dict[str, Any], case: str) -> None:
    messages = admit(policy, REFUSED_PREFLIGHT[case])
    assert messages[-1] == (
        "pod in team namespace research tolerates the preflight taint (or every taint): "
        "name the taint keys it tolerates"
    )


def test_the_documented_gang_example_is_admitted(dev_spec: AddonsSpec, policy: dict[str, Any]) -> None:
    team = dev_spec.teams[0]
    statefulset = gang.example(dev_spec, team)[1]
    assert admit(policy, {"spec": statefulset["spec"]["template"]["spec"]}, team.name) == []


def test_the_same_pod_is_refused_in_another_teams_namespace(policy: dict[str, Any]) -> None:
    assert admit(policy, pod([OWN]), team="vision") != []


def test_mutating_policy_match_condition(spec_136: AddonsSpec) -> None:
    mutating = admission.mutating(spec_136)[0]
    condition = mutating["spec"]["matchConditions"][0]["expression"]
    assert bool(_eval(condition, {"object": celpy.json_to_cel(pod())}))
    assert bool(_eval(condition, {"object": celpy.json_to_cel(pod([{"key": "x", "operator": "Exists"}]))}))
    assert not bool(_eval(condition, {"object": celpy.json_to_cel(pod([OWN]))}))
    # The JSONPatch expression uses Kubernetes' CEL types (JSONPatch, Object.*), which cel-python
    # lacks; parsing it still catches syntax errors.
    ENV.compile(mutating["spec"]["mutations"][0]["jsonPatch"]["expression"])


# --- GPU isolation: only device-plugin-allocated GPUs are visible ----------------------------------------


def refused(policy: dict[str, Any], pod_obj: dict[str, Any]) -> list[str]:
    """Messages of a variable-free policy's failed validations (empty: admitted)."""
    activation = {"object": celpy.json_to_cel(pod_obj)}
    return [v["message"] for v in policy["spec"]["validations"] if not bool(_eval(v["expression"], activation))]


def gpu_pod(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"containers": [{"name": "c", "image": "i"}]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {**base, **spec}}


def container(**fields: Any) -> dict[str, Any]:
    return {"name": "c", "image": "i", **fields}


ALL_GPUS = {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}
GPU_ADMITTED = {
    "plain pod": gpu_pod(),
    "GPUs through the device plugin": gpu_pod(
        containers=[container(resources={"limits": {"nvidia.com/gpu": "8", "rdma/ib": "1"}})]
    ),
    "CUDA_VISIBLE_DEVICES selects among allocated GPUs": gpu_pod(
        containers=[container(env=[{"name": "CUDA_VISIBLE_DEVICES", "value": "0,1"}])]
    ),
    "IPC_LOCK for InfiniBand": gpu_pod(containers=[container(securityContext={"capabilities": {"add": ["IPC_LOCK"]}})]),
    "an unrelated mount": gpu_pod(containers=[container(volumeMounts=[{"name": "v", "mountPath": "/var/run/x"}])]),
    "privileged: false": gpu_pod(containers=[container(securityContext={"privileged": False})]),
}
GPU_REFUSED = {
    "NVIDIA_VISIBLE_DEVICES=all without a GPU request": (gpu_pod(containers=[container(env=[ALL_GPUS])]), 0),
    "NVIDIA_VISIBLE_DEVICES in an init container": (
        gpu_pod(initContainers=[container(env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "0"}])]),
        0,
    ),
    "NVIDIA_VISIBLE_DEVICES in an ephemeral container": (gpu_pod(ephemeralContainers=[container(env=[ALL_GPUS])]), 0),
    "privileged": (gpu_pod(containers=[container(securityContext={"privileged": True})]), 1),
    "SYS_ADMIN": (gpu_pod(containers=[container(securityContext={"capabilities": {"add": ["SYS_ADMIN"]}})]), 1),
    "CAP_SYS_ADMIN": (
        gpu_pod(containers=[container(securityContext={"capabilities": {"add": ["IPC_LOCK", "CAP_SYS_ADMIN"]}})]),
        1,
    ),
    "ALL capabilities": (gpu_pod(containers=[container(securityContext={"capabilities": {"add": ["ALL"]}})]), 1),
    "a device-list mount": (
        gpu_pod(
            containers=[
                container(volumeMounts=[{"name": "null", "mountPath": "/var/run/nvidia-container-devices/all"}])
            ]
        ),
        2,
    ),
    "host network": (gpu_pod(hostNetwork=True), 3),
}


@pytest.fixture(scope="module")
def gpu_policy() -> dict[str, Any]:
    return admission.gpu_isolation()[0]


@pytest.mark.parametrize("case", list(GPU_ADMITTED))
def test_gpu_isolation_admits(gpu_policy: dict[str, Any], case: str) -> None:
    assert refused(gpu_policy, GPU_ADMITTED[case]) == []


@pytest.mark.parametrize("case", list(GPU_REFUSED))
def test_gpu_isolation_refuses(gpu_policy: dict[str, Any], case: str) -> None:
    pod_obj, which = GPU_REFUSED[case]
    assert refused(gpu_policy, pod_obj) == [gpu_policy["spec"]["validations"][which]["message"]]


def test_gpu_isolation_spares_only_the_node_agents_namespaces(dev_spec: AddonsSpec, gpu_policy: dict[str, Any]) -> None:
    binding = admission.gpu_isolation()[1]
    (expr,) = binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
    assert (expr["key"], expr["operator"], sorted(expr["values"])) == (
        "kubernetes.io/metadata.name",
        "NotIn",
        ["gpu-health", "kube-system"],
    )
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert {r for rule in gpu_policy["spec"]["matchConstraints"]["resourceRules"] for r in rule["resources"]} == {
        "pods",
        "pods/ephemeralcontainers",
    }
    # The documented job passes; every agent that sets NVIDIA_VISIBLE_DEVICES lives in a spared namespace.
    statefulset = gang.example(dev_spec, dev_spec.teams[0])[1]
    assert refused(gpu_policy, {"spec": statefulset["spec"]["template"]["spec"]}) == []
    from modules.cluster.manifests import render_manifests

    for obj in render_manifests(dev_spec):
        template = obj.get("spec", {}).get("template")
        if template and refused(gpu_policy, {"spec": template["spec"]}):
            assert obj["metadata"]["namespace"] in expr["values"], obj["metadata"]["name"]
