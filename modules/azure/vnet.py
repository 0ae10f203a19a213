"""A VNet and its subnets exactly as the address plan laid them out, each with its NSG."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import pulumi
from pulumi_azure_native import network

from modules import tags as tagging
from modules.address_plan.addressing import NSG_EXEMPT_SUBNETS
from modules.address_plan.plan import VNetPlan
from modules.address_plan.subnet_sizes import block_prefix
from modules.azure.context import DeployContext
from modules.azure.nsg import BASELINE_INBOUND, security_group
from modules.stackplan.addresses import nsg_name, vnet_name
from modules.stackplan.segmentation import Rule


def static_public_ip(name: str, ctx: DeployContext, role: str, parent: pulumi.Resource) -> network.PublicIPAddress:
    """A Standard, static public address: Bastion's (NAT gateways take prefixes, see ``nat_gateway``)."""
    return network.PublicIPAddress(
        name,
        resource_group_name=ctx.resource_group_name,
        location=ctx.location,
        sku=network.PublicIPAddressSkuArgs(name="Standard"),
        public_ip_allocation_method="Static",
        tags=ctx.tags_for(role),
        opts=pulumi.ResourceOptions(parent=parent),
    )


def nat_gateway(
    name: str, ctx: DeployContext, public_ips: int, zone: str | None, parent: pulumi.Resource
) -> network.NatGateway:
    """A Standard NAT gateway with a public IP prefix of ``public_ips`` addresses (a power of two, 2-16).

    A zonal gateway and its prefix share the zone; without one Azure places the gateway in a zone of its
    choosing (nat-gateway-availability-zones), so a zone outage can take that egress away.
    """
    zones = [zone] if zone else None
    prefix = network.PublicIPPrefix(
        f"{name}-ips",
        public_ip_prefix_name=f"{name}-ips",
        resource_group_name=ctx.resource_group_name,
        location=ctx.location,
        sku=network.PublicIPPrefixSkuArgs(name="Standard"),
        prefix_length=block_prefix(public_ips),
        public_ip_address_version="IPv4",
        zones=zones,
        tags=ctx.tags_for("network"),
        opts=pulumi.ResourceOptions(parent=parent),
    )
    return network.NatGateway(
        name,
        nat_gateway_name=name,
        resource_group_name=ctx.resource_group_name,
        location=ctx.location,
        sku=network.NatGatewaySkuArgs(name="Standard"),
        public_ip_prefixes=[network.SubResourceArgs(id=prefix.id)],
        # Azure's default; "it isn't recommended to increase the TCP idle timeout duration to longer than
        # the default time of 4 minutes" (nat-gateway-resource): longer holds SNAT ports of dead flows.
        idle_timeout_in_minutes=4,
        zones=zones,
        tags=ctx.tags_for("network"),
        opts=pulumi.ResourceOptions(parent=parent),
    )


def virtual_network(
    name: str, plan: VNetPlan, ctx: DeployContext, parent: pulumi.Resource, kind: str, limits_tag: str
) -> network.VirtualNetwork:
    return network.VirtualNetwork(
        vnet_name(name),
        virtual_network_name=vnet_name(name),
        resource_group_name=ctx.resource_group_name,
        location=ctx.location,
        address_space=network.AddressSpaceArgs(address_prefixes=[str(n) for n in plan.address_space]),
        tags=ctx.tags_for("network", **{tagging.NETWORK_KIND: kind, tagging.LIMITS: limits_tag}),
        opts=pulumi.ResourceOptions(parent=parent),
    )


def subnets(
    name: str,
    plan: VNetPlan,
    vnet: network.VirtualNetwork,
    ctx: DeployContext,
    parent: pulumi.Resource,
    *,
    rules_for: Callable[[str], tuple[Rule, ...]] = lambda _: BASELINE_INBOUND,
    nat_gateway_ids: Mapping[str, pulumi.Input[str]] | None = None,
    route_table_ids: Mapping[str, pulumi.Input[str]] | None = None,
) -> tuple[dict[str, network.Subnet], dict[str, network.NetworkSecurityGroup]]:
    """Create the planned subnets in address order, one at a time.

    Azure rejects concurrent writes to subnets of one VNet ("AnotherOperationInProgress"), so each
    subnet depends on the previous one, and whatever else lives in the VNet must wait for the last
    (see ``last``). No subnet relies on default outbound access (private subnets become the default
    with "the API version released after March 31, 2026", default-outbound-access; every subnet here
    sets ``defaultOutboundAccess: false`` itself): egress is the NAT gateway in ``nat_gateway_ids`` or
    nothing.
    """
    created: dict[str, network.Subnet] = {}
    nsgs: dict[str, network.NetworkSecurityGroup] = {}
    previous: network.Subnet | None = None
    gateways = nat_gateway_ids or {}
    for sub in plan.subnets.values():
        nsg = None
        if sub.name.lower() not in NSG_EXEMPT_SUBNETS:
            nsg = security_group(nsg_name(name, sub.name), ctx, rules_for(sub.name), parent)
            nsgs[sub.name] = nsg
        nat = gateways.get(sub.name)
        route_table = (route_table_ids or {}).get(sub.name)
        subnet = network.Subnet(
            f"{name}-{sub.name}",
            subnet_name=sub.name,
            virtual_network_name=vnet.name,
            resource_group_name=ctx.resource_group_name,
            address_prefix=str(sub.cidr),
            network_security_group=network.NetworkSecurityGroupArgs(id=nsg.id) if nsg else None,
            nat_gateway=network.SubResourceArgs(id=nat) if nat is not None else None,
            route_table=network.RouteTableArgs(id=route_table) if route_table is not None else None,
            private_endpoint_network_policies="Enabled" if sub.role == "private-endpoints" else None,
            default_outbound_access=False,
            opts=pulumi.ResourceOptions(parent=parent, depends_on=[previous] if previous else []),
        )
        created[sub.name] = subnet
        previous = subnet
    return created, nsgs


def last(created: Mapping[str, network.Subnet]) -> list[pulumi.Resource]:
    """What to depend on so a resource waits until every subnet of the VNet is written.

    Peerings, NICs, scale sets, load balancers, private endpoints and DNS links started while the
    VNet's subnets are still being written fail with AnotherOperationInProgress
    (pulumi-azure-native#4340, #699); the subnets are chained, so the last one implies them all.
    """
    subnets: list[pulumi.Resource] = list(created.values())
    return subnets[-1:]
