"""The change policies that `agk review --base` adds to the pack: each rule of
:mod:`policies.rules.change` with its name, why it exists, its enforcement level and severity.

They judge a change (base to proposed state), which CrossGuard's resource and stack policies
never see, so they are not part of ``PolicyPack``; they share its names, levels, policy config
and report formats (text, JSON, SARIF, markdown).
"""

from __future__ import annotations

from collections.abc import Callable

from pulumi_policy import EnforcementLevel, Policy, Severity

from policies.rules import change
from policies.rules.change import ChangeArgs, Report


class ChangePolicy(Policy):
    """A policy over a :class:`~policies.rules.change.ChangeArgs` (base and proposed state)."""

    def __init__(
        self,
        name: str,
        description: str,
        validate: Callable[[ChangeArgs, Report], None],
        enforcement_level: EnforcementLevel | None = None,
        severity: Severity | None = None,
    ) -> None:
        super().__init__(name, description, enforcement_level, None, None, severity)
        self.validate = validate


CHANGE_POLICIES: list[ChangePolicy] = [
    ChangePolicy(
        name="no-stateful-replacement",
        description="A change does not replace or delete what holds state: VNets, subnets in use, etcd "
        "members and their data disks, the storage account (unless the stack declares it in "
        "azure-gpu-k8s:changes).",
        validate=change.no_stateful_replacement,
        severity=Severity.CRITICAL,
    ),
    ChangePolicy(
        name="no-subnet-move",
        description="A change does not move an existing subnet (change its address prefix): the addresses of "
        "its nodes, pods and hosts would no longer be in it (unless the stack declares it).",
        validate=change.no_subnet_move,
        severity=Severity.HIGH,
    ),
    ChangePolicy(
        name="no-change-azure-refuses",
        description="A change does not update an input Azure refuses to change in place (a VM's OS profile "
        "or zones, a shrinking disk, ...; policies/rules/replacements.py, a source per row): the provider does not "
        "replace the resource and `pulumi up` fails half-way. No allowance lets it through.",
        validate=change.no_change_azure_refuses,
        severity=Severity.HIGH,
    ),
    ChangePolicy(
        name="control-plane-one-at-a-time",
        description="A change does not resize (Azure restarts the VM) or replace more etcd members than quorum "
        "spares (one), or more API servers than leave a majority serving, at once, unless they are ordered one "
        "after another.",
        validate=change.control_plane_one_at_a_time,
        severity=Severity.HIGH,
    ),
    ChangePolicy(
        name="etcd-membership-change",
        description="A change does not add etcd members that would boot a new cluster instead of joining, nor "
        "delete a member that has not left the cluster (etcdctl member add / member remove first).",
        validate=change.etcd_membership_change,
        severity=Severity.CRITICAL,
    ),
    ChangePolicy(
        name="allowance-takes-quorum",
        description="Allowances do not let more etcd members be replaced or deleted in one update than quorum "
        "survives.",
        validate=change.allowance_takes_quorum,
        enforcement_level=EnforcementLevel.ADVISORY,
        severity=Severity.HIGH,
    ),
    ChangePolicy(
        name="pool-shrink-below-running",
        description="A pool that shrinks below its running nodes takes nodes and their pods away: drain first.",
        validate=change.pool_shrink_below_running,
        enforcement_level=EnforcementLevel.ADVISORY,
        severity=Severity.MEDIUM,
    ),
    ChangePolicy(
        name="change-allowance-unused",
        description="An allowance in azure-gpu-k8s:changes that matches no change is removed, so it cannot "
        "permit a later, unreviewed one.",
        validate=change.change_allowance_unused,
        enforcement_level=EnforcementLevel.ADVISORY,
        severity=Severity.LOW,
    ),
]
