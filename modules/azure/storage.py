"""Blob storage for datasets and checkpoints: private endpoint only, HTTPS, TLS 1.2, no public blobs."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pulumi
from pulumi_azure_native import storage

from modules.azure.context import DeployContext
from modules.azure.dns import private_link
from modules.azure.rbac import grant

BLOB_SUFFIX = "blob.core.windows.net"
"""Azure public cloud's blob service domain (docs: "Storage account overview", standard endpoints)."""
BLOB_ZONE = f"privatelink.{BLOB_SUFFIX}"
# Built-in data-plane roles (azure/role-based-access-control/built-in-roles#storage). Shared keys are
# off, so these role assignments are the only way to read or write a blob.
BLOB_ROLES = {
    "read": ("Storage Blob Data Reader", "2a2b9908-6ea1-4ae2-8e65-a410df84e7d1"),
    "read-write": ("Storage Blob Data Contributor", "ba92f5b4-2d11-453d-a403-e96b0029c9fe"),
}


@dataclass(frozen=True)
class Grant:
    """A principal allowed to use one container with a blob data role."""

    key: str
    """Stable name of the principal in this stack (a pool, a group's object id): names the assignment."""
    principal_id: pulumi.Input[str]
    principal_type: str
    """ServicePrincipal (managed identities: Azure skips the directory lookup that races a new identity) or Group."""
    access: str
    """read or read-write (BLOB_ROLES)."""


def account_name(cluster: str, subscription_id: str, location: str, stack: str) -> str:
    """A storage account name: 3-24 lowercase letters and digits.

    Account names are unique across all of Azure, so the name must come from something the deploying
    organisation owns: the subscription. The same repository deployed unchanged by two organisations
    gets two names; one stack keeps its name across `pulumi up`s.
    """
    digest = hashlib.sha256(f"{subscription_id}/{location}/{stack}/{cluster}".encode()).hexdigest()[:8]
    return ("agk" + "".join(c for c in cluster if c.isalnum()))[:16] + digest


def blob_url(account: str) -> str:
    """The account's blob service endpoint (its private endpoint answers for this name inside the VNet)."""
    return f"https://{account}.{BLOB_SUFFIX}"


@dataclass(frozen=True)
class ClusterStorageArgs:
    ctx: DeployContext
    """Resource group, region, tags."""
    account_name: pulumi.Input[str]
    """Storage account name (``account_name``: from the subscription, so unique across Azure)."""
    containers: Sequence[str]
    """Blob containers to create."""

    endpoint_subnet_id: pulumi.Input[str]
    """Subnet of the private endpoint."""
    vnet_id: pulumi.Input[str]
    """The spoke VNet, linked to the hub's privatelink DNS zone."""
    dns_zone_id: pulumi.Input[str]
    """The hub's privatelink.blob.core.windows.net zone."""
    dns_resource_group_name: pulumi.Input[str]
    """The hub's resource group (the zone and its links live there)."""
    grants: Mapping[str, Sequence[Grant]] = field(default_factory=dict)
    """Container name to who may use it (data roles scoped to that container only: least privilege)."""
    retention_days: Mapping[str, int] = field(default_factory=dict)
    """Container name to the days after which its blobs are deleted (a lifecycle management rule)."""
    depends_on: Sequence[pulumi.Resource] = ()
    """Wait for these (the VNet's last subnet) before creating the private endpoint and DNS link."""


class ClusterStorage(pulumi.ComponentResource):
    id: pulumi.Output[str]
    name: pulumi.Output[str]
    containers: pulumi.Output[dict[str, str]]

    def __init__(self, name: str, args: ClusterStorageArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("agk:storage:ClusterStorage", name, None, opts)
        ctx = args.ctx
        account = storage.StorageAccount(
            f"{name}-account",
            account_name=args.account_name,
            resource_group_name=ctx.resource_group_name,
            location=ctx.location,
            kind=storage.Kind.STORAGE_V2,
            sku=storage.SkuArgs(name=storage.SkuName.STANDARD_ZRS),
            enable_https_traffic_only=True,
            minimum_tls_version=storage.MinimumTlsVersion.TLS1_2,
            allow_blob_public_access=False,
            allow_shared_key_access=False,
            public_network_access=storage.PublicNetworkAccess.DISABLED,
            network_rule_set=storage.NetworkRuleSetArgs(default_action=storage.DefaultAction.DENY),
            tags=ctx.tags_for("storage"),
            opts=pulumi.ResourceOptions(parent=self),
        )
        containers = {
            c: storage.BlobContainer(
                f"{name}-{c}",
                container_name=c,
                account_name=account.name,
                resource_group_name=ctx.resource_group_name,
                public_access=storage.PublicAccess.NONE,
                opts=pulumi.ResourceOptions(parent=self),
            )
            for c in args.containers
        }
        for container, grants in args.grants.items():
            for g in grants:
                grant(
                    f"{name}-{container}-{g.key}-{g.access}",
                    scope=containers[container].id,
                    principal_id=g.principal_id,
                    principal_type=g.principal_type,
                    role=BLOB_ROLES[g.access],
                    resource_group_id=ctx.resource_group_id,
                    parent=self,
                )
        if args.retention_days:
            self._retention(name, args, account, list(containers.values()))
        private_link(
            f"{name}-blob",
            name=f"{name}-blob",
            group="blob",
            target_id=account.id,
            zone_name=BLOB_ZONE,
            zone_id=args.dns_zone_id,
            subnet_id=args.endpoint_subnet_id,
            vnet_id=args.vnet_id,
            dns_resource_group_name=args.dns_resource_group_name,
            ctx=ctx,
            role="storage",
            parent=self,
            depends_on=args.depends_on,
        )
        self.id = account.id
        self.name = account.name
        self.containers = pulumi.Output.all(**{k: v.id for k, v in containers.items()}).apply(dict)
        self.register_outputs({"id": self.id, "name": self.name, "containers": self.containers})

    def _retention(
        self, name: str, args: ClusterStorageArgs, account: storage.StorageAccount, containers: list[pulumi.Resource]
    ) -> None:
        ctx = args.ctx
        # Lifecycle management (storage/blobs/lifecycle-management-overview): prefixes start with the
        # container's name; the service applies the rules once a day.
        storage.ManagementPolicy(
            f"{name}-retention",
            account_name=account.name,
            resource_group_name=ctx.resource_group_name,
            management_policy_name="default",
            policy=storage.ManagementPolicySchemaArgs(
                rules=[
                    storage.ManagementPolicyRuleArgs(
                        name=f"expire-{container}",
                        type="Lifecycle",
                        enabled=True,
                        definition=storage.ManagementPolicyDefinitionArgs(
                            filters=storage.ManagementPolicyFilterArgs(
                                blob_types=["blockBlob"], prefix_match=[f"{container}/"]
                            ),
                            actions=storage.ManagementPolicyActionArgs(
                                base_blob=storage.ManagementPolicyBaseBlobArgs(
                                    delete=storage.DateAfterModificationArgs(
                                        days_after_modification_greater_than=float(days)
                                    )
                                )
                            ),
                        ),
                    )
                    for container, days in sorted(args.retention_days.items())
                ]
            ),
            opts=pulumi.ResourceOptions(parent=self, depends_on=containers),
        )
