"""The self-managed control plane: API servers behind an internal Standard load balancer, etcd
and (optionally) a separate events etcd, each on dedicated VMs with addresses from the plan.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pulumi
from pulumi_azure_native import compute, network

from modules import tags as tagging
from modules.azure.context import DeployContext
from modules.azure.vm import VmSpec, linux_vm
from modules.bootstrap.context import APISERVER_PORT


@dataclass(frozen=True)
class EtcdGroup:
    """One etcd cluster (main or events)."""

    role: str
    """agk-role: etcd or events-etcd."""
    members: Mapping[str, str]
    """Host name to static private address."""
    subnet_id: pulumi.Input[str]
    """Subnet the members live in."""
    vm_size: str
    """Azure VM size."""
    storage: str
    """local-nvme (data on the VM's NVMe) or premium-ssd-v2 (a provisioned-IOPS data disk)."""
    disk_gib: int
    """Premium SSD v2 size."""
    disk_iops: int
    """Premium SSD v2 provisioned IOPS."""


@dataclass(frozen=True)
class ControlPlaneArgs:
    ctx: DeployContext
    """Resource group, region, tags, admin login."""
    sizing_nodes: int
    """Nodes the cluster is planned for (tagged on API servers for the sizing policy)."""
    apiservers: Mapping[str, str]
    """API server host name to static private address."""
    apiserver_vip: str
    """Static frontend address of the internal load balancer."""
    apiserver_vm_size: str
    """Azure VM size of the API servers."""
    control_plane_subnet_id: pulumi.Input[str]
    """Subnet of the API servers and the load balancer frontend."""
    etcd: Sequence[EtcdGroup]
    """The etcd clusters: the main one, then events when configured."""
    zones: Sequence[str]
    """Availability zones to spread VMs over, round robin."""
    custom_data: Mapping[str, pulumi.Input[str]]
    """Base64 cloud-config per host name."""
    depends_on: Sequence[pulumi.Resource] = ()
    """Wait for these (the VNet's last subnet) before creating anything in the VNet."""


class ControlPlane(pulumi.ComponentResource):
    id: pulumi.Output[str]
    name: pulumi.Output[str]
    apiserver_endpoint: pulumi.Output[str]
    apiservers: pulumi.Output[dict[str, str]]
    etcd_members: pulumi.Output[dict[str, str]]
    principals: pulumi.Output[dict[str, str]]
    """Host name (API servers and etcd members) to its identity's principal id."""

    def __init__(self, name: str, args: ControlPlaneArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("agk:compute:ControlPlane", name, None, opts)
        self.identities: dict[str, pulumi.Output[str]] = {}
        """Host name to its principal id, for grants inside this program."""
        lb, lb_id = self._load_balancer(name, args)
        self._apiservers(args, lb, pulumi.Output.concat(lb_id, "/backendAddressPools/apiservers"))
        members = self._etcd(args)

        self.id = lb.id
        self.name = lb.name
        self.apiserver_endpoint = pulumi.Output.from_input(f"https://{args.apiserver_vip}:{APISERVER_PORT}")
        self.apiservers = pulumi.Output.from_input(dict(args.apiservers))
        self.etcd_members = pulumi.Output.from_input(members)
        self.principals = pulumi.Output.all(**self.identities).apply(dict)
        self.register_outputs(
            {
                "id": self.id,
                "name": self.name,
                "apiserver_endpoint": self.apiserver_endpoint,
                "apiservers": self.apiservers,
                "etcd_members": self.etcd_members,
                "principals": self.principals,
            }
        )

    def _load_balancer(self, name: str, args: ControlPlaneArgs) -> tuple[network.LoadBalancer, pulumi.Output[str]]:
        """The API servers' internal load balancer: a static frontend on the VIP, /readyz probes."""
        ctx = args.ctx
        lb_name = f"{name}-apiserver-lb"
        lb_id = pulumi.Output.concat(ctx.resource_group_id, "/providers/Microsoft.Network/loadBalancers/", lb_name)
        lb = network.LoadBalancer(
            lb_name,
            load_balancer_name=lb_name,
            resource_group_name=ctx.resource_group_name,
            location=ctx.location,
            sku=network.LoadBalancerSkuArgs(name="Standard", tier="Regional"),
            frontend_ip_configurations=[
                network.FrontendIPConfigurationArgs(
                    name="apiserver",
                    private_ip_allocation_method="Static",
                    private_ip_address=args.apiserver_vip,
                    subnet=network.SubnetArgs(id=args.control_plane_subnet_id),
                    zones=list(args.zones) or None,
                )
            ],
            backend_address_pools=[network.BackendAddressPoolArgs(name="apiservers")],
            probes=[
                network.ProbeArgs(
                    name="readyz",
                    protocol="Https",
                    port=APISERVER_PORT,
                    request_path="/readyz",
                    interval_in_seconds=5,
                    number_of_probes=2,
                )
            ],
            load_balancing_rules=[
                network.LoadBalancingRuleArgs(
                    name="apiserver",
                    protocol="Tcp",
                    frontend_port=APISERVER_PORT,
                    backend_port=APISERVER_PORT,
                    frontend_ip_configuration=network.SubResourceArgs(
                        id=pulumi.Output.concat(lb_id, "/frontendIPConfigurations/apiserver")
                    ),
                    backend_address_pool=network.SubResourceArgs(
                        id=pulumi.Output.concat(lb_id, "/backendAddressPools/apiservers")
                    ),
                    probe=network.SubResourceArgs(id=pulumi.Output.concat(lb_id, "/probes/readyz")),
                    enable_tcp_reset=True,
                    idle_timeout_in_minutes=30,
                    load_distribution="Default",
                )
            ],
            tags=ctx.tags_for("apiserver"),
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on)),
        )
        return lb, lb_id

    def _apiservers(self, args: ControlPlaneArgs, lb: network.LoadBalancer, pool_id: pulumi.Output[str]) -> None:
        """The API server VMs behind the load balancer's pool.

        Each API server (and each etcd member, ``_etcd``) waits for the one before it: a change that resizes
        (Azure restarts the VM) or replaces them all goes one VM at a time, never the whole group at once."""
        ctx = args.ctx
        zones = list(args.zones)
        previous: list[pulumi.Resource] = []
        for i, (host, address) in enumerate(args.apiservers.items()):
            made = linux_vm(
                VmSpec(
                    name=host,
                    role="apiserver",
                    vm_size=args.apiserver_vm_size,
                    subnet_id=args.control_plane_subnet_id,
                    private_ip=address,
                    custom_data=args.custom_data[host],
                    zone=zones[i % len(zones)] if zones else None,
                    backend_pool_ids=(pool_id,),
                    vm_tags={tagging.CLUSTER_NODES: str(args.sizing_nodes)},
                ),
                ctx,
                self,
                depends_on=[lb, *args.depends_on],
                after=previous,
            )
            previous = [made.vm]
            self.identities[host] = made.identity.principal_id

    def _etcd(self, args: ControlPlaneArgs) -> dict[str, str]:
        """Every etcd group's members (with their Premium SSD v2 disks): host name to address."""
        ctx = args.ctx
        zones = list(args.zones)
        members: dict[str, str] = {}
        for group in args.etcd:
            previous: list[pulumi.Resource] = []
            for i, (host, address) in enumerate(group.members.items()):
                zone = zones[i % len(zones)] if zones else None
                disks: tuple[pulumi.Input[str], ...] = ()
                if group.storage == "premium-ssd-v2":
                    disk = compute.Disk(
                        f"{host}-data",
                        disk_name=f"{host}-data",
                        resource_group_name=ctx.resource_group_name,
                        location=ctx.location,
                        # Premium SSD v2: sub-millisecond latency with provisioned IOPS; zonal only.
                        sku=compute.DiskSkuArgs(name="PremiumV2_LRS"),
                        zones=[zone] if zone else None,
                        disk_size_gb=group.disk_gib,
                        disk_iops_read_write=group.disk_iops,
                        disk_m_bps_read_write=max(125, group.disk_iops // 40),
                        creation_data=compute.CreationDataArgs(create_option="Empty"),
                        tags=ctx.tags_for(group.role),
                        # A fixed name too: a replacement deletes the old disk first (its data is the member's).
                        opts=pulumi.ResourceOptions(parent=self, delete_before_replace=True),
                    )
                    disks = (disk.id,)
                made = linux_vm(
                    VmSpec(
                        name=host,
                        role=group.role,
                        vm_size=group.vm_size,
                        subnet_id=group.subnet_id,
                        private_ip=address,
                        custom_data=args.custom_data[host],
                        zone=zone,
                        data_disk_ids=disks,
                    ),
                    ctx,
                    self,
                    depends_on=args.depends_on,
                    after=previous,
                )
                previous = [made.vm]
                self.identities[host] = made.identity.principal_id
                members[host] = address
        return members
