"""Storage rules: datasets and checkpoints travel over TLS 1.2+ and are never public."""

from __future__ import annotations

from pulumi_policy import ReportViolation, ResourceValidationArgs

from policies.rules import wire

_TLS_OK = frozenset({"TLS1_2", "TLS1_3"})


def storage_https_only(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    if args.resource_type != wire.STORAGE_ACCOUNT:
        return
    if wire.get(args.props, "enableHttpsTrafficOnly") is not True:
        report_violation(f"storage account {args.name} accepts plain HTTP: set enableHttpsTrafficOnly true", None)


def storage_min_tls_1_2(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    if args.resource_type != wire.STORAGE_ACCOUNT:
        return
    version = wire.get(args.props, "minimumTlsVersion")
    if version not in _TLS_OK:
        report_violation(
            f"storage account {args.name} has minimumTlsVersion {version or 'unset'}: set it to TLS1_2", None
        )


def storage_no_public_blob_access(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    if args.resource_type == wire.STORAGE_ACCOUNT:
        if wire.get(args.props, "allowBlobPublicAccess") is not False:
            report_violation(
                f"storage account {args.name} does not forbid public blob access: set allowBlobPublicAccess false",
                None,
            )
    elif args.resource_type == wire.BLOB_CONTAINER:
        access = wire.get(args.props, "publicAccess", "None")
        if access != "None":
            report_violation(f"blob container {args.name} has publicAccess {access}: set it to None", None)
