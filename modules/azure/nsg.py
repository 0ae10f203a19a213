"""Network security groups: every subnet gets one, and none lets the Internet in."""

from __future__ import annotations

from collections.abc import Sequence

import pulumi
from pulumi_azure_native import network

from modules.azure.context import DeployContext
from modules.stackplan.segmentation import Rule

DENY_INTERNET_PRIORITY = 4000

DENY_INTERNET_INBOUND = Rule(
    "deny-internet-inbound", DENY_INTERNET_PRIORITY, "Inbound", "Deny", "*", "Internet", "*", ("*",)
)
# Load-balancer health probes come from 168.63.129.16 ("you must allow 168.63.129.16 ... The
# AzureLoadBalancer service tag identifies this source IP address", load-balancer-custom-probe-overview).
# Azure's own allow (AllowAzureLoadBalancerInBound) sits at 65001, after the Internet deny, and the
# Internet tag includes Azure-owned public space: allow the probes explicitly, ahead of the deny, or the
# API server VIP goes dark while every API server is healthy.
ALLOW_AZURE_LB_INBOUND = Rule(
    "allow-azure-load-balancer-inbound",
    DENY_INTERNET_PRIORITY - 100,
    "Inbound",
    "Allow",
    "*",
    "AzureLoadBalancer",
    "*",
    ("*",),
)
BASELINE_INBOUND = (ALLOW_AZURE_LB_INBOUND, DENY_INTERNET_INBOUND)
"""Every subnet's NSG ends with these (Bastion's has its own required set)."""

# Azure Bastion only works with these rules on its subnet (Microsoft's "NSG access and Azure
# Bastion" page). 443 from the Internet is the Bastion portal itself; no SSH/RDP comes from there.
BASTION_RULES = (
    Rule("allow-https-inbound", 120, "Inbound", "Allow", "Tcp", "Internet", "*", ("443",)),
    Rule("allow-gateway-manager", 130, "Inbound", "Allow", "Tcp", "GatewayManager", "*", ("443",)),
    Rule("allow-lb-inbound", 140, "Inbound", "Allow", "Tcp", "AzureLoadBalancer", "*", ("443",)),
    Rule(
        "allow-bastion-host-comms", 150, "Inbound", "Allow", "*", "VirtualNetwork", "VirtualNetwork", ("8080", "5701")
    ),
    Rule("allow-ssh-rdp-outbound", 100, "Outbound", "Allow", "*", "*", "VirtualNetwork", ("22", "3389")),
    Rule("allow-azure-cloud-outbound", 110, "Outbound", "Allow", "Tcp", "*", "AzureCloud", ("443",)),
    Rule(
        "allow-bastion-comms-outbound",
        120,
        "Outbound",
        "Allow",
        "*",
        "VirtualNetwork",
        "VirtualNetwork",
        ("8080", "5701"),
    ),
    Rule("allow-session-info-outbound", 130, "Outbound", "Allow", "*", "*", "Internet", ("80",)),
)


def _rule(rule: Rule) -> network.SecurityRuleArgs:
    single = len(rule.ports) == 1
    return network.SecurityRuleArgs(
        name=rule.name,
        priority=rule.priority,
        direction=rule.direction,
        access=rule.access,
        protocol=rule.protocol,
        source_address_prefix=rule.source,
        source_port_range="*",
        destination_address_prefix=rule.destination,
        destination_port_range=rule.ports[0] if single else None,
        destination_port_ranges=None if single else list(rule.ports),
    )


def security_group(
    name: str, ctx: DeployContext, rules: Sequence[Rule], parent: pulumi.Resource, role: str = "network"
) -> network.NetworkSecurityGroup:
    return network.NetworkSecurityGroup(
        name,
        network_security_group_name=name,
        resource_group_name=ctx.resource_group_name,
        location=ctx.location,
        security_rules=[_rule(r) for r in rules],
        tags=ctx.tags_for(role),
        opts=pulumi.ResourceOptions(parent=parent),
    )
