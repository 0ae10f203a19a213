"""What a subscription needs before `pulumi up`: feature registrations, regional vCPU quotas, public IPs,
and the deploying identity's roles.

Quotas are the limits Azure does raise on request, so a stack may declare the quota it has been
granted (``azure-gpu-k8s:limits.vcpus-<family>``). A declared quota below what the plan needs at its
peak is an error: Azure would create scale sets until the quota runs out and fail the rest, after a
part of the fleet is already billed. Undeclared quotas cannot be checked offline; the plan lists
them for the operator to request.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from modules.address_plan.limits import VCPU_QUOTA_PREFIX, Limits, quota_name
from modules.bootstrap.roles import Role
from modules.config_model import PROJECT
from modules.errors import ConfigError
from modules.stackplan.addresses import limits_for
from modules.stackplan.config import ClusterStack, HubStack, resource_group_name
from modules.stackplan.node_images import NodeImage
from modules.stackplan.pools import ClusterPools
from modules.stackplan.vm_choice import SizeChoice
from modules.vm_sizing.skus import sku

ENCRYPTION_AT_HOST = "https://learn.microsoft.com/azure/virtual-machines/linux/disks-enable-host-based-encryption-cli"


@dataclass(frozen=True)
class Feature:
    namespace: str
    name: str
    why: str
    command: str


@dataclass(frozen=True)
class Quota:
    """The regional vCPUs one VM family needs when every pool is at its peak (maximum plus surge)."""

    family: str
    vcpus: int
    vm_sizes: tuple[str, ...]
    declared: int | None
    """The quota the stack says it has been granted (``limits.vcpus-<family>``), if any."""

    @property
    def limit(self) -> str:
        return quota_name(self.family)


@dataclass(frozen=True)
class Step:
    """Something a person must do once before `pulumi up` (no API can do it for them offline)."""

    what: str
    command: str
    why: str


@dataclass(frozen=True)
class Permission:
    """A role the identity running `pulumi up` needs, where, and for what."""

    scope: str
    role: str
    why: str


@dataclass(frozen=True)
class Prerequisites:
    features: tuple[Feature, ...]
    quotas: tuple[Quota, ...]
    regional_vcpus: int
    regional_declared: int | None
    steps: tuple[Step, ...] = ()
    permissions: tuple[Permission, ...] = ()
    public_ips: int = 0
    """Standard public IPv4 addresses the stack creates (NAT gateway prefixes, Bastion): a per-region
    subscription limit ('Public IP addresses - Standard', networking limits) that varies by offer."""

    def to_json(self) -> dict[str, Any]:
        return {
            "features": [
                {"namespace": f.namespace, "name": f.name, "why": f.why, "command": f.command} for f in self.features
            ],
            "quotas": [
                {
                    "family": q.family,
                    "limit": q.limit,
                    "vcpus": q.vcpus,
                    "vm_sizes": list(q.vm_sizes),
                    "declared": q.declared,
                    "why": "regional vCPU quota at peak (every pool at its maximum plus surge): request it "
                    f"(quota request) and declare it under {PROJECT}:limits." + q.limit,
                }
                for q in self.quotas
            ],
            "regional_vcpus": self.regional_vcpus,
            "regional_declared": self.regional_declared,
            "steps": [{"what": t.what, "command": t.command, "why": t.why} for t in self.steps],
            "permissions": [{"scope": p.scope, "role": p.role, "why": p.why} for p in self.permissions],
            "public_ips": {
                "count": self.public_ips,
                "why": "Standard public IPv4 addresses in the region (NAT gateway prefixes, Bastion): check "
                "'Public IP Addresses - Standard' in the subscription's network usage (az network list-usages "
                "--location <region>) and request more before `pulumi up` if it does not leave this many free",
            },
        }


FEATURES = (
    Feature(
        "Microsoft.Compute",
        "EncryptionAtHost",
        "every VM and scale set encrypts its temp disk and caches at the host; Azure refuses such VMs "
        "until the subscription has the feature",
        "az feature register --namespace Microsoft.Compute --name EncryptionAtHost && "
        "az provider register --namespace Microsoft.Compute",
    ),
)


def vm_vcpus(counts: Iterable[tuple[str, int]], limits: Limits) -> Prerequisites:
    """Prerequisites for VMs ``(vm_size, count)``; raises ConfigError when a declared quota is too small."""
    per_family: dict[str, int] = defaultdict(int)
    sizes: dict[str, set[str]] = defaultdict(set)
    for vm_size, count in counts:
        size = sku(vm_size)
        per_family[size.family] += size.vcpus * count
        sizes[size.family].add(vm_size)
    quotas = tuple(
        Quota(family, vcpus, tuple(sorted(sizes[family])), limits.get(quota_name(family)))
        for family, vcpus in sorted(per_family.items())
    )
    total = sum(per_family.values())
    regional = limits.get(f"{VCPU_QUOTA_PREFIX}regional")
    checks: list[tuple[str, int, int | None]] = [(q.limit, q.vcpus, q.declared) for q in quotas]
    checks.append((f"{VCPU_QUOTA_PREFIX}regional", total, regional))
    for name, needed, declared in checks:
        if declared is not None and declared < needed:
            raise ConfigError(
                f"{PROJECT}:limits.{name}: the plan needs {needed:,} vCPUs at its peak but the declared "
                f"quota is {declared:,}: request {needed:,} (quota request) or lower the node counts"
            )
    return Prerequisites(FEATURES, quotas, total, regional)


# Contributor does not include Microsoft.Authorization/roleAssignments/write or roleDefinitions/write
# (built-in-roles: Contributor's NotActions exclude Microsoft.Authorization/*/Write); User Access
# Administrator has Microsoft.Authorization/* (both). The program creates the resource group itself,
# so both are needed at subscription scope (or on a resource group of that name created beforehand).
_SUBSCRIPTION = "subscription (or resource group {group}, created beforehand)"


def deployer_permissions(stack: str, hub_group: str | None) -> tuple[Permission, ...]:
    """What the identity running `pulumi up` for ``stack`` needs (``hub_group``: a spoke's hub)."""
    group = resource_group_name(stack)
    own = (
        Permission(
            _SUBSCRIPTION.format(group=group),
            "Contributor",
            f"creates resource group {group} and everything in it",
        ),
        Permission(
            _SUBSCRIPTION.format(group=group),
            "User Access Administrator",
            "writes role assignments for the hosts' managed identities and the remediation job's custom role "
            "definition, which Contributor cannot (Owner covers both rows)",
        ),
    )
    if hub_group is None:
        return own
    return (
        *own,
        Permission(
            f"resource group {hub_group}",
            "Network Contributor",
            "writes the hub half of the peering (on the hub VNet) and this cluster's route in the hub's route table",
        ),
        Permission(
            f"resource group {hub_group}",
            "Private DNS Zone Contributor",
            "links this VNet to the hub's private DNS zones, and the private endpoints' zone groups write records "
            "into them",
        ),
    )


def cluster_prerequisites(
    config: ClusterStack,
    pools: ClusterPools,
    sizes: Mapping[str, SizeChoice],
    *,
    stack: str,
    hub_group: str,
    public_ips: int,
    images: Mapping[Role, NodeImage] | None = None,
) -> Prerequisites:
    cluster = config.cluster
    hosts = [
        (sizes["apiserver"].chosen, cluster.api_servers.count),
        (sizes["etcd"].chosen, cluster.etcd.count),
        (sizes["prometheus"].chosen, cluster.prometheus.count),
        (cluster.nat.vm_size, 1),
    ]
    if cluster.events_etcd is not None:
        hosts.append((sizes["events-etcd"].chosen, cluster.events_etcd.count))
    counts = hosts + [(p.vm_size, p.peak_nodes) for p in pools.pools.values()]
    return replace(
        vm_vcpus(counts, limits_for(config)),
        steps=(
            *node_image_steps(images or {}),
            *encryption_at_host_steps((s for s, _ in counts), config.location),
        ),
        permissions=deployer_permissions(stack, hub_group),
        public_ips=public_ips,
    )


def node_image_steps(images: Mapping[Role, NodeImage]) -> tuple[Step, ...]:
    """One check per gallery image version the cluster boots: it must exist before `pulumi up` of the cluster.

    The images stack creates them (Azure VM Image Builder writes each version when its template runs), so it is
    deployed first and its builds finished; Azure refuses a VM or scale set whose image version does not exist,
    after the network, vault and PKI of the cluster are already deployed. Not checkable offline (the plan checks
    the images stack's config when its stack file is here: modules/stackplan/node_images.py)."""
    by_image = {image.role: image for image in images.values()}
    return tuple(
        Step(
            f"node image {image.role} {image.version}",
            f"az sig image-version show -g {image.resource_group} -r {image.gallery} -i {image.role} -e "
            f"{image.version} --query provisioningState -o tsv  (must print Succeeded; if not: `pulumi up --stack "
            f"{image.images_stack}` first and wait for its image builds)",
            f"the cluster's {', '.join(r for r, i in images.items() if i.role == image.role)} hosts boot it; Azure "
            "refuses a VM or scale set whose image version does not exist",
        )
        for image in sorted(by_image.values(), key=lambda i: i.role)
    )


def encryption_at_host_steps(vm_sizes: Iterable[str], location: str) -> tuple[Step, ...]:
    """One check per VM size: whether the size supports encryption at host in the region.

    Azure publishes it per size and region as the Resource SKUs API's capability ``EncryptionAtHostSupported``
    (`az vm list-skus`; learn.microsoft.com disks-enable-host-based-encryption-cli, "Finding supported VM
    sizes"); no document lists it per size, so it cannot be checked offline. A size without it makes Azure
    refuse every VM and scale set of it, after the rest of the stack is deployed.
    """
    return tuple(
        Step(
            f"encryption at host on {size}",
            f"az vm list-skus --location {location} --size {size} --resource-type virtualMachines"
            " --query \"[0].capabilities[?name=='EncryptionAtHostSupported'].value\" -o tsv  (must print True)",
            f"every {size} VM and scale set sets securityProfile.encryptionAtHost; Azure refuses them where the"
            " size lacks the capability (the EncryptionAtHost feature registration alone is not enough)",
        )
        for size in sorted(set(vm_sizes))
    )


def hub_prerequisites(config: HubStack, stack: str, egress_ips: int) -> Prerequisites:
    try:
        found = vm_vcpus([(config.hub.jump_vm_size, config.hub.jump_hosts)], limits_for(config))
    except ConfigError as err:
        raise ConfigError(str(err).replace("VM size", f"{PROJECT}:hub.jump_vm_size: VM size", 1)) from None
    bastion = 1 if config.hub.bastion else 0
    steps = encryption_at_host_steps([config.hub.jump_vm_size], config.location) if config.hub.jump_hosts else ()
    return replace(found, steps=steps, permissions=deployer_permissions(stack, None), public_ips=egress_ips + bastion)
