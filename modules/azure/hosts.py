"""Dedicated hosts outside the cluster: Prometheus (with sized data disks) and the NAT host."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pulumi
from pulumi_azure_native import network

from modules.azure.context import DeployContext
from modules.azure.vm import VmSpec, linux_vm


@dataclass(frozen=True)
class PrometheusHostsArgs:
    ctx: DeployContext
    """Resource group, region, tags, admin login."""
    hosts: Mapping[str, str]
    """Host name to static private address (identical replicas, an HA pair by default)."""
    subnet_id: pulumi.Input[str]
    """The monitoring subnet."""
    vm_size: str
    """Azure VM size."""
    data_disk_gib: int
    """TSDB disk: retention x ingestion at the scrape interval (modules.vm_sizing.formulas.prometheus_disk_gib)."""
    zones: Sequence[str]
    """Zones to spread the replicas over."""
    custom_data: Mapping[str, pulumi.Input[str]]
    """Base64 cloud-config per host name."""
    depends_on: Sequence[pulumi.Resource] = ()
    """Wait for these (the VNet's last subnet) before creating NICs in the VNet."""


class PrometheusHosts(pulumi.ComponentResource):
    id: pulumi.Output[str]
    name: pulumi.Output[str]
    hosts: pulumi.Output[dict[str, str]]
    principals: pulumi.Output[dict[str, str]]
    """Host name to its identity's principal id."""

    def __init__(self, name: str, args: PrometheusHostsArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("agk:compute:PrometheusHosts", name, None, opts)
        zones = list(args.zones)
        self.identities: dict[str, pulumi.Output[str]] = {}
        """Host name to its principal id, for grants inside this program."""
        # One replica at a time: a resize or replacement of the pair never stops both.
        previous: list[pulumi.Resource] = []
        for i, (host, address) in enumerate(args.hosts.items()):
            made = linux_vm(
                VmSpec(
                    name=host,
                    role="prometheus",
                    vm_size=args.vm_size,
                    subnet_id=args.subnet_id,
                    private_ip=address,
                    custom_data=args.custom_data[host],
                    zone=zones[i % len(zones)] if zones else None,
                    data_disk_gib=args.data_disk_gib,
                ),
                args.ctx,
                self,
                depends_on=args.depends_on,
                after=previous,
            )
            previous = [made.vm]
            self.identities[host] = made.identity.principal_id
        self.id = pulumi.Output.from_input(name)
        self.name = pulumi.Output.from_input(name)
        self.hosts = pulumi.Output.from_input(dict(args.hosts))
        self.principals = pulumi.Output.all(**self.identities).apply(dict)
        self.register_outputs({"id": self.id, "name": self.name, "hosts": self.hosts, "principals": self.principals})


@dataclass(frozen=True)
class NatHostArgs:
    ctx: DeployContext
    """Resource group, region, tags, admin login."""
    host: str
    """Host name."""
    address: str
    """Static private address: the next hop for the service CIDR."""
    subnet_id: pulumi.Input[str]
    """The nat subnet."""
    vm_size: str
    """Azure VM size."""
    custom_data: pulumi.Input[str]
    """Base64 cloud-config."""
    service_cidr: str
    """The cluster's service CIDR, routed from the hub to this host."""
    hub_route_table_name: pulumi.Input[str]
    """The hub's route table (its jump subnet) that gets the service-CIDR route."""
    hub_resource_group_name: pulumi.Input[str]
    """The hub's resource group."""
    depends_on: Sequence[pulumi.Resource] = ()
    """Wait for these (the VNet's last subnet) before creating the NIC in the VNet."""


class NatHost(pulumi.ComponentResource):
    """Inbound DNAT from outside the cluster to the service CIDR (the reference design)."""

    id: pulumi.Output[str]
    name: pulumi.Output[str]
    address: pulumi.Output[str]
    principal_id: pulumi.Output[str]

    def __init__(self, name: str, args: NatHostArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("agk:compute:NatHost", name, None, opts)
        made = linux_vm(
            VmSpec(
                name=args.host,
                role="nat",
                vm_size=args.vm_size,
                subnet_id=args.subnet_id,
                private_ip=args.address,
                custom_data=args.custom_data,
                ip_forwarding=True,
            ),
            args.ctx,
            self,
            depends_on=args.depends_on,
        )
        network.Route(
            f"{name}-service-route",
            route_name=f"{name}-services",
            resource_group_name=args.hub_resource_group_name,
            route_table_name=args.hub_route_table_name,
            address_prefix=args.service_cidr,
            next_hop_type=network.RouteNextHopType.VIRTUAL_APPLIANCE,
            next_hop_ip_address=args.address,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[made.vm]),
        )
        self.id = made.vm.id
        self.name = pulumi.Output.from_input(args.host)
        self.address = pulumi.Output.from_input(args.address)
        self.principal_id = made.identity.principal_id
        self.register_outputs(
            {"id": self.id, "name": self.name, "address": self.address, "principal_id": self.principal_id}
        )
