"""The team-toleration, GPU-isolation and tenant-pod-security policies, evaluated by the real API server on
the admission table.

Each pod of tests/cluster/admission_cases.py is created with ``dryRun=All`` in dev's team namespace
after dev's add-ons are applied: admission runs in full (the ValidatingAdmissionPolicies, their
bindings' namespace selectors, Pod Security admission on the namespace's labels, the API server's own
CEL), nothing is stored. A refusal must carry the table's reason, word for word. Namespaces of no team
are created here as a user would create one: no label but the name the API server sets.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import yaml

from agk.render import render_manifests_dir
from modules.cluster.objects import admission, gang
from tests.cluster.admission_cases import (
    ADMITTED,
    GPU_ADMITTED,
    GPU_REFUSED,
    NODE_NAME_MESSAGE,
    OTHER,
    OWN,
    POD_SECURITY_ADMITTED,
    POD_SECURITY_REFUSED,
    PREFLIGHT_MESSAGE,
    REFUSED_NODE_NAME,
    REFUSED_PREFLIGHT,
    REFUSED_TEAM,
    TEAM,
    TEAM_MESSAGE,
    pod,
)

from .cluster import ControlPlane, wait
from .conftest import prepared, wait_for_default_service_account

NAMESPACE = "research"


def create(cp: ControlPlane, obj: dict[str, Any], namespace: str = NAMESPACE) -> tuple[int, str]:
    """Dry-run create: the status and, when refused, the API server's message. Ephemeral containers
    cannot be set on create: the pod is created without them, then they are added through the
    ``pods/ephemeralcontainers`` subresource (what ``kubectl debug`` does), dry run."""
    ephemeral = obj["spec"].get("ephemeralContainers")
    if ephemeral is None:
        code, body = cp.call("POST", f"/api/v1/namespaces/{namespace}/pods?dryRun=All", obj)
        return code, str(body.get("message", ""))
    name = "ephemeral-target"
    plain = {
        **obj,
        "metadata": {"name": name},
        "spec": {k: v for k, v in obj["spec"].items() if k != "ephemeralContainers"},
    }
    code, body = cp.call("POST", f"/api/v1/namespaces/{namespace}/pods", plain)
    assert code in (201, 409), body
    try:
        # The scheduler and kwok write the pod between the GET and the PUT (binding, status): a 409 says
        # the copy is stale, so read it again, as kubectl debug does (bounded).
        for _ in range(10):
            got = cp.call("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")[1]
            got["spec"]["ephemeralContainers"] = ephemeral
            path = f"/api/v1/namespaces/{namespace}/pods/{name}/ephemeralcontainers?dryRun=All"
            code, body = cp.call("PUT", path, got)
            if code != 409:
                break
        return code, str(body.get("message", ""))
    finally:
        cp.call("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}?gracePeriodSeconds=0")


@pytest.mark.parametrize("case", list(ADMITTED) + list(GPU_ADMITTED))
def test_admitted(dev_cluster: ControlPlane, case: str) -> None:
    obj = ADMITTED.get(case) or GPU_ADMITTED[case]
    code, message = create(dev_cluster, obj)
    assert code == 201, message


@pytest.mark.parametrize("case", list(REFUSED_TEAM))
def test_refused_for_another_teams_taint(dev_cluster: ControlPlane, case: str) -> None:
    code, message = create(dev_cluster, REFUSED_TEAM[case])
    assert code == 403 and "ValidatingAdmissionPolicy 'team-tolerations'" in message, message
    assert message.endswith(f"denied request: {TEAM_MESSAGE}"), message


@pytest.mark.parametrize("case", list(REFUSED_PREFLIGHT))
def test_refused_for_the_preflight_taint(dev_cluster: ControlPlane, case: str) -> None:
    code, message = create(dev_cluster, REFUSED_PREFLIGHT[case])
    assert code == 403 and PREFLIGHT_MESSAGE in message, message


@pytest.mark.parametrize("case", list(REFUSED_NODE_NAME))
def test_refused_for_naming_its_node(dev_cluster: ControlPlane, case: str) -> None:
    """Such a pod would skip the scheduler and land on another team's, or an untested, node (the kubelet checks
    NoExecute taints only)."""
    code, message = create(dev_cluster, REFUSED_NODE_NAME[case])
    assert code == 403 and "ValidatingAdmissionPolicy 'team-tolerations'" in message, message
    assert message.endswith(f"denied request: {NODE_NAME_MESSAGE}"), message


@pytest.mark.parametrize("case", list(GPU_REFUSED))
def test_gpu_isolation_refuses(dev_cluster: ControlPlane, case: str) -> None:
    obj, which = GPU_REFUSED[case]
    policy = dev_cluster.get("/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/gpu-isolation")
    code, message = create(dev_cluster, obj)
    assert code == 403 and "ValidatingAdmissionPolicy 'gpu-isolation'" in message, message
    assert message.endswith(f"denied request: {policy['spec']['validations'][which]['message']}"), message


def test_the_same_pod_is_refused_in_another_teams_namespace(dev_cluster: ControlPlane) -> None:
    # dev has one team; a second team's namespace is labelled as the add-ons label every team's.
    vision = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "vision", "labels": {TEAM: "vision"}}}
    assert dev_cluster.call("POST", "/api/v1/namespaces", vision)[0] in (201, 409)
    code, message = create(dev_cluster, pod([OWN]), namespace="vision")
    assert code == 403 and "team-tolerations" in message, message
    assert "team namespace vision tolerates another team's taint" in message, message


# --- Tenancy: host access refused in every namespace but the node agents' --------------------------------

HOST_ROOT = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "p"},
    "spec": {
        "containers": [{"name": "c", "image": "i", "volumeMounts": [{"name": "root", "mountPath": "/host"}]}],
        "volumes": [{"name": "root", "hostPath": {"path": "/"}}],
    },
}


def validation_messages(cp: ControlPlane, policy: str) -> list[str]:
    got = cp.get(f"/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/{policy}")
    return [v["message"] for v in got["spec"]["validations"]]


def refused_by(cp: ControlPlane, message: str, expected: dict[str, list[int]]) -> bool:
    """The API server reports the first denying policy, in no fixed order among policies: the refusal is one
    of ``expected`` (policy -> indexes of the validations that must deny this pod)."""
    for policy, which in expected.items():
        texts = validation_messages(cp, policy)
        prefix = f"ValidatingAdmissionPolicy '{policy}' with binding '{policy}' denied request: "
        if any(message.endswith(prefix + texts[i]) for i in which):
            return True
    return False


@pytest.fixture(scope="module")
def in_force(dev_cluster: ControlPlane) -> ControlPlane:
    """dev's control plane once the API server enforces all three policies: each policy takes effect when the
    API server's informer has loaded it, a moment after it is applied, and an admitted pod proves nothing
    before that. One probe pod per policy that only that policy refuses."""
    probes = {
        "tenant-pod-security": {**HOST_ROOT, "spec": {"hostPID": True, "containers": [{"name": "c", "image": "i"}]}},
        "gpu-isolation": pod()
        | {
            "spec": {
                "containers": [{"name": "c", "image": "i", "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}]
            }
        },
        "team-tolerations": pod([OTHER]),
    }

    def refuses(policy: str, probe: dict[str, Any]) -> Callable[[], bool]:
        return lambda: f"ValidatingAdmissionPolicy '{policy}'" in create(dev_cluster, probe)[1]

    for policy, probe in probes.items():
        wait(f"{policy} in force", refuses(policy, probe), dev_cluster.processes(), timeout=60)
    return dev_cluster


@pytest.fixture(scope="module")
def scratch(in_force: ControlPlane) -> str:
    """A namespace created after the add-ons, without any label: nobody's team, no Pod Security labels."""
    name = "scratch"
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    assert in_force.call("POST", "/api/v1/namespaces", body)[0] in (201, 409)
    wait_for_default_service_account(in_force, [name])
    return name


def test_a_team_pod_mounting_the_nodes_root_is_refused(in_force: ControlPlane) -> None:
    code, message = create(in_force, HOST_ROOT)
    assert code == 403, message
    assert refused_by(in_force, message, {"tenant-pod-security": [3]}), message


def test_a_pod_mounting_the_nodes_root_in_a_new_unlabelled_namespace_is_refused(
    in_force: ControlPlane, scratch: str
) -> None:
    code, message = create(in_force, HOST_ROOT, namespace=scratch)
    assert code == 403, message
    assert refused_by(in_force, message, {"tenant-pod-security": [3]}), message


@pytest.mark.parametrize(
    "tolerations,priority",
    [([OTHER], None), ([{"key": TEAM, "operator": "Exists"}], "borrow"), ([{"operator": "Exists"}], None)],
    ids=["another team", "every team, borrowing", "every taint"],
)
def test_a_pod_of_no_team_tolerating_a_teams_taint_is_refused(
    in_force: ControlPlane, scratch: str, tolerations: list[dict[str, str]], priority: str | None
) -> None:
    code, message = create(in_force, pod(tolerations, priority), namespace=scratch)
    assert code == 403 and "ValidatingAdmissionPolicy 'team-tolerations'" in message, message
    assert f"pod in namespace {scratch}" in message, message


def test_a_pod_of_no_team_that_tolerates_no_team_is_admitted(in_force: ControlPlane, scratch: str) -> None:
    code, message = create(in_force, pod([{"key": "nvidia.com/gpu", "operator": "Exists"}]), namespace=scratch)
    assert code == 201, message


@pytest.mark.parametrize("case", list(POD_SECURITY_ADMITTED))
def test_what_training_needs_is_admitted(in_force: ControlPlane, case: str) -> None:
    code, message = create(in_force, POD_SECURITY_ADMITTED[case])
    assert code == 201, message


@pytest.mark.parametrize("case", list(POD_SECURITY_REFUSED))
def test_host_access_is_refused_in_team_namespaces(in_force: ControlPlane, case: str) -> None:
    obj, which = POD_SECURITY_REFUSED[case]
    code, message = create(in_force, obj)
    assert code == 403, message
    assert refused_by(in_force, message, {"tenant-pod-security": [which]}), message


def test_the_documented_training_job_is_admitted_with_its_topology_file(in_force: ControlPlane) -> None:
    """The StatefulSet the README and `agk render` give (gang.example), created for real (server-side, as
    `kubectl apply` does) and its pod template dry-run created in the team namespace: both admitted; the
    ConfigMap its topology volume names exists there, so the pod could start."""
    spec = prepared("dev").addons
    team = spec.teams[0].name
    statefulset = gang.example(spec, spec.teams[0])[1]
    template = statefulset["spec"]["template"]
    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "trainer-0", **template["metadata"]}}
    obj["spec"] = template["spec"]
    code, message = create(in_force, obj, namespace=team)
    assert code == 201, message
    sts_path = f"/apis/apps/v1/namespaces/{team}/statefulsets?dryRun=All"
    code, body = in_force.call("POST", sts_path, statefulset)
    assert code == 201, body
    (volume,) = [v for v in template["spec"]["volumes"] if v["name"] == "topology"]
    name = volume["configMap"]["name"]
    code, cm = in_force.call("GET", f"/api/v1/namespaces/{team}/configmaps/{name}")
    assert code == 200, cm
    assert {i["key"] for i in volume["configMap"]["items"]} <= set(cm["data"]), cm.get("data", {}).keys()


def test_the_system_agents_are_admitted_in_their_namespaces(in_force: ControlPlane, tmp_path_factory: Any) -> None:
    """Every DaemonSet and Deployment the add-ons ship, as the rendered manifests hold them: its pod
    template dry-run created in its namespace (the node agents keep their host access in kube-system and
    gpu-health, and the rest pass every policy where they are)."""
    folder = tmp_path_factory.mktemp("tenancy-manifests")
    render_manifests_dir(prepared("dev").addons, folder)
    workloads = [
        doc
        for path in sorted((folder / "manifests").glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc and doc["kind"] in ("DaemonSet", "Deployment")
    ]
    assert {w["metadata"]["namespace"] for w in workloads} >= set(admission.HOST_ACCESS_NAMESPACES)
    host = 0
    for w in workloads:
        template = w["spec"]["template"]
        obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "agent", **template["metadata"]}}
        obj["spec"] = template["spec"]
        host += bool(template["spec"].get("hostNetwork")) or any(
            "hostPath" in v for v in template["spec"].get("volumes", [])
        )
        code, message = create(in_force, obj, namespace=w["metadata"]["namespace"])
        assert code == 201, (w["kind"], w["metadata"]["name"], message)
    assert host > 0  # some of them do use the host, and are still admitted where they run
