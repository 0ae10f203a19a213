"""The program of a ``hub`` stack: the shared network every cluster spoke peers with (modules/azure/hub.py)."""

from __future__ import annotations

from typing import Any

from modules.azure.boot import minimal_cloud_config
from modules.azure.context import stack_context
from modules.azure.hub import HubNetwork, HubNetworkArgs
from modules.stackplan.addresses import StackAddresses, limits_tag
from modules.stackplan.config import HubStack
from modules.stackplan.egress import public_ips_for
from modules.stackplan.prerequisites import hub_prerequisites


def build(stack: str, config: HubStack, plan: StackAddresses) -> dict[str, Any]:
    hub = config.hub
    egress_ips = public_ips_for(
        max(hub.jump_hosts, 1), config.network.egress.connections_per_node, plan.limits, "NAT gateway jump"
    )
    prerequisites = hub_prerequisites(config, stack, egress_ips)
    _, ctx = stack_context(stack, config)
    jump = {f"{stack}-jump-{i}": minimal_cloud_config(f"{stack}-jump-{i}", "jump") for i in range(hub.jump_hosts)}
    network = HubNetwork(
        stack,
        HubNetworkArgs(
            ctx=ctx,
            plan=plan.vnet,
            limits_tag=limits_tag(config),
            bastion=hub.bastion,
            jump_hosts=hub.jump_hosts,
            jump_vm_size=hub.jump_vm_size,
            jump_custom_data=jump,
            private_dns_zone=hub.private_dns_zone,
            egress_public_ips=egress_ips,
        ),
    )
    return {
        "vnet_id": network.id,
        "vnet_name": network.name,
        "resource_group_name": network.resource_group_name,
        "route_table_name": network.route_table_name,
        "private_dns_zone_name": network.private_dns_zone_name,
        "blob_dns_zone_id": network.blob_dns_zone_id,
        "vault_dns_zone_id": network.vault_dns_zone_id,
        "subnet_ids": network.subnet_ids,
        "address_space": [str(n) for n in plan.vnet.address_space],
        "address_plan": plan.vnet.to_dict(),
        "prerequisites": prerequisites.to_json(),
    }
