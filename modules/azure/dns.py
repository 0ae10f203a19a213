"""Private DNS zones and their VNet links (registration off: records come from endpoints)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pulumi
from pulumi_azure_native import network, privatedns

from modules.azure.context import DeployContext


def link_vnet(
    name: str,
    *,
    zone_name: pulumi.Input[str],
    resource_group_name: pulumi.Input[str],
    vnet_id: pulumi.Input[str],
    tags: Mapping[str, str],
    parent: pulumi.Resource,
    link_name: str | None = None,
    depends_on: Sequence[pulumi.Resource] = (),
) -> privatedns.VirtualNetworkLink:
    """Let ``vnet_id`` resolve names in the zone (which may live in another stack's resource group)."""
    return privatedns.VirtualNetworkLink(
        name,
        virtual_network_link_name=link_name,
        private_zone_name=zone_name,
        resource_group_name=resource_group_name,
        location="Global",
        virtual_network=privatedns.SubResourceArgs(id=vnet_id),
        registration_enabled=False,
        tags=dict(tags),
        opts=pulumi.ResourceOptions(parent=parent, depends_on=list(depends_on)),
    )


def private_zone(
    name: str,
    zone_name: str,
    ctx: DeployContext,
    vnet_id: pulumi.Input[str],
    parent: pulumi.Resource,
    depends_on: Sequence[pulumi.Resource] = (),
) -> privatedns.PrivateZone:
    """A private zone in the context's resource group, linked to ``vnet_id``."""
    zone = privatedns.PrivateZone(
        name,
        private_zone_name=zone_name,
        resource_group_name=ctx.resource_group_name,
        location="Global",
        tags=ctx.tags_for("network"),
        opts=pulumi.ResourceOptions(parent=parent),
    )
    link_vnet(
        f"{name}-link",
        zone_name=zone.name,
        resource_group_name=ctx.resource_group_name,
        vnet_id=vnet_id,
        tags=ctx.tags_for("network"),
        parent=parent,
        depends_on=depends_on,
    )
    return zone


def private_link(
    logical: str,
    *,
    name: str,
    group: str,
    target_id: pulumi.Input[str],
    zone_name: str,
    zone_id: pulumi.Input[str],
    subnet_id: pulumi.Input[str],
    vnet_id: pulumi.Input[str],
    dns_resource_group_name: pulumi.Input[str],
    ctx: DeployContext,
    role: str,
    parent: pulumi.Resource,
    depends_on: Sequence[pulumi.Resource] = (),
) -> tuple[network.PrivateEndpoint, network.PrivateDnsZoneGroup, privatedns.VirtualNetworkLink]:
    """A private endpoint to ``target_id``'s sub-resource ``group`` (``vault``, ``blob``) in the endpoints subnet,
    the VNet linked to the hub's ``zone_name``, and the zone group that writes the endpoint's A record there, so
    the service's public name resolves to the private address from the VNet (learn.microsoft.com
    private-link/private-endpoint-dns). ``logical``: the prefix of the three resources' Pulumi names; ``name``:
    the endpoint's and the link's Azure name. The callers' pairs differ on purpose (the vault's and the storage
    account's names predate this helper): a new name is a new endpoint, so keep each caller's as deployed."""
    endpoint = network.PrivateEndpoint(
        f"{logical}-endpoint",
        private_endpoint_name=name,
        resource_group_name=ctx.resource_group_name,
        location=ctx.location,
        subnet=network.SubnetArgs(id=subnet_id),
        private_link_service_connections=[
            network.PrivateLinkServiceConnectionArgs(name=group, private_link_service_id=target_id, group_ids=[group])
        ],
        tags=ctx.tags_for(role),
        opts=pulumi.ResourceOptions(parent=parent, depends_on=list(depends_on)),
    )
    link = link_vnet(
        f"{logical}-dns-link",
        link_name=name,
        zone_name=zone_name,
        resource_group_name=dns_resource_group_name,
        vnet_id=vnet_id,
        tags=ctx.tags_for(role),
        parent=parent,
        depends_on=depends_on,
    )
    zone_group = network.PrivateDnsZoneGroup(
        f"{logical}-dns-group",
        private_dns_zone_group_name=group,
        private_endpoint_name=endpoint.name,
        resource_group_name=ctx.resource_group_name,
        private_dns_zone_configs=[network.PrivateDnsZoneConfigArgs(name=group, private_dns_zone_id=zone_id)],
        opts=pulumi.ResourceOptions(parent=parent),
    )
    return endpoint, zone_group, link
