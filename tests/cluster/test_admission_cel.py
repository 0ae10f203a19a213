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
