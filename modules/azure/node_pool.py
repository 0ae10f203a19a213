"""A node pool as Uniform scale sets whose NICs carry the pods' addresses.

Native pod networking, no overlay: each NIC has ``ipconfig1`` (the node) plus ``maxPods``
secondary IP configurations in the pool's subnet, which the CNI hands to pods (aks-engine's
ipAddressCount = 1 + maxPods). Only the primary would ever join a load balancer pool.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pulumi
from pulumi_azure_native import compute, managedidentity

from modules import tags as tagging
from modules.azure.context import DeployContext
from modules.azure.vm import boot_data, ssh_only
from modules.bootstrap.context import BOOT_HEALTH_PATH, BOOT_HEALTH_PORT
from modules.stackplan.config import RepairsConfig
from modules.vm_sizing.scale_sets import ScaleSetPlan


@dataclass(frozen=True)
class NodePoolArgs:
    ctx: DeployContext
    """Resource group, region, tags, admin login."""
    pool: str
    """The pool's name as the config and the bootstrap know it (`system` or a GPU pool's key)."""
    role: str
    """agk-role: gpu-node or system-node."""
    vm_size: str
    """Azure VM size."""
    scale_sets: Sequence[ScaleSetPlan]
    """The pool split into scale sets (stable names, capacities within the cap)."""
    subnet_id: pulumi.Input[str]
    """The pool's subnet: node and pod addresses."""
    pod_ips: int
    """Secondary IP configurations per NIC (one per pod that is not host-network)."""
    surge: int
    """Surge nodes the pool's subnet is planned for (tagged for the subnet-capacity policy)."""
    os_disk_gib: int
    """OS disk size (large ML images)."""
    custom_data: pulumi.Input[str]
    """Base64 cloud-config every node of the pool boots with, or an ``IdentityBound`` that renders it
    from the pool's identity (its client id; its read grant on the pool's bundle secret)."""
    zone: str | None = None
    """Availability zone of the pool's scale sets."""
    image: str = "gpu"
    """Key into DeployContext.images: the marketplace image, for a role without a gallery image."""
    depends_on: Sequence[pulumi.Resource] = ()
    """Wait for these (the VNet's last subnet) before creating scale sets in the VNet."""
    extra_identities: Sequence[pulumi.Input[str]] = ()
    """Further user-assigned identities the scale sets carry (the system pool: the cluster's controllers').
    With more than one, every IMDS token request must name its identity's client id."""
    earlier_sets: Sequence[pulumi.Resource] = ()
    """The cluster's scale sets created before this pool's, in order (the waves run across pools)."""
    in_flight: int = 0
    """Scale sets in flight at once: each set waits for the one this many places before it (0: no waves)."""
    repairs: RepairsConfig = field(default_factory=RepairsConfig)
    """Automatic instance repairs (action, grace period) and the terminate notification's notice."""


# Application Health extension, rich health states (virtual-machine-scale-sets-health-extension): the
# node's boot health endpoint answers {"ApplicationHealthState": "Healthy"} only once every boot step
# is done and the kubelet has joined, so a node that failed to join shows as Unhealthy in the portal,
# `az vmss get-instance-view` and the scale set's instance list.
HEALTH_GRACE_SECONDS = 3600
"""Time a new VM gets to boot and join before Unhealthy counts (package installs, image pulls, CSR)."""


def health_extension() -> compute.VirtualMachineScaleSetExtensionArgs:
    return compute.VirtualMachineScaleSetExtensionArgs(
        name="boot-health",
        publisher="Microsoft.ManagedServices",
        type="ApplicationHealthLinux",
        type_handler_version="2.0",
        auto_upgrade_minor_version=True,
        settings={
            "protocol": "http",
            "port": BOOT_HEALTH_PORT,
            "requestPath": BOOT_HEALTH_PATH,
            "intervalInSeconds": 15,
            "numberOfProbes": 4,
            "gracePeriod": HEALTH_GRACE_SECONDS,
        },
    )


def repairs_policy(repairs: RepairsConfig) -> compute.AutomaticRepairsPolicyArgs:
    """Automatic instance repairs (learn.microsoft.com virtual-machine-scale-sets-automatic-instance-repairs) on the
    boot-health signal: a node whose boot failed is repaired without a person. Azure repairs at most 5% of a scale
    set's instances at a time (one at a time below 20 instances), so a fleet-wide fault (a bad image, a broken
    bundle) repairs a trickle, not the fleet; and when the VMs it repaired stay Unhealthy it suspends repairs on that
    set (``orchestrationServices`` serviceState ``Suspended``) until a person resumes them. Both are the page's
    "Batching" and "Suspension of Repairs"."""
    return compute.AutomaticRepairsPolicyArgs(
        enabled=True, grace_period=f"PT{repairs.grace_minutes}M", repair_action=repairs.action
    )


def scheduled_events_profile(repairs: RepairsConfig) -> compute.ScheduledEventsProfileArgs:
    """Terminate notification (learn.microsoft.com virtual-machine-scale-sets-terminate-notification): a delete or
    scale-in (and a Replace repair) becomes a Terminate scheduled event ``terminate_notice_minutes`` ahead, which
    the node's scheduled_events.py drains for and acknowledges."""
    return compute.ScheduledEventsProfileArgs(
        terminate_notification_profile=compute.TerminateNotificationProfileArgs(
            enable=True, not_before_timeout=f"PT{repairs.terminate_notice_minutes}M"
        )
    )


def ip_configurations(
    subnet_id: pulumi.Input[str], pod_ips: int
) -> list[compute.VirtualMachineScaleSetIPConfigurationArgs]:
    subnet = compute.ApiEntityReferenceArgs(id=subnet_id)
    configs = [compute.VirtualMachineScaleSetIPConfigurationArgs(name="ipconfig1", primary=True, subnet=subnet)]
    configs += [
        compute.VirtualMachineScaleSetIPConfigurationArgs(name=f"pod{i:03d}", primary=False, subnet=subnet)
        for i in range(1, pod_ips + 1)
    ]
    return configs


class NodePool(pulumi.ComponentResource):
    id: pulumi.Output[str]
    name: pulumi.Output[str]
    scale_sets: pulumi.Output[dict[str, str]]
    capacity: pulumi.Output[int]
    identity_id: pulumi.Output[str]
    principal_id: pulumi.Output[str]
    """The pool's managed identity (every scale set of the pool uses it): the principal to grant roles to."""
    client_id: pulumi.Output[str]

    def __init__(self, name: str, args: NodePoolArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("agk:compute:NodePool", name, None, opts)
        ctx = args.ctx
        tags = ctx.tags_for(
            args.role, **{tagging.POOL: args.pool, tagging.POD_IPS: str(args.pod_ips), tagging.SURGE: str(args.surge)}
        )
        # One user-assigned identity for the pool: role assignments (blob containers, ...) are made once
        # per pool, not once per scale set, and survive replacing a scale set.
        identity = managedidentity.UserAssignedIdentity(
            f"{name}-identity",
            resource_name_=f"{name}-identity",
            resource_group_name=ctx.resource_group_name,
            location=ctx.location,
            tags=ctx.tags_for(args.role, **{tagging.POOL: args.pool}),
            opts=pulumi.ResourceOptions(parent=self),
        )
        # Bound once: every scale set of the pool boots the same customData (and waits for the same grant).
        custom_data = boot_data(args.custom_data, identity)
        created: dict[str, compute.VirtualMachineScaleSet] = {}
        subnet_id = pulumi.Output.from_input(args.subnet_id)
        ordered: list[pulumi.Resource] = list(args.earlier_sets)
        for plan in args.scale_sets:
            # Waves: this set waits for the one ``in_flight`` places before it (Azure allocates a wave at a time).
            wave = [ordered[-args.in_flight]] if args.in_flight and len(ordered) >= args.in_flight else []
            created[plan.name] = compute.VirtualMachineScaleSet(
                plan.name,
                vm_scale_set_name=plan.name,
                resource_group_name=ctx.resource_group_name,
                location=ctx.location,
                zones=[args.zone] if args.zone else None,
                sku=compute.SkuArgs(name=args.vm_size, tier="Standard", capacity=plan.capacity),
                orchestration_mode="Uniform",
                overprovision=False,
                single_placement_group=plan.single_placement_group,
                platform_fault_domain_count=1,
                upgrade_policy=compute.UpgradePolicyArgs(mode=compute.UpgradeMode.MANUAL),
                # A lowered capacity removes the newest instances of this set, so `agk plan --base` can say
                # which VMs go (Uniform's Default balances across fault domains first;
                # virtual-machine-scale-sets-scale-in-policy). A pool shrinks from its newest sets (split_pool).
                scale_in_policy=compute.ScaleInPolicyArgs(rules=[compute.VirtualMachineScaleSetScaleInRules.NEWEST_VM]),
                # Both are in the scale set's update model (VirtualMachineScaleSetUpdateProperties and its
                # VM profile; the pages above enable them on existing sets with `az vmss update`): a change
                # updates the set in place, running instances take the VM profile's part on `update-instances`.
                automatic_repairs_policy=repairs_policy(args.repairs),
                identity=compute.VirtualMachineScaleSetIdentityArgs(
                    type=compute.ResourceIdentityType.USER_ASSIGNED,
                    user_assigned_identities=[identity.id, *args.extra_identities],
                ),
                virtual_machine_profile=_vm_profile(args, plan.name, custom_data, subnet_id),
                tags=tags,
                # A fixed name: a replacement (a create-time property changed) deletes the old set first.
                opts=pulumi.ResourceOptions(
                    parent=self, depends_on=[*args.depends_on, *wave], delete_before_replace=True
                ),
            )
            ordered.append(created[plan.name])
        self.id = pulumi.Output.from_input(name)
        self.name = pulumi.Output.from_input(name)
        self.scale_set_resources: list[pulumi.Resource] = list(created.values())
        """This pool's scale sets, in order (the next pool's waves follow them)."""
        self.scale_set_refs: dict[str, pulumi.Output[str]] = {k: v.id for k, v in created.items()}
        """Scale set name to its id, for grants inside this program."""
        self.scale_sets = pulumi.Output.all(**self.scale_set_refs).apply(dict)
        self.capacity = pulumi.Output.from_input(sum(p.capacity for p in args.scale_sets))
        self.identity_id = identity.id
        self.principal_id = identity.principal_id
        self.client_id = identity.client_id
        self.register_outputs(
            {
                "id": self.id,
                "name": self.name,
                "scale_sets": self.scale_sets,
                "capacity": self.capacity,
                "identity_id": self.identity_id,
                "principal_id": self.principal_id,
                "client_id": self.client_id,
            }
        )


def _vm_profile(
    args: NodePoolArgs, computer_name_prefix: str, custom_data: pulumi.Input[str], subnet_id: pulumi.Output[str]
) -> compute.VirtualMachineScaleSetVMProfileArgs:
    """What every instance of one of the pool's scale sets boots: image, OS disk, the NIC with its pod IP
    configurations, encryption at host, Scheduled Events and the health extension."""
    ctx = args.ctx
    return compute.VirtualMachineScaleSetVMProfileArgs(
        os_profile=compute.VirtualMachineScaleSetOSProfileArgs(
            computer_name_prefix=computer_name_prefix,
            admin_username=ctx.admin_username,
            custom_data=custom_data,
            linux_configuration=ssh_only(ctx),
        ),
        storage_profile=compute.VirtualMachineScaleSetStorageProfileArgs(
            # A new gallery image version changes the model in place; under the Manual upgrade policy
            # running instances keep theirs until they are brought to the model (update-instances,
            # reimage): learn.microsoft.com virtual-machine-scale-sets-upgrade-policy ("Image reference
            # upgrades" are model changes). Moving a set from a marketplace image to a gallery one is
            # refused in place (policies/rules/replacements.py: publisher, offer).
            image_reference=ctx.image_reference(args.role, args.image),
            os_disk=compute.VirtualMachineScaleSetOSDiskArgs(
                create_option="FromImage",
                disk_size_gb=args.os_disk_gib,
                caching=compute.CachingTypes.READ_WRITE,
                managed_disk=compute.VirtualMachineScaleSetManagedDiskParametersArgs(
                    storage_account_type="Premium_LRS"
                ),
            ),
        ),
        network_profile=compute.VirtualMachineScaleSetNetworkProfileArgs(
            network_interface_configurations=[
                compute.VirtualMachineScaleSetNetworkConfigurationArgs(
                    name="nic0",
                    primary=True,
                    enable_accelerated_networking=True,
                    # One Output for the whole list, not one per IP configuration: at
                    # 75 scale sets x 27 configurations the SDK's per-Output cost dominates.
                    ip_configurations=subnet_id.apply(lambda sid: ip_configurations(sid, args.pod_ips)),
                )
            ]
        ),
        security_profile=compute.SecurityProfileArgs(encryption_at_host=True),
        scheduled_events_profile=scheduled_events_profile(args.repairs),
        extension_profile=compute.VirtualMachineScaleSetExtensionProfileArgs(extensions=[health_extension()]),
    )
