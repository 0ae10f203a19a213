"""A VNet and its subnets exactly as the address plan laid them out, each with its NSG."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import pulumi
from pulumi_azure_native import network

from modules import tags as tagging
from modules.azure.context import DeployContext
from modules.azure.nsg import DENY_INTERNET_INBOUND, Rule, security_group
from modules.netplan.plan import VNetPlan

# Azure refuses an NSG on these subnets.
NO_NSG_SUBNETS = frozenset({"AzureFirewallSubnet", "GatewaySubnet"})


def static_public_ip(name: str, ctx: DeployContext, role: str, parent: pulumi.Resource) -> network.PublicIPAddress:
    """A Standard, static public address: only the NAT gateway's egress and Bastion ever get one."""
    return network.PublicIPAddress(
        name,
        resource_group_name=ctx.resource_group_name,
        location=ctx.location,
        sku=network.PublicIPAddressSkuArgs(name="Standard"),
        public_ip_allocation_method="Static",
        tags=ctx.tags_for(role),
        opts=pulumi.ResourceOptions(parent=parent),
    )


def virtual_network(
    name: str, plan: VNetPlan, ctx: DeployContext, parent: pulumi.Resource, kind: str, limits_tag: str
) -> network.VirtualNetwork:
    return network.VirtualNetwork(
        f"{name}-vnet",
        virtual_network_name=f"{name}-vnet",
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
    rules_for: Callable[[str], tuple[Rule, ...]] = lambda _: (DENY_INTERNET_INBOUND,),
    nat_gateway_id: pulumi.Input[str] | None = None,
    route_table_ids: Mapping[str, pulumi.Input[str]] | None = None,
) -> tuple[dict[str, network.Subnet], dict[str, network.NetworkSecurityGroup]]:
    """Create the planned subnets in address order, one at a time.

    Azure rejects concurrent writes to subnets of one VNet ("AnotherOperationInProgress"), so
    each subnet depends on the previous one.
    """
    created: dict[str, network.Subnet] = {}
    nsgs: dict[str, network.NetworkSecurityGroup] = {}
    previous: network.Subnet | None = None
    for sub in plan.subnets.values():
        nsg = None
        if sub.name not in NO_NSG_SUBNETS:
            nsg = security_group(f"{name}-{sub.name}-nsg", ctx, rules_for(sub.name), parent)
            nsgs[sub.name] = nsg
        # Private endpoints and Bastion must not sit behind the NAT gateway's SNAT.
        uses_nat = nat_gateway_id is not None and sub.role not in ("private-endpoints", "bastion")
        route_table = (route_table_ids or {}).get(sub.name)
        subnet = network.Subnet(
            f"{name}-{sub.name}",
            subnet_name=sub.name,
            virtual_network_name=vnet.name,
            resource_group_name=ctx.resource_group_name,
            address_prefix=str(sub.cidr),
            network_security_group=network.NetworkSecurityGroupArgs(id=nsg.id) if nsg else None,
            nat_gateway=network.SubResourceArgs(id=nat_gateway_id) if uses_nat else None,
            route_table=network.RouteTableArgs(id=route_table) if route_table is not None else None,
            private_endpoint_network_policies="Enabled" if sub.role == "private-endpoints" else None,
            opts=pulumi.ResourceOptions(parent=parent, depends_on=[previous] if previous else []),
        )
        created[sub.name] = subnet
        previous = subnet
    return created, nsgs
