"""Stack-wide rules: every taggable Azure resource says who owns it and who pays."""

from __future__ import annotations

import functools
import importlib
import inspect

from pulumi_policy import ReportViolation, ResourceValidationArgs

from modules import tags as tagnames
from policies.rules import fields


@functools.cache
def taggable(resource_type: str) -> bool | None:
    """Whether the type has tags, from its real schema: the installed azure-native SDK gives a type
    a ``tags`` argument exactly when ARM lets the resource carry tags. ``None``: the SDK does not
    know the type (another SDK version, a versioned token it does not ship), so nothing is demanded.

    ``azure-native:storage:Blob`` -> ``pulumi_azure_native.storage.BlobArgs``;
    ``azure-native:network/v20230201:Subnet`` -> ``pulumi_azure_native.network.v20230201.SubnetArgs``.
    """
    parts = resource_type.split(":")
    if len(parts) != 3 or parts[0] != "azure-native":
        return None
    module = "pulumi_azure_native." + parts[1].replace("/", ".")
    try:
        args = getattr(importlib.import_module(module), f"{parts[2]}Args", None)
    except ImportError:
        return None
    if args is None:
        return None
    return "tags" in inspect.signature(args.__init__).parameters


def required_tags(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    if not args.resource_type.startswith(fields.AZ) or not taggable(args.resource_type):
        return
    wanted = list(args.get_config().get("tags", tagnames.REQUIRED))
    present = fields.tags(args.props)
    missing = [t for t in wanted if not str(present.get(t, "") or "").strip()]
    if missing:
        report_violation(
            f"{args.resource_type.split(':', 1)[1]} {args.name} lacks tag(s) {', '.join(missing)}: "
            "tag every Azure resource with owner, cost-center and cluster (modules.tags.base_tags)",
            None,
        )
