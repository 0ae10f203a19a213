"""What goes with a change: the nodes, GPUs, etcd members, subnets in use and API endpoint it touches.

Everything is counted from the base (what runs today): a replaced scale set takes its running
instances with it, whatever the new one will hold. GPUs come from the one VM size table
(:mod:`modules.vm_sizing.skus`); subnets and what takes addresses in them from the policy pack's
graph (:mod:`policies.rules.graph`), so a plan and a review count the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agk.plan import wire
from agk.plan.diff import Change, StackDiff, State
from agk.plan.restarts import HostRestart, host_restarts
from modules import tags as tagnames
from modules.vm_sizing.skus import SKUS
from policies.rules import fields as props_wire
from policies.rules.graph import Graph

VMSS = "azure-native:compute:VirtualMachineScaleSet"
VM = "azure-native:compute:VirtualMachine"
DISK = "azure-native:compute:Disk"
LOAD_BALANCER = "azure-native:network:LoadBalancer"
ETCD_ROLES = frozenset({"etcd", "events-etcd"})
GONE = frozenset({"replace", "delete"})


@dataclass
class _Res:
    """A state resource in the shape the policy graph reads (``Resource`` protocol)."""

    resource_type: str
    urn: str
    name: str
    props: Mapping[str, Any]


def props_of(res: State) -> dict[str, Any]:
    """What ARM holds for a resource: its outputs (with the id) where the state has them, else its inputs."""
    value = wire.plain(res.get("outputs") or res.get("inputs") or {})
    return value if isinstance(value, dict) else {}


def graph_of(resources: Iterable[State]) -> Graph:
    return Graph(
        _Res(str(r["type"]), str(r["urn"]), str(r["urn"]).rsplit("::", 1)[-1], props_of(r))
        for r in resources
        if r.get("type") != "pulumi:pulumi:Stack"
    )


@dataclass(frozen=True)
class ScaleSetHit:
    name: str
    pool: str
    vm_size: str
    action: str
    """replace | delete | scale-in (a lowered capacity: Azure deletes that many running instances)."""
    nodes: int
    """Running VMs that go: every instance of a replaced or deleted set, the removed ones of a scale-in."""
    gpus: int
    running: int = 0
    """Instances the set runs today."""

    def removed(self) -> str:
        """Which of the set's VMs go, in words."""
        if self.action == "scale-in":
            return f"{self.name}: the newest {self.nodes:,} of its {self.running:,} VMs"
        return (
            f"{self.name}: all {self.nodes:,} VMs, the set is {'replaced' if self.action == 'replace' else 'deleted'}"
        )


@dataclass(frozen=True)
class ScaleSetGrowth:
    """A scale set created, or one whose capacity rises: VMs `pulumi up` adds (and quota it takes)."""

    name: str
    pool: str
    vm_size: str
    action: str
    """create | scale-out"""
    nodes: int
    gpus: int


@dataclass(frozen=True)
class ScaleSetRoll:
    """A scale set whose model changes in place: new instances boot it, running ones only once
    reimaged (upgrade policy Manual; virtual-machine-scale-sets-upgrade-policy)."""

    name: str
    pool: str
    nodes: int
    paths: tuple[str, ...]
    """What changes in the model (input paths)."""


ROLLED = ("virtualMachineProfile", "sku.name")
"""Model inputs running instances keep until they are reimaged (capacity is not one: it adds or removes VMs)."""


@dataclass(frozen=True)
class SubnetMove:
    subnet: str
    urn: str
    """The Subnet resource (or the VNet that declares it inline)."""
    before: list[str]
    after: list[str]
    """Empty when the subnet goes (replaced or deleted)."""
    ip_configurations: int
    """IP configurations in it today (nodes, pods, hosts, endpoints)."""
    machines: int
    """Scale set instances and VMs with an address in it today."""


@dataclass
class BlastRadius:
    scale_sets: list[ScaleSetHit] = field(default_factory=list)
    etcd_members: list[str] = field(default_factory=list)
    """etcd VMs whose VM or data disk is replaced or deleted (a lost member each)."""
    subnets_moved: list[SubnetMove] = field(default_factory=list)
    """Subnets in use whose address prefix changes."""
    subnets_removed: list[SubnetMove] = field(default_factory=list)
    """Subnets in use that are replaced or deleted."""
    api_endpoint: list[str] = field(default_factory=list)
    """Why the API endpoint is affected (load balancer, its frontend address, API server VMs)."""
    to_roll: list[ScaleSetRoll] = field(default_factory=list)
    """Scale sets updated in place whose running nodes need a reimage to get the change."""
    created: list[ScaleSetGrowth] = field(default_factory=list)
    """Scale sets created or grown: the VMs the change adds."""
    restarts: list[HostRestart] = field(default_factory=list)
    """Hosts whose processes the change restarts (their bundle's restart map, or their VM)."""

    @property
    def nodes(self) -> int:
        return sum(s.nodes for s in self.scale_sets)

    @property
    def gpus(self) -> int:
        return sum(s.gpus for s in self.scale_sets)

    @property
    def nodes_created(self) -> int:
        return sum(s.nodes for s in self.created)

    @property
    def gpus_created(self) -> int:
        return sum(s.gpus for s in self.created)

    def as_json(self) -> dict[str, Any]:
        def subnet(s: SubnetMove) -> dict[str, Any]:
            return {
                "subnet": s.subnet,
                "from": s.before,
                "to": s.after,
                "ip_configurations": s.ip_configurations,
                "machines": s.machines,
            }

        return {
            "nodes": self.nodes,
            "gpus": self.gpus,
            "etcd_members": len(self.etcd_members),
            "subnets_moved": [subnet(s) for s in self.subnets_moved],
            "subnets_removed": [subnet(s) for s in self.subnets_removed],
            "api_endpoint": self.api_endpoint,
            "scale_sets": [
                {
                    "name": s.name,
                    "pool": s.pool,
                    "vm_size": s.vm_size,
                    "action": s.action,
                    "nodes": s.nodes,
                    "gpus": s.gpus,
                    "running": s.running,
                }
                for s in self.scale_sets
            ],
            "nodes_created": self.nodes_created,
            "gpus_created": self.gpus_created,
            "restarts": [r.as_json() for r in self.restarts],
            "scale_sets_created": [
                {
                    "name": s.name,
                    "pool": s.pool,
                    "vm_size": s.vm_size,
                    "action": s.action,
                    "nodes": s.nodes,
                    "gpus": s.gpus,
                }
                for s in self.created
            ],
            "etcd_member_names": self.etcd_members,
            "scale_sets_to_roll": [
                {"name": r.name, "pool": r.pool, "nodes": r.nodes, "paths": list(r.paths)} for r in self.to_roll
            ],
        }


def _role(res: State) -> str | None:
    return props_wire.role(props_of(res))


def _capacity(res: State) -> int:
    return props_wire.number(props_wire.get(props_of(res), "sku.capacity")) or 0


def _nodes_by_subnet(resources: Iterable[State]) -> dict[str, int]:
    """Running machines per subnet key: scale set instances (primary NIC) and standalone NICs."""
    out: dict[str, int] = {}
    for res in resources:
        props = props_of(res)
        if res.get("type") == VMSS:
            nics = props_wire.items(props, "virtualMachineProfile.networkProfile.networkInterfaceConfigurations")
            first = next((n for n in nics if props_wire.get(n, "primary")), nics[0] if nics else None)
            configs = props_wire.items(first, "ipConfigurations") if first is not None else []
            primary = next((c for c in configs if props_wire.get(c, "primary")), configs[0] if configs else None)
            key = props_wire.ref_id(primary, "subnet") if primary is not None else None
            if key:
                out[key] = out.get(key, 0) + _capacity(res)
        elif res.get("type") == "azure-native:network:NetworkInterface":
            for key in {props_wire.ref_id(c, "subnet") for c in props_wire.items(props, "ipConfigurations")}:
                if key:
                    out[key] = out.get(key, 0) + 1
    return out


def _gpus(size: str, nodes: int) -> int:
    sku = SKUS.get(size)
    return nodes * (sku.gpus if sku else 0)


def _scale_sets(change: Change, radius: BlastRadius) -> None:
    """What a scale set's change removes (replace, delete, a lowered capacity) or adds (create, a raised one)."""
    before = _capacity(change.before) if change.before is not None else 0
    after = _capacity(change.after) if change.after is not None and change.action != "delete" else 0
    props = props_of(change.before if change.before is not None else change.after or {})
    size = str(props_wire.get(props, "sku.name", ""))
    pool = props_wire.tag(props, tagnames.POOL) or ""
    if change.action in GONE:
        radius.scale_sets.append(
            ScaleSetHit(change.name, pool, size, change.action, before, _gpus(size, before), before)
        )
        if change.action == "replace" and after:
            new_size = str(props_wire.get(props_of(change.after or {}), "sku.name", "")) or size
            radius.created.append(ScaleSetGrowth(change.name, pool, new_size, "create", after, _gpus(new_size, after)))
    elif change.action == "create" and after:
        radius.created.append(ScaleSetGrowth(change.name, pool, size, "create", after, _gpus(size, after)))
    elif change.action == "update" and after < before:
        gone = before - after
        radius.scale_sets.append(ScaleSetHit(change.name, pool, size, "scale-in", gone, _gpus(size, gone), before))
    elif change.action == "update" and after > before:
        radius.created.append(
            ScaleSetGrowth(change.name, pool, size, "scale-out", after - before, _gpus(size, after - before))
        )


def blast_radius(diff: StackDiff) -> BlastRadius:
    radius = BlastRadius()
    gone = {c.urn: c for c in diff.changes if c.action in GONE}
    for change in diff.changes:
        if change.type == VMSS:
            _scale_sets(change, radius)
        if change.type == VMSS and change.action == "update" and change.before is not None:
            paths = tuple(p for p in change.paths if any(p == r or p.startswith(f"{r}.") for r in ROLLED))
            if paths:
                props = props_of(change.before)
                pool = props_wire.tag(props, tagnames.POOL) or ""
                radius.to_roll.append(ScaleSetRoll(change.name, pool, _capacity(change.before), paths))
    radius.etcd_members = _etcd_members(diff.base_resources, gone)
    radius.restarts = host_restarts(diff)
    _subnets(diff, radius)
    radius.api_endpoint = _api_endpoint(diff)
    return radius


def _etcd_members(base: list[State], gone: Mapping[str, Change]) -> list[str]:
    members: set[str] = set()
    disks_gone = {
        props_wire.arm_key(str(props_of(r).get("id", ""))): r
        for r in base
        if r.get("type") == DISK and r["urn"] in gone
    }
    for res in base:
        if res.get("type") != VM or _role(res) not in ETCD_ROLES:
            continue
        name = str(res["urn"]).rsplit("::", 1)[-1]
        if res["urn"] in gone:
            members.add(name)
            continue
        attached = props_wire.items(props_of(res), "storageProfile.dataDisks")
        if any(props_wire.ref_id(d, "managedDisk") in disks_gone for d in attached):
            members.add(name)
    # An etcd data disk whose VM the base does not show still holds a member's data.
    attached_anywhere = {
        props_wire.ref_id(d, "managedDisk")
        for r in base
        if r.get("type") == VM
        for d in props_wire.items(props_of(r), "storageProfile.dataDisks")
    }
    for key, disk in disks_gone.items():
        if _role(disk) in ETCD_ROLES and key not in attached_anywhere:
            members.add(str(disk["urn"]).rsplit("::", 1)[-1])
    return sorted(members)


def subnet_changes(diff: StackDiff) -> list[SubnetMove]:
    """Every existing subnet that moves (its prefixes change) or goes, with what is in it today."""
    before, after = graph_of(diff.base_resources), graph_of(diff.head_resources)
    nodes = _nodes_by_subnet(diff.base_resources)
    gone_urns = {c.urn for c in diff.changes if c.action in GONE}
    out = []
    for key, old in sorted(before.subnets.items()):
        new = after.subnets.get(key)
        prefixes = sorted(str(p) for p in old.prefixes)
        if new is None or old.urn in gone_urns:
            out.append(SubnetMove(old.name, old.urn, prefixes, [], old.ip_configurations, nodes.get(key, 0)))
            continue
        moved = sorted(str(p) for p in new.prefixes)
        if moved != prefixes:
            out.append(SubnetMove(old.name, old.urn, prefixes, moved, old.ip_configurations, nodes.get(key, 0)))
    return out


def _subnets(diff: StackDiff, radius: BlastRadius) -> None:
    for change in subnet_changes(diff):
        if not change.ip_configurations:
            continue
        (radius.subnets_moved if change.after else radius.subnets_removed).append(change)


def _frontends(res: State | None) -> list[str]:
    if res is None:
        return []
    return sorted(
        str(props_wire.get(f, "privateIPAddress", ""))
        for f in props_wire.items(props_of(res), "frontendIPConfigurations")
    )


def _api_endpoint(diff: StackDiff) -> list[str]:
    reasons = []
    for change in diff.changes:
        role = _role(change.before) if change.before is not None else None
        if change.type == LOAD_BALANCER and change.before is not None:
            if change.action in GONE:
                reasons.append(f"load balancer {change.name} is {_verb(change.action)}")
            elif _frontends(change.before) != _frontends(change.after):
                reasons.append(
                    f"load balancer {change.name} frontend moves from {', '.join(_frontends(change.before))}"
                    f" to {', '.join(_frontends(change.after))}"
                )
        elif change.type == VM and role == "apiserver" and change.action in GONE:
            reasons.append(f"API server {change.name} is {_verb(change.action)}")
    return reasons


def _verb(action: str) -> str:
    return "replaced" if action == "replace" else "deleted"
