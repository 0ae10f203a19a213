"""The whole stack as stack policies see it: resources found by ARM id, subnets with the IP
configurations that land in them, VNets with their peerings.

References are resolved by resource id, as in a real ``pulumi stack export``: a scale set names
its subnet by id, a peering names its remote VNet by id. A reference to a resource outside the
stack (the hub VNet seen from a spoke) stays unresolved and is never guessed.
"""

from __future__ import annotations

import ipaddress
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from modules import tags as tagnames
from policies.rules import fields

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class Resource(Protocol):
    resource_type: str
    urn: str
    name: str
    props: Mapping[str, Any]


@dataclass
class Subnet:
    key: str
    name: str
    urn: str
    vnet_key: str
    prefixes: list[Network]
    nsg: str | None
    demand: list[tuple[str, int]] = field(default_factory=list)
    """What takes addresses from the subnet: (who, IP configurations)."""

    @property
    def capacity(self) -> int:
        return sum(fields.addresses(p) for p in self.prefixes)

    @property
    def ip_configurations(self) -> int:
        return sum(count for _, count in self.demand)


@dataclass
class Vnet:
    key: str
    name: str
    urn: str
    props: Mapping[str, Any]
    prefixes: list[Network]
    kind: str | None
    limits: dict[str, int]
    subnets: list[Subnet] = field(default_factory=list)
    peers: set[str] = field(default_factory=set)
    """ARM ids of remote VNets, resolved or not."""


@dataclass
class Pool:
    """Scale sets of one pool in one subnet: surge counts once per pool, not per scale set."""

    label: str
    instances: int = 0
    surge: int = 0
    per_node: int = 0


class Graph:
    def __init__(self, resources: Iterable[Resource]) -> None:
        self.resources = list(resources)
        self.by_key: dict[str, Resource] = {}
        self.vnets: dict[str, Vnet] = {}
        self.subnets: dict[str, Subnet] = {}
        self.peerings: list[tuple[Resource, str | None, str | None]] = []
        for res in self.resources:
            key = fields.resource_key(res.resource_type, res.props)
            if key:
                self.by_key[key] = res
        for res in self.of_type(fields.VNET):
            self._add_vnet(res)
        for res in self.of_type(fields.SUBNET):
            self._add_subnet(res)
        for res in self.of_type(fields.PEERING):
            self._add_peering(res)
        self._add_demand()

    def of_type(self, resource_type: str) -> list[Resource]:
        return [r for r in self.resources if r.resource_type == resource_type]

    def find(self, key: str | None) -> Resource | None:
        return self.by_key.get(key) if key else None

    def _add_vnet(self, res: Resource) -> None:
        key = fields.resource_key(res.resource_type, res.props) or res.urn
        vnet = Vnet(
            key=key,
            name=fields.get(res.props, "name") or fields.get(res.props, "virtualNetworkName") or res.name,
            urn=res.urn,
            props=res.props,
            prefixes=fields.networks(fields.items(res.props, "addressSpace.addressPrefixes")),
            kind=fields.tag(res.props, tagnames.NETWORK_KIND),
            limits=_limits(fields.tag(res.props, tagnames.LIMITS)),
        )
        self.vnets[key] = vnet
        for inline in fields.items(res.props, "subnets"):
            name = fields.get(inline, "name")
            if not isinstance(name, str):
                continue
            sub = Subnet(
                key=f"{key}/subnets/{name.lower()}",
                name=name,
                urn=res.urn,
                vnet_key=key,
                prefixes=fields.prefixes(inline, "addressPrefix", "addressPrefixes"),
                nsg=fields.ref_id(inline, "networkSecurityGroup"),
            )
            self.subnets[sub.key] = sub
            vnet.subnets.append(sub)

    def _add_subnet(self, res: Resource) -> None:
        key = fields.resource_key(res.resource_type, res.props)
        if key is None or "/subnets/" not in key:
            return
        vnet_key = key.split("/subnets/")[0]
        sub = Subnet(
            key=key,
            name=key.rsplit("/", 1)[1],
            urn=res.urn,
            vnet_key=vnet_key,
            prefixes=fields.prefixes(res.props, "addressPrefix", "addressPrefixes"),
            nsg=fields.ref_id(res.props, "networkSecurityGroup"),
        )
        self.subnets[key] = sub
        if vnet_key in self.vnets:
            vnet = self.vnets[vnet_key]
            vnet.subnets = [s for s in vnet.subnets if s.key != key] + [sub]

    def _add_peering(self, res: Resource) -> None:
        remote = fields.ref_id(res.props, "remoteVirtualNetwork")
        local = _peering_local(res)
        self.peerings.append((res, local, remote))
        if local in self.vnets and remote:
            self.vnets[local].peers.add(remote)
        if remote in self.vnets and local:
            self.vnets[remote].peers.add(local)

    def _add_demand(self) -> None:
        pools: dict[tuple[str, str], Pool] = {}
        for res in self.of_type(fields.VMSS):
            capacity = fields.number(fields.get(res.props, "sku.capacity")) or 0
            pool_name = fields.tag(res.props, tagnames.POOL)
            surge = fields.int_tag(res.props, SURGE) or 0
            for nic in fields.items(res.props, "virtualMachineProfile.networkProfile.networkInterfaceConfigurations"):
                per_subnet: dict[str, int] = defaultdict(int)
                for ipc in fields.items(nic, "ipConfigurations"):
                    subnet = fields.ref_id(ipc, "subnet")
                    if subnet:
                        per_subnet[subnet] += 1
                for subnet, count in per_subnet.items():
                    label = f"pool {pool_name}" if pool_name else f"scale set {res.name}"
                    pool = pools.setdefault((label, subnet), Pool(label))
                    pool.instances += capacity
                    pool.surge = max(pool.surge, surge)
                    pool.per_node = max(pool.per_node, count)
        for (_, subnet), pool in pools.items():
            self._demand(subnet, pool.label, (pool.instances + pool.surge) * pool.per_node)
        for res in self.of_type(fields.NIC):
            for ipc in fields.items(res.props, "ipConfigurations"):
                self._demand(fields.ref_id(ipc, "subnet"), f"NIC {res.name}", 1)
        for res in self.of_type(fields.LOAD_BALANCER):
            for fe in fields.items(res.props, "frontendIPConfigurations"):
                self._demand(fields.ref_id(fe, "subnet"), f"load balancer {res.name}", 1)
        for res in self.of_type(fields.PRIVATE_ENDPOINT):
            self._demand(fields.ref_id(res.props, "subnet"), f"private endpoint {res.name}", 1)

    def _demand(self, subnet: str | None, who: str, count: int) -> None:
        if subnet in self.subnets and count:
            self.subnets[subnet].demand.append((who, count))

    def peered_groups(self) -> list[list[Vnet]]:
        """VNets of this stack joined by peerings (connected components)."""
        seen: set[str] = set()
        groups = []
        for key in self.vnets:
            if key in seen:
                continue
            group, todo = [], [key]
            while todo:
                current = todo.pop()
                if current in seen or current not in self.vnets:
                    continue
                seen.add(current)
                group.append(self.vnets[current])
                todo.extend(self.vnets[current].peers)
            groups.append(group)
        return groups


SURGE = "agk-surge"
"""On scale sets: the pool's surge node count (upgrade headroom), counted once per pool."""


def _peering_local(res: Resource) -> str | None:
    own = fields.get(res.props, "id")
    if isinstance(own, str) and "/virtualnetworkpeerings/" in own.lower():
        return fields.arm_key(own).split("/virtualnetworkpeerings/")[0]
    rg, vnet = fields.get(res.props, "resourceGroupName"), fields.get(res.props, "virtualNetworkName")
    if isinstance(rg, str) and isinstance(vnet, str):
        return fields.arm_key(f"resourceGroups/{rg}/providers/microsoft.network/virtualnetworks/{vnet}")
    return None


def _limits(text: str | None) -> dict[str, int]:
    if not text:
        return {}
    try:
        return tagnames.decode_limits(text)
    except ValueError:
        return {}
