"""Plan every VNet of a hub-and-spoke network: subnets laid out, limits counted, overlaps refused.

Input is plain value objects (``VNetSpec``), so the planner knows nothing of stack files or
Pulumi; ``modules.stackplan.addresses`` builds the specs from validated stack config.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from ipaddress import IPv4Network
from typing import Any

from modules.address_plan.addressing import AKS_REFUSED, AddressError, check_usable, first_overlap, inside, parse_cidr
from modules.address_plan.findings import Finding
from modules.address_plan.layout import Block, allocate
from modules.address_plan.limits import Limits
from modules.address_plan.subnet_sizes import AZURE_RESERVED_PER_SUBNET, usable


@dataclass(frozen=True)
class SubnetRequest:
    """A subnet a VNet needs: stable name, role, and the addresses it must hand out."""

    name: str
    role: str
    ips_needed: int
    longest_prefix: int | None = None
    """Azure's minimum size for special subnets (AzureBastionSubnet and AzureFirewallSubnet: /26)."""
    where: str = ""
    """The config key that drives this subnet's size, for error messages."""


@dataclass(frozen=True)
class VNetSpec:
    name: str
    kind: str
    """``hub`` or ``spoke``."""
    address_space: tuple[str, ...]
    subnets: tuple[SubnetRequest, ...]
    limits: Limits
    peers: tuple[str, ...] = ()
    pinned: Mapping[str, str] = field(default_factory=dict)
    going: Mapping[str, str] = field(default_factory=dict)
    """Deployed subnets this plan no longer has (name to CIDR): they exist until the update ends, so their
    ranges stay taken in this plan and are free again in the next."""
    allow_public: bool = False
    other_ranges: tuple[tuple[str, str], ...] = ()
    """Ranges routed to this VNet's workloads that must not overlap any peered VNet (service CIDR)."""
    key_prefix: str = ""
    """Prefix for config keys in errors (``<stack>: azure-gpu-k8s:``)."""


@dataclass(frozen=True)
class SubnetPlan:
    name: str
    role: str
    cidr: IPv4Network
    ips_needed: int

    @property
    def usable_ips(self) -> int:
        return usable(self.cidr.prefixlen)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "cidr": str(self.cidr),
            "role": self.role,
            "ips_needed": self.ips_needed,
            "usable_ips": self.usable_ips,
        }


@dataclass(frozen=True)
class VNetPlan:
    name: str
    kind: str
    address_space: tuple[IPv4Network, ...]
    subnets: Mapping[str, SubnetPlan]
    peers: tuple[str, ...]
    limits: Limits

    @property
    def size(self) -> int:
        return sum(n.num_addresses for n in self.address_space)

    @property
    def ips_needed(self) -> int:
        return sum(s.ips_needed for s in self.subnets.values())

    @property
    def usable_ips(self) -> int:
        return self.size - AZURE_RESERVED_PER_SUBNET * len(self.subnets)

    @property
    def allocated(self) -> int:
        return sum(s.cidr.num_addresses for s in self.subnets.values())

    @property
    def utilization(self) -> float:
        return self.ips_needed / self.size if self.size else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "cidr": str(self.address_space[0]),
            "address_space": [str(n) for n in self.address_space],
            "ips_needed": self.ips_needed,
            "usable_ips": self.usable_ips,
            "allocated_ips": self.allocated,
            "utilization": round(self.utilization, 4),
            "peers": list(self.peers),
            "subnets": [s.to_dict() for s in sorted(self.subnets.values(), key=lambda s: s.cidr)],
        }


@dataclass(frozen=True)
class NetworkPlan:
    vnets: Mapping[str, VNetPlan]
    warnings: tuple[Finding, ...]

    def group_ips(self, name: str) -> int:
        vnet = self.vnets[name]
        return vnet.ips_needed + sum(self.vnets[p].ips_needed for p in vnet.peers if p in self.vnets)


def _block(req: SubnetRequest, vnet: VNetSpec) -> Block:
    lim = vnet.limits
    shortest, longest = lim["subnet-min-prefix"], lim["subnet-max-prefix"]
    if req.ips_needed < 0:
        raise AddressError(f"{vnet.key_prefix}{req.where or req.name}: {req.ips_needed} addresses is negative")
    prefix = next((p for p in range(longest, shortest - 1, -1) if usable(p) >= req.ips_needed), None)
    if prefix is None:
        raise AddressError(
            f"{vnet.key_prefix}{req.where or req.name}: {req.ips_needed:,} addresses exceed the largest subnet "
            f"(/{shortest}, {usable(shortest):,} usable): split the pool or lower pod_ips"
        )
    if req.longest_prefix is not None:
        prefix = min(prefix, req.longest_prefix)
    return Block(req.name, prefix)


def _spaces(vnet: VNetSpec) -> list[IPv4Network]:
    nets = []
    for i, text in enumerate(vnet.address_space):
        where = f"{vnet.key_prefix}network.address_space[{i}]"
        net = parse_cidr(text, where)
        check_usable(net, where, allow_public=vnet.allow_public)
        nets.append(net)
    clash = first_overlap([(str(n), n) for n in nets])
    if clash:
        raise AddressError(
            f"{vnet.key_prefix}network.address_space: {clash[0][0]} overlaps {clash[1][0]}: list disjoint prefixes"
        )
    return nets


def plan_vnet(vnet: VNetSpec) -> tuple[VNetPlan, list[Finding]]:
    """Lay out one VNet and report the limits it breaks on its own."""
    spaces = _spaces(vnet)
    names = [s.name for s in vnet.subnets]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup:
        raise AddressError(f"{vnet.key_prefix}{dup}: two subnets share this name: give each a unique name")
    pinned: dict[str, IPv4Network] = {}
    by_name = {s.name: s for s in vnet.subnets}
    for name, text in sorted(vnet.pinned.items()):
        where = f"{vnet.key_prefix}network.pinned.{name}"
        if name not in by_name:
            raise AddressError(f"{where}: no subnet is called {name!r}: use one of {', '.join(sorted(by_name))}")
        net = parse_cidr(text, where)
        need = by_name[name].ips_needed
        if usable(net.prefixlen) < need:
            raise AddressError(
                f"{where}: {net} has {usable(net.prefixlen):,} usable addresses but {name} needs {need:,}: "
                "pin a larger CIDR"
            )
        pinned[name] = net
    blocks = [_block(s, vnet) for s in vnet.subnets]
    going = {name: parse_cidr(text, f"deployed subnet {name}") for name, text in vnet.going.items()}
    placed = allocate(spaces, blocks, pinned, reserved=going, key_prefix=vnet.key_prefix)
    subnets = {
        s.name: SubnetPlan(s.name, s.role, placed[s.name], s.ips_needed)
        for s in sorted(vnet.subnets, key=lambda s: placed[s.name])
    }
    plan = VNetPlan(vnet.name, vnet.kind, tuple(spaces), subnets, vnet.peers, vnet.limits)
    findings: list[Finding] = []
    lim = vnet.limits
    if plan.ips_needed > lim["vnet-private-ips"]:
        findings.append(
            Finding(
                "vnet-private-ip-limit",
                f"{vnet.name}: {plan.ips_needed:,} private IPs exceed the {lim['vnet-private-ips']:,} one VNet holds "
                f"(a hard Azure limit): {lim.rows['vnet-private-ips'].fix}",
                vnet.name,
            )
        )
    if len(subnets) > lim["subnets-per-vnet"]:
        findings.append(
            Finding(
                "subnets-per-vnet-limit",
                f"{vnet.name}: {len(subnets)} subnets exceed {lim['subnets-per-vnet']}",
                vnet.name,
            )
        )
    if len(vnet.peers) > lim["vnet-peerings"]:
        findings.append(
            Finding(
                "vnet-peering-limit",
                f"{vnet.name}: {len(vnet.peers)} peerings exceed {lim['vnet-peerings']}",
                vnet.name,
            )
        )
    return plan, findings


def _refuse_overlap(
    hub: str, members: Sequence[str], plans: Mapping[str, VNetPlan], specs: Mapping[str, VNetSpec]
) -> None:
    """Raise on the first two VNets of one hub-and-spoke network whose ranges overlap.

    A sweep over ranges sorted by start address: a range overlaps an earlier one exactly when it
    starts before the furthest end seen so far, so 1,000 spokes cost a sort, not a million pairs.
    """
    ranges = sorted(
        (int(net.network_address), int(net.broadcast_address), member, net)
        for member in members
        for net in plans[member].address_space
    )
    reach: tuple[int, str, IPv4Network] | None = None
    for start, end, member, net in ranges:
        if reach is not None and start <= reach[0]:
            (first, fnet), (second, snet) = sorted(((reach[1], reach[2]), (member, net)), key=lambda x: x[0] == hub)
            raise AddressError(
                f"{specs[first].key_prefix}network.address_space: {first}'s {fnet} overlaps {second}'s {snet} "
                f"in {hub}'s hub-and-spoke network: give every VNet its own range",
                stack=first,
            )
        if reach is None or end > reach[0]:
            reach = (end, member, net)


def plan_network(vnets: Sequence[VNetSpec]) -> NetworkPlan:
    """Plan every VNet, then check what only the whole network shows (overlaps, peered groups)."""
    plans: dict[str, VNetPlan] = {}
    findings: list[Finding] = []
    specs = {v.name: v for v in vnets}
    for vnet in vnets:
        try:
            plan, found = plan_vnet(vnet)
        except AddressError as err:
            raise err.in_stack(vnet.name) from None
        plans[vnet.name] = plan
        findings.extend(found)

    # Peered VNets must not overlap; spokes of one hub must not overlap each other either:
    # Azure refuses to peer a VNet with two VNets whose spaces overlap.
    for hub in (v for v in vnets if v.kind == "hub"):
        _refuse_overlap(hub.name, list(dict.fromkeys([hub.name, *[p for p in hub.peers if p in plans]])), plans, specs)
    for vnet in vnets:
        peered = [plans[p] for p in vnet.peers if p in plans]
        try:
            _refuse_own_range_overlaps(vnet, [plans[vnet.name], *peered])
        except AddressError as err:
            raise err.in_stack(vnet.name) from None
        lim = vnet.limits
        group = plans[vnet.name].ips_needed + sum(p.ips_needed for p in peered)
        if peered and group > lim["peered-group-private-ips"]:
            findings.append(
                Finding(
                    "peered-group-ip-limit",
                    f"{vnet.name} and its peers ({', '.join(p.name for p in peered)}) use {group:,} private IPs, "
                    f"over the {lim['peered-group-private-ips']:,} a peered group holds (a hard Azure limit): "
                    f"{lim.rows['peered-group-private-ips'].fix}",
                    vnet.name,
                )
            )
    _refuse_routed_overlaps(vnets, plans)
    return NetworkPlan(plans, tuple(findings))


def _refuse_own_range_overlaps(vnet: VNetSpec, neighbours: Sequence[VNetPlan]) -> None:
    """A VNet's routed ranges (its service CIDR) against itself, its peers and what AKS refuses."""
    for label, text in vnet.other_ranges:
        where = f"{vnet.key_prefix}{label}"
        net = parse_cidr(text, where)
        check_usable(net, where, allow_public=vnet.allow_public)
        for refused in AKS_REFUSED:
            if net.overlaps(refused):
                raise AddressError(
                    f"{where}: {net} {inside(net, refused)} {refused}, which AKS refuses for cluster ranges "
                    "(Docker bridge and documentation ranges): use another private range"
                )
        for other in neighbours:
            for space in other.address_space:
                if net.overlaps(space):
                    raise AddressError(
                        f"{where}: {net} overlaps VNet {other.name}'s {space}: "
                        "use a range outside this VNet and every VNet peered with it"
                    )


def _refuse_routed_overlaps(vnets: Sequence[VNetSpec], plans: Mapping[str, VNetPlan]) -> None:
    """A spoke's service CIDR is routed from the hub to that spoke's NAT host: overlapping any other VNet
    of the network (or another spoke's service CIDR) would send that VNet's traffic to the wrong cluster,
    and two equal routes in the hub's route table conflict.

    One sweep over every range sorted by start (as ``_refuse_overlap``): VNet spaces are already known to
    be disjoint and each service CIDR to avoid its own VNet, so any overlap left is one of these.
    """
    items: list[tuple[int, int, str, VNetSpec | None, str, IPv4Network]] = []
    for vnet in vnets:
        for label, text in vnet.other_ranges:
            net = parse_cidr(text, f"{vnet.key_prefix}{label}")
            items.append((int(net.network_address), int(net.broadcast_address), vnet.name, vnet, label, net))
    if not items:
        return
    for plan in plans.values():
        for space in plan.address_space:
            items.append((int(space.network_address), int(space.broadcast_address), plan.name, None, "", space))
    items.sort(key=lambda i: (i[0], i[1]))
    reach = items[0]
    for item in items[1:]:
        if item[0] <= reach[1] and item[2] != reach[2]:
            routed, other = (item, reach) if item[3] is not None else (reach, item)
            owner, label, net = routed[3], routed[4], routed[5]
            assert owner is not None
            if other[3] is None:
                raise AddressError(
                    f"{owner.key_prefix}{label}: {net} overlaps VNet {other[2]}'s {other[5]}: the hub would route "
                    f"{other[2]}'s traffic to {owner.name}; use a range outside every VNet of the network",
                    stack=owner.name,
                )
            later, first = (item, reach) if item[2] > reach[2] else (reach, item)
            assert later[3] is not None
            raise AddressError(
                f"{later[3].key_prefix}{later[4]}: {later[5]} overlaps {first[2]}'s {first[4]} {first[5]}: the hub "
                "routes each cluster's service CIDR to its own NAT host; give every cluster its own range",
                stack=later[2],
            )
        if item[1] > reach[1]:
            reach = item
