"""One cluster's spoke VNet: planned subnets with NSGs, NAT gateway egress, peering with the hub.

The spoke stack creates both halves of the peering (it reads the hub through a StackReference).
Spokes peer only with the hub. On a peering in VNet X, `allowForwardedTraffic` decides whether X
accepts traffic that an appliance in the remote VNet forwarded (virtual-network-peering-overview):
the hub accepts what this spoke's NAT host forwards (its replies come from service IPs, which are
not the spoke's own addresses), while the spoke side stays off unless the stack asks, so the hub can
never hand one spoke traffic that came from another. No appliance in the hub forwards at all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pulumi
from pulumi_azure_native import network

from modules.address_plan.plan import VNetPlan
from modules.azure.context import DeployContext
from modules.azure.dns import link_vnet
from modules.azure.nsg import BASELINE_INBOUND
from modules.azure.vnet import last, nat_gateway, subnets, virtual_network
from modules.stackplan.segmentation import Rule


@dataclass(frozen=True)
class Egress:
    """One NAT gateway of the spoke and the subnets behind it (modules.stackplan.egress plans them)."""

    name: str
    """``shared`` or a GPU pool's name: the gateway is ``<spoke>-egress-<name>``."""
    subnets: Sequence[str]
    public_ips: int
    """Addresses of its public IP prefix (2, 4, 8 or 16)."""
    zone: str | None


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
    vault_dns_zone_id: pulumi.Input[str]
    """The hub's privatelink.vaultcore.azure.net zone, where the cluster's Key Vault endpoint registers."""
    address_space: Sequence[str] = ()
    """The hub VNet's address prefixes (from the address plan): the spoke's peering carries them, so a change
    of the hub's space updates (and syncs) it."""


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
    egress: Sequence[Egress]
    """The NAT gateways and the subnets each serves; subnets in none have no internet egress."""
    extra_rules: Mapping[str, Sequence[Rule]] = field(default_factory=dict)
    """NSG rules per subnet on top of denying inbound from the Internet (the NAT host's service ingress)."""


class SpokeNetwork(pulumi.ComponentResource):
    id: pulumi.Output[str]
    name: pulumi.Output[str]
    subnet_ids: pulumi.Output[dict[str, str]]
    nsg_ids: pulumi.Output[dict[str, str]]
    peering_ids: pulumi.Output[dict[str, str]]
    nat_gateway_ids: pulumi.Output[dict[str, str]]

    def __init__(self, name: str, args: SpokeNetworkArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("agk:network:SpokeNetwork", name, None, opts)
        ctx = args.ctx
        vnet = virtual_network(name, args.plan, ctx, self, "spoke", args.limits_tag)
        gateways: dict[str, network.NatGateway] = {
            egress.name: nat_gateway(f"{name}-egress-{egress.name}", ctx, egress.public_ips, egress.zone, self)
            for egress in args.egress
        }
        nat_of_subnet = {subnet: gateways[e.name].id for e in args.egress for subnet in e.subnets}

        def rules(subnet: str) -> tuple[Rule, ...]:
            return (*args.extra_rules.get(subnet, ()), *BASELINE_INBOUND)

        created, nsgs = subnets(name, args.plan, vnet, ctx, self, rules_for=rules, nat_gateway_ids=nat_of_subnet)
        ready = last(created)
        hub = args.hub
        # A peering keeps the address space the remote VNet had when it was made: once a VNet's space changes,
        # the peering on the other side must be synced (learn.microsoft.com Sync-AzVirtualNetworkPeering:
        # "to sync the latest address space on the peering link, this ... needs to be called on the (peered)
        # remote virtual network"). Each peering carries the remote's current prefixes, so a new prefix changes
        # its inputs, and syncRemoteAddressSpace makes that update the sync.
        own_space = network.AddressSpaceArgs(address_prefixes=[str(p) for p in args.plan.address_space])
        hub_space = network.AddressSpaceArgs(address_prefixes=list(hub.address_space)) if hub.address_space else None
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
                remote_virtual_network_address_space=hub_space,
                sync_remote_address_space="true" if hub_space else None,
                opts=pulumi.ResourceOptions(parent=self, depends_on=ready),
            ),
            "from-hub": network.VirtualNetworkPeering(
                f"{name}-from-hub",
                virtual_network_peering_name=f"hub-to-{name}",
                resource_group_name=hub.resource_group_name,
                virtual_network_name=hub.vnet_name,
                remote_virtual_network=network.SubResourceArgs(id=vnet.id),
                allow_virtual_network_access=True,
                # The NAT host's replies to researchers in the hub come from service IPs, which are not
                # this spoke's addresses: the hub drops them unless it accepts forwarded traffic.
                allow_forwarded_traffic=True,
                allow_gateway_transit=False,
                use_remote_gateways=False,
                remote_virtual_network_address_space=own_space,
                sync_remote_address_space="true",
                opts=pulumi.ResourceOptions(parent=self, depends_on=ready),
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
            depends_on=ready,
        )
        self.ready: list[pulumi.Resource] = ready
        """Depend on these to wait until every subnet of the VNet is written."""
        self.subnet_refs: dict[str, pulumi.Output[str]] = {k: v.id for k, v in created.items()}
        """Subnet ids for wiring inside this program (the `subnet_ids` output is their map)."""
        self.id = vnet.id
        self.name = vnet.name
        self.subnet_ids = pulumi.Output.all(**{k: v.id for k, v in created.items()}).apply(dict)
        self.nsg_ids = pulumi.Output.all(**{k: v.id for k, v in nsgs.items()}).apply(dict)
        self.peering_ids = pulumi.Output.all(**{k: v.id for k, v in peerings.items()}).apply(dict)
        self.nat_gateway_ids = pulumi.Output.all(**{k: v.id for k, v in gateways.items()}).apply(dict)
        self.register_outputs(
            {
                "id": self.id,
                "name": self.name,
                "subnet_ids": self.subnet_ids,
                "nsg_ids": self.nsg_ids,
                "peering_ids": self.peering_ids,
                "nat_gateway_ids": self.nat_gateway_ids,
            }
        )
