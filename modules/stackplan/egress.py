"""Outbound internet for a spoke: which subnets share a NAT gateway, and how many public IPs each needs.

A subnet takes at most one NAT gateway and a NAT gateway at most 16 public IPs; each public IP carries
at most 50,000 concurrent connections to one destination (nat-gateway-resource). So egress scales by
subnet: every GPU pool subnet gets its own NAT gateway (in the pool's zone when it has one), the other
subnets share one. Each gateway gets a public IP prefix sized from the peak nodes behind it, never
fewer than AKS's at-scale guidance of two addresses.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from modules.address_plan.limits import Limits
from modules.address_plan.subnet_sizes import block_prefix
from modules.config_model import PROJECT
from modules.errors import ConfigError

MIN_PUBLIC_IPS = 2
"""AKS at-scale guidance: at least 2 outbound IPs (aks/best-practices-performance-scale-large)."""
SHARED = "shared"
NO_NAT_ROLES = frozenset({"private-endpoints", "bastion"})
"""Private endpoints never egress; Azure Bastion refuses a NAT gateway on its subnet."""


@dataclass(frozen=True)
class EgressGroup:
    """One NAT gateway and the subnets behind it."""

    name: str
    """``shared`` or the GPU pool's name."""
    subnets: tuple[str, ...]
    nodes: int
    """Peak VMs behind it (pools at their maximum plus surge, and fixed hosts)."""
    zone: str | None
    """The zone of a zonal gateway; None: non-zonal (Azure places it in one zone of its choosing)."""
    public_ips: int
    """Addresses of its public IP prefix (a power of two: prefixes are /28 to /31)."""

    @property
    def prefix_length(self) -> int:
        return block_prefix(self.public_ips)

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "subnets": list(self.subnets),
            "nodes": self.nodes,
            "zone": self.zone or "non-zonal",
            "public_ips": self.public_ips,
        }


def public_ips_for(nodes: int, connections_per_node: int, limits: Limits, where: str) -> int:
    per_ip = limits["nat-connections-per-ip"]
    cap = limits["nat-gateway-public-ips"]
    needed = max(MIN_PUBLIC_IPS, math.ceil(nodes * connections_per_node / per_ip))
    if needed > cap:
        raise ConfigError(
            f"{PROJECT}:network.egress.connections_per_node: {where} needs {needed} public IPs for {nodes:,} nodes "
            f"x {connections_per_node} connections, over the {cap} a NAT gateway holds (a hard Azure limit): "
            f"{limits.rows['nat-gateway-public-ips'].fix}"
        )
    return 1 << (32 - block_prefix(needed))


def group(
    name: str,
    subnets: Sequence[str],
    nodes: int,
    zone: str | None,
    connections_per_node: int,
    limits: Limits,
) -> EgressGroup:
    ips = public_ips_for(nodes, connections_per_node, limits, f"NAT gateway {name}")
    return EgressGroup(name, tuple(subnets), nodes, zone, ips)


def spoke_egress(
    subnet_roles: Sequence[tuple[str, str]],
    pools: Sequence[tuple[str, str, int, str | None]],
    fixed_hosts: int,
    connections_per_node: int,
    limits: Limits,
) -> tuple[EgressGroup, ...]:
    """NAT gateways of a spoke.

    ``subnet_roles``: every planned subnet (name, role); ``pools``: GPU pools as (name, subnet, peak
    nodes, zone); ``fixed_hosts``: VMs outside the GPU pools (system pool at peak, control plane, hosts).
    """
    gpu_subnets = {subnet for _, subnet, _, _ in pools}
    groups = [group(name, [subnet], nodes, zone, connections_per_node, limits) for name, subnet, nodes, zone in pools]
    shared = [name for name, role in subnet_roles if role not in NO_NAT_ROLES and name not in gpu_subnets]
    groups.insert(0, group(SHARED, shared, fixed_hosts, None, connections_per_node, limits))
    return tuple(groups)
