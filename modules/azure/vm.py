"""One Linux VM with its NIC: no public IP, SSH keys only, encryption at host, managed identity."""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
from pulumi_azure_native import compute, managedidentity, network

from modules.azure.context import DeployContext
from modules.errors import AgkError


class IdentityBound:
    """customData that only exists once the machine's own identity does: it names the identity's client
    id (IMDS needs it to pick the identity), and the machine must not boot before that identity may read
    its Key Vault secret. Whoever creates the identity (``linux_vm``, ``NodePool``) calls ``bind`` after
    creating it and before the VM or scale set; ``bind`` makes the read grant and returns the customData,
    which carries the grant as a dependency, so the machine is created after it.

    To every other signature it is an ``Input[str]`` (an awaitable), so the host components pass it
    through unchanged; awaited without being bound it fails with a clear message instead of booting a
    machine that cannot fetch its bundle.
    """

    def __init__(self, what: str, bind: Callable[[managedidentity.UserAssignedIdentity], pulumi.Output[str]]) -> None:
        self.what = what
        self._bind = bind
        self.bound: pulumi.Output[str] | None = None

    def bind(self, identity: managedidentity.UserAssignedIdentity) -> pulumi.Output[str]:
        if self.bound is not None:
            raise AgkError(f"customData of {self.what} bound to a second identity: one machine, one identity")
        self.bound = self._bind(identity)
        return self.bound

    def __await__(self) -> Generator[Any, None, str]:
        raise AgkError(
            f"customData of {self.what} was used before its machine's identity existed: "
            "create the machine with modules.azure.vm.linux_vm or NodePool, which bind it"
        )
        yield  # unreachable: makes this a generator, so an IdentityBound is an Awaitable[str]


def boot_data(custom_data: pulumi.Input[str], identity: managedidentity.UserAssignedIdentity) -> pulumi.Input[str]:
    """The customData a machine with ``identity`` is created with (binding it when it needs the identity)."""
    return custom_data.bind(identity) if isinstance(custom_data, IdentityBound) else custom_data


@dataclass(frozen=True)
class VmSpec:
    """What differs between the fixed hosts of a cluster (API servers, etcd, Prometheus, NAT, jump)."""

    name: str
    """Stable resource and host name."""
    role: str
    """agk-role tag value."""
    vm_size: str
    """Azure VM size."""
    subnet_id: pulumi.Input[str]
    """Subnet of the NIC."""
    private_ip: str | None
    """Static private address from the address plan; None for dynamic."""
    custom_data: pulumi.Input[str]
    """Base64 cloud-config, or an ``IdentityBound`` that renders it from the VM's identity."""
    zone: str | None = None
    """Availability zone."""
    os_disk_gib: int = 128
    """OS disk size."""
    data_disk_ids: Sequence[pulumi.Input[str]] = field(default_factory=tuple)
    """Managed disks to attach (LUN by position: the bootstrap mounts LUN 0)."""
    data_disk_gib: int = 0
    """Size of an empty Premium SSD data disk created with the VM (0: none)."""
    backend_pool_ids: Sequence[pulumi.Input[str]] = field(default_factory=tuple)
    """Load balancer backend pools of the primary IP configuration."""
    ip_forwarding: bool = False
    """Let the NIC forward traffic (the NAT host)."""
    image: str = "general"
    """Key into DeployContext.images: the marketplace image, for a role without a gallery image."""
    vm_tags: Mapping[str, str] = field(default_factory=dict)
    """Tags only the VM carries (facts for policies, e.g. the node count API servers are sized for): on the
    VM alone, so a change to them never touches its NIC or identity."""


IMAGE_REFERENCE = "storageProfile.imageReference"
"""The VM input whose change replaces the VM (``replace_on_changes``)."""


def ssh_only(ctx: DeployContext) -> compute.LinuxConfigurationArgs:
    """Linux login for every VM and scale set: the context's SSH keys, password authentication off."""
    return compute.LinuxConfigurationArgs(
        disable_password_authentication=True,
        ssh=compute.SshConfigurationArgs(
            public_keys=[
                compute.SshPublicKeyArgs(path=f"/home/{ctx.admin_username}/.ssh/authorized_keys", key_data=key)
                for key in ctx.ssh_public_keys
            ]
        ),
    )


@dataclass(frozen=True)
class HostVm:
    nic: network.NetworkInterface
    vm: compute.VirtualMachine
    identity: managedidentity.UserAssignedIdentity
    """The host's own identity (its only one): what it may read, such as its bundle secret in the cluster's
    Key Vault, is granted to this principal before the VM first boots (``IdentityBound``)."""


def linux_vm(
    spec: VmSpec,
    ctx: DeployContext,
    parent: pulumi.Resource,
    depends_on: Sequence[pulumi.Resource] = (),
    after: Sequence[pulumi.Resource] = (),
) -> HostVm:
    """The VM, its NIC and identity; ``depends_on`` (the VNet's last subnet, a load balancer) gates the NIC.

    ``after``: the VMs of its group that go first. `pulumi up` creates, updates (a resize: Azure restarts the
    VM) and replaces a VM only once those are done, so a group such as etcd changes one member at a time."""
    tags = ctx.tags_for(spec.role)
    identity = managedidentity.UserAssignedIdentity(
        f"{spec.name}-identity",
        resource_name_=f"{spec.name}-identity",
        resource_group_name=ctx.resource_group_name,
        location=ctx.location,
        tags=tags,
        opts=pulumi.ResourceOptions(parent=parent),
    )
    nic = network.NetworkInterface(
        f"{spec.name}-nic",
        resource_group_name=ctx.resource_group_name,
        location=ctx.location,
        enable_accelerated_networking=True,
        enable_ip_forwarding=spec.ip_forwarding,
        ip_configurations=[
            network.NetworkInterfaceIPConfigurationArgs(
                name="ipconfig1",
                primary=True,
                subnet=network.SubnetArgs(id=spec.subnet_id),
                private_ip_allocation_method="Static" if spec.private_ip else "Dynamic",
                private_ip_address=spec.private_ip,
                load_balancer_backend_address_pools=[
                    network.BackendAddressPoolArgs(id=pool_id) for pool_id in spec.backend_pool_ids
                ]
                or None,
            )
        ],
        tags=tags,
        opts=pulumi.ResourceOptions(parent=parent, depends_on=list(depends_on)),
    )
    data_disks = _data_disks(spec)
    vm = compute.VirtualMachine(
        spec.name,
        resource_group_name=ctx.resource_group_name,
        location=ctx.location,
        vm_name=spec.name,
        zones=[spec.zone] if spec.zone else None,
        hardware_profile=compute.HardwareProfileArgs(vm_size=spec.vm_size),
        identity=compute.VirtualMachineIdentityArgs(
            type=compute.ResourceIdentityType.USER_ASSIGNED, user_assigned_identities=[identity.id]
        ),
        security_profile=compute.SecurityProfileArgs(encryption_at_host=True),
        os_profile=compute.OSProfileArgs(
            computer_name=spec.name,
            admin_username=ctx.admin_username,
            custom_data=boot_data(spec.custom_data, identity),
            linux_configuration=ssh_only(ctx),
        ),
        storage_profile=compute.StorageProfileArgs(
            image_reference=ctx.image_reference(spec.role, spec.image),
            os_disk=compute.OSDiskArgs(
                create_option="FromImage",
                # The API's default is Detach: a deleted or replaced VM would leave its OS disk billing.
                delete_option=compute.DiskDeleteOptionTypes.DELETE,
                disk_size_gb=spec.os_disk_gib,
                managed_disk=compute.ManagedDiskParametersArgs(storage_account_type="Premium_LRS"),
            ),
            data_disks=data_disks or None,
        ),
        network_profile=compute.NetworkProfileArgs(
            network_interfaces=[compute.NetworkInterfaceReferenceArgs(id=nic.id, primary=True)]
        ),
        tags={**tags, **spec.vm_tags},
        # The VM's name is fixed (its host name, its certificates' names): a replacement that created first
        # would collide with it (`pulumi up --replace`, the documented way to re-image a host), so the old VM
        # goes first and the host is down until the new one boots.
        # A new image version is a replacement, planned and reviewed: Azure refuses to change a VM's
        # imageReference in place (PropertyChangeNotAllowed: "Changing property 'imageReference.id' is not
        # allowed"), and pulumi-azure-native's schema does not mark it as forcing a replacement, so without
        # this `pulumi up` would fail half-way on the first host (pulumi-azure-native#1117).
        opts=pulumi.ResourceOptions(
            parent=parent,
            depends_on=[*depends_on, *after],
            delete_before_replace=True,
            replace_on_changes=[IMAGE_REFERENCE],
        ),
    )
    return HostVm(nic, vm, identity)


def _data_disks(spec: VmSpec) -> list[compute.DataDiskArgs]:
    """The disks ``spec`` attaches (made by its component) and the empty one it asks Azure for, lun by lun."""
    data_disks = [
        compute.DataDiskArgs(
            lun=lun,
            create_option="Attach",
            # Premium SSD v2 refuses host caching, and etcd's fsyncs must reach the disk anyway.
            caching=compute.CachingTypes.NONE,
            managed_disk=compute.ManagedDiskParametersArgs(id=disk_id),
        )
        for lun, disk_id in enumerate(spec.data_disk_ids)
    ]
    if spec.data_disk_gib:
        data_disks.append(
            compute.DataDiskArgs(
                lun=len(data_disks),
                create_option="Empty",
                disk_size_gb=spec.data_disk_gib,
                # A write-heavy TSDB gains nothing from a read cache.
                caching=compute.CachingTypes.NONE,
                managed_disk=compute.ManagedDiskParametersArgs(storage_account_type="Premium_LRS"),
            )
        )
    return data_disks


def first_private_ip(configs: Sequence[network.outputs.NetworkInterfaceIPConfigurationResponse] | None) -> str:
    """The primary private address of a NIC, from its ipConfigurations output."""
    for config in configs or ():
        if config.private_ip_address:
            return config.private_ip_address
    return ""
