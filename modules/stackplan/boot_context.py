"""From a cluster stack's config and address plan to the pure ``BootstrapContext``."""

from __future__ import annotations

from collections.abc import Mapping
from ipaddress import IPv4Address

from modules.address_plan.host_addresses import ClusterAddresses
from modules.bootstrap import alerting, versions
from modules.bootstrap.config import EtcdTuning
from modules.bootstrap.context import (
    BootstrapContext,
    ClusterImages,
    ControlPlaneHosts,
    EtcdBackup,
    EtcdCluster,
    EtcdRole,
    Host,
    NodeImageExpectation,
    NodeSettings,
    PoolBoot,
    PrometheusSettings,
)
from modules.bootstrap.roles import ROLES
from modules.cluster.spec import CLUSTER_DOMAIN
from modules.config_model import PROJECT
from modules.errors import ConfigError
from modules.identity.plan import apiserver_identity
from modules.images.recipe import recipe
from modules.stackplan.config import BACKUP_CONTAINER, ApiServersConfig, ClusterStack, EtcdConfig, StackConfig
from modules.stackplan.node_images import node_images
from modules.stackplan.pools import ClusterPools, PoolPlan
from modules.vm_sizing import formulas
from modules.vm_sizing.skus import sku

GIB = 1024**3


def _hosts(addresses: Mapping[str, IPv4Address]) -> tuple[Host, ...]:
    return tuple(Host(name, ip) for name, ip in addresses.items())


def _etcd(role: EtcdRole, cluster: str, etcd: EtcdConfig, hosts: tuple[Host, ...]) -> EtcdCluster:
    rtt = etcd.rtt_ms
    return EtcdCluster(
        role=role,
        token=f"{cluster}-{role}",
        members=hosts,
        storage=etcd.storage,
        heartbeat_ms=rtt,
        election_ms=10 * rtt,
        quota_bytes=etcd.quota_backend_gib * GIB,
        snapshot_count=etcd.snapshot_count,
        compaction_retention=etcd.compaction_retention,
        # Only the main etcd is backed up (EtcdConfig.backup says why the events etcd is not).
        backup=EtcdBackup(etcd.backup.every_minutes, BACKUP_CONTAINER)
        if role == "etcd" and etcd.backup.enabled
        else None,
    )


def _follows(events: EtcdConfig, main: EtcdConfig) -> EtcdConfig:
    """The events etcd's section with the tuning it leaves unset taken from the main etcd's (one section tuned
    both before each cluster had its own: settings moved from there keep holding for both)."""
    return events.model_copy(
        update={k: getattr(main, k) for k in EtcdTuning.model_fields if k not in events.model_fields_set}
    )


def _control_plane(nodes: int, hosts: tuple[Host, ...], tuning: ApiServersConfig) -> ControlPlaneHosts:
    """API server and client limits for ``nodes``, the cluster's sizing step (modules.vm_sizing.formulas);
    a value set in cluster.api_servers wins."""
    reads, mutating = formulas.apiserver_inflight(nodes)
    if tuning.max_requests_inflight:
        # The default mutating limit follows reads set by hand, so raising only the reads raises both.
        reads, mutating = (
            tuning.max_requests_inflight,
            formulas.apiserver_inflight_mutating(tuning.max_requests_inflight),
        )
    mutating = tuning.max_mutating_requests_inflight or mutating
    qps = tuning.client_qps or formulas.client_qps(nodes)
    return ControlPlaneHosts(
        apiservers=hosts,
        max_requests_inflight=reads,
        max_mutating_requests_inflight=mutating,
        goaway_chance=0.001 if len(hosts) > 1 else None,
        client_qps=qps,
        client_burst=tuning.client_burst or formulas.client_burst(qps),
        audit_log_max_age_days=tuning.audit_log_max_age_days,
        encryption_keys=tuple(tuning.encryption_keys),
    )


def _pool(pool: PoolPlan, addresses: ClusterAddresses) -> PoolBoot:
    try:
        subnet = addresses.subnets[pool.subnet]
    except KeyError:
        raise ConfigError(
            f"{PROJECT}:cluster: pool {pool.name!r} has no subnet {pool.subnet!r} in the address plan: re-run the plan"
        ) from None
    return PoolBoot(
        name=pool.name,
        role=pool.role,
        vm_size=pool.vm_size,
        pod_ips=pool.pod_ips,
        kubelet_max_pods=pool.kubelet_max_pods,
        gpus=pool.gpus_per_node,
        gpu_model=sku(pool.vm_size).gpu_model,
        infiniband=pool.infiniband,
        team=pool.team,
        subnet=subnet,
        labels=pool.labels,
        taints=pool.taints,
    )


def image_expectations(config: ClusterStack, release: str) -> dict[str, NodeImageExpectation]:
    """Per cluster role, the node image its hosts must have booted: the role's recipe for ``release`` (what the
    images stack builds from the same versions table) and the gallery version the cluster chose."""
    cluster = config.cluster
    roles = tuple(r for r in ROLES if r != "events-etcd" or cluster.events_etcd is not None)
    out: dict[str, NodeImageExpectation] = {}
    for role, image in node_images(cluster, release, roles).items():
        # A row without a verified sha256 (a placeholder, or none) is refused here, naming it: exit status 2.
        made = recipe(image.role, release, images=config.images, key="cluster.kubernetes_version")
        out[role] = NodeImageExpectation(
            role=image.role,
            version=image.version,
            release=made.release,
            artifacts=tuple((i.row.name, i.row.version, i.sha256) for i in made.installs),
        )
    return out


def bootstrap_context(
    config: StackConfig, addresses: ClusterAddresses, pools: ClusterPools, stack: str
) -> BootstrapContext:
    """The context every bootstrap renderer reads (``stack`` names the workload identity issuer); raises
    ConfigError for a non-cluster stack."""
    if not isinstance(config, ClusterStack):
        raise ConfigError(f"{PROJECT}:kind: a {config.kind} stack boots no nodes: render a cluster stack")
    cluster = config.cluster
    domain = cluster.label_domain
    xids = config.addons.health.fatal_xids
    if not xids:
        raise ConfigError(
            f"{PROJECT}:addons.health.fatal_xids: empty: list the XIDs that fail a node (Azure's list: github.com/Azure/azurehpc-health-checks)"
        )
    events = None
    if cluster.events_etcd is not None:
        events = _etcd(
            "events-etcd", cluster.name, _follows(cluster.events_etcd, cluster.etcd), _hosts(addresses.events_etcd)
        )
    tuning, nodes = cluster.prometheus, cluster.nodes
    release = versions.release(cluster.kubernetes_version)
    patch = cluster.kubernetes_patch
    return BootstrapContext(
        cluster=cluster.name,
        kubernetes_version=release.release(patch),
        images=ClusterImages(
            apiserver=release.image("kube-apiserver", patch),
            controller_manager=release.image("kube-controller-manager", patch),
            scheduler=release.image("kube-scheduler", patch),
            proxy=release.image("kube-proxy", patch),
            pause=release.pause_image,
        ),
        label_domain=domain,
        cluster_domain=CLUSTER_DOMAIN,
        service_cidr=addresses.service_cidr,
        dns_service_ip=addresses.dns_service_ip,
        apiserver_service_ip=addresses.apiserver_service_ip,
        apiserver_vip=addresses.apiserver_vip,
        internal_cidrs=tuple(addresses.internal_cidrs),
        etcd=_etcd("etcd", cluster.name, cluster.etcd, _hosts(addresses.etcd)),
        events_etcd=events,
        control_plane=_control_plane(pools.sizing_nodes, _hosts(addresses.apiservers), cluster.api_servers),
        pools=tuple(_pool(p, addresses) for p in pools.pools.values()),
        sizing_nodes=pools.sizing_nodes,
        node=NodeSettings(
            image_gc_high_percent=nodes.image_gc_high_percent,
            image_gc_low_percent=nodes.image_gc_low_percent,
            image_pull_progress_deadline=nodes.image_pull_progress_deadline,
        ),
        prometheus=PrometheusSettings(
            # The Prometheus image's releases (modules/images): what the hosts run, whatever the stack says.
            version=versions.ARTIFACTS["prometheus"].version,
            hosts=_hosts(addresses.prometheus),
            shards=tuning.shards,
            retention_days=tuning.retention_days,
            gomaxprocs=tuning.gomaxprocs,
            query_timeout=tuning.query_timeout,
            query_max_samples=tuning.query_max_samples,
            scrape_interval=tuning.scrape_interval,
            remote_write_url=tuning.remote_write_url,
            alertmanager_version=versions.ARTIFACTS["alertmanager"].version,
            grafana_version=versions.APT_PACKAGES["grafana"].version if tuning.grafana else None,
            data_disk_gib=tuning.data_disk_gib
            or formulas.prometheus_disk_gib(
                pools.prometheus_series(tuning.shards),
                tuning.retention_days,
                formulas.duration_seconds(tuning.scrape_interval),
            ),
        ),
        nat=Host(f"{cluster.name}-nat-0", addresses.nat),
        preflight_timeout=config.addons.preflight.stuck_alert_after,
        fatal_xids=tuple(sorted(set(xids))),
        identity=apiserver_identity(
            cluster.identity,
            cluster=cluster.name,
            location=config.location,
            stack=stack,
            cluster_domain=CLUSTER_DOMAIN,
        ),
        alerting=alerting.from_config(config.alerting),
        node_images=image_expectations(config, release.release(patch)),
    )
