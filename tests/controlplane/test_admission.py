"""The team-toleration and GPU-isolation policies, evaluated by the real API server on the admission table.

Each pod of tests/cluster/admission_cases.py is created with ``dryRun=All`` in dev's team namespace
after dev's add-ons are applied: admission runs in full (the ValidatingAdmissionPolicies, their
bindings' namespace selectors, the API server's own CEL), nothing is stored. A refusal must carry the
table's reason, word for word.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.cluster.admission_cases import (
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

from .cluster import ControlPlane

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
