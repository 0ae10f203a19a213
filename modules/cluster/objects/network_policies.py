"""NetworkPolicies: the add-on namespaces deny by default and allow only what their pods need.

The namespaces the add-ons create (gpu-health, scheduler-plugins, balloons) get a namespace-wide
``default-deny`` (ingress and egress) plus one allow per workload. In kube-system, which the
add-ons share with components they do not own, each add-on workload (CoreDNS, kube-state-metrics,
cloud-controller-manager) gets its own policy selecting only its pods.

Limits worth knowing: Kubernetes leaves a policy's effect on hostNetwork pods undefined (its network
policy docs, since kubernetes/website#39875: a plugin that cannot tell their traffic from the node's
ignores them; OKD: a policy "does not apply to the host network namespace"). So the host-network node
agents (device plugins, dcgm-exporter, node-problem-detector, the iptables exporter, preflight,
cloud-node-manager) are isolated by nothing here for certain, and the two host-network workloads
that take IMDS tokens (cloud-controller-manager, the XID remediation in default-deny gpu-health)
keep allow policies: they work whether a plugin applies policies to them or not. Traffic from a
pod's own node (kubelet probes) is always allowed. Policies are
only enforced where the cluster runs a policy engine: Azure CNI alone enforces none.
"""

from __future__ import annotations

from typing import Any

from modules.cluster.objects import cloud_provider, coredns, serving_certs, state_metrics
from modules.cluster.objects.common import BALLOON_NS, GANG_NS, HEALTH_NS, Obj, meta
from modules.cluster.objects.preflight import RETEST
from modules.cluster.objects.remediation import APP as REMEDIATION
from modules.cluster.objects.remediation import IMDS_ADDRESS
from modules.cluster.spec import AddonsSpec

APP = "network-policies"
NAME_LABEL = "kubernetes.io/metadata.name"  # set by the API server on every namespace
PRIVATE = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")


def _policy(name: str, ns: str, pods: dict[str, str], *, ingress: list[Obj] | None, egress: list[Obj] | None) -> Obj:
    """A policy isolating ``pods`` in both directions; ``None`` lists allow nothing."""
    spec: dict[str, Any] = {
        "podSelector": {"matchLabels": pods} if pods else {},
        "policyTypes": ["Ingress", "Egress"],
    }
    if ingress:
        spec["ingress"] = ingress
    if egress:
        spec["egress"] = egress
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": meta(name, ns, app=APP),
        "spec": spec,
    }


def _tcp(*ports: int) -> list[Obj]:
    return [{"protocol": "TCP", "port": p} for p in ports]


def _cidrs(cidrs: tuple[str, ...], except_: tuple[str, ...] = ()) -> list[Obj]:
    return [{"ipBlock": {"cidr": c, **({"except": list(except_)} if except_ else {})}} for c in cidrs]


def api_server(spec: AddonsSpec) -> Obj:
    """Egress to the API servers (their VNet addresses: policies see traffic after the Service DNAT)."""
    return {"to": _cidrs(spec.network.apiserver_cidrs), "ports": _tcp(spec.network.apiserver_port)}


def cluster_dns() -> Obj:
    return {
        "to": [
            {
                "namespaceSelector": {"matchLabels": {NAME_LABEL: coredns.NS}},
                "podSelector": {"matchLabels": coredns.K8S_APP},
            }
        ],
        "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
    }


def instance_metadata() -> Obj:
    """IMDS: managed-identity tokens (host-local, http on 80)."""
    return {"to": _cidrs((IMDS_ADDRESS,)), "ports": _tcp(80)}


def azure_public(port: int = 443) -> Obj:
    """Azure Resource Manager (management.azure.com) has public addresses only: HTTPS outside the private ranges."""
    return {"to": _cidrs(("0.0.0.0/0",), PRIVATE), "ports": _tcp(port)}


def scrape(spec: AddonsSpec, *ports: int) -> Obj:
    return {"from": _cidrs(spec.network.monitoring_cidrs), "ports": _tcp(*ports)}


def _default_deny(ns: str) -> Obj:
    return _policy("default-deny", ns, {}, ingress=None, egress=None)


def _name(app: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": app}


def network_policies(spec: AddonsSpec) -> list[Obj]:
    objs = [_default_deny(ns) for ns in (HEALTH_NS, GANG_NS, BALLOON_NS)]
    # gpu-health: the two CronJobs are its only pod-network pods (the node agents are host-network).
    objs.append(_policy(RETEST, HEALTH_NS, _name(RETEST), ingress=None, egress=[api_server(spec)]))
    objs.append(
        _policy(
            REMEDIATION,
            HEALTH_NS,
            _name(REMEDIATION),
            ingress=None,
            egress=[api_server(spec), instance_metadata(), azure_public(), cluster_dns()],
        )
    )
    # scheduler-plugins: the scheduler talks to the API server only (probes come from its node).
    objs.append(_policy("scheduler", GANG_NS, _name("scheduler-plugins"), ingress=None, egress=[api_server(spec)]))
    # kube-system: one policy per add-on workload.
    objs.append(
        _policy(
            coredns.NAME,
            coredns.NS,
            coredns.K8S_APP,
            # Every pod and node resolves names here; Prometheus scrapes the metrics port.
            ingress=[
                {"ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]},
                scrape(spec, coredns.METRICS_PORT),
            ],
            # Upstream resolvers (the node's resolv.conf: Azure DNS or the VNet's custom servers) and the API.
            egress=[
                {"ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]},
                api_server(spec),
            ],
        )
    )
    objs.append(
        _policy(
            state_metrics.APP,
            state_metrics.NS,
            _name(state_metrics.APP),
            ingress=[scrape(spec, state_metrics.METRICS_PORT, state_metrics.TELEMETRY_PORT)],
            egress=[api_server(spec)],
        )
    )
    objs.append(
        _policy(
            cloud_provider.CCM,
            cloud_provider.NS,
            _name(cloud_provider.CCM),
            ingress=None,
            egress=[api_server(spec), instance_metadata(), azure_public(), cluster_dns()],
        )
    )
    # The serving certificate approver talks to the API server and nothing else; nothing talks to it.
    objs.append(
        _policy(serving_certs.APP, serving_certs.NS, _name(serving_certs.APP), ingress=None, egress=[api_server(spec)])
    )
    return objs
