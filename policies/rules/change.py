"""Change rules (`agk review --base`): what a pull request may do to what already runs.

CrossGuard policies see only the proposed state; these rules see the change from a base to it,
which `agk plan --base` works out (:mod:`agk.plan.diff`). A stack that means a dangerous change
says so in its stack file, under ``azure-gpu-k8s:changes`` (a reviewed, named allowance with a
reason); every rule here honours a matching allowance, and an allowance that matches no change
is reported so it does not silently permit the next one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from policies.rules import fields
from policies.rules.replacements import refusals

ETCD_ROLES = frozenset({"etcd", "events-etcd"})
CHANGES_KEY = "azure-gpu-k8s:changes"

Report = Callable[[str, str | None], None]


@dataclass(frozen=True)
class ChangedResource:
    urn: str
    type: str
    name: str
    action: str
    """create | update | replace | delete"""
    keys: tuple[str, ...] = ()
    refused: tuple[str, ...] = ()
    """Inputs Azure refuses to change in place."""
    role: str | None = None
    """The ``agk-role`` tag of the resource as it runs today."""


@dataclass(frozen=True)
class SubnetChange:
    urn: str
    """The Subnet resource, or the VNet that declares the subnet inline."""
    name: str
    """The subnet's resource name (an inline subnet: its name in the VNet): what an allowance names."""
    subnet: str
    """Its name in the VNet."""
    before: tuple[str, ...]
    after: tuple[str, ...]
    """Empty when the subnet goes."""
    ip_configurations: int
    """IP configurations in it today: in use when above zero."""


@dataclass(frozen=True)
class PoolChange:
    name: str
    running: int
    """Instances its scale sets hold today."""
    planned: int
    removed: tuple[tuple[str, int, int], ...] = ()
    """``(scale set, today, planned)`` for each set whose capacity drops, newest first."""


@dataclass(frozen=True)
class GroupRoll:
    """The VMs of one control-plane group (etcd, events-etcd, API servers) that a change restarts by `pulumi up`
    (Azure restarts a resized VM; a replaced one is down until the new one boots)."""

    role: str
    members: int
    """VMs in the group today."""
    hosts: tuple[str, ...]
    """Those the change restarts or replaces."""
    chained: bool
    """Each of them waits for the one before (its VM depends on it), so they go one at a time."""


ROLL_LIMIT = {"etcd": "quorum", "events-etcd": "quorum", "apiserver": "capacity"}


def at_once(role: str, members: int) -> int:
    """The most VMs of a group that may be down together: one etcd member (a second would leave a 3-member
    cluster without quorum; etcd's runtime-reconfiguration guide changes one member at a time), and as many API
    servers as leave a majority serving behind the load balancer."""
    return 1 if ROLL_LIMIT.get(role) == "quorum" else max(1, (members - 1) // 2)


@dataclass(frozen=True)
class Allowance:
    action: str
    """replace | delete | move | add (an etcd member added by hand first)"""
    reason: str
    urn: str | None = None
    name: str | None = None

    def matches(self, urn: str, name: str, action: str) -> bool:
        return self.action == action and (self.urn == urn or self.name == name)

    def describe(self) -> str:
        return f"{{{'urn' if self.urn else 'name'}: {self.urn or self.name}, action: {self.action}}}"


@dataclass(frozen=True)
class ChangeArgs:
    stack: str
    changes: Sequence[ChangedResource]
    subnets: Sequence[SubnetChange] = ()
    pools: Sequence[PoolChange] = ()
    allowances: Sequence[Allowance] = ()
    config: Mapping[str, Any] = field(default_factory=dict)
    rolls: Sequence[GroupRoll] = ()
    """Per control-plane group, the VMs this change restarts or replaces."""
    etcd_groups: Mapping[str, int] = field(default_factory=dict)
    """etcd role (etcd, events-etcd) to its member VMs today."""

    def allowed(self, urn: str, name: str, action: str) -> bool:
        return any(a.matches(urn, name, action) for a in self.allowances)

    def how_to_allow(self, name: str, action: str) -> str:
        return (
            f"if intended, declare it in stacks/Pulumi.{self.stack}.yaml under {CHANGES_KEY}:"
            f" allow: [{{name: {name}, action: {action}, reason: <why, e.g. the change ticket>}}]"
        )


def _what(change: ChangedResource) -> str | None:
    """Why a resource holds state that a replacement or deletion destroys (None: it does not)."""
    if change.type == fields.VNET:
        return "VNet (every subnet, peering and address in it)"
    if change.type == fields.STORAGE_ACCOUNT:
        return "storage account (datasets and checkpoints)"
    if change.type == fields.VM and change.role in ETCD_ROLES:
        return f"{change.role} member VM (one of the quorum)"
    if change.type == fields.VM and change.action == "replace":
        # A fixed host (API server, Prometheus, NAT) is replaced delete-first, e.g. for a new image version
        # (modules/azure/vm.py replace_on_changes): it is down until the new one boots, so only by intent.
        return f"{change.role or 'host'} VM (a running host, down until its replacement boots)"
    if change.type == fields.DISK and change.role in ETCD_ROLES:
        return f"{change.role} data disk (the member's data)"
    return None


def _verb(action: str) -> str:
    return "replaced (deleted, then created empty)" if action == "replace" else "deleted"


def no_stateful_replacement(args: ChangeArgs, report_violation: Report) -> None:
    in_use = {s.urn: s for s in args.subnets if s.ip_configurations and not s.after}
    for change in args.changes:
        if change.action not in ("replace", "delete"):
            continue
        what = _what(change)
        if what is None and change.type == fields.SUBNET and change.urn in in_use:
            count = in_use[change.urn].ip_configurations
            what = f"subnet in use ({count:,} IP configuration{'s' if count != 1 else ''} in it today)"
        if what is None or args.allowed(change.urn, change.name, change.action):
            continue
        forced = f" because {', '.join(change.keys)} changes" if change.keys else ""
        report_violation(
            f"{what} {change.name} would be {_verb(change.action)}{forced}: {args.how_to_allow(change.name, change.action)}",
            change.urn,
        )


def no_subnet_move(args: ChangeArgs, report_violation: Report) -> None:
    for subnet in args.subnets:
        if not subnet.after or args.allowed(subnet.urn, subnet.name, "move"):
            continue
        count = subnet.ip_configurations
        used = f"; {count:,} IP configuration{'s are' if count != 1 else ' is'} in it today" if count else ""
        report_violation(
            f"subnet {subnet.subnet} moves from {', '.join(subnet.before)} to {', '.join(subnet.after)}{used}:"
            f" pin it (network.pinned) to keep its addresses; {args.how_to_allow(subnet.name, 'move')}",
            subnet.urn,
        )


def no_change_azure_refuses(args: ChangeArgs, report_violation: Report) -> None:
    """Mandatory whatever the stack allows: an allowance changes what the review says, not what Azure accepts."""
    for change in args.changes:
        if not change.refused:
            continue
        fixes = "; ".join(dict.fromkeys(f"{r.path}: {r.fix}" for r in refusals(change.type, change.refused)))
        report_violation(
            f"Azure refuses to change {', '.join(change.refused)} of {change.type.split(':', 1)[1]} {change.name}"
            " in place (PropertyChangeNotAllowed), and the provider does not replace it: `pulumi up` would fail"
            f" there, half-way. Keep the value, or: {fixes} ({change.urn}). No allowance lets it through",
            change.urn,
        )


CHAIN_OVERLAP = 2
"""Members a chain may have down at once. Each VM of a chain waits for the one before to be *running* again,
not for its process to be healthy: Azure's resize returns once the VM has restarted
(learn.microsoft.com/azure/virtual-machines/sizes/resize-vm), so the member before may still be rejoining
while the next one stops."""


def chain_is_enough(role: str, members: int) -> bool:
    """Whether an ordered chain keeps a quorum group up: it can lose ``CHAIN_OVERLAP`` members (5 and more).
    An API server group stays up while one server serves, so a chain always is."""
    return ROLL_LIMIT.get(role) != "quorum" or (members - 1) // 2 >= CHAIN_OVERLAP


def control_plane_one_at_a_time(args: ChangeArgs, report_violation: Report) -> None:
    """Mandatory: resizing or replacing more control-plane VMs at once than the group can spare stops it."""
    for roll in args.rolls:
        limit = at_once(roll.role, roll.members)
        if len(roll.hosts) <= limit or (roll.chained and chain_is_enough(roll.role, roll.members)):
            continue
        what = "etcd loses quorum" if ROLL_LIMIT.get(roll.role) == "quorum" else "the API goes down"
        if roll.chained:
            why = (
                f"ordered, but each waits only for the VM before to run again, not for its member to rejoin, so two"
                f" can be down at once and {what} with more than {limit} down"
            )
        else:
            why = (
                f"at once, and {what} with more than {limit} down: order them (each VM depends on the one before,"
                " as modules/azure/control_plane.py does; enough for 5 members or more) or"
            )
        report_violation(
            f"{len(roll.hosts)} of {roll.members} {roll.role} VMs ({', '.join(roll.hosts)}) would be restarted or"
            f" replaced by `pulumi up` {why}: change one per update (`pulumi up --target <urn>` one VM at a time,"
            " waiting for `etcdctl endpoint health` or /readyz in between)",
            None,
        )


def etcd_membership_change(args: ChangeArgs, report_violation: Report) -> None:
    """Mandatory: a running etcd cluster gains or loses members only through etcd's own membership API."""
    for role, members in sorted(args.etcd_groups.items()):
        vms = [c for c in args.changes if c.type == fields.VM and c.role == role]
        added = [c for c in vms if c.action == "create"]
        removed = [c for c in vms if c.action == "delete"]
        if added and not all(args.allowed(c.urn, c.name, "add") for c in added):
            names = ", ".join(c.name for c in added)
            report_violation(
                f"{role} grows from {members} to {members + len(added) - len(removed)} members ({names} created):"
                " the program renders a member for a new cluster (initial-cluster-state: new), so it never joins the"
                " running one. Add one member per update: `etcdctl member add <name> --peer-urls=https://<ip>:2380`"
                " on a healthy member, then deploy that member and start it with initial-cluster-state: existing"
                " (docs/day2.md); " + args.how_to_allow(added[0].name, "add"),
                added[0].urn,
            )
        for change in removed:
            if args.allowed(change.urn, change.name, "delete"):
                continue
            report_violation(
                f"{role} member {change.name} would be deleted without leaving the cluster: the others keep"
                f" counting it in their quorum. First `etcdctl member remove <its member id>` (etcdctl member list),"
                " one member per update, then delete its VM; " + args.how_to_allow(change.name, "delete"),
                change.urn,
            )


def allowance_takes_quorum(args: ChangeArgs, report_violation: Report) -> None:
    """Advisory: allowances that together let more etcd members go at once than quorum survives."""
    for roll in args.rolls:
        if ROLL_LIMIT.get(roll.role) != "quorum":
            continue
        allowed = [
            c.name
            for c in args.changes
            if c.role == roll.role
            and c.type == fields.VM
            and c.action in ("replace", "delete")
            and args.allowed(c.urn, c.name, c.action)
        ]
        if len(allowed) > (roll.members - 1) // 2:
            report_violation(
                f"{CHANGES_KEY} allows {len(allowed)} of {roll.members} {roll.role} members to be replaced or deleted"
                f" in one update ({', '.join(allowed)}): more than {(roll.members - 1) // 2} down at once takes"
                " etcd's quorum; replace one member per update (docs/day2.md)",
                None,
            )


def pool_shrink_below_running(args: ChangeArgs, report_violation: Report) -> None:
    for pool in args.pools:
        if pool.planned < pool.running:
            sets = "; ".join(
                f"{name} {before:,} -> {after:,}" + (" (deleted)" if not after else "")
                for name, before, after in pool.removed
            )
            report_violation(
                f"pool {pool.name} shrinks from {pool.running:,} to {pool.planned:,} nodes: "
                f"{pool.running - pool.planned:,} running nodes and their pods go"
                + (f" ({sets}; a set loses its newest VMs)" if sets else "")
                + "; drain them first",
                None,
            )


def change_allowance_unused(args: ChangeArgs, report_violation: Report) -> None:
    candidates = [(c.urn, c.name, c.action) for c in args.changes]
    candidates += [(c.urn, c.name, "add") for c in args.changes if c.action == "create"]
    candidates += [(s.urn, s.name, "move") for s in args.subnets if s.after]
    for allowance in args.allowances:
        refused = next((c for c in args.changes if c.refused and allowance.matches(c.urn, c.name, "replace")), None)
        if refused is not None and not any(allowance.matches(*c) for c in candidates):
            report_violation(
                f"{CHANGES_KEY} allowance {allowance.describe()} ({allowance.reason}) names {refused.name}, whose"
                f" change Azure refuses in place ({', '.join(refused.refused)}): an allowance cannot make Azure accept"
                " it, so `pulumi up` would still fail; replace the resource as no-change-azure-refuses says and"
                f" remove the allowance from stacks/Pulumi.{args.stack}.yaml",
                None,
            )
            continue
        if not any(allowance.matches(*c) for c in candidates):
            report_violation(
                f"{CHANGES_KEY} allowance {allowance.describe()} ({allowance.reason}) matches no change:"
                f" remove it from stacks/Pulumi.{args.stack}.yaml so it cannot permit a later one",
                None,
            )
