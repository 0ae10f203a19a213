"""The typed model of a stack's configuration, one per kind of stack, validated before any resource exists.

Stack files (``stacks/Pulumi.<stack>.yaml``) keep every key of this project under the
``azure-gpu-k8s:`` namespace; ``kind`` picks the model. Unknown keys are errors at every level: a typo must never silently
do nothing. ``python -m modules.stackplan.schema`` exports the JSON Schema that editors use to check stack
files (``stacks/schema.json``).
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from modules.address_plan.limits import Limits
from modules.bootstrap import versions
from modules.bootstrap.alerting_config import AlertingConfig
from modules.bootstrap.config import ControlPlaneTuning, EtcdTuning, NodeTuning, PrometheusTuning
from modules.cluster.config import AddonsConfig
from modules.config_model import PROJECT, StrictModel
from modules.errors import ConfigError
from modules.identity.config import IdentityConfig
from modules.images import ImageRole
from modules.images.config import ImageBuildConfig, ImagesConfig
from modules.regions import REGIONS, closest

# Other namespaces a stack file may carry: provider settings Pulumi itself reads.
FOREIGN_NAMESPACES = frozenset({"azure-native", "kubernetes", "tls", "pulumi"})

_NAME = re.compile(r"^[a-z][a-z0-9-]{0,30}[a-z0-9]$")
_SURGE = re.compile(r"^([0-9]+)%?$")


_M = TypeVar("_M", bound=BaseModel)


def _name(kind: str, value: str) -> str:
    if not _NAME.match(value):
        raise ValueError(
            f"{value!r} is not a valid {kind} name: use 2-32 lowercase letters, digits and '-', starting with a letter"
        )
    return value


# Azure's tag limits (learn.microsoft.com azure-resource-manager/management/tag-resources, "Limitations": at most
# 50 tag name-value pairs per resource; names up to 512 characters, 128 on storage accounts; values up to 256;
# names without < > % & \\ ? /). Every tag goes on the storage account too, so names keep to its 128.
TAGS_PER_RESOURCE = 50
TAG_NAME_MAX = 128
TAG_VALUE_MAX = 256
_TAG_NAME_FORBIDDEN = set("<>%&\\?/")
TOOLKIT_TAGS = 8
"""Tags the program adds to a resource besides the stack's (owner, cost-center, cluster and up to five agk-*)."""


def _tag(name: str, value: str) -> None:
    if not name or len(name) > TAG_NAME_MAX:
        raise ValueError(f"tag name {name[:40]!r} has {len(name)} characters: use 1 to {TAG_NAME_MAX} (Azure's limit)")
    bad = sorted(set(name) & _TAG_NAME_FORBIDDEN)
    if bad:
        raise ValueError(f"tag name {name!r} contains {' '.join(bad)}, which Azure refuses in tag names: rename it")
    if len(value) > TAG_VALUE_MAX:
        raise ValueError(
            f"tag {name!r}: its value has {len(value)} characters: use at most {TAG_VALUE_MAX} (Azure's limit)"
        )


class TagsConfig(StrictModel):
    """Tags put on every taggable Azure resource (the ``cluster`` tag is added per stack)."""

    owner: str = Field(min_length=1, description="Team or person that owns the resources.")
    cost_center: str = Field(min_length=1, description="Cost center billed for the resources.")
    extra: dict[str, str] = Field(default_factory=dict, description="Further tags, name to value.")

    @model_validator(mode="after")
    def _limits(self) -> TagsConfig:
        _tag("owner", self.owner)
        _tag("cost-center", self.cost_center)
        for name, value in self.extra.items():
            _tag(name, value)
        room = TAGS_PER_RESOURCE - TOOLKIT_TAGS
        if len(self.extra) > room:
            raise ValueError(
                f"extra: {len(self.extra)} tags, but Azure takes at most {TAGS_PER_RESOURCE} per resource and the"
                f" toolkit sets up to {TOOLKIT_TAGS}: use at most {room} (or one tag with a JSON value)"
            )
        return self


RESERVED_ADMIN_NAMES = frozenset(
    {
        "administrator", "admin", "user", "user1", "test", "user2", "test1", "user3", "admin1", "1", "123", "a",
        "actuser", "adm", "admin2", "aspnet", "backup", "console", "david", "guest", "john", "owner", "root",
        "server", "sql", "support", "support_388945a0", "sys", "test2", "test3", "user4", "user5",
    }
)  # fmt: skip
"""User names Azure refuses for a VM's admin account: azure-rest-api-specs compute.json OSProfile.adminUsername
("Disallowed values: ..."; Linux: 1 to 64 characters). Azure answers only at `pulumi up`, per VM."""
ADMIN_NAME_MAX = 64
_ADMIN_NAME = re.compile(r"^[a-z_][a-z0-9_-]*$")


class AdminConfig(StrictModel):
    """Login for the VMs: SSH keys only, password authentication is always disabled."""

    username: str = Field(default="azureuser", description="Admin user name on every VM.")

    @field_validator("username")
    @classmethod
    def _username(cls, name: str) -> str:
        if name.lower() in RESERVED_ADMIN_NAMES:
            raise ValueError(
                f"{name!r} is a user name Azure refuses for a VM's admin account (compute API, OSProfile.adminUsername):"
                " use another, e.g. azureuser"
            )
        if not 1 <= len(name) <= ADMIN_NAME_MAX or not _ADMIN_NAME.match(name):
            raise ValueError(
                f"{name!r} is not a Linux user name Azure takes: use 1 to {ADMIN_NAME_MAX} lowercase letters, digits,"
                " '_' or '-', starting with a letter or '_'"
            )
        return name

    ssh_public_keys: list[str] = Field(description="OpenSSH public keys allowed to log in (not secret). At least one.")

    @field_validator("ssh_public_keys")
    @classmethod
    def _keys(cls, keys: list[str]) -> list[str]:
        if not keys:
            raise ValueError("no SSH public key: add at least one 'ssh-ed25519 ...' or 'ssh-rsa ...' key")
        for key in keys:
            if re.match(r"^ecdsa-sha2-nistp(256|384|521) ", key):
                # The compute API takes RSA of 2048 bits or more and Ed25519 (SshPublicKey.keyData; the
                # SshEncryptionTypes enum: RSA, Ed25519): an ECDSA key fails at `pulumi up`.
                raise ValueError(f"{key[:40]!r}: Azure takes no ECDSA key: use an ssh-ed25519 or ssh-rsa (2048+) key")
            if not re.match(r"^ssh-(ed25519|rsa) [A-Za-z0-9+/=]+( .*)?$", key):
                raise ValueError(f"{key[:40]!r} is not an OpenSSH public key: paste the one line of your *.pub file")
            bits = _rsa_bits(key)
            if bits is not None and bits < RSA_MIN_BITS:
                raise ValueError(
                    f"{key[:40]!r} is a {bits}-bit RSA key; Azure needs {RSA_MIN_BITS} bits or more:"
                    " use ssh-keygen -t ed25519 (or -t rsa -b 4096)"
                )
        return keys


RSA_MIN_BITS = 2048
"""The compute API's floor for an ssh-rsa key (SshPublicKey.keyData: "at least 2048-bit and in ssh-rsa format")."""


def _rsa_bits(key: str) -> int | None:
    """The modulus length of an ``ssh-rsa`` key (RFC 4253 6.6: string "ssh-rsa", mpint e, mpint n), None for
    another type or a blob that does not parse (left to Azure)."""
    kind, _, rest = key.partition(" ")
    if kind != "ssh-rsa":
        return None
    try:
        blob = base64.b64decode(rest.split(" ", 1)[0], validate=True)
        fields, at = [], 0
        for _ in range(3):
            size = int.from_bytes(blob[at : at + 4], "big")
            fields.append(blob[at + 4 : at + 4 + size])
            at += 4 + size
    except (ValueError, IndexError):
        return None
    if fields[0] != b"ssh-rsa" or not fields[2]:
        return None
    return int.from_bytes(fields[2], "big").bit_length()


class LimitOverride(StrictModel):
    """A quota the subscription has been granted (quota increase); shown as an override in every report."""

    value: int = Field(gt=0, description="The quota in force for this stack's subscription and region.")
    reason: str = Field(min_length=1, description="Why it differs from Azure's default (e.g. the ticket).")


class EgressConfig(StrictModel):
    """Outbound internet through NAT gateways: one per GPU pool subnet, one for the other subnets."""

    connections_per_node: int = Field(
        default=32,
        ge=1,
        le=50_000,
        description="Concurrent connections a node may hold to one internet destination (image layers: "
        "containerd pulls 10 at a time). Sizes each NAT gateway's public IPs (50,000 per IP and destination).",
    )


class NetworkConfig(StrictModel):
    """The stack's VNet address space; subnets are laid out by the planner (modules.address_plan)."""

    address_space: list[str] = Field(min_length=1, description="CIDR prefixes of the VNet.")
    allow_public_ranges: bool = Field(
        default=False, description="Allow non-private (non RFC 1918 / 100.64.0.0/10) address space."
    )
    pinned: dict[str, str] = Field(
        default_factory=dict,
        description="Subnet name to CIDR for subnets that already exist: never moved by the planner.",
    )
    egress: EgressConfig = Field(default_factory=EgressConfig, description="NAT gateway sizing.")


class HubConfig(StrictModel):
    """The shared hub: researcher access and DNS for every cluster spoke."""

    bastion: bool = Field(default=True, description="Deploy Azure Bastion for researcher access.")
    firewall: bool = Field(default=False, description="Reserve an AzureFirewallSubnet.")
    jump_hosts: int = Field(default=1, ge=0, le=10, description="Jump host VMs in the hub.")
    jump_vm_size: str = Field(default="Standard_D2ds_v5", description="VM size of the jump hosts.")
    private_dns_zone: str = Field(
        default="clusters.gpu.internal", description="Private DNS zone linked to every spoke."
    )


AZURE_ZONES = ("1", "2", "3")
"""Logical availability zones a region with zones offers (learn.microsoft.com reliability/availability-zones-overview:
"a minimum of three"; the compute API's zones take "1", "2" and "3")."""


def _zones(zones: list[str]) -> list[str]:
    for zone in zones:
        if zone not in AZURE_ZONES:
            raise ValueError(f"zone {zone!r} does not exist: use {', '.join(AZURE_ZONES)}")
    if len(set(zones)) != len(zones):
        raise ValueError(f"zones {zones} name a zone twice: list each once")
    return zones


def _surge(value: int | str) -> int | str:
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"surge {value} is negative: use a count >= 0 or a percentage like '10%'")
        return value
    if not _SURGE.match(value.strip()):
        raise ValueError(f"surge {value!r} is not a count or a percentage: use e.g. 1 or '10%'")
    return value.strip()


class PoolConfig(StrictModel):
    """A node pool: the number of VMs and the pod IPs each NIC carries."""

    vm_size: str = Field(description="Azure VM size, e.g. Standard_ND96isr_H100_v5.")
    nodes: int = Field(ge=1, description="Nodes deployed (scale set capacity, summed over scale sets).")
    max_nodes: int | None = Field(
        default=None, description="Autoscaling maximum; address space is planned for this count."
    )
    pod_ips: int = Field(
        default=30,
        ge=1,
        description="Pod IPs per node: secondary IP configurations on each NIC, one per pod that is not "
        "host-network (at most 255). The kubelet's maxPods adds the host-network pods to this.",
    )
    surge: int | str = Field(default=1, description="Extra nodes during upgrades: a count or 'N%'.")
    os_disk_gib: int = Field(default=512, ge=64, le=4095, description="OS disk size (large ML images).")
    scale_set_headroom: int = Field(
        default=1,
        ge=0,
        description="VMs each scale set keeps free below its cap, so a failed VM can be replaced before it is deleted.",
    )

    _check_surge = field_validator("surge")(classmethod(lambda cls, v: _surge(v)))

    @model_validator(mode="after")
    def _max_nodes(self) -> PoolConfig:
        if self.max_nodes is not None and self.max_nodes < self.nodes:
            raise ValueError(f"max_nodes {self.max_nodes} is below nodes {self.nodes}: raise max_nodes or lower nodes")
        # Every node takes at least one private IP of its VNet, whose size Azure caps (a hard limit):
        # refused here, before any planning works through a pool that cannot exist.
        vnet = Limits.default().rows["vnet-private-ips"].value
        assert vnet is not None
        for key, count in (("nodes", self.nodes), ("max_nodes", self.max_nodes or 0)):
            if count > vnet:
                raise ValueError(
                    f"{key} {count:,} is more than one VNet can address ({vnet:,} private IPs, a hard Azure "
                    "limit): lower it or split the pool across clusters"
                )
        return self


class GpuPoolConfig(PoolConfig):
    """A GPU pool: one logical pool, as many scale sets as its size needs."""

    infiniband: bool = Field(
        default=True, description="InfiniBand SKU: each scale set is one placement group (cap 100)."
    )
    team: str | None = Field(default=None, description="Team the pool belongs to (node taint).")
    zone: str | None = Field(default=None, description="Availability zone for the pool's scale sets.")

    @field_validator("zone")
    @classmethod
    def _zone(cls, zone: str | None) -> str | None:
        return None if zone is None else _zones([zone])[0]


class ApiServersConfig(ControlPlaneTuning):
    """kube-apiserver VMs behind an internal Standard load balancer, with the scheduler and controller-manager
    beside each: how many, where, and their limits."""

    count: int = Field(default=3, description="1, 3 or 5 API server VMs.")
    vm_size: str | None = Field(default=None, description="Override the size the sizing rules recommend.")
    zones: list[str] = Field(default_factory=lambda: ["1", "2", "3"], description="Zones to spread over.")

    _check_zones = field_validator("zones")(classmethod(lambda cls, v: _zones(v)))

    @field_validator("count")
    @classmethod
    def _count(cls, v: int) -> int:
        if v not in (1, 3, 5):
            raise ValueError(f"{v} API servers is not supported: use 1, 3 or 5")
        return v


# Snapshot intervals a wall-clock timer can keep on every member (a systemd OnCalendar repetition
# restarts each hour or day): divisors of an hour, or whole hours that divide a day.
BACKUP_INTERVALS = (5, 6, 10, 12, 15, 20, 30, 60, 120, 180, 240, 360, 480, 720, 1440)


class EtcdBackupConfig(StrictModel):
    """Scheduled `etcdctl snapshot save` uploads to the cluster's blob storage (container etcd-backups)."""

    enabled: bool = Field(default=True, description="Take and upload snapshots.")
    every_minutes: int = Field(
        default=60,
        description="Minutes between two snapshots of the cluster: one of "
        f"{', '.join(map(str, BACKUP_INTERVALS))}. Every member has a timer at this interval, offset by "
        "its index; the first one due uploads and the others skip while that snapshot is fresh.",
    )
    retention_days: int = Field(
        default=14, ge=1, le=365, description="Snapshots older than this are deleted (blob lifecycle policy)."
    )

    @field_validator("every_minutes")
    @classmethod
    def _interval(cls, v: int) -> int:
        if v not in BACKUP_INTERVALS:
            raise ValueError(
                f"every_minutes {v} cannot be kept by a wall-clock timer: use one of "
                f"{', '.join(map(str, BACKUP_INTERVALS))} (a divisor of 60, or whole hours that divide 24)"
            )
        return v


class EtcdConfig(EtcdTuning):
    """An etcd cluster on dedicated VMs with low-latency storage, and how its members are tuned."""

    count: int = Field(default=3, description="Members: 3 or 5 (Kubernetes recommends 5 in production).")
    vm_size: str | None = Field(default=None, description="Override the size the sizing rules recommend.")
    storage: Literal["local-nvme", "premium-ssd-v2"] = Field(
        default="premium-ssd-v2",
        description="local-nvme (Lsv3 SKU, ~200 us) or a Premium SSD v2 data disk with provisioned IOPS.",
    )
    disk_gib: int = Field(default=64, ge=16, le=1024, description="Data disk size (premium-ssd-v2).")
    disk_iops: int | None = Field(
        default=None,
        ge=3000,
        le=80000,
        description="Provisioned IOPS (premium-ssd-v2); default: the etcd hardware guide's figure for the node count.",
    )
    backup: EtcdBackupConfig = Field(
        default_factory=EtcdBackupConfig,
        description="Snapshots of the main etcd (the events etcd holds only events, which expire within an hour "
        "and which nothing needs after a restore, so it is not backed up).",
    )

    @model_validator(mode="after")
    def _iops_per_gib(self) -> EtcdConfig:
        # Premium SSD v2 provisions at most 500 IOPS per GiB.
        if self.disk_iops is not None and self.disk_iops > 500 * self.disk_gib:
            raise ValueError(
                f"disk_iops {self.disk_iops} exceeds 500 per GiB of a {self.disk_gib} GiB Premium SSD v2 disk: "
                f"raise disk_gib to {-(-self.disk_iops // 500)} or lower disk_iops"
            )
        return self

    @field_validator("count")
    @classmethod
    def _count(cls, v: int) -> int:
        if v not in (3, 5):
            raise ValueError(f"{v} etcd members is not supported: use 3 or 5 (an odd quorum)")
        return v


class PrometheusConfig(PrometheusTuning):
    """Dedicated Prometheus hosts (an HA pair by default), and the server they run."""

    count: int = Field(
        default=2,
        ge=1,
        le=4,
        description="Prometheus VMs. With shards 1 they are identical replicas; see shards.",
    )
    shards: int = Field(
        default=1,
        ge=1,
        le=4,
        description=(
            "Shares the node targets (kubelet, cAdvisor, the node agents' pods) are split into by a hash of the "
            "node's name: host i scrapes share i mod shards, so count / shards hosts hold each share (its "
            "replicas), and each host's VM and disk are sized for its share. Cluster-wide jobs "
            "(kube-state-metrics, API servers, etcd) are scraped by every host. Must divide count."
        ),
    )
    vm_size: str | None = Field(default=None, description="Override the size the sizing rules recommend.")
    retention_days: int = Field(default=15, ge=1, le=365, description="TSDB retention.")

    @model_validator(mode="after")
    def _shards_divide_hosts(self) -> PrometheusConfig:
        if self.count % self.shards:
            raise ValueError(
                f"shards {self.shards} does not divide count {self.count}: every share needs the same number of "
                "hosts (replicas), so set count to a multiple of shards"
            )
        return self


class NatConfig(StrictModel):
    """The NAT host for inbound DNAT to the service CIDR (the reference design)."""

    vm_size: str = Field(default="Standard_D4ds_v5", description="NAT host VM size.")


_CONTAINER = re.compile(r"^(?=.{3,63}$)[a-z0-9](?:[a-z0-9]|-(?!-))*[a-z0-9]$")
_OBJECT_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


BACKUP_CONTAINER = "etcd-backups"
"""The container etcd snapshots go to (written only by the etcd members' identities)."""


class ContainerConfig(StrictModel):
    """A blob container and who may use it (Azure RBAC on the container: shared keys are off)."""

    gpu_nodes: Literal["none", "read", "read-write"] = Field(
        default="read-write",
        description="What the GPU pools' managed identities may do: Storage Blob Data Reader (read) or "
        "Contributor (read-write), scoped to this container.",
    )
    reader_groups: list[str] = Field(
        default_factory=list,
        description="Microsoft Entra group object IDs whose members may read this container (researchers).",
    )

    @field_validator("reader_groups")
    @classmethod
    def _groups(cls, groups: list[str]) -> list[str]:
        for group in groups:
            if not _OBJECT_ID.match(group):
                raise ValueError(f"{group!r} is not an Entra object ID: use the group's GUID (az ad group show)")
        return groups


def _default_containers() -> dict[str, ContainerConfig]:
    return {"datasets": ContainerConfig(gpu_nodes="read"), "checkpoints": ContainerConfig(gpu_nodes="read-write")}


class StorageConfig(StrictModel):
    """Blob storage for datasets and checkpoints, reachable only through a private endpoint."""

    enabled: bool = Field(default=True, description="Create the storage account.")
    containers: dict[str, ContainerConfig] = Field(
        default_factory=_default_containers, description="Blob containers by name, with who may use them."
    )

    @field_validator("containers")
    @classmethod
    def _names(cls, containers: dict[str, ContainerConfig]) -> dict[str, ContainerConfig]:
        if BACKUP_CONTAINER in containers:
            raise ValueError(f"{BACKUP_CONTAINER!r} holds the etcd snapshots: name your container differently")
        for name in containers:
            if not _CONTAINER.match(name):
                raise ValueError(
                    f"{name!r} is not a blob container name Azure accepts: use 3-63 lowercase letters, digits "
                    "and single hyphens, starting and ending with a letter or digit"
                )
        return containers


class RepairsConfig(StrictModel):
    """What the pools' scale sets do on their own: repair a node whose boot failed, warn a node before deleting it."""

    action: Literal["Replace", "Reimage", "Restart"] = Field(
        default="Replace",
        description="Automatic instance repair of a node the boot-health signal reports Unhealthy (learn.microsoft.com "
        "virtual-machine-scale-sets-automatic-instance-repairs, 'Available repair actions'). Replace (Azure's default) "
        "puts a new VM on other hardware, which a broken GPU or InfiniBand port needs; each scale set keeps "
        "scale_set_headroom free for it. Reimage keeps the instance, its host and its IP; Restart only reboots.",
    )
    grace_minutes: int = Field(
        default=60,
        ge=10,
        le=90,
        description="Minutes after a VM is created or changed before it may be repaired (automaticRepairsPolicy."
        "gracePeriod: 10 to 90, same page 'Grace period'); the boot's time budget, as the health extension's grace.",
    )
    terminate_notice_minutes: int = Field(
        default=10,
        ge=5,
        le=15,
        description="How long Azure holds a scale-in or delete of a node so it can drain first (terminate "
        "notification notBeforeTimeout: 5 to 15 minutes; learn.microsoft.com "
        "virtual-machine-scale-sets-terminate-notification). The node acknowledges sooner once drained.",
    )


class NodeImagesConfig(StrictModel):
    """The gallery image versions a cluster's hosts and scale sets boot: the images stack's (modules/images).

    Required in effect, not optional: a host's boot installs nothing from the internet (it verifies its image
    and configures it), so no cluster host can boot a marketplace image. The version of each role's image is
    ``<minor>.<patch>.<build>`` of the cluster's own Kubernetes release (``Recipe.gallery_version``): only the
    build number is chosen here, so a cluster can never boot a kubelet of another release than it runs."""

    images_stack: str = Field(
        default="images",
        description="Stack reference of the images stack whose gallery holds the images: 'images' or "
        "'org/azure-gpu-k8s/images'. Its gallery is agk_<stack> in resource group agk-<stack>, same subscription.",
    )
    build: int = Field(
        default=1,
        ge=1,
        le=2_147_483_647,
        description="The images stack's build number every role boots (image version <minor>.<patch>.<build>). "
        "Raising it is a planned roll: scale sets get a new model, fixed hosts are replaced (agk plan --base).",
    )
    roles: dict[ImageRole, int] = Field(
        default_factory=dict,
        description="Per image role, a build other than `build` (roll one role at a time, e.g. gpu-node: 4).",
    )

    @field_validator("roles")
    @classmethod
    def _builds(cls, roles: dict[ImageRole, int]) -> dict[ImageRole, int]:
        for role, build in roles.items():
            if isinstance(build, bool) or not 1 <= build <= 2_147_483_647:
                raise ValueError(f"roles.{role}: {build!r} is not a build number: use a whole number of 1 or more")
        return roles


class ClusterConfig(StrictModel):
    """One GPU cluster spoke with its self-managed control plane."""

    name: str = Field(description="Cluster name (tag `cluster`, resource names).")
    hub_stack: str = Field(default="hub", description="Stack reference of the hub: 'hub' or 'org/azure-gpu-k8s/hub'.")
    node_images: NodeImagesConfig = Field(
        default_factory=NodeImagesConfig,
        description="The images stack's gallery image versions every host and scale set boots.",
    )
    network_plugin: Literal["azure-cni"] = Field(
        default="azure-cni",
        description="Pod networking: secondary IP configurations on node NICs (no overlay).",
    )
    service_cidr: str = Field(description="Kubernetes service CIDR (must not overlap any VNet).")
    api_servers: ApiServersConfig = Field(default_factory=ApiServersConfig)
    etcd: EtcdConfig = Field(default_factory=EtcdConfig)
    events_etcd: EtcdConfig | None = Field(
        default=None,
        description="Separate etcd for events. Tuning it leaves unset (rtt_ms, quota_backend_gib, snapshot_count, "
        "compaction_retention) follows cluster.etcd.",
    )
    prometheus: PrometheusConfig = Field(default_factory=PrometheusConfig)
    nat: NatConfig = Field(default_factory=NatConfig)
    storage: StorageConfig = Field(default_factory=StorageConfig)
    identity: IdentityConfig | None = Field(
        default=None,
        description="Researchers' sign-in (Microsoft Entra ID), their RBAC, and workload identity for the teams' pods "
        "(docs/researchers.md). Omitted: only the break-glass admin kubeconfig gets in, and pods reach no storage.",
    )
    system_pool: PoolConfig = Field(description="CPU nodes for cluster services.")
    gpu_pools: dict[str, GpuPoolConfig] = Field(min_length=1, description="GPU pools keyed by name.")
    kubernetes_version: str = Field(
        default=versions.DEFAULT_MINOR,
        description="Kubernetes minor every node and object targets: one of the versions table's "
        f"({', '.join(versions.SUPPORTED)}; modules/bootstrap/versions.py).",
    )
    kubernetes_patch: int | None = Field(
        default=None,
        description="Patch release of kubernetes_version (default: the newest the versions table knows).",
    )
    nodes: NodeTuning = Field(
        default_factory=NodeTuning, description="Every pool's kubelet and container runtime settings."
    )
    label_domain: str = Field(
        default="gpu.example.com",
        description="Domain of the node labels and taints this toolkit sets (<domain>/team=<team>).",
    )
    allow_forwarded_traffic: bool = Field(
        default=False, description="Let the hub forward traffic into this spoke (off: no transit)."
    )
    repairs: RepairsConfig = Field(
        default_factory=RepairsConfig,
        description="Automatic instance repairs and terminate notifications of the pools' scale sets.",
    )
    scale_sets_in_flight: int = Field(
        default=10,
        ge=1,
        le=1000,
        description="Scale sets `pulumi up` creates (or changes) at once: each waits for the one this many places "
        "before it, so a 76-set cluster is allocated in waves and a capacity or quota failure stops a wave, not "
        "the whole fleet.",
    )

    @field_validator("name")
    @classmethod
    def _cluster_name(cls, v: str) -> str:
        return _name("cluster", v)

    @field_validator("kubernetes_patch")
    @classmethod
    def _patch(cls, v: int | None) -> int | None:
        if v is not None and v < 0:
            raise ValueError(f"kubernetes_patch {v} is negative: use 0 or more, or remove it")
        return v

    @field_validator("label_domain")
    @classmethod
    def _label_domain(cls, v: str) -> str:
        # The kubelet refuses to start with a --node-labels key in the kubernetes.io or k8s.io
        # namespaces (the domain itself or any subdomain) unless it is one of Kubernetes' own
        # (cmd/kubelet/app/options/options.go ValidateKubeletFlags, isKubernetesLabel; the rule
        # NodeRestriction enforces on the API side). Those namespaces belong to Kubernetes.
        for reserved in ("kubernetes.io", "k8s.io"):
            if v == reserved or v.endswith("." + reserved):
                raise ValueError(
                    f"{v!r} is in the {reserved} namespace, which Kubernetes reserves: the kubelet refuses "
                    "--node-labels there (NodeRestriction), so no node would start; use a domain your "
                    "organisation owns, e.g. gpu.example.com"
                )
        return v

    @model_validator(mode="after")
    def _backups_need_storage(self) -> ClusterConfig:
        if self.etcd.backup.enabled and not self.storage.enabled:
            raise ValueError(
                "etcd.backup.enabled: snapshots go to the cluster's storage account, which storage.enabled "
                "turns off: enable storage or set etcd.backup.enabled: false"
            )
        if self.events_etcd is not None and "backup" in self.events_etcd.model_fields_set:
            # A setting that would do nothing must not look as if it did something.
            raise ValueError(
                "events_etcd.backup: the events etcd is never backed up (its events expire within an hour and "
                "nothing needs them after a restore): remove it"
            )
        return self

    @model_validator(mode="after")
    def _zonal_disks(self) -> ClusterConfig:
        # Premium SSD v2 disks are zonal only; etcd members take the API servers' zones.
        groups = [self.etcd, *([self.events_etcd] if self.events_etcd else [])]
        if not self.api_servers.zones and any(g.storage == "premium-ssd-v2" for g in groups):
            raise ValueError(
                "api_servers.zones is empty but etcd uses premium-ssd-v2, which Azure only offers zonal: "
                "list the region's zones (e.g. ['1', '2', '3']) or use etcd.storage: local-nvme"
            )
        return self

    @field_validator("gpu_pools")
    @classmethod
    def _no_system_pool_name(cls, pools: dict[str, GpuPoolConfig]) -> dict[str, GpuPoolConfig]:
        if "system" in pools:
            raise ValueError("a GPU pool cannot be called 'system': that name is the system pool's; rename it")
        return pools

    @field_validator("kubernetes_version")
    @classmethod
    def _version(cls, v: str) -> str:
        return versions.check_minor(v)

    @field_validator("gpu_pools")
    @classmethod
    def _pool_names(cls, pools: dict[str, GpuPoolConfig]) -> dict[str, GpuPoolConfig]:
        for name in pools:
            _name("pool", name)
        return pools


class ChangeAllowance(StrictModel):
    """A reviewed, named exception to the change policies of `agk review --base`."""

    urn: str | None = Field(default=None, min_length=1, description="The resource's URN, as agk plan --base lists it.")
    name: str | None = Field(default=None, min_length=1, description="Or its logical name (the URN's last part).")
    action: Literal["replace", "delete", "move", "add"] = Field(
        description="replace | delete | move (a subnet's new prefix) | add (an etcd member added by hand first)."
    )
    reason: str = Field(min_length=1, description="Why it is intended, e.g. the change ticket.")

    @field_validator("reason", "urn", "name")
    @classmethod
    def _not_blank(cls, v: str | None) -> str | None:
        if v is not None and not v.strip():
            raise ValueError("blank: say which resource, and why the change is intended (e.g. the change ticket)")
        return v.strip() if v is not None else None

    @model_validator(mode="after")
    def _one_target(self) -> ChangeAllowance:
        if (self.urn is None) == (self.name is None):
            raise ValueError("give exactly one of urn and name (the resource's logical name)")
        return self


class ChangesConfig(StrictModel):
    """Changes to deployed resources this stack means; `agk review --base` allows them."""

    allow: list[ChangeAllowance] = Field(default_factory=list, description="Reviewed allowances.")


class AddonsStackConfig(StrictModel):
    """A `<cluster>-addons` stack: the cluster's Kubernetes objects, deployed once its API answers."""

    cluster_stack: str = Field(description="The cluster stack whose outputs (kubeconfig, spec) it reads.")


def _location(v: str) -> str:
    if v not in REGIONS:
        guess = closest(v)
        hint = f"did you mean {guess!r}?" if guess else "use the name `az account list-locations` prints"
        raise ValueError(f"{v!r} is not an Azure region: {hint} (e.g. eastus2)")
    return v


StackKind = Literal["hub", "cluster", "addons", "images"]

# Why a section is not part of a stack of another kind, said when a stack file has one: by the stack's kind
# where the kind takes few sections, else by the section.
_ONLY_ITS_OWN = {
    "images": "it builds node images only",
    "addons": "it reads the cluster stack's outputs",
}
_WHOSE = {
    "image_build": "node images are an images stack's",
    "alerting": "alerts are a cluster stack's",
    "cluster": "remove it or set kind: cluster",
    "hub": "remove it or set kind: hub",
    "addons": "a cluster's add-ons are set in its cluster stack",
    "addons_stack": "remove it or set kind: addons",
    "bootstrap": "how hosts boot is set in a cluster stack's component sections (cluster.etcd, cluster.api_servers, ...)",
}
# Every top-level section some kind has, in the order a stack file lists them (the first foreign one is named).
_SECTIONS = (
    "location", "tags", "admin", "limits", "images", "network", "addons_stack", "image_build", "hub", "cluster",
    "changes", "bootstrap", "alerting", "addons",
)  # fmt: skip


class _Stack(StrictModel):
    """What every kind of stack has; each kind adds its own sections (a tagged union on ``kind``)."""

    changes: ChangesConfig = Field(
        default_factory=ChangesConfig, description="Allowances for the change policies (agk review --base)."
    )

    @model_validator(mode="before")
    @classmethod
    def _only_own_sections(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        kind = str(data.get("kind", ""))
        if "bootstrap" in data and kind == "cluster":
            raise ValueError(_bootstrap_moved(data["bootstrap"]))
        for key in _SECTIONS:
            if key in data and key not in cls.model_fields:
                article = "an" if kind[:1] in ("a", "e", "i", "o", "u") else "a"
                why = _WHOSE["image_build"] if key == "image_build" else _ONLY_ITS_OWN.get(kind) or _WHOSE[key]
                raise ValueError(f"{article} {kind} stack has no {key!r} section: {why}")
        return data


# Where the settings of the former ``bootstrap`` section went: each component's section has its count, sizes
# and tuning together. Its sub-sections, by the tuning model whose keys moved; then its single keys.
_MOVED_SECTIONS: dict[str, tuple[str, type[StrictModel]]] = {
    "etcd": ("cluster.etcd", EtcdTuning),
    "control_plane": ("cluster.api_servers", ControlPlaneTuning),
    "nodes": ("cluster.nodes", NodeTuning),
    "prometheus": ("cluster.prometheus", PrometheusTuning),
}
_MOVED_KEYS = {
    "kubernetes_patch": "cluster.kubernetes_patch",
    "preflight_timeout": "addons.preflight.stuck_alert_after",
}
BOOTSTRAP_MOVED = {**{k: new for k, (new, _) in _MOVED_SECTIONS.items()}, **_MOVED_KEYS}


def _bootstrap_moved(raw: object) -> str:
    """The one line for a stack file that still has a ``bootstrap`` section: its first key's new place."""
    where, why = (
        f"{PROJECT}:bootstrap",
        "the bootstrap section is gone: each component's settings are in its own section",
    )
    if not isinstance(raw, Mapping) or not raw:
        return f"{where}: {why} ({', '.join(sorted(set(BOOTSTRAP_MOVED.values())))}): remove it"
    section, value = next(iter(raw.items()))
    section = str(section)
    if section in _MOVED_KEYS:
        return f"{where}.{section}: moved to {PROJECT}:{_MOVED_KEYS[section]}: move it there ({why})"
    if section not in _MOVED_SECTIONS:
        return f"{where}.{section}: unknown key ({why}): remove it or fix the spelling"
    new, model = _MOVED_SECTIONS[section]
    if not isinstance(value, Mapping) or not value:
        return f"{where}.{section}: moved to {PROJECT}:{new}: move its keys there ({why})"
    key = str(next(iter(value)))
    removed = RENAMED.get(f"{section}.{key}") or RENAMED.get(key)
    if removed:
        return f"{where}.{section}.{key}: {removed}"
    if key not in model.model_fields:
        return f"{where}.{section}.{key}: unknown key ({why}): remove it or fix the spelling (see stacks/schema.json)"
    return f"{where}.{section}.{key}: moved to {PROJECT}:{new}.{key}: move it there ({why})"


class _Located(_Stack):
    """A stack that deploys into a region of its own (hub, cluster, images)."""

    location: Annotated[str, AfterValidator(_location)] = Field(description="Azure region, e.g. eastus2.")
    tags: TagsConfig = Field(description="Who owns what the stack deploys, and who pays.")
    images: ImagesConfig = Field(default_factory=ImagesConfig, description="Pinned VM images.")


class _Networked(_Located):
    """A stack with a VNet and machines of its own (hub, cluster)."""

    admin: AdminConfig = Field(description="The machines' administrator account.")
    limits: dict[str, LimitOverride] = Field(
        default_factory=dict,
        description="Quotas the subscription has been granted (only adjustable limits, e.g. "
        "vcpus-standardNDSH100v5Family), keyed by limit name; hard Azure limits cannot be overridden.",
    )
    network: NetworkConfig = Field(description="The VNet's address space, pinned subnets and egress.")


class HubStack(_Networked):
    """The shared network: researcher access, DNS and routes for every cluster spoke."""

    kind: Literal["hub"] = Field(description="hub: the shared network.")
    hub: HubConfig = Field(default_factory=HubConfig, description="Bastion, jump hosts, the private DNS zone.")


class ClusterStack(_Networked):
    """A cluster spoke: its control plane, pools, monitoring hosts and storage."""

    kind: Literal["cluster"] = Field(description="cluster: a spoke with one Kubernetes cluster.")
    cluster: ClusterConfig = Field(description="The cluster: pools, control plane, storage, identity.")
    alerting: AlertingConfig | None = Field(
        default=None,
        description="Where a cluster's alerts go (receivers, routes by severity). Omitted: Alertmanager keeps "
        "alerts and tells no one (docs/oncall.md).",
    )
    addons: AddonsConfig = Field(default_factory=AddonsConfig)


class AddonsStack(_Stack):
    """A ``<cluster>-addons`` stack: the cluster's Kubernetes objects, deployed once its API answers."""

    kind: Literal["addons"] = Field(description="addons: a cluster's Kubernetes objects.")
    addons_stack: AddonsStackConfig = Field(description="The cluster stack it deploys into.")


class ImagesStack(_Located):
    """The node images: a gallery image per role, built from the versions table."""

    kind: Literal["images"] = Field(description="images: the node images.")
    image_build: ImageBuildConfig = Field(description="The gallery, the release and the roles to build.")


# One model per kind of stack; a stack file's `kind` picks it (and JSON Schema's discriminator says the same).
STACK_KINDS: dict[str, type[_Stack]] = {
    "hub": HubStack,
    "cluster": ClusterStack,
    "addons": AddonsStack,
    "images": ImagesStack,
}
StackConfig = HubStack | ClusterStack | AddonsStack | ImagesStack
NetworkedStack = HubStack | ClusterStack
"""The stacks of one hub-and-spoke network (each with a VNet)."""


_IN_IMAGE = (
    "removed: {what} now comes with the node image, at the versions table's release (modules/bootstrap/versions.py "
    "row {row}); remove the key, and bump the row and rebuild the images to change it (docs/images.md)"
)
# Keys earlier versions accepted, and what replaced them (by key, or by section.key where the key is generic).
RENAMED = {
    "retest_schedule": "replaced by retest_every_minutes (how often the re-test runs) and retest_period_days "
    "(in how many days every GPU node is re-tested): the nodes per run follow from the fleet's size",
    "retest_max_nodes": "no longer set by hand: set retest_period_days; each run takes ceil(GPU nodes / runs "
    "in the period) nodes",
    "max_pods": "no longer set by hand: set pod_ips (the NIC's secondary IP configurations); the kubelet's "
    "maxPods is pod_ips plus the host-network pods the cluster runs on the node",
    # Issue 21: hosts boot node images built from the versions table; nothing is downloaded at boot.
    "azure_cni_sha256": _IN_IMAGE.format(what="Azure CNI", row="azure-cni")
    + " (built from its Go module, checked by go.sum: no checksum to set)",
    "azure_cni_version": _IN_IMAGE.format(what="Azure CNI", row="azure-cni"),
    "cni_plugins_version": _IN_IMAGE.format(what="the CNI plugins", row="cni-plugins"),
    "cni_plugins_sha256": _IN_IMAGE.format(what="the CNI plugins", row="cni-plugins"),
    "prometheus.version": _IN_IMAGE.format(what="Prometheus", row="prometheus"),
    "alertmanager_version": _IN_IMAGE.format(what="Alertmanager", row="alertmanager"),
    "grafana_version": _IN_IMAGE.format(what="Grafana", row="grafana (APT_PACKAGES)")
    + "; set cluster.prometheus.grafana: false to run none",
}


def _loc(loc: tuple[int | str, ...]) -> str:
    head, *rest = loc if loc else ("",)
    text = f"{PROJECT}:{head}"
    for part in rest:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text


def _one_line(err: ValidationError, section: tuple[str, ...] = ()) -> str:
    first = err.errors(include_url=False)[0]
    # Unions report every branch; the error of the branch that matched the input type is first.
    where, kind, msg = _loc((*section, *first["loc"])), first["type"], first["msg"]
    value, ctx = first.get("input"), first.get("ctx") or {}
    if not first["loc"] and not section:
        return str(msg).removeprefix("Value error, ")
    if kind == "extra_forbidden":
        loc = [str(x) for x in first["loc"]]
        renamed = RENAMED.get(".".join(loc[-2:])) or RENAMED.get(loc[-1])
        if renamed:
            return f"{where}: {renamed}"
        return f"{where}: unknown key: remove it or fix the spelling (see stacks/schema.json)"
    if kind == "missing":
        return f"{where}: missing: add it to the stack config"
    if kind == "value_error":
        return f"{where}: {msg.removeprefix('Value error, ')}"
    if kind == "literal_error":
        return f"{where}: {value!r} is not allowed: use {ctx.get('expected', msg)}"
    return f"{where}: {_plain(kind, value, ctx, msg)}"


def _plain(kind: str, value: Any, ctx: Mapping[str, Any], msg: str) -> str:
    """Pydantic's error kinds said the way a stack file's author fixes them."""
    if kind == "greater_than_equal":
        return f"{value!r} is too small: use {ctx['ge']} or more"
    if kind == "greater_than":
        return f"{value!r} is too small: use more than {ctx['gt']}"
    if kind == "less_than_equal":
        return f"{value!r} is too large: use {ctx['le']} or less"
    if kind == "less_than":
        return f"{value!r} is too large: use less than {ctx['lt']}"
    if kind == "too_short":
        return f"empty: give at least {ctx.get('min_length', 1)}"
    if kind == "string_too_short":
        return f"{value!r} is too short: give at least {ctx.get('min_length', 1)} character(s)"
    if kind == "string_type" and isinstance(value, int | float) and not isinstance(value, bool):
        hint = " (YAML reads an unquoted 1.30 as the number 1.3)" if isinstance(value, float) else ""
        return f"{value!r} is a number, not text: quote it in the stack file{hint}"
    if kind == "string_type":
        return f"{value!r} is not text: write a string"
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return f"{value!r} is not a whole number: write one like 3"
    if kind in ("bool_type", "bool_parsing"):
        return f"{value!r} is not true or false: write true or false"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return f"{value!r} is not a mapping: write it as 'key: value' lines"
    if kind in ("list_type", "tuple_type"):
        return f"{value!r} is not a list: write it as '- item' lines"
    return f"{value!r} is invalid: {msg.lower()}"


def parse_section(model: type[_M], raw: Any, key: str) -> _M:
    """One section of a stack file (``azure-gpu-k8s:<key>``) validated on its own, errors as for the whole."""
    try:
        return model.model_validate(raw)
    except ValidationError as err:
        raise ConfigError(_one_line(err, (key,))) from None


def parse_config(raw: Mapping[str, Any]) -> StackConfig:
    """Validate a stack's config given as Pulumi holds it (``"<namespace>:<key>" -> value``).

    Values may be native (from a stack file) or JSON strings (Pulumi's runtime form).
    """
    ours: dict[str, Any] = {}
    for key, value in raw.items():
        namespace, sep, name = key.partition(":")
        if not sep:
            raise ConfigError(f"{key}: config key without a namespace: write it as {PROJECT}:{key}")
        if namespace in FOREIGN_NAMESPACES:
            continue
        if namespace != PROJECT:
            raise ConfigError(f"{key}: unknown config namespace {namespace!r}: use {PROJECT}:{name}")
        if isinstance(value, str) and value[:1] in "{[":
            with contextlib.suppress(json.JSONDecodeError):
                value = json.loads(value)
        ours[name] = value
    kind = ours.get("kind")
    if kind is None:
        raise ConfigError(f"{PROJECT}:kind: missing: add it to the stack config ({_kinds()})")
    model = STACK_KINDS.get(kind) if isinstance(kind, str) else None
    if model is None:
        raise ConfigError(f"{PROJECT}:kind: {kind!r} is not allowed: use {_kinds()}")
    try:
        return model.model_validate(ours)  # type: ignore[return-value]
    except ValidationError as err:
        first = err.errors(include_url=False)[0]
        if first["type"] == "missing" and len(first["loc"]) == 1:
            raise ConfigError(
                f"kind is {kind} but {PROJECT}:{first['loc'][0]} is missing: add it to the stack config"
            ) from None
        raise ConfigError(_one_line(err)) from None


def _kinds() -> str:
    *most, last = (repr(k) for k in STACK_KINDS)
    return f"{', '.join(most)} or {last}"


def resource_group_name(stack: str) -> str:
    """The resource group a hub or cluster stack deploys into (named once: the program and the cloud
    provider's azure.json must agree)."""
    return f"agk-{stack}"


def stack_file(stacks_dir: Path, stack: str) -> Path:
    return stacks_dir / f"Pulumi.{stack}.yaml"


# Top-level keys Pulumi itself writes into a stack file (`pulumi stack init` with the passphrase or a
# cloud secrets provider, `pulumi config env add`): see Pulumi's "Project and stack settings" and
# pulumi.automation's ProjectStack (config, secretsprovider, encryptedkey, encryptionsalt, environment).
PULUMI_STACK_KEYS = frozenset({"config", "secretsprovider", "encryptedkey", "encryptionsalt", "environment"})


class _UniqueKeyLoader(yaml.SafeLoader):
    """safe_load that refuses a key given twice in one mapping (YAML says keys are unique; PyYAML keeps
    the last silently, so a second `a100:` would replace the first pool without a word)."""


def _mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue  # `<<: *anchor`: the merged keys yield to the explicit ones (construct_mapping merges)
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} (first on line {seen[key] + 1})", key_node.start_mark
            )
        seen[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


MAX_STACK_FILE_BYTES = 1024 * 1024
"""A stack file is a few kilobytes (prod-7500's: 4 KB): anything past a megabyte is refused before it is parsed."""
MAX_YAML_NODES = 100_000
"""Values a stack file may expand to, aliases counted each time they are used: bounds an alias bomb (a few
anchors that expand to billions of values) before anything is expanded."""


def _expanded(node: yaml.Node, where: str) -> None:
    """ConfigError when the composed document, aliases expanded, would exceed MAX_YAML_NODES (or recurses)."""
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(node, False)]
    while stack:
        current, done = stack.pop()
        key = id(current)
        children = (
            [n for pair in current.value for n in pair]
            if isinstance(current, yaml.MappingNode)
            else list(current.value)
            if isinstance(current, yaml.SequenceNode)
            else []
        )
        if done:
            on_path.discard(key)
            sizes[key] = 1 + sum(sizes[id(c)] for c in children)
            if sizes[key] > MAX_YAML_NODES:
                line = current.start_mark.line + 1
                raise ConfigError(
                    f"{where} line {line}: expands to more than {MAX_YAML_NODES:,} values (aliases of aliases):"
                    " write the values out, or use fewer aliases"
                )
            continue
        if key in sizes:
            continue
        if key in on_path:
            raise ConfigError(f"{where} line {current.start_mark.line + 1}: an alias refers to itself: remove it")
        on_path.add(key)
        stack.append((current, True))
        stack.extend((c, False) for c in children if id(c) not in sizes)


def parse_yaml(text: str, where: str) -> Any:
    """One YAML document with unique keys; errors name the line and the fix. Bounded before it is expanded:
    at most MAX_STACK_FILE_BYTES, and at most MAX_YAML_NODES values once aliases are expanded."""
    size = len(text.encode("utf-8"))
    if size > MAX_STACK_FILE_BYTES:
        raise ConfigError(
            f"{where}: {size:,} bytes, more than a stack file's {MAX_STACK_FILE_BYTES:,}: is it the right file?"
        )
    try:
        loader = _UniqueKeyLoader(text)  # a SafeLoader subclass: no arbitrary objects
        try:
            node = loader.get_single_node()
            if node is None:
                return None
            _expanded(node, where)
            return loader.construct_document(node)
        finally:
            loader.dispose()
    except yaml.constructor.ConstructorError as err:
        mark = err.problem_mark
        line = f" line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{where}{line}: {err.problem}: give each key once") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{where}{line}: not valid YAML: fix the syntax") from None


def read_text(path: Path) -> str:
    """A stack file's text; unreadable, oversized or non-UTF-8 files are one line, not a traceback."""
    try:
        size = path.stat().st_size
        if size > MAX_STACK_FILE_BYTES:
            raise ConfigError(
                f"{path}: {size:,} bytes, more than a stack file's {MAX_STACK_FILE_BYTES:,}: is it the right file?"
            )
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not UTF-8 (byte {err.start}): save the stack file as UTF-8") from None
    except OSError as err:
        raise ConfigError(f"{path}: cannot be read ({err.strerror}): check its permissions") from None


def check_stack_path(path: Path) -> None:
    """ConfigError unless ``path`` is a regular file: absent (naming the stacks there) or something else."""
    if path.is_file():
        return
    if path.exists() or path.is_symlink():
        kind = "a directory" if path.is_dir() else "not a regular file (a FIFO, socket, device or broken link)"
        raise ConfigError(f"{path}: {kind}, not a stack file: replace it with the stack's YAML file or remove it")
    stacks = stack_names(path.parent)
    raise ConfigError(f"{path}: no such stack file: use one of {', '.join(stacks) or '(none)'}")


def read_stack_file(path: Path) -> dict[str, Any]:
    """The raw ``config:`` map of a stack file."""
    check_stack_path(path)
    doc = parse_yaml(read_text(path), str(path))
    if doc is None:
        raise ConfigError(f"{path}: empty: a stack file starts with 'config:'")
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: a {type(doc).__name__}, not a mapping: a stack file starts with 'config:'")
    extra = set(doc) - PULUMI_STACK_KEYS
    if extra:
        raise ConfigError(
            f"{path}: unknown top-level key {sorted(map(str, extra))[0]!r}: put settings under 'config:' "
            f"(Pulumi writes only {', '.join(sorted(PULUMI_STACK_KEYS))})"
        )
    config = doc.get("config") or {}
    if not isinstance(config, dict):
        raise ConfigError(f"{path}: 'config' is not a mapping: fix the stack file")
    return config


def load_stack(stacks_dir: Path, stack: str) -> StackConfig:
    """Read and validate ``stacks/Pulumi.<stack>.yaml`` (no Pulumi engine involved)."""
    path = stack_file(stacks_dir, stack)
    try:
        return parse_config(read_stack_file(path))
    except ConfigError as err:
        raise err.in_stack(stack) from None


def stack_names(stacks_dir: Path) -> list[str]:
    """The stacks whose files are there (regular files only: a folder named like one is not a stack)."""
    return sorted(
        p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in stacks_dir.glob("Pulumi.*.yaml") if p.is_file()
    )
