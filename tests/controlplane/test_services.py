"""Services on dev's real API server, add-ons applied: a Service outside the system namespaces stays inside the
cluster (``tenant-services``: no LoadBalancer, which cloud-controller-manager would put on an Azure load
balancer, no NodePort), and no Service anywhere gets ``externalIPs`` (the DenyServiceExternalIPs admission
plugin the rendered kube-apiserver enables). Every request is a dry run."""

from __future__ import annotations

from typing import Any

import pytest

from modules.cluster.objects import service_exposure

from .cluster import ControlPlane, wait
from .conftest import wait_for_default_service_account

TEAM_NS, SCRATCH = "research", "services-scratch"
EXTERNAL_IPS = "Use of external IPs is denied by admission control"


def service(type_: str | None = None, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"selector": {"app": "a"}, "ports": [{"port": 80, "targetPort": 8080}], **spec}
    if type_:
        body["type"] = type_
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}, "spec": body}


def create(cp: ControlPlane, namespace: str, body: dict[str, Any]) -> tuple[int, str]:
    code, out = cp.call("POST", f"/api/v1/namespaces/{namespace}/services?dryRun=All", body)
    return code, str(out.get("message", ""))


def refusal(namespace: str, type_: str) -> str:
    policy = service_exposure.POLICY
    return (
        f'services "s" is forbidden: ValidatingAdmissionPolicy {policy!r} with binding {policy!r} denied '
        f"request: Service s in namespace {namespace} is type {type_}, which reaches beyond the cluster "
        "(LoadBalancer: an Azure load balancer, public unless annotated internal; NodePort: a port on every node): "
        "use type ClusterIP, and ask the platform team to expose it"
    )


@pytest.fixture(scope="module")
def enforced(dev_cluster: ControlPlane) -> ControlPlane:
    """dev's plane once the API server enforces tenant-services (a policy takes effect when its informer has
    loaded it, a moment after it is applied), with a namespace of no team created after the add-ons."""
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SCRATCH}}
    assert dev_cluster.call("POST", "/api/v1/namespaces", body)[0] in (201, 409)
    wait_for_default_service_account(dev_cluster, [SCRATCH])
    probe = service("LoadBalancer")
    in_force = lambda: create(dev_cluster, TEAM_NS, probe)[0] == 403  # noqa: E731
    wait(f"{service_exposure.POLICY} in force", in_force, dev_cluster.processes(), timeout=60)
    return dev_cluster


@pytest.mark.parametrize("type_", service_exposure.EXPOSED_TYPES)
@pytest.mark.parametrize("namespace", [TEAM_NS, SCRATCH])
def test_a_service_beyond_the_cluster_is_refused_outside_the_system_namespaces(
    enforced: ControlPlane, namespace: str, type_: str
) -> None:
    code, message = create(enforced, namespace, service(type_))
    assert (code, message) == (403, refusal(namespace, type_))


def test_changing_a_team_service_to_a_load_balancer_is_refused(enforced: ControlPlane) -> None:
    name = "changed"
    body = service() | {"metadata": {"name": name}}
    code, out = enforced.call("POST", f"/api/v1/namespaces/{TEAM_NS}/services", body)
    assert code == 201, out
    try:
        out["spec"]["type"] = "LoadBalancer"
        code, refused = enforced.call("PUT", f"/api/v1/namespaces/{TEAM_NS}/services/{name}?dryRun=All", out)
        assert code == 403 and f"Service {name} in namespace {TEAM_NS} is type LoadBalancer" in refused["message"]
    finally:
        enforced.call("DELETE", f"/api/v1/namespaces/{TEAM_NS}/services/{name}")


@pytest.mark.parametrize(
    "body", [service(), service("ClusterIP"), service(clusterIP="None")], ids=["default", "ClusterIP", "headless"]
)
def test_a_service_inside_the_cluster_is_admitted(enforced: ControlPlane, body: dict[str, Any]) -> None:
    code, message = create(enforced, TEAM_NS, body)
    assert code == 201, message


@pytest.mark.parametrize("type_", service_exposure.EXPOSED_TYPES)
def test_the_platform_exposes_services_from_its_own_namespaces(enforced: ControlPlane, type_: str) -> None:
    code, message = create(enforced, "kube-system", service(type_))
    assert code == 201, message


@pytest.mark.parametrize("namespace", [TEAM_NS, "kube-system"])
def test_no_service_gets_external_ips_in_any_namespace(enforced: ControlPlane, namespace: str) -> None:
    code, message = create(enforced, namespace, service(externalIPs=["10.16.0.4"]))
    assert code == 403 and message.endswith(EXTERNAL_IPS), message
