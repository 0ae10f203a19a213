"""How many addresses a node pool takes, per network plugin, and the smallest subnet that holds them.

The formulas are Microsoft's (concepts-network-ip-address-planning and the pod-subnet and
overlay pages): the node subnet carries ``(nodes + surge)`` primaries, plus, with Azure CNI in
node-subnet mode, ``(nodes + surge) * maxPods`` secondary IP configurations.
"""

from __future__ import annotations

import math
from typing import Any, Literal, NamedTuple, get_args

from modules.address_plan.findings import Finding
from modules.address_plan.limits import Limits
from modules.errors import AgkError

Plugin = Literal["kubenet", "azure-cni", "azure-cni-pod-subnet", "azure-cni-overlay"]
PLUGINS: tuple[str, ...] = get_args(Plugin)
DEFAULT_MAX_PODS: dict[str, int] = {
    "kubenet": 110,
    "azure-cni": 30,
    "azure-cni-pod-subnet": 110,
    "azure-cni-overlay": 250,
}
AZURE_RESERVED_PER_SUBNET = 5
"""Azure keeps .0 (network), .1 (gateway), .2 and .3 (Azure DNS) and the broadcast address of every subnet
(virtual-networks-faq: "Are there any restrictions on using IP addresses within these subnets?")."""
POD_BATCH = 16  # dynamic pod-subnet allocation hands out addresses in batches of 16


class SizingError(AgkError):
    """Input the sizing formulas cannot answer (not a broken limit: those are warnings)."""


def usable(prefix: int) -> int:
    """Addresses Azure lets you assign in a /prefix subnet (5 are reserved)."""
    return (1 << (32 - prefix)) - AZURE_RESERVED_PER_SUBNET


def block_prefix(addresses: int) -> int:
    """The prefix of the smallest aligned block of at least ``addresses`` addresses (no reservation: a
    public IP prefix, a per-node pod range)."""
    return 32 - math.ceil(math.log2(addresses)) if addresses > 1 else 32


def prefix_for(needed: int, *, longest: int = 29, shortest: int = 2) -> int | None:
    """The longest prefix (smallest subnet) whose usable count covers ``needed``; None if none does."""
    if needed < 0:
        raise SizingError(f"{needed} addresses is negative: ask for 0 or more")
    for prefix in range(longest, shortest - 1, -1):
        if usable(prefix) >= needed:
            return prefix
    return None


def parse_surge(surge: int | str, nodes: int, where: str = "surge") -> int:
    """Surge as a count, or a percentage of ``nodes`` rounded up (AKS rounds max surge up)."""
    if isinstance(surge, int) and not isinstance(surge, bool):
        if surge < 0:
            raise SizingError(f"{where}: {surge} is negative: use a count >= 0 or a percentage like 10%")
        return surge
    text = str(surge).strip()
    # ASCII digits only: str.isdigit() also accepts '²' (which int() refuses) and int() accepts '٣'.
    number = text[:-1] if text.endswith("%") else text
    if not (number and number.isascii() and number.isdigit()):
        raise SizingError(f"{where}: {surge!r} is not a count or a percentage: use e.g. 1 or 10%")
    if text.endswith("%"):
        pct = int(number)
        if pct > 100:
            raise SizingError(f"{where}: {text} is over 100%: use a percentage from 0% to 100%")
        return math.ceil(nodes * pct / 100)
    return int(text)


class PodSubnet(NamedTuple):
    ips_needed: int
    prefix_length: int | None
    usable_ips: int | None

    def to_dict(self) -> dict[str, Any]:
        return {"ips_needed": self.ips_needed, "prefix_length": self.prefix_length, "usable_ips": self.usable_ips}


class Sizing(NamedTuple):
    """The answer of ``subnet-calc size``."""

    plugin: str
    nodes: int
    surge_nodes: int
    max_pods: int
    vnet_ips_needed: int
    prefix_length: int | None
    usable_ips: int | None
    warnings: tuple[Finding, ...] = ()
    pod_subnet: PodSubnet | None = None
    pod_cidr_prefix: int | None = None
    ip_configs_per_nic: int = 1

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "plugin": self.plugin,
            "nodes": self.nodes,
            "surge_nodes": self.surge_nodes,
            "max_pods": self.max_pods,
            "vnet_ips_needed": self.vnet_ips_needed,
            "prefix_length": self.prefix_length,
            "subnet": None,
            "usable_ips": self.usable_ips,
            "ip_configs_per_nic": self.ip_configs_per_nic,
            "warnings": [w.to_dict() for w in self.warnings],
        }
        if self.pod_subnet is not None:
            out["pod_subnet"] = self.pod_subnet.to_dict()
        if self.pod_cidr_prefix is not None:
            out["pod_cidr"] = {"prefix_length": self.pod_cidr_prefix}
        return out


def node_subnet_ips(plugin: str, nodes_total: int, max_pods: int) -> int:
    """Addresses the node subnet gives out for ``nodes_total`` (nodes + surge) nodes."""
    if plugin == "azure-cni":
        return nodes_total + nodes_total * max_pods
    return nodes_total


class _PluginPart(NamedTuple):
    """What one CNI plugin adds to a pool's sizing beyond the node subnet."""

    ip_configs_per_nic: int = 1
    pod_cidr_prefix: int | None = None
    pod_subnet: PodSubnet | None = None
    warnings: tuple[Finding, ...] = ()


def _azure_cni(total: int, pods: int, static_pod_blocks: bool, lim: Limits) -> _PluginPart:
    ip_configs = 1 + pods
    warnings = []
    if ip_configs > lim["nic-private-ips"]:
        warnings.append(
            Finding(
                "nic-ip-config-limit",
                f"1 + {pods} max pods = {ip_configs} IP configurations per NIC exceeds Azure's {lim['nic-private-ips']}",
            )
        )
    return _PluginPart(ip_configs_per_nic=ip_configs, warnings=tuple(warnings))


def _kubenet(total: int, pods: int, static_pod_blocks: bool, lim: Limits) -> _PluginPart:
    warnings = []
    if total > lim["kubenet-nodes"]:
        warnings.append(
            Finding(
                "kubenet-node-limit",
                f"{total:,} nodes exceed kubenet's {lim['kubenet-nodes']} (one route per node in a "
                "route table): use Azure CNI",
            )
        )
    return _PluginPart(pod_cidr_prefix=block_prefix(total) - 8, warnings=tuple(warnings))  # a /24 per node


def _overlay(total: int, pods: int, static_pod_blocks: bool, lim: Limits) -> _PluginPart:
    warnings = []
    # Above max-pods-max the range warning already says it; this one is the overlay's own cap.
    if lim["overlay-max-pods"] < pods <= lim["max-pods-max"]:
        warnings.append(
            Finding("overlay-max-pods", f"max pods {pods} exceeds overlay's {lim['overlay-max-pods']} per node")
        )
    return _PluginPart(pod_cidr_prefix=block_prefix(total) - 8, warnings=tuple(warnings))  # a /24 per node


def _pod_subnet(total: int, pods: int, static_pod_blocks: bool, lim: Limits) -> _PluginPart:
    warnings = []
    if static_pod_blocks:
        per_node = math.ceil((pods + 1) / POD_BATCH) * POD_BATCH
        if (pods + 1) % POD_BATCH:
            best = per_node - 1
            warnings.append(
                Finding(
                    "static-block-waste",
                    f"max pods {pods} leaves part of a /28 block unused per node: {best} uses the blocks fully",
                )
            )
        shortest = lim["pod-subnet-static-min-prefix"]
    else:
        per_node = max(POD_BATCH, math.ceil(pods / POD_BATCH) * POD_BATCH)
        shortest = lim["pod-subnet-dynamic-min-prefix"]
        if total * pods > lim["pod-subnet-dynamic-pods"]:
            warnings.append(
                Finding(
                    "pod-subnet-pod-limit",
                    f"{total * pods:,} pods exceed dynamic mode's ~{lim['pod-subnet-dynamic-pods']:,} per cluster",
                )
            )
    pod_ips = total * per_node
    pod_prefix = prefix_for(pod_ips, longest=lim["subnet-max-prefix"], shortest=lim["subnet-min-prefix"])
    subnet = PodSubnet(pod_ips, pod_prefix, usable(pod_prefix) if pod_prefix is not None else None)
    if pod_prefix is None or pod_prefix < shortest:
        warnings.append(
            Finding(
                "pod-subnet-too-large",
                f"the pod subnet needs {pod_ips:,} addresses, more than a /{shortest} pod subnet holds",
            )
        )
    return _PluginPart(pod_subnet=subnet, warnings=tuple(warnings))


_PLUGIN_RULES = {
    "azure-cni": _azure_cni,
    "kubenet": _kubenet,
    "azure-cni-overlay": _overlay,
    "azure-cni-pod-subnet": _pod_subnet,
}


def _scale_limits(
    total: int, vnet_ips: int, pod_subnet: PodSubnet | None, prefix: int | None, infiniband: bool, lim: Limits
) -> list[Finding]:
    """The Azure limits a pool's size can break, whatever the plugin."""
    warnings = []
    if prefix is None:
        warnings.append(
            Finding(
                "subnet-too-large",
                f"{vnet_ips:,} addresses do not fit in one subnet (largest /{lim['subnet-min-prefix']})",
            )
        )
    vnet_total = vnet_ips + (pod_subnet.ips_needed if pod_subnet else 0)
    if vnet_total > lim["vnet-private-ips"]:
        warnings.append(
            Finding(
                "vnet-private-ip-limit",
                f"{vnet_total:,} private IPs exceed the {lim['vnet-private-ips']:,} one VNet holds (a hard Azure "
                "limit): lower max pods or split the workload across clusters (subnet-calc fit prints what fits)",
            )
        )
    # InfiniBand only reaches inside one placement group, which caps such a scale set at 100 VMs.
    cap = lim["vmss-instances-spg"] if infiniband else lim["vmss-instances-large"]
    if total > cap:
        sets = math.ceil(total / cap)
        kind = "an InfiniBand scale set (one placement group)" if infiniband else "one scale set"
        warnings.append(
            Finding(
                "vmss-instance-limit",
                f"{total:,} nodes exceed the {cap:,} VMs of {kind}: the pool needs {sets} scale sets",
            )
        )
    # Only primary IP configurations join backend pools, so the count is nodes, not pods.
    if total > lim["lb-backend-pool"]:
        warnings.append(
            Finding(
                "lb-backend-pool-limit",
                f"{total:,} nodes exceed a Standard load balancer's {lim['lb-backend-pool']:,} backend pool "
                "members: spread the nodes over several load balancers or backend pools",
            )
        )
    if total > lim["aks-nodes-per-cluster"]:
        warnings.append(
            Finding(
                "cluster-node-limit",
                f"{total:,} nodes exceed the {lim['aks-nodes-per-cluster']:,} nodes Kubernetes and AKS are "
                "tested to: expect control-plane tuning (OpenAI ran 7,500 with a self-managed control plane)",
            )
        )
    return warnings


def size(
    plugin: str,
    nodes: int,
    *,
    max_pods: int | None = None,
    surge: int | str = 1,
    limits: Limits | None = None,
    infiniband: bool = False,
    static_pod_blocks: bool = False,
) -> Sizing:
    """Size one pool's subnet(s). Input errors raise; broken Azure limits become warnings."""
    lim = limits or Limits.default()
    if plugin not in PLUGINS:
        raise SizingError(f"plugin {plugin!r} is unknown: use one of {', '.join(PLUGINS)}")
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        raise SizingError(f"nodes: {nodes!r} is not a positive count: use 1 or more")
    pods = DEFAULT_MAX_PODS[plugin] if max_pods is None else max_pods
    if pods < 1:
        raise SizingError(
            f"max pods: {pods} is not a positive count: use {lim['max-pods-min']} to {lim['max-pods-max']}"
        )
    surge_nodes = parse_surge(surge, nodes)
    total = nodes + surge_nodes
    warnings: list[Finding] = []
    if not lim["max-pods-min"] <= pods <= lim["max-pods-max"]:
        warnings.append(
            Finding("max-pods-range", f"max pods {pods} is outside Azure's {lim['max-pods-min']}-{lim['max-pods-max']}")
        )
    part = _PLUGIN_RULES[plugin](total, pods, static_pod_blocks, lim)
    vnet_ips = node_subnet_ips(plugin, total, pods)
    prefix = prefix_for(vnet_ips, longest=lim["subnet-max-prefix"], shortest=lim["subnet-min-prefix"])
    warnings += [*part.warnings, *_scale_limits(total, vnet_ips, part.pod_subnet, prefix, infiniband, lim)]
    return Sizing(
        plugin=plugin,
        nodes=nodes,
        surge_nodes=surge_nodes,
        max_pods=pods,
        vnet_ips_needed=vnet_ips,
        prefix_length=prefix,
        usable_ips=usable(prefix) if prefix is not None else None,
        warnings=tuple(warnings),
        pod_subnet=part.pod_subnet,
        pod_cidr_prefix=part.pod_cidr_prefix,
        ip_configs_per_nic=part.ip_configs_per_nic,
    )
