"""Azure's limits that address planning must respect: one table, a source per row.

Many of these are defaults that Azure raises by support request, so a stack may override any row
(``azure-gpu-k8s:limits``); an overridden row keeps its default and reason so every report can
say which figure is in force and why.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import NamedTuple

from modules.errors import ConfigError

# NamedTuple, not dataclass: `subnet-calc size` imports this table and must start instantly
# (dataclasses imports `inspect`, a large part of the start-up budget).

_NET_LIMITS = (
    "https://learn.microsoft.com/azure/azure-resource-manager/management/"
    "azure-subscription-service-limits#azure-networking-limits"
)
_VMSS = "https://learn.microsoft.com/azure/virtual-machine-scale-sets/virtual-machine-scale-sets-placement-groups"
_AKS_LIMITS = "https://learn.microsoft.com/azure/aks/quotas-skus-regions#service-quotas-and-limits"
_AKS_IP = "https://learn.microsoft.com/azure/aks/concepts-network-ip-address-planning"
_POD_SUBNET = "https://learn.microsoft.com/azure/aks/concepts-network-azure-cni-pod-subnet"
_OVERLAY = "https://learn.microsoft.com/azure/aks/concepts-network-azure-cni-overlay"
_SUBNETS = "https://learn.microsoft.com/azure/virtual-network/virtual-network-ip-addresses-overview-arm"


class Limit(NamedTuple):
    """One row: a named limit, its value in force, Azure's default and where the default comes from."""

    name: str
    value: int
    description: str
    source: str
    default: int = 0
    reason: str = ""
    """Why the value differs from Azure's default (a quota ticket); empty when not overridden."""

    @property
    def overridden(self) -> bool:
        return self.value != self.default


def _row(name: str, value: int, description: str, source: str) -> Limit:
    return Limit(name, value, description, source, default=value)


DEFAULTS: tuple[Limit, ...] = (
    _row("vnet-private-ips", 65_536, "private IP addresses per VNet", _NET_LIMITS),
    _row(
        "peered-group-private-ips",
        128_000,
        "private IP addresses in a VNet plus its directly peered VNets (2022 figure, unverified since)",
        _NET_LIMITS,
    ),
    _row("nic-private-ips", 256, "private IP addresses (IP configurations) per NIC", _NET_LIMITS),
    _row("subnets-per-vnet", 3_000, "subnets per VNet", _NET_LIMITS),
    _row("vnet-peerings", 500, "VNet peerings per VNet", _NET_LIMITS),
    _row("route-table-routes", 400, "user-defined routes per route table", _NET_LIMITS),
    _row("lb-backend-pool", 5_000, "Standard load balancer backend pool size", _NET_LIMITS),
    _row("vmss-instances-spg", 100, "VMs per scale set with singlePlacementGroup=true (InfiniBand)", _VMSS),
    _row("vmss-instances-large", 1_000, "VMs per scale set with singlePlacementGroup=false", _VMSS),
    _row(
        "vmss-instances-large-custom-image",
        600,
        "VMs per scale set with singlePlacementGroup=false from a custom image (unverified if current)",
        _VMSS,
    ),
    _row("aks-nodes-per-cluster", 5_000, "AKS nodes per cluster (Kubernetes' tested envelope too)", _AKS_LIMITS),
    _row("aks-nodes-per-pool", 1_000, "AKS nodes per node pool", _AKS_LIMITS),
    _row("aks-pools", 100, "AKS node pools per cluster", _AKS_LIMITS),
    _row("kubenet-nodes", 400, "kubenet nodes (one user-defined route per node)", _AKS_IP),
    _row("max-pods-min", 10, "smallest maxPods per node", _AKS_IP),
    _row("max-pods-max", 250, "largest maxPods per node", _AKS_IP),
    _row("overlay-max-pods", 250, "pods per node with Azure CNI Overlay (one /24 per node)", _OVERLAY),
    _row("pod-subnet-dynamic-pods", 65_000, "pods per cluster, Azure CNI pod subnet in dynamic mode", _POD_SUBNET),
    _row("pod-subnet-dynamic-min-prefix", 16, "largest pod subnet (shortest prefix), dynamic mode", _POD_SUBNET),
    _row("pod-subnet-static-min-prefix", 12, "largest pod subnet (shortest prefix), static block mode", _POD_SUBNET),
    _row("subnet-min-prefix", 2, "largest IPv4 subnet (shortest prefix) Azure accepts", _SUBNETS),
    _row("subnet-max-prefix", 29, "smallest IPv4 subnet (longest prefix) Azure accepts", _SUBNETS),
)


class Limits:
    """The limits in force for one stack: Azure's defaults with the stack's overrides applied."""

    __slots__ = ("rows",)

    def __init__(self, rows: Mapping[str, Limit]) -> None:
        self.rows: Mapping[str, Limit] = dict(rows)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Limits) and dict(self.rows) == dict(other.rows)

    def __hash__(self) -> int:
        return hash(tuple(self.rows.values()))

    def __repr__(self) -> str:
        return f"Limits({len(self.rows)} rows, overridden: {[r.name for r in self.overridden()]})"

    @classmethod
    def default(cls) -> Limits:
        return cls({row.name: row for row in DEFAULTS})

    def with_overrides(self, overrides: Mapping[str, tuple[int, str]]) -> Limits:
        """Apply ``{name: (value, reason)}``; an unknown name is an error listing the known ones."""
        rows = dict(self.rows)
        for name, (value, reason) in overrides.items():
            if name not in rows:
                raise ConfigError(f"azure-gpu-k8s:limits.{name}: unknown limit: use one of {', '.join(sorted(rows))}")
            if value <= 0:
                raise ConfigError(f"azure-gpu-k8s:limits.{name}: {value} is not positive: use a count > 0")
            rows[name] = rows[name]._replace(value=value, reason=reason)
        return Limits(rows)

    def __getitem__(self, name: str) -> int:
        return self.rows[name].value

    def __iter__(self) -> Iterator[Limit]:
        return iter(self.rows.values())

    def overridden(self) -> list[Limit]:
        return [row for row in self.rows.values() if row.overridden]
