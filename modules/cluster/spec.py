"""The add-ons spec: everything the cluster's Kubernetes objects are built from.

The cluster stack computes it from its validated config (``addons_spec``) and exports it as a
plain JSON object; the ``<cluster>-addons`` stack reads it back (``AddonsSpec.from_json``). All
cross-references between the ``addons`` section and the pools are checked here, before any
resource exists, each failure one line naming the key.
"""

from __future__ import annotations

import ipaddress
import json
import math
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from modules import labels
from modules.bootstrap import versions
from modules.bootstrap.context import APISERVER_PORT
from modules.cluster import images
from modules.cluster.config import AddonsConfig
from modules.config_model import PROJECT
from modules.errors import ConfigError
from modules.identity.plan import AccessSpec
from modules.vm_sizing import formulas

P = PROJECT
# Namespaces the add-ons own: a team may not be called after one of them.
SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease", "gpu-health", "balloons")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_TAG = re.compile(r"^v\d+\.\d+\.\d+$")
# The kubelets' clusterDomain (the node bootstrap sets the same).
CLUSTER_DOMAIN = "cluster.local"


@dataclass(frozen=True)
class PoolFacts:
    """What the add-ons need to know about one GPU pool."""

    name: str
    vm_size: str
    gpus_per_node: int
    nodes: int
    team: str | None = None


@dataclass(frozen=True)
class TeamSpec:
    """A team: namespace ``name`` labelled ``<domain>/team=<name>``, with a GPU quota."""

    name: str
    gpu_quota: int
    pools: tuple[str, ...]


@dataclass(frozen=True)
class BalloonSpec:
    """The balloon Deployment of one pool."""

    pool: str
    replicas: int
    gpus_per_node: int
    team: str | None = None


@dataclass(frozen=True)
class PreflightSpec:
    enabled: bool
    level: int
    timeout_minutes: int
    retest_schedule: str
    """The re-test CronJob's schedule (every ``retest_every_minutes``)."""
    retest_max_nodes: int
    """Idle nodes one run sends back to preflight: ``retest_per_run`` of the fleet and the period."""
    retest_period_days: int
    retest_every_minutes: int


RETEST_MINUTE = 17
"""Minute of the hour the re-test runs start (off the hour, where other jobs crowd)."""


def retest_schedule(every_minutes: int) -> str:
    """A cron schedule that runs every ``every_minutes`` (a divisor of 60, or whole hours dividing 24)."""
    if every_minutes < 60:
        return f"{RETEST_MINUTE % every_minutes}-59/{every_minutes} * * * *"
    hours = every_minutes // 60
    if hours == 1:
        return f"{RETEST_MINUTE} * * * *"
    return f"{RETEST_MINUTE} 0 * * *" if hours == 24 else f"{RETEST_MINUTE} */{hours} * * *"


def retest_per_run(gpu_nodes: int, period_days: int, every_minutes: int) -> int:
    """Nodes one re-test run takes so that ``gpu_nodes`` are all re-tested within ``period_days``: the one
    place the sweep's arithmetic lives. Runs re-test the longest-untested idle nodes first
    (scripts/retest_idle.py), so consecutive runs walk the whole fleet."""
    runs = period_days * 24 * 60 // every_minutes
    return max(1, math.ceil(gpu_nodes / runs))


@dataclass(frozen=True)
class GangSpec:
    enabled: bool
    scheduler_name: str
    scheduler_image: str
    permit_waiting_seconds: int
    replicas: int
    # Requests and limits (modules.vm_sizing.formulas.gang_scheduler); the defaults are the fixed sizes a
    # cluster stack exported before they followed the node count, so an older `addons_spec` still reads.
    cpu_millis: int = 500
    cpu_limit_millis: int = 2000
    memory_mib: int = 512


@dataclass(frozen=True)
class QueuesSpec:
    """Kueue (modules/cluster/objects/queues.py): one ClusterQueue per team in ``cohort``."""

    enabled: bool
    cohort: str
    image: str
    borrowing_limit_percent: int | None = None
    lending_limit_percent: int | None = None
    replicas: int = 2


@dataclass(frozen=True)
class HealthSpec:
    dcgm_exporter: bool
    iptables_exporter: bool
    node_problem_detector: bool
    fatal_xids: tuple[int, ...]
    replace_after_minutes: int


@dataclass(frozen=True)
class RollSpec:
    """The pool roll (modules/cluster/objects/roll.py); the fields are ``addons.roll``'s."""

    enabled: bool = False
    every_minutes: int = 5
    max_unavailable_percent: int = 5
    island_max_unavailable_percent: int = 10
    pause_after_failed: int = 3
    drain_timeout_minutes: int = 60
    node_timeout_minutes: int = 120


@dataclass(frozen=True)
class PolicyEngineSpec:
    """The NetworkPolicy engine (modules/cluster/objects/policy_engine.py): its node agent's size."""

    enabled: bool = False
    """False in an older cluster stack's export (before the engine existed): no engine objects."""
    cpu_millis: int = 0
    cpu_limit_millis: int = 0
    memory_mib: int = 0


@dataclass(frozen=True)
class DnsSpec:
    """CoreDNS behind ``kube-system/kube-dns``: the address every kubelet hands pods as nameserver."""

    service_ip: str
    """The kubelets' clusterDNS (the address plan's ``dns_service_ip``)."""
    cluster_domain: str
    replicas: int
    spread_required: bool
    """Replicas on distinct nodes (hard anti-affinity) when the system pool has a node for each."""
    image: str


@dataclass(frozen=True)
class StateMetricsSpec:
    """kube-state-metrics: the only source of ``kube_node_*`` series the node alerts read."""

    image: str
    cpu_millis: int
    memory_mib: int
    cpu_limit_millis: int = 0
    """0 in an older cluster stack's export: twice the request, as it was then."""


PLACEHOLDER_ID = "ffffffff-ffff-ffff-ffff-ffffffffffff"
"""GUID-shaped, never a real tenant, subscription or client id (nor the offline plan's mock ones)."""
PLACEHOLDER_NAME = "<unset>"
# RFC 5737 documentation range: never a real cluster's address.
PLACEHOLDER_CIDR = "192.0.2.0/24"


@dataclass(frozen=True)
class CloudSpec:
    """Where the cluster's VMs live in Azure: cloud-provider-azure's ``azure.json`` and the remediation job.

    Inputs from the cluster stack (its resource group, VNet, subnet, NSG, identities); nothing here
    is a secret (managed identities, no client secret). The defaults are placeholders, listed by
    :attr:`placeholders`, until the cluster stack passes its values.
    """

    tenant_id: str = PLACEHOLDER_ID
    subscription_id: str = PLACEHOLDER_ID
    resource_group: str = PLACEHOLDER_NAME
    """The resource group of the nodes' scale sets (``resourceGroup``)."""
    location: str = PLACEHOLDER_NAME
    vnet_name: str = PLACEHOLDER_NAME
    vnet_resource_group: str = PLACEHOLDER_NAME
    subnet_name: str = PLACEHOLDER_NAME
    """Subnet of internal load-balancer frontends (``subnetName``), e.g. the system pool's."""
    security_group_name: str = PLACEHOLDER_NAME
    """NSG the controller adds load-balancer rules to (``securityGroupName``): that subnet's NSG."""
    controller_client_id: str = PLACEHOLDER_ID
    """Client id of the user-assigned identity cloud-controller-manager uses (``userAssignedIdentityID``)."""
    remediation_client_id: str = PLACEHOLDER_ID
    """Client id of the identity the remediation job deletes GPU scale-set instances with."""

    @property
    def placeholders(self) -> tuple[str, ...]:
        """Fields still holding a placeholder (the cluster stack has not passed them)."""
        return tuple(k for k, v in asdict(self).items() if v in (PLACEHOLDER_ID, PLACEHOLDER_NAME))


@dataclass(frozen=True)
class NetworkSpec:
    """Addresses the add-on namespaces' NetworkPolicies allow (inputs from the address plan)."""

    apiserver_cidrs: tuple[str, ...] = (PLACEHOLDER_CIDR,)
    """The API servers' VNet addresses (control-plane subnet, VIP included)."""
    apiserver_port: int = APISERVER_PORT
    monitoring_cidrs: tuple[str, ...] = (PLACEHOLDER_CIDR,)
    """Where Prometheus scrapes from (the monitoring subnet)."""

    @property
    def placeholders(self) -> tuple[str, ...]:
        fields = {"apiserver_cidrs": self.apiserver_cidrs, "monitoring_cidrs": self.monitoring_cidrs}
        return tuple(k for k, v in fields.items() if PLACEHOLDER_CIDR in v)


@dataclass(frozen=True)
class CloudProviderSpec:
    """cloud-provider-azure's images: the release of the cluster's Kubernetes minor."""

    controller_image: str
    node_manager_image: str
    # cloud-controller-manager's requests and limits (modules.vm_sizing.formulas.cloud_controller_manager);
    # the defaults are the fixed sizes an older cluster stack's `addons_spec` implies.
    controller_cpu_millis: int = 100
    controller_cpu_limit_millis: int = 2000
    controller_memory_mib: int = 512


@dataclass(frozen=True)
class AddonsSpec:
    """Validated, JSON-round-trippable input of every add-on object builder."""

    cluster_name: str
    kubernetes_version: str
    label_domain: str
    system_nodes: int
    pools: tuple[PoolFacts, ...]
    teams: tuple[TeamSpec, ...]
    balloons: tuple[BalloonSpec, ...]
    preflight: PreflightSpec
    gang: GangSpec
    health: HealthSpec
    dns: DnsSpec
    state_metrics: StateMetricsSpec
    cloud_provider: CloudProviderSpec
    cloud: CloudSpec
    network: NetworkSpec
    access: AccessSpec | None = None
    """Researchers' groups and the teams' workload identities (``cluster.identity``); None: none."""
    # Default for an add-ons spec a cluster stack exported before queues existed: no Kueue.
    queues: QueuesSpec = QueuesSpec(False, "gpus", versions.KUEUE.ref)
    # Default for an add-ons spec exported before the roll existed: no roll job.
    roll: RollSpec = RollSpec()
    # Default for an add-ons spec exported before the policy engine existed: no engine.
    policy_engine: PolicyEngineSpec = PolicyEngineSpec()

    # Node label and taint keys shared with the node bootstrap (modules.labels).
    @property
    def team_key(self) -> str:
        return labels.key(self.label_domain, labels.TEAM)

    @property
    def pool_key(self) -> str:
        return labels.key(self.label_domain, labels.POOL)

    @property
    def preflight_key(self) -> str:
        return labels.key(self.label_domain, labels.PREFLIGHT)

    @property
    def accelerator_key(self) -> str:
        """``<domain>/accelerator=nvidia`` marks GPU nodes; system (CPU) nodes lack the label."""
        return labels.key(self.label_domain, labels.ACCELERATOR)

    @property
    def ib_island_key(self) -> str:
        """The scale set (one placement group, one InfiniBand fabric) a GPU node belongs to."""
        return labels.key(self.label_domain, labels.IB_ISLAND)

    @property
    def fatal_xid_key(self) -> str:
        """Taint (NoExecute) the remediation controller puts on a node with a fatal XID."""
        return labels.key(self.label_domain, labels.FATAL_XID)

    @property
    def placeholders(self) -> tuple[str, ...]:
        """Inputs the cluster stack has not passed yet (``cloud.<field>``, ``network.<field>``)."""
        return tuple(f"cloud.{f}" for f in self.cloud.placeholders) + tuple(
            f"network.{f}" for f in self.network.placeholders
        )

    @property
    def minor(self) -> int:
        return int(self.kubernetes_version.split(".")[1])

    @property
    def mutating_admission(self) -> bool:
        """MutatingAdmissionPolicy is GA (admissionregistration.k8s.io/v1, on by default) from 1.36."""
        return self.minor >= 36

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | str) -> AddonsSpec:
        # Through a stack output, numbers arrive as doubles and None-valued keys are dropped.
        raw: dict[str, Any] = _ints(json.loads(data) if isinstance(data, str) else dict(data))
        try:
            return cls(
                cluster_name=raw["cluster_name"],
                kubernetes_version=raw["kubernetes_version"],
                label_domain=raw["label_domain"],
                system_nodes=raw["system_nodes"],
                pools=tuple(PoolFacts(**p) for p in raw["pools"]),
                teams=tuple(TeamSpec(t["name"], t["gpu_quota"], tuple(t["pools"])) for t in raw["teams"]),
                balloons=tuple(BalloonSpec(**b) for b in raw["balloons"]),
                preflight=PreflightSpec(**raw["preflight"]),
                gang=GangSpec(**raw["gang"]),
                health=HealthSpec(**{**raw["health"], "fatal_xids": tuple(raw["health"]["fatal_xids"])}),
                dns=DnsSpec(**raw["dns"]),
                state_metrics=StateMetricsSpec(**raw["state_metrics"]),
                cloud_provider=CloudProviderSpec(**raw["cloud_provider"]),
                cloud=CloudSpec(**raw["cloud"]),
                network=NetworkSpec(
                    **{
                        **raw["network"],
                        "apiserver_cidrs": tuple(raw["network"]["apiserver_cidrs"]),
                        "monitoring_cidrs": tuple(raw["network"]["monitoring_cidrs"]),
                    }
                ),
                access=AccessSpec.from_json(raw["access"]) if raw.get("access") else None,
                **_optional(raw),
            )
        except (KeyError, TypeError) as err:
            raise ConfigError(
                f"addons_spec output is not an add-ons spec ({err}): run `pulumi up` on the cluster stack "
                "with this version of the toolkit first"
            ) from None


def _optional(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The sections an older exported spec lacks (their defaults switch the add-on off)."""
    out: dict[str, Any] = {}
    if "queues" in raw:
        out["queues"] = QueuesSpec(**raw["queues"])
    if "roll" in raw:
        out["roll"] = RollSpec(**raw["roll"])
    if "policy_engine" in raw:
        out["policy_engine"] = PolicyEngineSpec(**raw["policy_engine"])
    return out


def _ints(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _ints(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_ints(v) for v in value]
    return value


def _fail(key: str, message: str) -> ConfigError:
    return ConfigError(f"{P}:{key}: {message}")


def _check_team_name(key: str, team: str) -> None:
    if not _DNS_LABEL.match(team):
        raise _fail(key, f"team {team!r} is not a valid namespace name: use lowercase letters, digits and '-'")
    if team in SYSTEM_NAMESPACES or team.startswith("kube-"):
        raise _fail(key, f"team {team!r} would take over a system namespace: pick another team name")


def _teams(pools: Mapping[str, PoolFacts], addons: AddonsConfig) -> tuple[TeamSpec, ...]:
    owned: dict[str, list[str]] = {}
    for pool in pools.values():
        if pool.team is None:
            continue
        _check_team_name(f"cluster.gpu_pools.{pool.name}.team", pool.team)
        if addons.teams is not None and pool.team not in addons.teams:
            declared = ", ".join(sorted(addons.teams)) or "none"
            raise _fail(
                f"cluster.gpu_pools.{pool.name}.team",
                f"team {pool.team!r} is not declared in addons.teams (declared: {declared}): "
                "fix the pool's team or add it under addons.teams",
            )
        owned.setdefault(pool.team, []).append(pool.name)
    declared_teams = addons.teams if addons.teams is not None else {t: None for t in owned}
    teams = []
    for name in sorted(declared_teams):
        _check_team_name(f"addons.teams.{name}", name)
        team_pools = sorted(owned.get(name, []))
        config = declared_teams[name]
        quota = config.gpu_quota if config is not None else None
        if quota is None:
            if not team_pools:
                raise _fail(
                    f"addons.teams.{name}",
                    "owns no GPU pool and has no gpu_quota: set team on a gpu_pool or set gpu_quota",
                )
            quota = sum(pools[p].gpus_per_node * pools[p].nodes for p in team_pools)
        teams.append(TeamSpec(name, quota, tuple(team_pools)))
    return tuple(teams)


def _balloons(pools: Mapping[str, PoolFacts], addons: AddonsConfig) -> tuple[BalloonSpec, ...]:
    for pool_name, replicas in addons.balloons.items():
        key = f"addons.balloons.{pool_name}"
        if pool_name not in pools:
            raise _fail(key, f"no GPU pool named {pool_name!r} (pools: {', '.join(sorted(pools))}): fix the name")
        if replicas < 0:
            raise _fail(key, f"{replicas} replicas is negative: use 0 to {pools[pool_name].nodes}")
        if replicas > pools[pool_name].nodes:
            raise _fail(
                key,
                f"{replicas} replicas exceed pool {pool_name}'s {pools[pool_name].nodes} nodes: lower replicas",
            )
    return tuple(
        BalloonSpec(p.name, addons.balloons.get(p.name, 0), p.gpus_per_node, p.team)
        for p in sorted(pools.values(), key=lambda p: p.name)
    )


def _preflight(addons: AddonsConfig, pools: Mapping[str, PoolFacts]) -> PreflightSpec:
    cfg = addons.preflight
    if not 1 <= cfg.level <= 4:
        raise _fail(
            "addons.preflight.level",
            f"{cfg.level} is not a DCGM diagnostic level: use 1 to 4 (dcgmi diag -r)",
        )
    gpu_nodes = sum(p.nodes for p in pools.values())
    return PreflightSpec(
        cfg.enabled,
        cfg.level,
        cfg.timeout_minutes,
        retest_schedule(cfg.retest_every_minutes),
        retest_per_run(gpu_nodes, cfg.retest_period_days, cfg.retest_every_minutes),
        cfg.retest_period_days,
        cfg.retest_every_minutes,
    )


def _gang(kubernetes_version: str, addons: AddonsConfig, size: formulas.Resources) -> GangSpec:
    cfg = addons.gang
    if not _DNS_SUBDOMAIN.match(cfg.scheduler_name) or len(cfg.scheduler_name) > 63:
        raise _fail(
            "addons.gang.scheduler_name",
            f"{cfg.scheduler_name!r} is not a valid scheduler name: use lowercase letters, digits and '-'",
        )
    if cfg.image_tag is not None and not _TAG.match(cfg.image_tag):
        raise _fail("addons.gang.image_tag", f"{cfg.image_tag!r} is not a release tag: use e.g. v0.34.7")
    release = versions.release(kubernetes_version)
    if not cfg.enabled:
        tag = cfg.image_tag or "none"
    elif cfg.image_tag is not None:
        # The version skew policy: a kube-scheduler may be one minor older than the API server, never newer.
        tag = cfg.image_tag
        if not versions.gang_within_skew(tag, kubernetes_version):
            n = release.minor_number
            raise _fail(
                "addons.gang.image_tag",
                f"{tag} is built for Kubernetes 1.{versions.tag_minor(tag)}, outside the version skew of "
                f"{kubernetes_version} (a kube-scheduler may be one minor older than the API server, never "
                f"newer): use a v0.{n}.x or v0.{n - 1}.x release, or set addons.gang.enabled: false",
            )
    elif release.gang_scheduler is None:
        working = [m for m, r in versions.TABLE.items() if r.gang_scheduler is not None]
        raise _fail(
            "addons.gang.enabled",
            f"Kubernetes {kubernetes_version} has no scheduler-plugins release within the version skew (the "
            f"newest, {versions.NEWEST_GANG_SCHEDULER}, is for 1.{versions.tag_minor(versions.NEWEST_GANG_SCHEDULER)}; a kube-scheduler may be at most one minor "
            f"older than the API server): use cluster.kubernetes_version {' or '.join(working)}, or set "
            "addons.gang.enabled: false",
        )
    else:
        tag = release.gang_scheduler
    # Only the scheduler: the scheduler-plugins controller is not deployed (objects/gang.py says why).
    return GangSpec(
        cfg.enabled,
        cfg.scheduler_name,
        versions.gang_scheduler_image(tag),
        cfg.permit_waiting_seconds,
        cfg.replicas,
        size.cpu_millis,
        size.cpu_limit_millis,
        size.memory_mib,
    )


def _queues(addons: AddonsConfig) -> QueuesSpec:
    cfg = addons.queues
    if not _DNS_LABEL.match(cfg.cohort):
        raise _fail(
            "addons.queues.cohort", f"{cfg.cohort!r} is not a valid cohort name: use lowercase letters, digits and '-'"
        )
    return QueuesSpec(
        cfg.enabled,
        cfg.cohort,
        versions.KUEUE.ref,
        cfg.borrowing_limit_percent,
        cfg.lending_limit_percent,
        cfg.replicas,
    )


def _policy_engine(agent: formulas.Resources) -> PolicyEngineSpec:
    return PolicyEngineSpec(True, agent.cpu_millis, agent.cpu_limit_millis, agent.memory_mib)


def _roll(addons: AddonsConfig) -> RollSpec:
    cfg = addons.roll
    if 60 % cfg.every_minutes:
        raise _fail(
            "addons.roll.every_minutes",
            f"{cfg.every_minutes} does not divide the hour: use 1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30 or 60",
        )
    if cfg.enabled and cfg.node_timeout_minutes <= addons.preflight.timeout_minutes:
        raise _fail(
            "addons.roll.node_timeout_minutes",
            f"{cfg.node_timeout_minutes} is not more than addons.preflight.timeout_minutes "
            f"({addons.preflight.timeout_minutes}): a rolled node needs its reimage, boot and diagnostics inside it; "
            f"raise it to at least {addons.preflight.timeout_minutes + 30}",
        )
    return RollSpec(
        cfg.enabled,
        cfg.every_minutes,
        cfg.max_unavailable_percent,
        cfg.island_max_unavailable_percent,
        cfg.pause_after_failed,
        cfg.drain_timeout_minutes,
        cfg.node_timeout_minutes,
    )


def _health(addons: AddonsConfig) -> HealthSpec:
    cfg = addons.health
    xids = cfg.fatal_xids
    if not xids:
        raise _fail(
            "addons.health.fatal_xids",
            "empty: list the XIDs that fail a node (Azure's list: github.com/Azure/azurehpc-health-checks)",
        )
    bad = [x for x in xids if x <= 0]
    if bad:
        raise _fail("addons.health.fatal_xids", f"{bad[0]} is not an XID: use positive numbers")
    dupes = sorted({x for x in xids if xids.count(x) > 1})
    if dupes:
        raise _fail("addons.health.fatal_xids", f"{dupes[0]} is listed twice: remove the duplicate")
    return HealthSpec(
        cfg.dcgm_exporter,
        cfg.iptables_exporter,
        cfg.node_problem_detector,
        tuple(sorted(xids)),
        cfg.replace_after_minutes,
    )


def _dns(service_ip: str, cluster_domain: str, system_nodes: int, nodes: int, version: str) -> DnsSpec:
    try:
        ip = ipaddress.IPv4Address(service_ip)
    except ValueError:
        raise _fail(
            "cluster.service_cidr",
            f"DNS service address {service_ip!r} is not an IPv4 address: use an IPv4 service_cidr",
        ) from None
    if not _DNS_SUBDOMAIN.match(cluster_domain):
        raise _fail("cluster_domain", f"{cluster_domain!r} is not a DNS domain: use e.g. cluster.local")
    wanted = formulas.dns_replicas(nodes, system_nodes)
    return DnsSpec(
        service_ip=str(ip),
        cluster_domain=cluster_domain,
        replicas=wanted,
        spread_required=system_nodes >= wanted,
        image=versions.release(version).coredns_image,
    )


def _state_metrics(size: formulas.Resources, version: str) -> StateMetricsSpec:
    return StateMetricsSpec(
        image=versions.release(version).kube_state_metrics_image,
        cpu_millis=size.cpu_millis,
        memory_mib=size.memory_mib,
        cpu_limit_millis=size.cpu_limit_millis,
    )


def _cloud_provider(version: str, size: formulas.Resources) -> CloudProviderSpec:
    return CloudProviderSpec(
        controller_image=images.cloud_provider_azure(images.CLOUD_CONTROLLER_MANAGER, version).ref,
        node_manager_image=images.cloud_provider_azure(images.CLOUD_NODE_MANAGER, version).ref,
        controller_cpu_millis=size.cpu_millis,
        controller_cpu_limit_millis=size.cpu_limit_millis,
        controller_memory_mib=size.memory_mib,
    )


def _network(network: NetworkSpec) -> NetworkSpec:
    for key, cidrs in (("apiserver_cidrs", network.apiserver_cidrs), ("monitoring_cidrs", network.monitoring_cidrs)):
        if not cidrs:
            raise _fail(f"addons_spec.network.{key}", "empty: pass the subnet CIDRs from the address plan")
        for cidr in cidrs:
            try:
                ipaddress.IPv4Network(cidr)
            except ValueError:
                raise _fail(
                    f"addons_spec.network.{key}", f"{cidr!r} is not an IPv4 network: pass e.g. 10.16.0.0/24"
                ) from None
    if not 1 <= network.apiserver_port <= 65535:
        raise _fail("addons_spec.network.apiserver_port", f"{network.apiserver_port} is not a TCP port: use 1-65535")
    return network


def addons_spec(
    cluster_name: str,
    kubernetes_version: str,
    label_domain: str,
    pools: Mapping[str, PoolFacts],
    addons: AddonsConfig,
    *,
    dns_service_ip: str,
    system_nodes: int,
    peak_nodes: int,
    pods_per_node: int,
    scrapers: int,
    cluster_domain: str = CLUSTER_DOMAIN,
    cloud: CloudSpec | None = None,
    network: NetworkSpec | None = None,
    access: AccessSpec | None = None,
) -> AddonsSpec:
    """Validate the ``addons`` section against the pools and build the spec (pure, no Pulumi).

    ``dns_service_ip`` is the kubelets' clusterDNS from the address plan; ``system_nodes`` the
    system (CPU) pool's node count, where cluster services run; ``peak_nodes`` the most nodes the
    cluster can hold at once (every pool at its maximum plus surge); services are sized for its sizing step
    (modules.vm_sizing.formulas, so a small pool change restarts no add-on); ``pods_per_node`` the largest
    kubelet maxPods of the pools (what the gang scheduler's Pod cache is sized for); ``scrapers`` the Prometheus
    hosts, each scraping kube-state-metrics whole (what its CPU is sized for).
    ``cloud`` and ``network`` are the cluster stack's Azure coordinates and subnet addresses; left out,
    they are placeholders that :attr:`AddonsSpec.placeholders` lists.
    """
    if not _DNS_SUBDOMAIN.match(label_domain) or "." not in label_domain or len(label_domain) > 253:
        raise _fail(
            "cluster.label_domain",
            f"{label_domain!r} is not a DNS domain: use one your organisation owns, e.g. gpu.example.com",
        )
    # One table of supported minors (modules.bootstrap.versions); each has ValidatingAdmissionPolicy v1.
    versions.release(kubernetes_version)
    for name, pool in pools.items():
        if pool.gpus_per_node < 1:
            raise _fail(
                f"cluster.gpu_pools.{name}.vm_size",
                f"{pool.vm_size} has no GPUs: use a GPU size or move the pool to system_pool",
            )
    if system_nodes < 1:
        raise _fail("cluster.system_pool.nodes", f"{system_nodes}: cluster services need at least 1 system node")
    nodes = formulas.sizing_step(peak_nodes)
    pods = formulas.cluster_pods(nodes, pods_per_node)
    teams = _teams(pools, addons)
    _check_access(access, teams)
    return AddonsSpec(
        cluster_name=cluster_name,
        kubernetes_version=kubernetes_version,
        label_domain=label_domain,
        system_nodes=system_nodes,
        pools=tuple(sorted(pools.values(), key=lambda p: p.name)),
        teams=teams,
        balloons=_balloons(pools, addons),
        preflight=_preflight(addons, pools),
        gang=_gang(kubernetes_version, addons, formulas.gang_scheduler(nodes, pods)),
        health=_health(addons),
        dns=_dns(dns_service_ip, cluster_domain, system_nodes, nodes, kubernetes_version),
        state_metrics=_state_metrics(formulas.kube_state_metrics(nodes, pods, scrapers), kubernetes_version),
        cloud_provider=_cloud_provider(kubernetes_version, formulas.cloud_controller_manager(nodes)),
        cloud=cloud or CloudSpec(),
        network=_network(network or NetworkSpec()),
        access=access,
        queues=_queues(addons),
        roll=_roll(addons),
        policy_engine=_policy_engine(formulas.policy_agent(pods)),
    )


def _check_access(access: AccessSpec | None, teams: tuple[TeamSpec, ...]) -> None:
    """Every team given an Entra group is a team of the cluster (a typo would leave a group with nothing)."""
    if access is None:
        return
    names = {t.name for t in teams}
    for team in access.teams:
        if team.team not in names:
            raise _fail(
                f"cluster.identity.teams.{team.team}",
                f"no team {team.team!r} (teams: {', '.join(sorted(names)) or 'none'}): name a team of a GPU pool or "
                "of addons.teams",
            )
