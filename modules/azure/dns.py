"""Private DNS zones and their VNet links (registration off: records come from endpoints)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pulumi
from pulumi_azure_native import privatedns

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
