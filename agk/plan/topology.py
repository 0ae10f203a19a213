"""The network a plan describes, read back from the captured resources (as a reviewer sees it).

Everything here comes from the resources the program registered, never from the stack config:
the diagram shows what `pulumi up` would build, not what the config meant to ask for.
"""

from __future__ import annotations

import ipaddress
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from agk.plan import wire
from agk.plan.engine import StackPlan
from modules import tags as tagnames
from modules.address_plan.subnet_sizes import AZURE_RESERVED_PER_SUBNET

VNET = "azure-native:network:VirtualNetwork"
SUBNET = "azure-native:network:Subnet"
PEERING = "azure-native:network:VirtualNetworkPeering"
VMSS = "azure-native:compute:VirtualMachineScaleSet"
VM = "azure-native:compute:VirtualMachine"
ROLE_TAG, POOL_TAG, NETWORK_TAG = tagnames.ROLE, tagnames.POOL, tagnames.NETWORK_KIND


def usable(cidr: str) -> int:
    """Addresses Azure lets you assign in a subnet (it keeps 5)."""
    return max(ipaddress.ip_network(cidr, strict=False).num_addresses - AZURE_RESERVED_PER_SUBNET, 0)


@dataclass
class Subnet:
    id: str
    name: str
    cidr: str

    @property
    def usable(self) -> int:
        return usable(self.cidr)


@dataclass
class Vnet:
    id: str
    name: str
    cidrs: list[str]
    kind: str
    subnets: list[Subnet] = field(default_factory=list)
    external: bool = False
    """Lives in another stack (the far end of a peering)."""


@dataclass
class Peering:
    local: str
    remote: str
    name: str


@dataclass
class Pool:
    """The scale sets of one pool (``agk-pool`` tag)."""

    name: str
    role: str
    vm_size: str
    scale_sets: int
    nodes: int
    subnet_ids: list[str]
    single_placement_group: bool | None


@dataclass
class Topology:
    vnets: list[Vnet]
    peerings: list[Peering]
    pools: list[Pool]
    vms_by_role: dict[str, int]

    def vnet_of(self, subnet_id: str) -> Vnet | None:
        for vnet in self.vnets:
            if any(s.id.lower() == subnet_id.lower() for s in vnet.subnets):
                return vnet
        return None


def _props(res: Any) -> dict[str, Any]:
    value = wire.plain(res.outputs or res.inputs)
    return value if isinstance(value, dict) else {}


def _vnet_id_of(child_id: str) -> str:
    marker = "/virtualnetworks/"
    at = child_id.lower().find(marker)
    if at < 0:
        return child_id
    end = child_id.find("/", at + len(marker))
    return child_id if end < 0 else child_id[:end]


def _name_of(arm_id: str) -> str:
    return arm_id.rstrip("/").rsplit("/", 1)[-1]


def topology(plan: StackPlan, referenced: tuple[StackPlan, ...] = ()) -> Topology:
    """The plan's network; VNets at the far end of a peering are filled in from ``referenced`` plans."""
    vnets = _vnets(plan)
    known_elsewhere: dict[str, Vnet] = {}
    for other in referenced:
        for vid, vnet in _vnets(other).items():
            known_elsewhere[vid] = Vnet(vnet.id, vnet.name, vnet.cidrs, vnet.kind, vnet.subnets, external=True)
    peerings: list[Peering] = []
    for res in plan.by_type(PEERING):
        props = _props(res)
        local = _vnet_id_of(str(props.get("id") or res.id))
        remote = str((props.get("remoteVirtualNetwork") or {}).get("id") or "")
        if not remote:
            continue
        for end in (local, remote):
            if end.lower() not in vnets:
                vnets[end.lower()] = known_elsewhere.get(end.lower()) or Vnet(end, _name_of(end), [], "", external=True)
        peerings.append(Peering(local, remote, str(props.get("name") or res.name)))
    for vnet in vnets.values():
        vnet.subnets.sort(key=lambda s: ipaddress.ip_network(s.cidr, strict=False) if s.cidr else s.name)
    pools = _pools(plan)
    roles = Counter(str((_props(r).get("tags") or {}).get(ROLE_TAG) or "untagged") for r in plan.by_type(VM))
    ordered = sorted(vnets.values(), key=lambda v: (v.kind != "hub", v.external, v.name))
    return Topology(ordered, peerings, pools, dict(sorted(roles.items())))


def _vnets(plan: StackPlan) -> dict[str, Vnet]:
    vnets: dict[str, Vnet] = {}
    for res in plan.by_type(VNET):
        props = _props(res)
        tags = props.get("tags") or {}
        vid = str(props.get("id") or res.id)
        vnet = Vnet(
            id=vid,
            name=str(props.get("name") or res.name),
            cidrs=list((props.get("addressSpace") or {}).get("addressPrefixes") or []),
            kind=str(tags.get(NETWORK_TAG, "")),
        )
        for inline in props.get("subnets") or []:
            prefix = inline.get("addressPrefix") or (inline.get("addressPrefixes") or [""])[0]
            vnet.subnets.append(Subnet(str(inline.get("id")), str(inline.get("name")), str(prefix)))
        vnets[vid.lower()] = vnet
    for res in plan.by_type(SUBNET):
        props = _props(res)
        sid = str(props.get("id") or res.id)
        prefix = props.get("addressPrefix") or (props.get("addressPrefixes") or [""])[0]
        parent = vnets.get(_vnet_id_of(sid).lower())
        if parent is not None and not any(s.id.lower() == sid.lower() for s in parent.subnets):
            parent.subnets.append(Subnet(sid, str(props.get("name") or res.name), str(prefix)))
    return vnets


def _pools(plan: StackPlan) -> list[Pool]:
    pools: dict[str, Pool] = {}
    for res in plan.by_type(VMSS):
        props = _props(res)
        tags = props.get("tags") or {}
        sku = props.get("sku") or {}
        name = str(tags.get(POOL_TAG) or res.name)
        pool = pools.setdefault(
            name,
            Pool(
                name, str(tags.get(ROLE_TAG, "")), str(sku.get("name", "")), 0, 0, [], props.get("singlePlacementGroup")
            ),
        )
        pool.scale_sets += 1
        pool.nodes += int(sku.get("capacity") or 0)
        profile = (props.get("virtualMachineProfile") or {}).get("networkProfile") or {}
        for nic in profile.get("networkInterfaceConfigurations") or []:
            for ip in nic.get("ipConfigurations") or []:
                sid = (ip.get("subnet") or {}).get("id")
                if sid and sid not in pool.subnet_ids:
                    pool.subnet_ids.append(sid)
    return sorted(pools.values(), key=lambda p: p.name)


def address_plan(plan: StackPlan) -> dict[str, Any]:
    """The address plan as built (the shape of ``subnet-calc plan --format json``)."""
    topo = topology(plan)
    vnets = []
    for vnet in topo.vnets:
        if vnet.external:
            continue
        capacity = sum(ipaddress.ip_network(c, strict=False).num_addresses for c in vnet.cidrs)
        subnets = [
            {"name": s.name, "cidr": s.cidr, "role": "", "ips_needed": None, "usable_ips": s.usable}
            for s in vnet.subnets
        ]
        allocated = sum(ipaddress.ip_network(s.cidr, strict=False).num_addresses for s in vnet.subnets if s.cidr)
        vnets.append(
            {
                "name": vnet.name,
                "cidr": ", ".join(vnet.cidrs),
                "ips_needed": None,
                "usable_ips": capacity,
                "utilization": round(allocated / capacity, 4) if capacity else 0.0,
                "subnets": subnets,
            }
        )
    return {"stack": plan.stack, "vnets": vnets, "warnings": []}
