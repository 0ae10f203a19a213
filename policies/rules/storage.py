"""Storage rules: datasets and checkpoints travel over TLS 1.2+ and are never public."""

from __future__ import annotations

from pulumi_policy import ReportViolation, ResourceValidationArgs

from modules import tags as tagnames
from policies.rules import fields

_TLS_OK = frozenset({"TLS1_2", "TLS1_3"})
HTTPS_ONLY = ("enableHttpsTrafficOnly", "supportsHttpsTrafficOnly")
"""The SDK's name (x-ms-client-name) first, then ARM's own, as exports and older API versions carry it."""


def https_only(props: object) -> bool:
    """Whether the account refuses plain HTTP. Unset means yes: Microsoft.Storage's spec says the
    default of supportsHttpsTrafficOnly "is true since API version 2019-04-01", older than any API
    version azure-native v2 or v3 deploys."""
    for key in HTTPS_ONLY:
        value = fields.get(props, key)
        if value is not None:
            return value is True
    return True


def storage_https_only(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    if args.resource_type != fields.STORAGE_ACCOUNT:
        return
    if not https_only(args.props):
        report_violation(f"storage account {args.name} accepts plain HTTP: set enableHttpsTrafficOnly true", None)


def storage_min_tls_1_2(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    if args.resource_type != fields.STORAGE_ACCOUNT:
        return
    version = fields.get(args.props, "minimumTlsVersion")
    if version not in _TLS_OK:
        # Unset: Microsoft.Storage's spec says "the default interpretation is TLS 1.0".
        shown = version or "unset (Azure's default: TLS1_0)"
        report_violation(f"storage account {args.name} has minimumTlsVersion {shown}: set it to TLS1_2", None)


ISSUER_ROLE = "oidc-issuer"
"""The workload identity issuer's account (modules/azure/workload_identity.py): public by design, it holds only
the service-account issuer's discovery document and public keys, which Entra fetches anonymously."""
ISSUER_CONTAINER = "oidc"


def storage_no_public_blob_access(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    if args.resource_type == fields.STORAGE_ACCOUNT:
        if fields.tags(args.props).get(tagnames.ROLE) == ISSUER_ROLE:
            return
        if fields.get(args.props, "allowBlobPublicAccess") is not False:
            report_violation(
                f"storage account {args.name} does not forbid public blob access: set allowBlobPublicAccess false",
                None,
            )
    elif args.resource_type == fields.BLOB_CONTAINER:
        access = fields.get(args.props, "publicAccess", "None")
        # The issuer's container may serve its blobs (never a listing: Blob, not Container); on any account but
        # the issuer's, allowBlobPublicAccess false (above) makes the setting inert.
        if access == "Blob" and fields.get(args.props, "containerName") == ISSUER_CONTAINER:
            return
        if access != "None":
            report_violation(f"blob container {args.name} has publicAccess {access}: set it to None", None)
