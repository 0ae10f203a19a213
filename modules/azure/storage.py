"""Blob storage for datasets and checkpoints: private endpoint only, HTTPS, TLS 1.2, no public blobs."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
from pulumi_azure_native import network, storage

from modules.azure.context import DeployContext
from modules.azure.dns import link_vnet

BLOB_ZONE = "privatelink.blob.core.windows.net"


def account_name(cluster: str, salt: str) -> str:
    """A storage account name: 3-24 lowercase letters and digits, globally unique per cluster."""
    digest = hashlib.sha256(f"{cluster}/{salt}".encode()).hexdigest()[:8]
    return ("agk" + "".join(c for c in cluster if c.isalnum()))[:16] + digest


@dataclass(frozen=True)
class ClusterStorageArgs:
    ctx: DeployContext
    """Resource group, region, tags."""
    account_name: str
    """Storage account name (modules.azure.storage.account_name)."""
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
        endpoint = network.PrivateEndpoint(
            f"{name}-blob-endpoint",
            private_endpoint_name=f"{name}-blob",
            resource_group_name=ctx.resource_group_name,
            location=ctx.location,
            subnet=network.SubnetArgs(id=args.endpoint_subnet_id),
            private_link_service_connections=[
                network.PrivateLinkServiceConnectionArgs(
                    name="blob", private_link_service_id=account.id, group_ids=["blob"]
                )
            ],
            tags=ctx.tags_for("storage"),
            opts=pulumi.ResourceOptions(parent=self),
        )
        link_vnet(
            f"{name}-blob-dns-link",
            link_name=f"{name}-blob",
            zone_name=BLOB_ZONE,
            resource_group_name=args.dns_resource_group_name,
            vnet_id=args.vnet_id,
            tags=ctx.tags_for("storage"),
            parent=self,
        )
        network.PrivateDnsZoneGroup(
            f"{name}-blob-dns-group",
            private_dns_zone_group_name="blob",
            private_endpoint_name=endpoint.name,
            resource_group_name=ctx.resource_group_name,
            private_dns_zone_configs=[
                network.PrivateDnsZoneConfigArgs(name="blob", private_dns_zone_id=args.dns_zone_id)
            ],
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.id = account.id
        self.name = account.name
        self.containers = pulumi.Output.all(**{k: v.id for k, v in containers.items()}).apply(dict)
        self.register_outputs({"id": self.id, "name": self.name, "containers": self.containers})
