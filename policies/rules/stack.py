"""Stack-wide rules: every taggable Azure resource says who owns it and who pays."""

from __future__ import annotations

from pulumi_policy import ReportViolation, ResourceValidationArgs

from modules import tags as tagnames
from policies.rules import wire

NOT_TAGGABLE = frozenset(
    {
        "azure-native:network:Subnet",
        "azure-native:network:VirtualNetworkPeering",
        "azure-native:network:SecurityRule",
        "azure-native:network:Route",
        "azure-native:network:PrivateDnsZoneGroup",
        "azure-native:storage:BlobContainer",
        "azure-native:storage:BlobServiceProperties",
        "azure-native:storage:ManagementPolicy",
        "azure-native:privatedns:PrivateRecordSet",
        "azure-native:authorization:RoleAssignment",
        "azure-native:compute:VirtualMachineScaleSetExtension",
    }
)
"""Child resources ARM gives no tags (tests check each against the installed SDK's args)."""


def required_tags(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    if not args.resource_type.startswith(wire.AZ) or args.resource_type in NOT_TAGGABLE:
        return
    wanted = list(args.get_config().get("tags", tagnames.REQUIRED))
    present = wire.tags(args.props)
    missing = [t for t in wanted if not str(present.get(t, "") or "").strip()]
    if missing:
        report_violation(
            f"{args.resource_type.split(':', 1)[1]} {args.name} lacks tag(s) {', '.join(missing)}: "
            "tag every Azure resource with owner, cost-center and cluster (modules.tags.base_tags)",
            None,
        )
