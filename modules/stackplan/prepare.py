"""Everything a cluster stack decides before its first resource: the pure half of the program.

Validation, pools, address plan, sizes, prerequisites, bootstrap and add-ons are all computed here
from the config alone, so bad input fails with one line and nothing built, and tests can check the
decisions without running Pulumi.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from modules.address_plan.host_addresses import ClusterAddresses
from modules.bootstrap import versions
from modules.bootstrap.context import PORTS, BootstrapContext
from modules.bootstrap.roles import ROLES, Role
from modules.bootstrap.roles.parts import POOL_STATIC_PODS
from modules.cluster.manifests import render_manifests
from modules.cluster.placement import NodeTaint, daemonsets_on, released
from modules.cluster.spec import AddonsSpec, CloudSpec, NetworkSpec, PoolFacts, addons_spec
from modules.errors import AgkError
from modules.identity.plan import access_spec
from modules.stackplan.addresses import (
    StackAddresses,
    cluster_addresses,
    hub_stack_name,
    limits_for,
    nsg_name,
    plan_stack,
    vnet_name,
)
from modules.stackplan.boot_context import bootstrap_context
from modules.stackplan.config import ClusterStack, StackConfig, resource_group_name
from modules.stackplan.egress import EgressGroup, spoke_egress
from modules.stackplan.node_images import NodeImage, check_gpu_base, check_images_stack, node_images
from modules.stackplan.pools import ClusterPools, plan_pools
from modules.stackplan.prerequisites import Prerequisites, cluster_prerequisites
from modules.stackplan.segmentation import Rule, subnet_rules
from modules.stackplan.storage_access import StorageAccess, storage_access
from modules.stackplan.vm_choice import SizeChoice, size_cluster
from modules.vm_sizing import formulas


@dataclass(frozen=True)
class ClusterPrep:
    stack: str
    config: ClusterStack
    plan: StackAddresses
    addresses: ClusterAddresses
    pools: ClusterPools
    """Every pool's counts (nodes, surge, pod IPs, kubelet maxPods, scale sets), computed once."""
    sizes: dict[str, SizeChoice]
    prerequisites: Prerequisites
    """What the subscription needs before `pulumi up` (feature registrations, vCPU quotas)."""
    egress: tuple[EgressGroup, ...]
    """The spoke's NAT gateways: which subnets each serves and its public IPs."""
    bootstrap: BootstrapContext
    """What every node boots with (cloud-init, PKI subjects), from the same addresses."""
    addons: AddonsSpec
    """What the `<cluster>-addons` stack builds, validated with the pools (exported as `addons_spec`)."""
    node_images: dict[Role, NodeImage]
    """Cluster role -> the gallery image version its hosts and scale sets boot (modules/stackplan/node_images.py)."""
    subnet_rules: dict[str, tuple[Rule, ...]]
    """Each subnet's own NSG rules (modules/stackplan/segmentation.py), ahead of the baseline every NSG has."""
    storage: StorageAccess | None
    """The storage account's containers and who may use each; ``None`` without one."""

    def chosen_sizes(self) -> list[dict[str, object]]:
        """Every count-driven size in force, read back from what the hosts and add-ons are built with (a
        stack's override included), each with the formula in modules.vm_sizing.formulas that proposes it and
        that formula's source: the program's ``sizes`` output, which `agk plan` lists."""
        cp, prom, addons = self.bootstrap.control_plane, self.bootstrap.prometheus, self.addons
        # The gang scheduler and cloud-controller-manager run with the spec's figures (objects/gang.py,
        # objects/cloud_provider.py); kube-state-metrics likewise (objects/state_metrics.py).
        rows: list[tuple[str, object, str, str]] = [
            (
                "kube-apiserver --max-requests-inflight",
                cp.max_requests_inflight,
                "apiserver_inflight",
                formulas.KUBE_UP_APISERVER,
            ),
            (
                "kube-apiserver --max-mutating-requests-inflight",
                cp.max_mutating_requests_inflight,
                "apiserver_inflight",
                formulas.KUBE_UP_APISERVER,
            ),
            (
                "kube-controller-manager, kube-scheduler API QPS",
                cp.client_qps,
                "client_qps",
                f"default 20; 100 as upstream's 5,000-node tests ({formulas.SCALE_VALIDATION}); 200 above 3,000 nodes "
                "the project's",
            ),
            ("kube-controller-manager, kube-scheduler API burst", cp.client_burst, "client_burst", "2 x QPS"),
            (
                "kube-scheduler percentageOfNodesToScore",
                formulas.scheduler_score_percent(self.bootstrap.sizing_nodes),
                "scheduler_score_percent",
                formulas.SCHEDULER_TUNING,
            ),
            (
                f"Prometheus active series a host ({prom.shards} share(s) of the nodes)",
                self.pools.prometheus_series(prom.shards),
                "prometheus_series",
                f"project estimate, kube-state-metrics measured ({formulas.SCALE_TIER})",
            ),
            (
                f"Prometheus data disk GiB ({prom.retention_days} d at {prom.scrape_interval})",
                prom.data_disk_gib,
                "prometheus_disk_gib",
                formulas.PROM_STORAGE,
            ),
            ("CoreDNS replicas", addons.dns.replicas, "dns_replicas", "project rule"),
            (
                "kube-state-metrics CPU / memory",
                f"{addons.state_metrics.cpu_millis}m / {addons.state_metrics.memory_mib}Mi",
                "kube_state_metrics",
                f"{formulas.KSM_RESOURCES} base; per series fitted to the scale tier ({formulas.SCALE_TIER})",
            ),
            (
                "gang scheduler CPU / memory",
                f"{addons.gang.cpu_millis}m / {addons.gang.memory_mib}Mi",
                "gang_scheduler",
                f"fitted to the scale tier ({formulas.SCALE_TIER})",
            ),
            (
                "cloud-controller-manager CPU / memory",
                f"{addons.cloud_provider.controller_cpu_millis}m / {addons.cloud_provider.controller_memory_mib}Mi",
                "cloud_controller_manager",
                f"project estimate ({formulas.SCALE_TIER})",
            ),
            (
                "NetworkPolicy agent (every node) CPU / memory",
                f"{addons.policy_engine.cpu_millis}m / {addons.policy_engine.memory_mib}Mi",
                "policy_agent",
                f"one copy of every Pod at the gang scheduler's size per Pod; 693 MiB measured at 52,540 Pods ({formulas.SCALE_TIER})",
            ),
            (
                "XID remediation, idle re-test memory",
                f"{formulas.PAGED_CONTROLLER.memory_mib}Mi",
                "PAGED_CONTROLLER",
                f"measured ({formulas.SCALE_TIER})",
            ),
        ]
        return [{"name": n, "value": v, "formula": f, "source": src} for n, v, f, src in rows]


def addons_for(stack: str, config: ClusterStack, addresses: ClusterAddresses, pools: ClusterPools) -> AddonsSpec:
    """The add-ons spec: the ``addons`` section checked against the pools, plus the cluster DNS address."""
    cluster = config.cluster
    facts = {p.name: PoolFacts(p.name, p.vm_size, p.gpus_per_node, p.nodes, p.team) for p in pools.gpu}
    return addons_spec(
        cluster.name,
        cluster.kubernetes_version,
        cluster.label_domain,
        facts,
        config.addons,
        dns_service_ip=str(addresses.dns_service_ip),
        system_nodes=pools.system.nodes,
        peak_nodes=pools.peak_nodes,
        pods_per_node=pools.pods_per_node,
        scrapers=cluster.prometheus.count,
        cloud=CloudSpec(
            resource_group=resource_group_name(stack),
            location=config.location,
            vnet_name=vnet_name(cluster.name),
            vnet_resource_group=resource_group_name(stack),
            subnet_name=pools.system.subnet,
            security_group_name=nsg_name(cluster.name, pools.system.subnet),
        ),
        network=NetworkSpec(
            apiserver_cidrs=(str(addresses.subnets["control-plane"]),),
            apiserver_port=PORTS.apiserver,
            monitoring_cidrs=(str(addresses.subnets["monitoring"]),),
        ),
        access=access_spec(cluster.identity, cluster=cluster.name, location=config.location, stack=stack),
    )


def with_node_agents(pools: ClusterPools, addons: AddonsSpec) -> ClusterPools:
    """Each pool with the static pods and DaemonSets on its nodes once they take work (from the rendered
    objects).

    A GPU node joins with ``<domain>/preflight=pending``; DaemonSets that select that label (the
    preflight diagnostic) leave when preflight passes, before any workload may land. The kubelet's
    maxPods counts every pod on the node, so it holds the pods that stay, not those: otherwise a node
    with N pod IPs admits N+1 workload pods and the last never gets an address. The joining node's own
    pods must still fit, which ``with_agents`` checks.
    """
    return agents_on(pools, render_manifests(addons), addons.preflight_key)


def agents_on(pools: ClusterPools, objs: Iterable[Mapping[str, Any]], preflight_key: str) -> ClusterPools:
    """:func:`with_node_agents` for any rendered objects (pure: the table tests give their own)."""
    objs = list(objs)
    host_network: dict[str, tuple[str, ...]] = {}
    ip_daemons: dict[str, tuple[str, ...]] = {}
    joining: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {}
    for pool in pools.pools.values():
        taints = [NodeTaint(t.key, t.value, t.effect) for t in pool.taints]
        landing = daemonsets_on(objs, dict(pool.labels), taints)
        staying = daemonsets_on(objs, *released(dict(pool.labels), taints, preflight_key))
        host_network[pool.name] = POOL_STATIC_PODS + tuple(d.ref for d in staying if d.host_network)
        ip_daemons[pool.name] = tuple(d.ref for d in staying if not d.host_network)
        joining[pool.name] = (
            POOL_STATIC_PODS + tuple(d.ref for d in landing if d.host_network),
            tuple(d.ref for d in landing if not d.host_network),
        )
    return pools.with_agents(host_network, ip_daemons, joining)


def cluster_egress(config: ClusterStack, plan: StackAddresses, pools: ClusterPools) -> tuple[EgressGroup, ...]:
    cluster = config.cluster
    hosts = (
        cluster.api_servers.count
        + cluster.etcd.count
        + (cluster.events_etcd.count if cluster.events_etcd else 0)
        + cluster.prometheus.count
        + 1  # the NAT host
        + pools.system.peak_nodes
    )
    return spoke_egress(
        [(s.name, s.role) for s in plan.vnet.subnets.values()],
        [(p.name, p.subnet, p.peak_nodes, p.zone) for p in pools.gpu],
        hosts,
        config.network.egress.connections_per_node,
        plan.limits,
    )


def prepare_cluster(
    stack: str,
    config: StackConfig,
    stacks_dir: Path,
    deployed: Mapping[str, str] | None = None,
    scale_sets: Mapping[str, Mapping[str, int]] | None = None,
    large_pools: frozenset[str] = frozenset(),
) -> ClusterPrep:
    """Everything before the first resource; ``deployed``: the stack's subnets as deployed (kept in place);
    ``scale_sets``: each pool's scale sets and their capacities as deployed (kept, see split_pool);
    ``large_pools``: the pools deployed as large scale sets (kept large)."""
    if not isinstance(config, ClusterStack):
        raise ValueError(f"{stack} is a {config.kind} stack, not a cluster")
    cluster = config.cluster
    plan = plan_stack(stacks_dir, stack, config, deployed)
    plan.refuse_hard_limit_breaks()
    addresses = cluster_addresses(plan)
    try:
        # The Kubernetes minor against every pinned component: the node images' containerd and the GPU base's DCGM here, the gang
        # scheduler's skew in addons_spec, the component images in the versions table (bootstrap_context).
        versions.check_image_containerd(cluster.kubernetes_version)
        check_gpu_base(config.images)
        release = versions.kubernetes_release(cluster.kubernetes_version, cluster.kubernetes_patch)
        booted = tuple(r for r in ROLES if r != "events-etcd" or cluster.events_etcd is not None)
        images = node_images(cluster, release, booted)
        check_images_stack(stacks_dir, cluster, release, images)
        pools = plan_pools(cluster, limits_for(config), scale_sets, large_pools)
        # Which node agents land on which pool comes from the rendered add-ons; the pools' maxPods (and so the
        # gang scheduler's Pod cache, sized in the spec) come from those agents: build the spec again with them.
        pools = with_node_agents(pools, addons_for(stack, config, addresses, pools))
        addons = addons_for(stack, config, addresses, pools)
        sizes = size_cluster(cluster, pools)
        egress = cluster_egress(config, plan, pools)
        prerequisites = cluster_prerequisites(
            config,
            pools,
            sizes,
            stack=stack,
            hub_group=resource_group_name(hub_stack_name(cluster)),
            public_ips=sum(g.public_ips for g in egress),
            images=images,
        )
        boot = bootstrap_context(config, addresses, pools, stack)
    except AgkError as err:
        raise err.in_stack(stack) from None
    return ClusterPrep(
        stack=stack,
        config=config,
        plan=plan,
        addresses=addresses,
        pools=pools,
        sizes=sizes,
        prerequisites=prerequisites,
        egress=egress,
        bootstrap=boot,
        addons=addons,
        node_images=images,
        subnet_rules=subnet_rules(dict(addresses.subnets), addresses.service_cidr, plan.hub_space),
        storage=storage_access(
            cluster,
            [p.name for p in pools.gpu],
            [t.team for t in addons.access.teams] if addons.access and cluster.identity else [],
            list(addresses.etcd),
        ),
    )
