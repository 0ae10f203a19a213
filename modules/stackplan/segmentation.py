"""The spoke's NSG segmentation: who may reach etcd, the kubelets and Prometheus (issue 20, item 10).

Pods take VNet addresses (Azure CNI, node subnet), so without rules any pod reaches any host port in the
VNet: Azure's default AllowVnetInBound (priority 65000) admits the whole VirtualNetwork tag, peered VNets
included (learn.microsoft.com virtual-network/network-security-groups-overview, "Default security rules").
These rules sit before it (priorities 300 to 399, allows first, then the denies), per subnet:

- etcd (both clusters): client port 2379 from the API servers' subnet and the members' own, peer port 2380
  from the members only, metrics and health port 2381 from the Prometheus hosts and the members (their restart
  gates) only; nothing else in the VNet.
- every subnet with a kubelet (pools and fixed hosts: the static pods run under one): 10250 from the API
  servers (logs, exec, port-forward) and from Prometheus (metrics, scraped directly over HTTPS) only.
- monitoring: Prometheus' HTTP port (its API, the admin and lifecycle endpoints included) from the hub's
  researchers and the Prometheus hosts only; no pod or node of the cluster reaches it.

A pod reaching its own node's address never leaves the host, so NSGs do not apply to it: the kubelet's own
authentication (webhook authn/authz, anonymous off) covers that path.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from ipaddress import IPv4Network

from modules.bootstrap.context import ETCD_CLIENT_PORT, ETCD_METRICS_PORT, ETCD_PEER_PORT, KUBELET_PORT, PROMETHEUS_PORT


@dataclass(frozen=True)
class Rule:
    """One NSG security rule (Microsoft.Network securityRules: the fields the subnets' NSGs set)."""

    name: str
    priority: int
    direction: str
    access: str
    protocol: str
    source: str
    destination: str
    ports: Sequence[str]


BASE_PRIORITY = 300
NAT_PRIORITY = 200
"""The NAT host's service ingress: ahead of the segmentation's rules."""
ETCD_SUBNETS = ("etcd", "events-etcd")
NO_KUBELET = ("endpoints",)
"""Subnets without a kubelet (private endpoints only)."""


def _allow(name: str, sources: Sequence[str], ports: Sequence[int]) -> list[tuple[str, str, str, tuple[str, ...]]]:
    return [(f"allow-{name}-{i}", "Allow", src, tuple(str(p) for p in ports)) for i, src in enumerate(sources)]


def spoke_rules(subnets: Mapping[str, IPv4Network], hub_space: Sequence[IPv4Network]) -> dict[str, tuple[Rule, ...]]:
    """The segmentation rules of each subnet, by subnet name (the subnets the plan lays out)."""
    control = [str(subnets["control-plane"])] if "control-plane" in subnets else []
    monitoring = [str(subnets["monitoring"])] if "monitoring" in subnets else []
    out: dict[str, tuple[Rule, ...]] = {}
    for name, cidr in subnets.items():
        rows: list[tuple[str, str, str, tuple[str, ...]]] = []
        denies: list[tuple[str, tuple[str, ...]]] = []
        if name in ETCD_SUBNETS:
            rows += _allow("etcd-client-apiservers", control, [ETCD_CLIENT_PORT])
            # The members' own gates read each other's /health on the metrics port (modules/bootstrap/roles/upkeep.py).
            rows += _allow("etcd-members", [str(cidr)], [ETCD_CLIENT_PORT, ETCD_PEER_PORT, ETCD_METRICS_PORT])
            rows += _allow("etcd-metrics-prometheus", monitoring, [ETCD_METRICS_PORT])
            denies.append(("etcd", (str(ETCD_CLIENT_PORT), str(ETCD_PEER_PORT), str(ETCD_METRICS_PORT))))
        if name not in NO_KUBELET:
            rows += _allow("kubelet-apiservers", control, [KUBELET_PORT])
            rows += _allow("kubelet-prometheus", monitoring, [KUBELET_PORT])
            denies.append(("kubelet", (str(KUBELET_PORT),)))
        if name == "monitoring":
            rows += _allow("prometheus-hub", [str(n) for n in hub_space], [PROMETHEUS_PORT])
            rows += _allow("prometheus-peers", [str(cidr)], [PROMETHEUS_PORT])
            denies.append(("prometheus", (str(PROMETHEUS_PORT),)))
        rules = [
            Rule(rule, BASE_PRIORITY + i, "Inbound", access, "Tcp", source, str(cidr), ports)
            for i, (rule, access, source, ports) in enumerate(rows)
        ]
        start = BASE_PRIORITY + len(rules)
        rules += [
            Rule(f"deny-{what}-from-vnet", start + i, "Inbound", "Deny", "Tcp", "VirtualNetwork", str(cidr), ports)
            for i, (what, ports) in enumerate(denies)
        ]
        if rules:
            out[name] = tuple(rules)
    return out


def nat_host_rules(service_cidr: IPv4Network, hub_space: Sequence[IPv4Network]) -> dict[str, tuple[Rule, ...]]:
    """The nat subnet admits the hub's researchers to the service CIDR (the NAT host DNATs it to pods).

    Explicit rather than left to AllowVnetInBound: the service CIDR is neither the spoke's nor the hub's
    address space, only a route in the hub's route table.
    """
    service = str(service_cidr)
    rules = tuple(
        Rule(f"allow-hub-to-services-{i}", NAT_PRIORITY + i, "Inbound", "Allow", "*", str(net), service, ("*",))
        for i, net in enumerate(hub_space)
    )
    return {"nat": rules}


def subnet_rules(
    subnets: Mapping[str, IPv4Network], service_cidr: IPv4Network, hub_space: Sequence[IPv4Network]
) -> dict[str, tuple[Rule, ...]]:
    """Every spoke subnet's own NSG rules: the NAT host's service ingress, then the segmentation."""
    rules: dict[str, tuple[Rule, ...]] = dict(nat_host_rules(service_cidr, hub_space))
    for name, extra in spoke_rules(subnets, hub_space).items():
        rules[name] = (*rules.get(name, ()), *extra)
    return rules
