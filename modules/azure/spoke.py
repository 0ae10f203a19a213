"""One cluster's spoke VNet: planned subnets with NSGs, NAT gateway egress, peering with the hub.

The spoke stack creates both halves of the peering (it reads the hub through a StackReference).
Spokes peer only with the hub, and the hub side does not allow forwarded traffic by default,
so nothing can transit the hub from one spoke to another.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
from pulumi_azure_native import network

from modules.azure.context import DeployContext
from modules.azure.dns import link_vnet
from modules.azure.vnet import static_public_ip, subnets, virtual_network
from modules.netplan.plan import VNetPlan


@dataclass(frozen=True)
class HubRef:
    """What a spoke needs of the hub (the hub stack's outputs)."""

    vnet_id: pulumi.Input[str]
    """Hub VNet ARM id."""
    vnet_name: pulumi.Input[str]
    """Hub VNet name."""
    resource_group_name: pulumi.Input[str]
    """Hub resource group."""
    route_table_name: pulumi.Input[str]
    """Hub route table that gets this spoke's service-CIDR route."""
    private_dns_zone_name: pulumi.Input[str]
    """Private DNS zone this spoke links to."""
    blob_dns_zone_id: pulumi.Input[str]
    """The hub's privatelink.blob.core.windows.net zone, where storage endpoints register."""


@dataclass(frozen=True)
class SpokeNetworkArgs:
    ctx: DeployContext
    """Resource group, region, tags."""
    plan: VNetPlan
    """The spoke's laid-out address plan."""
    limits_tag: str
    """Raised limits the stack declares (modules.tags.encode_limits)."""
    hub: HubRef
    """The hub to peer with."""
    allow_forwarded_traffic: bool
    """Let traffic forwarded by the hub into the spoke (off: no transit)."""


class SpokeNetwork(pulumi.ComponentResource):
    id: pulumi.Output[str]
    name: pulumi.Output[str]
    subnet_ids: pulumi.Output[dict[str, str]]
    nsg_ids: pulumi.Output[dict[str, str]]
    peering_ids: pulumi.Output[dict[str, str]]
    nat_gateway_id: pulumi.Output[str]

    def __init__(self, name: str, args: SpokeNetworkArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("agk:network:SpokeNetwork", name, None, opts)
        ctx = args.ctx
        vnet = virtual_network(name, args.plan, ctx, self, "spoke", args.limits_tag)
        egress_ip = static_public_ip(f"{name}-egress-ip", ctx, "network", self)
        nat = network.NatGateway(
            f"{name}-egress",
            nat_gateway_name=f"{name}-egress",
            resource_group_name=ctx.resource_group_name,
            location=ctx.location,
            sku=network.NatGatewaySkuArgs(name="Standard"),
            public_ip_addresses=[network.SubResourceArgs(id=egress_ip.id)],
            idle_timeout_in_minutes=10,
            tags=ctx.tags_for("network"),
            opts=pulumi.ResourceOptions(parent=self),
        )
        created, nsgs = subnets(name, args.plan, vnet, ctx, self, nat_gateway_id=nat.id)
        hub = args.hub
        peerings = {
            "to-hub": network.VirtualNetworkPeering(
                f"{name}-to-hub",
                virtual_network_peering_name=f"{name}-to-hub",
                resource_group_name=ctx.resource_group_name,
                virtual_network_name=vnet.name,
                remote_virtual_network=network.SubResourceArgs(id=hub.vnet_id),
                allow_virtual_network_access=True,
                allow_forwarded_traffic=args.allow_forwarded_traffic,
                allow_gateway_transit=False,
                use_remote_gateways=False,
                opts=pulumi.ResourceOptions(parent=self),
            ),
            "from-hub": network.VirtualNetworkPeering(
                f"{name}-from-hub",
                virtual_network_peering_name=f"hub-to-{name}",
                resource_group_name=hub.resource_group_name,
                virtual_network_name=hub.vnet_name,
                remote_virtual_network=network.SubResourceArgs(id=vnet.id),
                allow_virtual_network_access=True,
                # The hub never forwards into a spoke what came from elsewhere: no transit.
                allow_forwarded_traffic=False,
                allow_gateway_transit=False,
                use_remote_gateways=False,
                opts=pulumi.ResourceOptions(parent=self),
            ),
        }
        link_vnet(
            f"{name}-dns-link",
            link_name=f"{name}-link",
            zone_name=hub.private_dns_zone_name,
            resource_group_name=hub.resource_group_name,
            vnet_id=vnet.id,
            tags=ctx.tags_for("network"),
            parent=self,
        )
        self.subnet_refs: dict[str, pulumi.Output[str]] = {k: v.id for k, v in created.items()}
        """Subnet ids for wiring inside this program (the `subnet_ids` output is their map)."""
        self.id = vnet.id
        self.name = vnet.name
        self.subnet_ids = pulumi.Output.all(**{k: v.id for k, v in created.items()}).apply(dict)
        self.nsg_ids = pulumi.Output.all(**{k: v.id for k, v in nsgs.items()}).apply(dict)
        self.peering_ids = pulumi.Output.all(**{k: v.id for k, v in peerings.items()}).apply(dict)
        self.nat_gateway_id = nat.id
        self.register_outputs(
            {
                "id": self.id,
                "name": self.name,
                "subnet_ids": self.subnet_ids,
                "nsg_ids": self.nsg_ids,
                "peering_ids": self.peering_ids,
                "nat_gateway_id": self.nat_gateway_id,
            }
        )
