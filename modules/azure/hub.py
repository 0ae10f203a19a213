"""The shared hub: researchers' way in (Bastion, jump hosts), the clusters' private DNS zone.

Nothing in the hub forwards between spokes: there is no appliance and no route from one spoke to
another, so one cluster's failure stays in that cluster. The only routes in the hub are those a
spoke adds to reach its own service CIDR through its NAT host.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pulumi
from pulumi_azure_native import network

from modules.address_plan.plan import VNetPlan
from modules.azure.context import DeployContext
from modules.azure.dns import private_zone
from modules.azure.keyvault import VAULT_ZONE
from modules.azure.nsg import BASELINE_INBOUND, BASTION_RULES
from modules.azure.storage import BLOB_ZONE
from modules.azure.vm import VmSpec, first_private_ip, linux_vm
from modules.azure.vnet import last, nat_gateway, static_public_ip, subnets, virtual_network
from modules.stackplan.segmentation import Rule


@dataclass(frozen=True)
class HubNetworkArgs:
    ctx: DeployContext
    """Resource group, region, tags, admin login."""
    plan: VNetPlan
    """The hub's laid-out address plan."""
    limits_tag: str
    """Raised limits the stack declares (modules.tags.encode_limits)."""
    bastion: bool
    """Deploy Azure Bastion (needs its AzureBastionSubnet in the plan)."""
    jump_hosts: int
    """Jump host VMs in the `jump` subnet."""
    jump_vm_size: str
    """Their VM size."""
    jump_custom_data: Mapping[str, pulumi.Input[str]]
    """Base64 cloud-config per jump host name."""
    private_dns_zone: str
    """Private DNS zone that every spoke links to."""
    egress_public_ips: int
    """Public IPs of the jump subnet's NAT gateway: the jump hosts' only way out (no default outbound access)."""


class HubNetwork(pulumi.ComponentResource):
    id: pulumi.Output[str]
    name: pulumi.Output[str]
    resource_group_name: pulumi.Output[str]
    subnet_ids: pulumi.Output[dict[str, str]]
    route_table_name: pulumi.Output[str]
    private_dns_zone_name: pulumi.Output[str]
    blob_dns_zone_id: pulumi.Output[str]
    vault_dns_zone_id: pulumi.Output[str]
    jump_hosts: pulumi.Output[dict[str, str]]

    def __init__(self, name: str, args: HubNetworkArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("agk:network:HubNetwork", name, None, opts)
        ctx = args.ctx
        vnet = virtual_network(name, args.plan, ctx, self, "hub", args.limits_tag)
        route_table = network.RouteTable(
            f"{name}-routes",
            route_table_name=f"{name}-routes",
            resource_group_name=ctx.resource_group_name,
            location=ctx.location,
            # Spoke routes are added by each cluster stack; BGP propagation off keeps them the only ones.
            disable_bgp_route_propagation=True,
            tags=ctx.tags_for("network"),
            opts=pulumi.ResourceOptions(parent=self),
        )

        bastion_net = args.plan.subnets.get("AzureBastionSubnet")
        bastion_cidr = str(bastion_net.cidr) if bastion_net is not None else None

        egress = nat_gateway(f"{name}-egress-jump", ctx, args.egress_public_ips, None, self)
        created, _ = subnets(
            name,
            args.plan,
            vnet,
            ctx,
            self,
            rules_for=lambda subnet: _rules(subnet, bastion_cidr),
            route_table_ids={"jump": route_table.id},
            nat_gateway_ids={"jump": egress.id},
        )
        ready = last(created)
        zone = private_zone(f"{name}-dns", args.private_dns_zone, ctx, vnet.id, self, ready)
        # One privatelink zone for every cluster's storage endpoint: a VNet cannot link two zones
        # of the same name, and researchers in the hub must resolve each spoke's private endpoint.
        blob_zone = private_zone(f"{name}-blob-dns", BLOB_ZONE, ctx, vnet.id, self, ready)
        vault_zone = private_zone(f"{name}-vault-dns", VAULT_ZONE, ctx, vnet.id, self, ready)
        if args.bastion:
            self._bastion(name, ctx, created["AzureBastionSubnet"].id, ready)
        jump: dict[str, pulumi.Output[str]] = {}
        for i in range(args.jump_hosts):
            host = f"{name}-jump-{i}"
            made = linux_vm(
                VmSpec(
                    name=host,
                    role="jump",
                    vm_size=args.jump_vm_size,
                    subnet_id=created["jump"].id,
                    private_ip=None,
                    custom_data=args.jump_custom_data[host],
                ),
                ctx,
                self,
                depends_on=ready,
            )
            jump[host] = made.nic.ip_configurations.apply(first_private_ip)

        self.id = vnet.id
        self.name = vnet.name
        self.resource_group_name = pulumi.Output.from_input(ctx.resource_group_name)
        self.subnet_ids = pulumi.Output.all(**{k: v.id for k, v in created.items()}).apply(dict)
        self.route_table_name = route_table.name
        self.private_dns_zone_name = zone.name
        self.blob_dns_zone_id = blob_zone.id
        self.vault_dns_zone_id = vault_zone.id
        self.jump_hosts = pulumi.Output.all(**jump).apply(dict)
        self.register_outputs(
            {
                "id": self.id,
                "name": self.name,
                "resource_group_name": self.resource_group_name,
                "subnet_ids": self.subnet_ids,
                "route_table_name": self.route_table_name,
                "private_dns_zone_name": self.private_dns_zone_name,
                "blob_dns_zone_id": self.blob_dns_zone_id,
                "vault_dns_zone_id": self.vault_dns_zone_id,
                "jump_hosts": self.jump_hosts,
            }
        )

    def _bastion(
        self, name: str, ctx: DeployContext, subnet_id: pulumi.Input[str], ready: list[pulumi.Resource]
    ) -> None:
        """Azure Bastion (Standard, native client) in front of the jump hosts."""
        pip = static_public_ip(f"{name}-bastion-ip", ctx, "bastion", self)
        network.BastionHost(
            f"{name}-bastion",
            resource_group_name=ctx.resource_group_name,
            location=ctx.location,
            sku=network.SkuArgs(name="Standard"),
            # Native client (`az network bastion ssh` / `tunnel`): operators reach the jump hosts
            # from their own terminal and run kubectl there; needs Standard and tunneling on
            # (Bastion "Configure native client support").
            enable_tunneling=True,
            ip_configurations=[
                network.BastionHostIPConfigurationArgs(
                    name="bastion",
                    subnet=network.SubResourceArgs(id=subnet_id),
                    public_ip_address=network.SubResourceArgs(id=pip.id),
                )
            ],
            tags=ctx.tags_for("bastion"),
            opts=pulumi.ResourceOptions(parent=self, depends_on=ready),
        )


def _rules(subnet: str, bastion_cidr: str | None) -> tuple[Rule, ...]:
    """The hub's NSG rules per subnet."""
    if subnet == "AzureBastionSubnet":
        return BASTION_RULES
    if subnet == "jump" and bastion_cidr is not None:
        # VirtualNetwork includes every peered spoke: without this, any pod IP of any cluster could
        # reach the jump hosts, the one place that reaches every cluster. Bastion sessions come
        # from its subnet (NSG access and Azure Bastion).
        return (
            Rule("allow-ssh-from-bastion", 100, "Inbound", "Allow", "Tcp", bastion_cidr, "*", ("22",)),
            Rule("deny-vnet-inbound", 3000, "Inbound", "Deny", "*", "VirtualNetwork", "*", ("*",)),
            *BASELINE_INBOUND,
        )
    return BASELINE_INBOUND
