"""CEL admission evaluated by cel-python on admitted and refused pods: a quick check of the same table the
real API server evaluates (tests/controlplane/test_admission.py), which is the authority."""

from __future__ import annotations

from typing import Any

import celpy
import pytest
from celpy import celtypes

from modules.cluster.objects import admission, gang
from modules.cluster.spec import AddonsSpec

from .admission_cases import (
    ADMITTED,
    GPU_ADMITTED,
    GPU_REFUSED,
    OWN,
    PREFLIGHT_MESSAGE,
    REFUSED_PREFLIGHT,
    REFUSED_TEAM,
    TEAM,
    TEAM_MESSAGE,
    pod,
)

ENV = celpy.Environment()


def _eval(expr: str, activation: dict[str, Any]) -> Any:
    return ENV.program(ENV.compile(expr)).evaluate(activation)


def admit(
    policy: dict[str, Any],
    pod: dict[str, Any],
    team: str = "research",
    *,
    old: dict[str, Any] | None = None,
    user: str = "alice",
) -> list[str]:
    """Messages of the failed validations (empty: admitted), as the API server computes them; ``old``: the
    pod before an UPDATE (None: a CREATE), ``user``: who sends it."""
    activation: dict[str, Any] = {
        "object": celpy.json_to_cel(pod),
        "oldObject": celpy.json_to_cel(old),
        "request": celpy.json_to_cel(
            {"operation": "CREATE" if old is None else "UPDATE", "userInfo": {"username": user}}
        ),
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


@pytest.fixture(scope="module")
def policy(dev_spec: AddonsSpec) -> dict[str, Any]:
    return admission.validating(dev_spec)[0]


@pytest.mark.parametrize("case", list(ADMITTED))
def test_admitted(policy: dict[str, Any], case: str) -> None:
    assert admit(policy, ADMITTED[case]) == []


@pytest.mark.parametrize("case", list(REFUSED_TEAM))
def test_refused_for_another_teams_taint(policy: dict[str, Any], case: str) -> None:
    assert admit(policy, REFUSED_TEAM[case]) == [TEAM_MESSAGE]


@pytest.mark.parametrize("case", list(REFUSED_PREFLIGHT))
def test_refused_for_the_preflight_taint(policy: dict[str, Any], case: str) -> None:
    messages = admit(policy, REFUSED_PREFLIGHT[case])
    assert messages[-1] == PREFLIGHT_MESSAGE


def test_the_documented_gang_example_is_admitted(dev_spec: AddonsSpec, policy: dict[str, Any]) -> None:
    team = dev_spec.teams[0]
    statefulset = gang.example(dev_spec, team)[1]
    assert admit(policy, {"spec": statefulset["spec"]["template"]["spec"]}, team.name) == []


def test_the_same_pod_is_refused_in_another_teams_namespace(policy: dict[str, Any]) -> None:
    assert admit(policy, pod([OWN]), team="vision") != []


def _queued(p: dict[str, Any]) -> dict[str, Any]:
    return {**p, "spec": {**p["spec"], "schedulingGates": [{"name": admission.KUEUE_GATE}]}}


def test_kueue_admits_to_another_teams_pool_and_only_kueue_lifts_its_gate(policy: dict[str, Any]) -> None:
    """A job Kueue admitted to a lender's pool: its pods carry the lender's toleration (the flavor's) and are
    created behind Kueue's gate; Kueue lifts it. Anyone else lifting it would place the pod themselves."""
    borrowed = next(iter(REFUSED_TEAM.values()))
    assert admit(policy, borrowed) == [TEAM_MESSAGE]
    gated = _queued(borrowed)
    assert admit(policy, gated) == []
    assert admit(policy, borrowed, old=gated, user=admission.KUEUE_USER) == []
    messages = admit(policy, borrowed, old=gated, user="alice")
    assert len(messages) == 1 and admission.KUEUE_GATE in messages[0], messages
    # An update that adds a foreign toleration is judged as a create is; one that leaves them is not.
    assert admit(policy, borrowed, old=pod([OWN])) == [TEAM_MESSAGE]
    assert admit(policy, {**borrowed, "metadata": {"labels": {"x": "y"}}}, old=borrowed) == []


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
