"""The change policies (`agk review --base`) run over a stack's diff, into the review's report."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence

from pulumi_policy import EnforcementLevel

from agk.plan.blast import VMSS, props_of, subnet_changes
from agk.plan.diff import StackDiff, State
from agk.review.config import Settings
from agk.review.evaluate import Report, Violation
from modules import tags as tagnames
from modules.vm_sizing.scale_sets import scale_in_order
from policies.changes import ChangePolicy
from policies.rules import fields
from policies.rules.change import Allowance, ChangeArgs, ChangedResource, GroupRoll, PoolChange, SubnetChange

STACK_TYPE = "pulumi:pulumi:Stack"


def _scale_sets(resources: Iterable[State]) -> dict[str, dict[str, int]]:
    """Pool to its scale sets' capacities."""
    out: dict[str, dict[str, int]] = {}
    for res in resources:
        if res.get("type") != VMSS:
            continue
        props = props_of(res)
        name = str(res["urn"]).rsplit("::", 1)[-1]
        pool = fields.tag(props, tagnames.POOL) or name
        out.setdefault(pool, {})[name] = fields.number(fields.get(props, "sku.capacity")) or 0
    return out


def change_args(diff: StackDiff, allowances: Sequence[Allowance]) -> ChangeArgs:
    changes = [
        ChangedResource(
            urn=c.urn,
            type=c.type,
            name=c.name,
            action=c.action,
            keys=c.keys,
            refused=c.refused,
            role=fields.role(props_of(c.before if c.before is not None else c.after or {})),
        )
        for c in diff.changes
    ]
    subnets = [
        SubnetChange(
            s.urn,
            s.urn.rsplit("::", 1)[-1] if s.urn.split("::")[2].endswith(fields.SUBNET) else s.subnet,
            s.subnet,
            tuple(s.before),
            tuple(s.after),
            s.ip_configurations,
        )
        for s in subnet_changes(diff)
    ]
    running, planned = _scale_sets(diff.base_resources), _scale_sets(diff.head_resources)
    pools = [
        PoolChange(
            name,
            sum(sets.values()),
            sum(planned.get(name, {}).values()),
            tuple(scale_in_order(sets, planned.get(name, {}))),
        )
        for name, sets in sorted(running.items())
    ]
    groups: dict[str, int] = {}
    for res in diff.base_resources:
        if res.get("type") == fields.VM and (role := fields.role(props_of(res))) in ("etcd", "events-etcd"):
            groups[role] = groups.get(role, 0) + 1
    return ChangeArgs(diff.stack, changes, subnets, pools, list(allowances), rolls=rolls(diff), etcd_groups=groups)


ROLLED_ROLES = ("etcd", "events-etcd", "apiserver")


def rolls(diff: StackDiff) -> list[GroupRoll]:
    """Per control-plane group, the VMs `pulumi up` restarts (a resize) or replaces, and whether the plan orders
    them one after another (each VM's dependencies reach the one before)."""
    members: dict[str, list[str]] = {}
    for res in diff.base_resources:
        if res.get("type") == fields.VM and (role := fields.role(props_of(res))) in ROLLED_ROLES:
            members.setdefault(role, []).append(str(res["urn"]))
    deps = {str(r["urn"]): set(r.get("dependencies") or ()) for r in diff.head_resources}
    out = []
    for role, urns in sorted(members.items()):
        hit = sorted(
            c.urn
            for c in diff.changes
            if c.urn in urns and (c.action == "replace" or (c.action == "update" and c.restarts))
        )
        if not hit:
            continue
        chained = all(_reaches(deps, later, earlier) for earlier, later in itertools.pairwise(hit))
        out.append(GroupRoll(role, len(urns), tuple(u.rsplit("::", 1)[-1] for u in hit), chained))
    return out


def _reaches(deps: dict[str, set[str]], start: str, goal: str) -> bool:
    seen, todo = set(), [start]
    while todo:
        urn = todo.pop()
        if urn == goal:
            return True
        if urn not in seen:
            seen.add(urn)
            todo.extend(deps.get(urn, ()))
    return False


def evaluate_changes(
    policies: Sequence[ChangePolicy],
    settings: dict[str, Settings],
    args: ChangeArgs,
    diff: StackDiff,
    source: str,
) -> Report:
    types = {str(r["urn"]): str(r["type"]) for r in [*diff.base_resources, *diff.head_resources]}
    root = diff.root
    violations: list[Violation] = []
    running = [p for p in policies if settings[p.name].level != EnforcementLevel.DISABLED]
    for policy in running:
        level = settings[policy.name].level
        shown = EnforcementLevel.MANDATORY if level == EnforcementLevel.REMEDIATE else level

        def report(
            message: str, urn: str | None, policy: ChangePolicy = policy, shown: EnforcementLevel = shown
        ) -> None:
            target = urn or root
            violations.append(
                Violation(
                    policy=policy.name,
                    enforcement=shown.value,
                    severity=policy.severity.value if policy.severity else "",
                    urn=target,
                    type=types.get(target, STACK_TYPE),
                    message=message,
                    stack=diff.stack,
                    source=source,
                )
            )

        policy.validate(args, report)
    return Report(violations=violations, policies_run=len(running), stacks=[diff.stack])
