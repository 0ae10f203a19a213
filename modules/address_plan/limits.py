"""Azure's limits that planning must respect: one table, a source per row, and whether Azure lets a
customer raise it.

Most rows are hard: Microsoft's networking-limits table says "We have increased all default limits to
their maximum limits. If there's no maximum limit column, the resource doesn't have adjustable limits",
and the private-IP rows have no such column (a docs owner, MicrosoftDocs/azure-docs#78438: "the limits
in this article are hard limits unless otherwise noted"). A stack's ``azure-gpu-k8s:limits`` may only
override the adjustable rows (regional vCPU quotas, granted by quota request): overriding a hard row is
a config error that says what to change instead. Both the planner and the policy pack read the values
in force from here (``Limits.in_force``), so they cannot disagree.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import NamedTuple

from modules.config_model import PROJECT
from modules.errors import ConfigError
from modules.vm_sizing.skus import SKUS

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
_NAT = "https://learn.microsoft.com/azure/nat-gateway/nat-gateway-resource"
_VCPU_QUOTA = "https://learn.microsoft.com/azure/quotas/per-vm-quota-requests"
_HARD = "hard: no maximum-limit column in Microsoft's networking limits table (MicrosoftDocs/azure-docs#78438)"


class Limit(NamedTuple):
    """One row: a named limit, its value in force, Azure's default and where the default comes from."""

    name: str
    value: int | None
    """The value in force; None for a subscription quota the stack has not declared (unknown offline)."""
    description: str
    source: str
    default: int | None = None
    adjustable: bool = False
    """Whether Azure raises it on request (quota request); hard limits are never overridable."""
    fix: str = ""
    """What to change instead of the limit when a plan breaks it."""
    reason: str = ""
    """Why the value differs from Azure's default (a quota ticket); empty when not overridden."""

    @property
    def overridden(self) -> bool:
        return self.value != self.default

    @property
    def kind(self) -> str:
        return "adjustable by quota request" if self.adjustable else "hard Azure limit"


def _hard(name: str, value: int, description: str, source: str, fix: str) -> Limit:
    return Limit(name, value, description, source, default=value, adjustable=False, fix=fix)


_SPLIT = "split the pool into more scale sets"
_FEWER_PODS = (
    "lower the pools' pod_ips (subnet-calc fit prints the most that fit) or split the workload across clusters"
)

HARD_LIMITS: tuple[Limit, ...] = (
    _hard("vnet-private-ips", 65_536, "private IP addresses per VNet", _NET_LIMITS, _FEWER_PODS),
    # The newest published copy of this row we found is from 2022 (MicrosoftDocs/azure-docs
    # includes/azure-virtual-network-limits.md); no newer figure has been published.
    _hard(
        "peered-group-private-ips",
        128_000,
        "private IP addresses in a VNet plus its directly peered VNets",
        _NET_LIMITS,
        "lower pod_ips in the hub's spokes or move a cluster to another hub (its own peered group)",
    ),
    _hard(
        "nic-private-ips", 256, "private IP addresses (IP configurations) per NIC", _NET_LIMITS, "use pod_ips <= 255"
    ),
    _hard("subnets-per-vnet", 3_000, "subnets per VNet", _NET_LIMITS, "use fewer, larger pools"),
    _hard("vnet-peerings", 500, "VNet peerings per VNet", _NET_LIMITS, "give further spokes another hub"),
    _hard("route-table-routes", 400, "user-defined routes per route table", _NET_LIMITS, "use Azure CNI, not kubenet"),
    _hard(
        "lb-backend-pool",
        5_000,
        "Standard load balancer backend pool size",
        _NET_LIMITS,
        "spread the nodes over several backend pools",
    ),
    _hard(
        "vmss-instances-spg",
        100,
        "VMs per scale set with singlePlacementGroup=true (InfiniBand)",
        _VMSS,
        _SPLIT,
    ),
    _hard("vmss-instances-large", 1_000, "VMs per scale set with singlePlacementGroup=false", _VMSS, _SPLIT),
    _hard(
        "vmss-instances-large-custom-image",
        600,
        "VMs per scale set with singlePlacementGroup=false from a custom image (unverified if current)",
        _VMSS,
        _SPLIT,
    ),
    _hard(
        "nat-gateway-public-ips",
        16,
        "public IP addresses per NAT gateway (and one NAT gateway per subnet)",
        _NAT,
        "lower network.egress.connections_per_node or split the pool into more subnets",
    ),
    _hard(
        "nat-connections-per-ip",
        50_000,
        "concurrent connections through one NAT gateway public IP to one destination",
        _NAT,
        "lower network.egress.connections_per_node",
    ),
    # AKS's own envelopes: a self-managed cluster is not bound by them, but `subnet-calc size` reports
    # them for AKS users and the plan names the ones it goes beyond.
    _hard("aks-nodes-per-cluster", 5_000, "AKS nodes per cluster (Kubernetes' tested envelope too)", _AKS_LIMITS, ""),
    _hard("aks-nodes-per-pool", 1_000, "AKS nodes per node pool", _AKS_LIMITS, ""),
    _hard("aks-pools", 100, "AKS node pools per cluster", _AKS_LIMITS, ""),
    _hard("kubenet-nodes", 400, "kubenet nodes (one user-defined route per node)", _AKS_IP, "use Azure CNI"),
    _hard("max-pods-min", 10, "smallest maxPods per node (AKS)", _AKS_IP, ""),
    _hard("max-pods-max", 250, "largest maxPods per node (AKS)", _AKS_IP, ""),
    _hard("overlay-max-pods", 250, "pods per node with Azure CNI Overlay (one /24 per node)", _OVERLAY, ""),
    _hard("pod-subnet-dynamic-pods", 65_000, "pods per cluster, Azure CNI pod subnet in dynamic mode", _POD_SUBNET, ""),
    _hard("pod-subnet-dynamic-min-prefix", 16, "largest pod subnet (shortest prefix), dynamic mode", _POD_SUBNET, ""),
    _hard(
        "pod-subnet-static-min-prefix", 12, "largest pod subnet (shortest prefix), static block mode", _POD_SUBNET, ""
    ),
    _hard("subnet-min-prefix", 2, "largest IPv4 subnet (shortest prefix) Azure accepts", _SUBNETS, ""),
    _hard("subnet-max-prefix", 29, "smallest IPv4 subnet (longest prefix) Azure accepts", _SUBNETS, ""),
)

VCPU_QUOTA_PREFIX = "vcpus-"
"""Adjustable rows: ``vcpus-<family>`` (a family's regional vCPU quota) and ``vcpus-regional``."""


def quota_name(family: str) -> str:
    """The limits-table row of a VM family's vCPU quota (spaces dropped: families are spelled both ways)."""
    return VCPU_QUOTA_PREFIX + family.replace(" ", "")


def _quota(name: str, description: str) -> Limit:
    return Limit(
        name,
        None,
        description,
        _VCPU_QUOTA,
        default=None,
        adjustable=True,
        fix="request a quota increase for the region (Azure portal: Quotas, or `az quota update`) and declare it",
    )


QUOTA_LIMITS: tuple[Limit, ...] = (
    _quota(f"{VCPU_QUOTA_PREFIX}regional", "Total Regional vCPUs of the subscription"),
    *(
        _quota(quota_name(family), f"regional vCPUs of the {family} VM family")
        for family in sorted({s.family for s in SKUS.values()})
    ),
)

DEFAULTS: tuple[Limit, ...] = HARD_LIMITS + QUOTA_LIMITS


class Limits:
    """The limits in force for one stack: Azure's defaults with the stack's declared quotas applied."""

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
        """Apply ``{name: (value, reason)}`` from a stack file; only adjustable rows may change."""
        rows = dict(self.rows)
        for name, (value, reason) in overrides.items():
            key = f"{PROJECT}:limits.{name}"
            if name not in rows:
                quotas = ", ".join(r.name for r in rows.values() if r.adjustable)
                raise ConfigError(f"{key}: unknown limit: declare one of the adjustable quotas ({quotas})")
            row = rows[name]
            if not row.adjustable:
                fix = row.fix or "fit the plan inside it"
                raise ConfigError(
                    f"{key}: {row.description} ({row.default:,}) is a hard Azure limit that no support request "
                    f"raises: remove the override and {fix}"
                )
            if value <= 0:
                raise ConfigError(f"{key}: {value} is not positive: use the quota granted, a count > 0")
            rows[name] = row._replace(value=value, reason=reason)
        return Limits(rows)

    def __getitem__(self, name: str) -> int:
        value = self.rows[name].value
        if value is None:
            raise KeyError(f"{name} is a subscription quota with no declared value")
        return value

    def get(self, name: str) -> int | None:
        """The value in force, None for an undeclared quota (or an unknown name)."""
        row = self.rows.get(name)
        return row.value if row is not None else None

    def __iter__(self) -> Iterator[Limit]:
        return iter(self.rows.values())

    def overridden(self) -> list[Limit]:
        return [row for row in self.rows.values() if row.overridden]

    @classmethod
    def in_force(cls, declared: Mapping[str, int]) -> Limits:
        """The limits a deployment runs under from what it declares (e.g. a VNet's ``agk-limits`` tag):
        adjustable rows take the declared value; hard rows keep Azure's, whatever is declared."""
        rows = {row.name: row for row in DEFAULTS}
        for name, value in declared.items():
            row = rows.get(name)
            if row is not None and row.adjustable:
                rows[name] = row._replace(value=value)
        return cls(rows)

    @staticmethod
    def hard_overrides(declared: Mapping[str, int]) -> list[str]:
        """Declared names that are hard limits set to something other than Azure's value."""
        rows = {row.name: row for row in DEFAULTS}
        return sorted(n for n, v in declared.items() if n in rows and not rows[n].adjustable and v != rows[n].default)
