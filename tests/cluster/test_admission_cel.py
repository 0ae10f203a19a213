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
    NODE_NAME_MESSAGE,
    OTHER,
    OUTSIDER_MESSAGE,
    OWN,
    POD_SECURITY_ADMITTED,
    POD_SECURITY_REFUSED,
    PREFLIGHT_MESSAGE,
    REFUSED_NODE_NAME,
    REFUSED_PREFLIGHT,
    REFUSED_TEAM,
    TEAM,
    TEAM_MESSAGE,
    on_node,
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
    labelled: bool = True,
    old: dict[str, Any] | None = None,
    user: str = "alice",
    groups: tuple[str, ...] = ("system:authenticated",),
) -> list[str]:
    """Messages of the failed validations (empty: admitted), as the API server computes them. ``labelled``:
    the namespace ``team`` carries the team label (else it is a namespace of no team); ``old``: the pod
    before an UPDATE (None: a CREATE), ``user``: who sends it."""
    labels = {TEAM: team} if labelled else {"kubernetes.io/metadata.name": team}
    activation: dict[str, Any] = {
        "object": celpy.json_to_cel(pod),
        "oldObject": celpy.json_to_cel(old),
        "request": celpy.json_to_cel(
            {"operation": "CREATE" if old is None else "UPDATE", "userInfo": {"username": user, "groups": list(groups)}}
        ),
        "namespaceObject": celpy.json_to_cel({"metadata": {"name": team, "labels": labels}}),
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


@pytest.mark.parametrize("case", list(REFUSED_NODE_NAME))
def test_refused_for_naming_its_node(policy: dict[str, Any], case: str) -> None:
    assert admit(policy, REFUSED_NODE_NAME[case]) == [NODE_NAME_MESSAGE]


def test_a_node_creates_its_own_mirror_pods_and_no_other_node_names_it(policy: dict[str, Any]) -> None:
    """A static pod's mirror names its node and is created by that node (NodeRestriction lets a node create
    only those, bound to itself, and holds only for users in system:nodes); created as another node, by a user
    named like the node but outside that group, or without the mirror annotation, it is refused."""
    plain = on_node(pod())
    mirror = plain | {"metadata": {"name": "p", "annotations": {admission.MIRROR_ANNOTATION: "hash"}}}
    node, nodes = "system:node:dev-h100-0000s0", ("system:nodes", "system:authenticated")
    assert admit(policy, mirror, user=node, groups=nodes) == []
    assert admit(policy, mirror, user="system:node:dev-h100-0000s1", groups=nodes) == [NODE_NAME_MESSAGE]
    assert admit(policy, mirror, user=node) == [NODE_NAME_MESSAGE]  # the name, not the group: no NodeRestriction
    assert admit(policy, plain, user=node, groups=nodes) == [NODE_NAME_MESSAGE]  # not a mirror


def test_a_bound_pod_is_updated_with_its_node_name(policy: dict[str, Any]) -> None:
    """The scheduler binds through pods/binding; every later update of the pod (a label, the job controller's
    finalizer) carries the node it was bound to, and is not refused for it."""
    bound = on_node(pod([OWN], "training"))
    labelled = bound | {"metadata": {"name": "p", "labels": {"step": "2"}}}
    assert admit(policy, labelled, old=bound) == []


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


def test_the_documented_topology_hostpath_of_before_is_refused(dev_spec: AddonsSpec) -> None:
    """The job this project documented until now mounted /opt/microsoft from the host; that is refused now,
    and the documented job mounts the team's ConfigMap instead."""
    policy = admission.pod_security()[0]
    before = {
        "spec": {
            "containers": [{"name": "c", "image": "i"}],
            "volumes": [{"name": "topology", "hostPath": {"path": "/opt/microsoft", "type": "Directory"}}],
        }
    }
    assert refused(policy, before) == [policy["spec"]["validations"][3]["message"]]
    pod_spec = gang.example(dev_spec, dev_spec.teams[0])[1]["spec"]["template"]["spec"]
    assert [v for v in pod_spec["volumes"] if "hostPath" in v] == []
    # NCCL still finds its file where the image put it: the ConfigMap item lands at NCCL_TOPO_FILE.
    (trainer,) = pod_spec["containers"]
    (mount,) = [m for m in trainer["volumeMounts"] if m["name"] == "topology"]
    (volume,) = [v for v in pod_spec["volumes"] if v["name"] == "topology"]
    (item,) = volume["configMap"]["items"]
    env = {e["name"]: e["value"] for e in trainer["env"]}
    assert volume["configMap"]["name"] == "nccl-topology"
    assert f"{mount['mountPath']}/{item['path']}" == env["NCCL_TOPO_FILE"]


# --- Namespaces of no team ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "tolerations,priority",
    [([OTHER], None), ([OWN], "training"), ([{"key": TEAM, "operator": "Exists"}], "borrow")],
    ids=["another team", "a team", "every team, even borrowing"],
)
def test_a_namespace_of_no_team_tolerates_no_team(
    policy: dict[str, Any], tolerations: list[dict[str, str]], priority: str | None
) -> None:
    assert admit(policy, pod(tolerations, priority), "scratch", labelled=False) == [OUTSIDER_MESSAGE]


def test_a_namespace_of_no_team_may_run_untolerating_pods(policy: dict[str, Any]) -> None:
    assert admit(policy, pod(), "scratch", labelled=False) == []
    assert admit(policy, pod([{"key": "nvidia.com/gpu", "operator": "Exists"}]), "scratch", labelled=False) == []


def test_a_namespace_of_no_team_names_itself_for_the_preflight_taint(policy: dict[str, Any]) -> None:
    messages = admit(policy, pod([{"operator": "Exists"}]), "scratch", labelled=False)
    assert messages[-1].startswith("pod in namespace scratch tolerates the preflight taint"), messages


# --- tenant-pod-security: Pod Security baseline plus IPC_LOCK ----------------------------------------------


@pytest.fixture(scope="module")
def psa_policy() -> dict[str, Any]:
    return admission.pod_security()[0]


@pytest.mark.parametrize("case", list(POD_SECURITY_ADMITTED))
def test_pod_security_admits(psa_policy: dict[str, Any], case: str) -> None:
    assert refused(psa_policy, POD_SECURITY_ADMITTED[case]) == []


@pytest.mark.parametrize("case", list(POD_SECURITY_REFUSED))
def test_pod_security_refuses(psa_policy: dict[str, Any], case: str) -> None:
    pod_obj, which = POD_SECURITY_REFUSED[case]
    assert refused(psa_policy, pod_obj) == [psa_policy["spec"]["validations"][which]["message"]]


def test_every_binding_spares_only_the_system_namespaces(dev_spec: AddonsSpec) -> None:
    bindings = {
        o["metadata"]["name"]: o["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
        for o in admission.admission(dev_spec) + admission.pod_security()
        if o["kind"] == "ValidatingAdmissionPolicyBinding"
    }
    name = "kubernetes.io/metadata.name"
    assert bindings == {
        "team-tolerations": [
            {"key": name, "operator": "NotIn", "values": ["kube-system", "gpu-health", "balloons", "scheduler-plugins"]}
        ],
        "gpu-isolation": [{"key": name, "operator": "NotIn", "values": ["kube-system", "gpu-health"]}],
        "tenant-pod-security": [{"key": name, "operator": "NotIn", "values": ["kube-system", "gpu-health"]}],
    }


def test_the_documented_job_and_every_workload_outside_the_agents_namespaces_keep_baseline(
    dev_spec: AddonsSpec, psa_policy: dict[str, Any]
) -> None:
    from modules.cluster.manifests import render_manifests

    statefulset = gang.example(dev_spec, dev_spec.teams[0])[1]
    assert refused(psa_policy, {"spec": statefulset["spec"]["template"]["spec"]}) == []
    for obj in render_manifests(dev_spec):
        template = obj.get("spec", {}).get("template")
        if template and refused(psa_policy, {"spec": template["spec"]}):
            assert obj["metadata"]["namespace"] in admission.HOST_ACCESS_NAMESPACES, obj["metadata"]["name"]
