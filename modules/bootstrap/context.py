"""Everything the bootstrap templates need, as plain frozen values (no config models, no Pulumi).

``modules/stackplan/boot_context.py`` builds a ``BootstrapContext`` from a stack's config and its address
plan; every renderer and the PKI spec read only this.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from ipaddress import IPv4Address, IPv4Network
from typing import Literal

from modules.address_plan.addressing import IMDS
from modules.bootstrap.alerting import UNCONFIGURED, Alerting

EtcdRole = Literal["etcd", "events-etcd"]
PoolRole = Literal["gpu-node", "system-node"]

# Ports, named once (kubeadm's constants.go for the Kubernetes ones); templates get them as ``PORTS``.
ETCD_CLIENT_PORT = 2379
ETCD_PEER_PORT = 2380
ETCD_METRICS_PORT = 2381
APISERVER_PORT = 6443
KUBELET_PORT = 10250
KUBELET_HEALTHZ_PORT = 10248
KUBE_PROXY_METRICS_PORT = 10249
KUBE_PROXY_HEALTHZ_PORT = 10256
CONTROLLER_MANAGER_PORT = 10257
SCHEDULER_PORT = 10259
NODE_EXPORTER_PORT = 9100
PROMETHEUS_PORT = 9090
ALERTMANAGER_PORT = 9093
ALERTMANAGER_CLUSTER_PORT = 9094
"""Alertmanager's API and its gossip (TCP and UDP): its defaults (alertmanager --help)."""
GRAFANA_PORT = 3000
# The boot health endpoint every pool node serves on loopback for the scale sets' Application Health
# extension (rich health states: HTTP 200 with {"ApplicationHealthState": "Healthy"|"Unhealthy"}).
BOOT_HEALTH_PORT = 10280
BOOT_HEALTH_PATH = "/boot-health"
# Azure's instance metadata service: host-local, needs the Metadata header and no proxy (IMDS docs).
IMDS_URL = f"http://{IMDS}/metadata"
IMDS_API_VERSION = "2021-02-01"


@dataclass(frozen=True)
class NodePorts:
    apiserver: int = APISERVER_PORT
    kubelet: int = KUBELET_PORT
    kubelet_healthz: int = KUBELET_HEALTHZ_PORT
    kube_proxy_metrics: int = KUBE_PROXY_METRICS_PORT
    kube_proxy_healthz: int = KUBE_PROXY_HEALTHZ_PORT
    controller_manager: int = CONTROLLER_MANAGER_PORT
    scheduler: int = SCHEDULER_PORT
    boot_health: int = BOOT_HEALTH_PORT


PORTS = NodePorts()


@dataclass(frozen=True)
class Host:
    """A fixed host: its stable name (also its hostname) and static address."""

    name: str
    ip: IPv4Address


@dataclass(frozen=True)
class EtcdBackup:
    """Scheduled snapshots of one etcd cluster (modules/bootstrap/etcd_backup.py renders them)."""

    every_minutes: int
    """Minutes between two snapshots of the cluster (one member's; the members' timers are offset)."""
    container: str
    """Blob container of the cluster's storage account the snapshots go to."""


@dataclass(frozen=True)
class EtcdCluster:
    """One etcd cluster (the main one, or the separate events cluster)."""

    role: EtcdRole
    token: str
    """initial-cluster-token: distinct per cluster so members of two clusters never join up."""
    members: tuple[Host, ...]
    storage: Literal["local-nvme", "premium-ssd-v2"]
    heartbeat_ms: int
    election_ms: int
    quota_bytes: int
    snapshot_count: int
    compaction_retention: str
    backup: EtcdBackup | None = None
    """None: no snapshots (backups disabled, or the events etcd, which is never backed up)."""

    @property
    def client_urls(self) -> tuple[str, ...]:
        return tuple(f"https://{m.ip}:{ETCD_CLIENT_PORT}" for m in self.members)

    @property
    def initial_cluster(self) -> str:
        return ",".join(f"{m.name}=https://{m.ip}:{ETCD_PEER_PORT}" for m in self.members)

    def member(self, name: str) -> Host:
        for m in self.members:
            if m.name == name:
                return m
        raise KeyError(name)


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: Literal["NoSchedule", "NoExecute", "PreferNoSchedule"]


@dataclass(frozen=True)
class PoolBoot:
    """A pool of identical nodes that boot from one user-data."""

    name: str
    role: PoolRole
    vm_size: str
    pod_ips: int
    """Secondary IP configurations on each node's NIC (one per pod that is not host-network)."""
    kubelet_max_pods: int
    """pod_ips plus the host-network pods (static pods, node agents) the cluster runs on these nodes."""
    gpus: int
    gpu_model: str
    infiniband: bool
    team: str | None
    subnet: IPv4Network
    labels: tuple[tuple[str, str], ...]
    taints: tuple[Taint, ...]


@dataclass(frozen=True)
class ControlPlaneHosts:
    apiservers: tuple[Host, ...]
    max_requests_inflight: int
    max_mutating_requests_inflight: int
    goaway_chance: float | None
    """Only with several API servers behind the load balancer; None leaves the flag out."""
    client_qps: int
    client_burst: int
    audit_log_max_age_days: int
    encryption_keys: tuple[str, ...]
    """Secret encryption keys by name, in the API servers' order: the first encrypts (encryption.py)."""


@dataclass(frozen=True)
class NodeSettings:
    image_gc_high_percent: int
    image_gc_low_percent: int
    image_pull_progress_deadline: str


@dataclass(frozen=True)
class ClusterImages:
    """The images of one Kubernetes release (modules.bootstrap.versions)."""

    apiserver: str
    controller_manager: str
    scheduler: str
    proxy: str
    pause: str


@dataclass(frozen=True)
class PrometheusSettings:
    version: str
    """Upstream release (distribution builds lack Kubernetes service discovery)."""
    hosts: tuple[Host, ...]
    shards: int
    """The kubelet/cAdvisor targets are split into this many shares; host i scrapes share i % shards."""
    retention_days: int
    gomaxprocs: int
    query_timeout: str
    query_max_samples: int
    scrape_interval: str
    remote_write_url: str | None
    data_disk_gib: int
    alertmanager_version: str
    grafana_version: str | None
    """Grafana beside each Prometheus (None: none)."""
    """Upstream Alertmanager release on the same hosts (the versions table's alertmanager row)."""


@dataclass(frozen=True)
class ApiserverIdentity:
    """Who the API servers trust and as whom they sign (modules/identity/oidc.py renders both)."""

    service_account_issuers: tuple[str, ...]
    """The public issuer Azure fetches first (it signs), then the in-cluster one (still accepted)."""
    jwks_uri: str
    """Where the public issuer's keys are published (the discovery document the API server serves names it)."""
    authentication_config: str
    """AuthenticationConfiguration YAML: researchers' Entra ID tokens."""


@dataclass(frozen=True)
class NodeImageExpectation:
    """What a host's node image must be: the fields of its manifest (``/etc/agk/image.json``, modules/images)
    that name the role, the Kubernetes release and every versions-table row it installs."""

    role: str
    """The image role (``etcd`` for both etcd clusters)."""
    version: str
    """The gallery image version the host boots (35.8.1), named when the check fails."""
    release: str
    artifacts: tuple[tuple[str, str, str], ...]
    """(name, version, sha256) of every row the image installs."""

    def to_json(self) -> dict[str, object]:
        return {
            "role": self.role,
            "version": self.version,
            "release": self.release,
            "artifacts": [{"name": n, "version": v, "sha256": s} for n, v, s in self.artifacts],
        }


@dataclass(frozen=True)
class BootstrapContext:
    """The cluster as the bootstrap files see it."""

    cluster: str
    kubernetes_version: str
    """Full release, e.g. 1.35.8 (images, packages)."""
    images: ClusterImages
    label_domain: str
    cluster_domain: str
    service_cidr: IPv4Network
    dns_service_ip: IPv4Address
    apiserver_service_ip: IPv4Address
    apiserver_vip: IPv4Address
    internal_cidrs: tuple[IPv4Network, ...]
    """Everything that is not the internet for egress accounting (address plan, not a literal)."""
    etcd: EtcdCluster
    events_etcd: EtcdCluster | None
    control_plane: ControlPlaneHosts
    pools: tuple[PoolBoot, ...]
    sizing_nodes: int
    """The node count the control plane is sized for: the peak rounded up to its sizing step (it changes only
    when a step is crossed, so a small pool change rewrites no control-plane file)."""
    node: NodeSettings
    prometheus: PrometheusSettings
    nat: Host
    preflight_timeout: str
    fatal_xids: tuple[int, ...]
    """XIDs that fail a node (the stack's ``addons.health.fatal_xids``, shared with the XID rule)."""
    alerting: Alerting = UNCONFIGURED
    node_images: Mapping[str, NodeImageExpectation] = field(default_factory=dict)
    """Cluster role -> the node image its hosts boot, as its manifest must say (the first boot step checks)."""
    """Where Alertmanager sends alerts (the stack's ``alerting`` section)."""
    identity: ApiserverIdentity | None = None
    """Workload identity's issuer and researchers' sign-in (``cluster.identity``); None: the in-cluster issuer
    only, and client certificates are the only way in for people."""

    @property
    def kubernetes_minor(self) -> str:
        return ".".join(self.kubernetes_version.split(".")[:2])

    @property
    def preflight_taint_key(self) -> str:
        return f"{self.label_domain}/preflight"

    @property
    def apiserver_url(self) -> str:
        return f"https://{self.apiserver_vip}:{APISERVER_PORT}"

    def pool(self, name: str) -> PoolBoot:
        for p in self.pools:
            if p.name == name:
                return p
        raise KeyError(name)
