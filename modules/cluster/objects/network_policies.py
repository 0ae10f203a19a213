"""NetworkPolicies: the add-on namespaces deny by default and allow only what their pods need.

The namespaces the add-ons create (gpu-health, scheduler-plugins, balloons) get a namespace-wide
``default-deny`` (ingress and egress) plus one allow per pod-network workload. In kube-system, which
the add-ons share with components they do not own, each add-on pod-network workload (CoreDNS,
kube-state-metrics) gets its own policy selecting only its pods.

Limits worth knowing (Kubernetes and OKD docs, "About network policy"): a policy "does not apply to
the host network namespace", so the host-network workloads (device plugins, dcgm-exporter,
node-problem-detector, the iptables exporter, preflight, cloud-node-manager, and the two that take
Azure tokens from IMDS, which pods cannot reach: cloud-controller-manager and the XID remediation)
get no policy here, since one would restrict nothing; and traffic from a pod's own node (kubelet
probes) is always allowed. Policies are only enforced where the cluster runs a policy engine: Azure
CNI alone enforces none.
"""

from __future__ import annotations

from typing import Any

from modules.cluster.objects import coredns, state_metrics
from modules.cluster.objects.common import BALLOON_NS, GANG_NS, HEALTH_NS, Obj, meta
from modules.cluster.objects.preflight import RETEST
from modules.cluster.spec import AddonsSpec

APP = "network-policies"
NAME_LABEL = "kubernetes.io/metadata.name"  # set by the API server on every namespace


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


def scrape(spec: AddonsSpec, *ports: int) -> Obj:
    return {"from": _cidrs(spec.network.monitoring_cidrs), "ports": _tcp(*ports)}


def _default_deny(ns: str) -> Obj:
    return _policy("default-deny", ns, {}, ingress=None, egress=None)


def _name(app: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": app}


def network_policies(spec: AddonsSpec) -> list[Obj]:
    objs = [_default_deny(ns) for ns in (HEALTH_NS, GANG_NS, BALLOON_NS)]
    # gpu-health: the re-test CronJob is its only pod-network workload (the node agents and the
    # remediation are host-network).
    objs.append(_policy(RETEST, HEALTH_NS, _name(RETEST), ingress=None, egress=[api_server(spec)]))
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
    return objs
