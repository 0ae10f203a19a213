"""Every node pool's numbers, worked out once from the config before any resource exists.

A ``PoolPlan`` is the one place a pool's counts live: nodes deployed, its autoscaling maximum, surge,
the pod IPs each NIC carries, the kubelet's maxPods and the scale sets. Subnets, scale sets, tags,
bootstrap, sizing and policies all read it; nothing re-parses ``surge`` or re-adds node counts.

Pod IPs and kubelet maxPods differ on purpose: with Azure CNI every pod that is not host-network
takes one secondary IP configuration of the node's NIC, but the kubelet's maxPods counts every pod,
host-network ones included (static pods and node agents). So maxPods = pod IPs + the host-network
pods the cluster itself puts on the node, derived from the add-ons and static pods, not typed twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from modules import labels
from modules.address_plan.limits import Limits
from modules.address_plan.subnet_sizes import parse_surge
from modules.bootstrap.context import PoolRole, Taint
from modules.config_model import PROJECT
from modules.errors import ConfigError
from modules.stackplan.config import ClusterConfig, GpuPoolConfig, PoolConfig
from modules.vm_sizing.formulas import cluster_pods, prometheus_series, sizing_step
from modules.vm_sizing.scale_sets import ScaleSetPlan, split_pool
from modules.vm_sizing.skus import sku

SYSTEM = "system"


@dataclass(frozen=True)
class PoolPlan:
    """One pool, counted once."""

    name: str
    """``system`` or the GPU pool's key in the config."""
    key: str
    """Its config key (``cluster.system_pool``, ``cluster.gpu_pools.<name>``), for messages."""
    role: PoolRole
    vm_size: str
    gpus_per_node: int
    nodes: int
    """VMs deployed: the scale sets' capacities add up to this."""
    max_nodes: int
    """Autoscaling maximum (``nodes`` when the pool does not autoscale)."""
    surge: int
    """Extra VMs that may exist at once (upgrades, replacements in flight); the subnet plans for them."""
    pod_ips: int
    """Secondary IP configurations on every node's NIC: one per pod that is not host-network."""
    scale_sets: tuple[ScaleSetPlan, ...]
    infiniband: bool
    team: str | None
    zone: str | None
    os_disk_gib: int
    labels: tuple[tuple[str, str], ...]
    """Node labels the kubelet registers with (``--node-labels``)."""
    taints: tuple[Taint, ...]
    """Taints the kubelet registers with (``registerWithTaints``)."""
    host_network_pods: tuple[str, ...] = ()
    """Static pods and node agents that use the host network (no pod IP) on this pool's nodes once they
    take work: not the preflight pods, which leave when it passes."""
    ip_daemons: tuple[str, ...] = ()
    """Node agents that take a pod IP (not host-network) on this pool's nodes once they take work."""

    @property
    def peak_nodes(self) -> int:
        """The most VMs of this pool that can exist at once: its maximum plus surge."""
        return self.max_nodes + self.surge

    @property
    def ip_configurations_per_nic(self) -> int:
        return 1 + self.pod_ips

    @property
    def subnet_ips(self) -> int:
        """IP configurations the pool takes from its subnet: (max nodes + surge) x (1 + pod IPs)."""
        return self.peak_nodes * self.ip_configurations_per_nic

    @property
    def kubelet_max_pods(self) -> int:
        """The kubelet counts every pod, host-network ones too: one per pod IP plus one per host-network
        pod that stays. A pod that leaves before workloads arrive would be a slot with no address."""
        return self.pod_ips + len(self.host_network_pods)

    @property
    def workload_pod_ips(self) -> int:
        """Pod IPs left for workloads once the node agents that take one have theirs."""
        return self.pod_ips - len(self.ip_daemons)

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def subnet(self) -> str:
        return SYSTEM if self.name == SYSTEM else f"gpu-{self.name}"

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "role": self.role,
            "vm_size": self.vm_size,
            "nodes": self.nodes,
            "max_nodes": self.max_nodes,
            "surge": self.surge,
            "peak_nodes": self.peak_nodes,
            "pod_ips": self.pod_ips,
            "kubelet_max_pods": self.kubelet_max_pods,
            "host_network_pods": list(self.host_network_pods),
            "scale_sets": {s.name: s.capacity for s in self.scale_sets},
            "single_placement_group": all(s.single_placement_group for s in self.scale_sets),
            "subnet": self.subnet,
            "subnet_ips": self.subnet_ips,
            "gpus": self.gpus,
        }


@dataclass(frozen=True)
class ClusterPools:
    """Every pool of one cluster, keyed by name (``system`` first)."""

    pools: Mapping[str, PoolPlan]

    @property
    def system(self) -> PoolPlan:
        return self.pools[SYSTEM]

    @property
    def gpu(self) -> tuple[PoolPlan, ...]:
        return tuple(p for p in self.pools.values() if p.role == "gpu-node")

    @property
    def deployed_nodes(self) -> int:
        """VMs `pulumi up` creates (the scale sets' capacities)."""
        return sum(p.nodes for p in self.pools.values())

    @property
    def peak_nodes(self) -> int:
        """The most nodes the cluster can hold at once (every pool at its maximum plus surge): what the
        subnets are planned for."""
        return sum(p.peak_nodes for p in self.pools.values())

    @property
    def pods_per_node(self) -> int:
        """The GPU pools' largest maxPods, not the system pool's: its few nodes take more agents each, but
        counting every node at that figure would size caches for pods that cannot exist; a pool's config, not
        its node count, so a resize within the step changes nothing."""
        return max((p.kubelet_max_pods for p in self.gpu), default=self.system.kubelet_max_pods)

    @property
    def sizing_pods(self) -> int:
        """The most Pods the sizing step holds (:func:`modules.vm_sizing.formulas.cluster_pods`): what caches
        of every Pod (the gang scheduler, kube-state-metrics' series) are sized for."""
        return cluster_pods(self.sizing_nodes, self.pods_per_node)

    def prometheus_series(self, shards: int) -> int:
        """One Prometheus host's active series at the sizing step, its share of ``shards``
        (:func:`modules.vm_sizing.formulas.prometheus_series`): what its disk and the plan's figure follow."""
        return prometheus_series(self.sizing_nodes, self.sizing_pods, shards)

    @property
    def sizing_nodes(self) -> int:
        """What the control plane and Prometheus are sized for: ``peak_nodes`` rounded up to its sizing step
        (:func:`modules.vm_sizing.formulas.sizing_step`), so a small pool change resizes nothing."""
        return sizing_step(self.peak_nodes)

    def with_agents(
        self,
        host_network: Mapping[str, tuple[str, ...]],
        ip_daemons: Mapping[str, tuple[str, ...]],
        joining: Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]] | None = None,
    ) -> ClusterPools:
        """``host_network``/``ip_daemons``: the pods on a pool's nodes once they take work; ``joining``: the
        (host-network, pod-IP) pods on a node before preflight releases it, which the same maxPods and
        pod IPs must admit."""
        pools = {
            name: replace(p, host_network_pods=host_network[name], ip_daemons=ip_daemons[name])
            for name, p in self.pools.items()
        }
        for p in pools.values():
            if p.workload_pod_ips < 1:
                raise ConfigError(
                    f"{PROJECT}:{p.key}.pod_ips: {p.pod_ips} pod IPs but {len(p.ip_daemons)} node agent(s) "
                    f"({', '.join(p.ip_daemons)}) take one on every node: raise pod_ips to {len(p.ip_daemons) + 1} "
                    "or more"
                )
            hosted, addressed = (joining or {}).get(p.name, ((), ()))
            # A joining node holds no workload (the preflight taint), but its own pods must be admitted:
            # past maxPods the kubelet rejects them, past the pod IPs one never gets an address.
            short = max(len(hosted) + len(addressed) - p.kubelet_max_pods, len(addressed) - p.pod_ips)
            if short > 0:
                raise ConfigError(
                    f"{PROJECT}:{p.key}.pod_ips: {p.pod_ips} pod IPs leave no room for the {len(hosted) + len(addressed)} "
                    f"pods of a node before preflight ({', '.join(hosted + addressed)}): raise pod_ips to "
                    f"{p.pod_ips + short} or more"
                )
        return ClusterPools(pools)


def node_identity(
    name: str, vm_size: str, team: str | None, domain: str
) -> tuple[tuple[tuple[str, str], ...], tuple[Taint, ...]]:
    """The labels and taints a pool's nodes register with."""
    size = sku(vm_size)
    out = [(labels.key(domain, labels.POOL), name)]
    taints: list[Taint] = []
    if size.gpus:
        # GPU nodes join untested: the preflight DaemonSet (selected by the preflight label) runs
        # dcgmi on them and lifts the taint. CPU nodes have nothing to diagnose and join ready.
        out += [
            (labels.key(domain, labels.ACCELERATOR), labels.ACCELERATOR_NVIDIA),
            (labels.key(domain, labels.GPU_MODEL), size.gpu_model),
            (labels.key(domain, labels.PREFLIGHT), "pending"),
        ]
        taints.append(Taint(labels.key(domain, labels.PREFLIGHT), "pending", "NoSchedule"))
    if team:
        out.append((labels.key(domain, labels.TEAM), team))
        taints.append(Taint(labels.key(domain, labels.TEAM), team, "NoSchedule"))
    return tuple(out), tuple(taints)


def _surge(pool: PoolConfig, nodes: int, key: str) -> int:
    try:
        return parse_surge(pool.surge, nodes, where=f"{key}.surge")
    except ValueError as err:
        raise ConfigError(f"{PROJECT}:{err}") from None


def plan_pool(
    name: str,
    key: str,
    pool: PoolConfig,
    limits: Limits,
    domain: str,
    deployed: Mapping[str, int] | None = None,
    deployed_large: bool = False,
) -> PoolPlan:
    """One pool; ``deployed``: its scale sets as the last `pulumi up` left them (kept, see split_pool), and
    ``deployed_large`` whether they are large sets (kept: the conversion is one way)."""
    try:
        size = sku(pool.vm_size)
    except ConfigError as err:
        raise ConfigError(f"{PROJECT}:{key}.vm_size: {err}") from None
    nic_cap = limits["nic-private-ips"]
    if pool.pod_ips + 1 > nic_cap:
        raise ConfigError(
            f"{PROJECT}:{key}.pod_ips: 1 + {pool.pod_ips} IP configurations exceed the {nic_cap} a NIC holds "
            f"(a hard Azure limit): use pod_ips {nic_cap - 1} or fewer"
        )
    gpu = isinstance(pool, GpuPoolConfig)
    infiniband = isinstance(pool, GpuPoolConfig) and pool.infiniband
    max_nodes = pool.max_nodes or pool.nodes
    try:
        sets = split_pool(
            name,
            pool.nodes,
            infiniband=infiniband,
            cap_spg=limits["vmss-instances-spg"],
            cap_large=limits["vmss-instances-large"],
            headroom=pool.scale_set_headroom,
            max_nodes=max_nodes,
            deployed=deployed,
            deployed_large=deployed_large,
        )
    except ValueError as err:
        raise ConfigError(f"{PROJECT}:{key}.scale_set_headroom: {err}") from None
    team = pool.team if isinstance(pool, GpuPoolConfig) else None
    node_labels, taints = node_identity(name, pool.vm_size, team, domain)
    return PoolPlan(
        name=name,
        key=key,
        role="gpu-node" if gpu else "system-node",
        vm_size=pool.vm_size,
        gpus_per_node=size.gpus,
        nodes=pool.nodes,
        max_nodes=max_nodes,
        surge=_surge(pool, max_nodes, key),
        pod_ips=pool.pod_ips,
        scale_sets=tuple(sets),
        infiniband=infiniband,
        team=team,
        zone=pool.zone if isinstance(pool, GpuPoolConfig) else None,
        os_disk_gib=pool.os_disk_gib,
        labels=node_labels,
        taints=taints,
    )


def plan_pools(
    cluster: ClusterConfig,
    limits: Limits,
    deployed: Mapping[str, Mapping[str, int]] | None = None,
    large: frozenset[str] = frozenset(),
) -> ClusterPools:
    """Every pool of ``cluster``; raises ConfigError naming the key for counts Azure cannot hold.

    ``deployed``: pool name to its scale sets' capacities as deployed (:func:`deployed_scale_sets`); ``large``:
    the pools deployed as large scale sets (:func:`deployed_large_pools`)."""
    domain = cluster.label_domain
    sets = deployed or {}
    pools = {
        SYSTEM: plan_pool(
            SYSTEM, "cluster.system_pool", cluster.system_pool, limits, domain, sets.get(SYSTEM), SYSTEM in large
        )
    }
    for name, pool in cluster.gpu_pools.items():
        key = f"cluster.gpu_pools.{name}"
        pools[name] = plan_pool(name, key, pool, limits, domain, sets.get(name), name in large)
    return ClusterPools(pools)


def deployed_large_pools(outputs: Mapping[str, object]) -> frozenset[str]:
    """The pools whose scale sets the last `pulumi up` deployed as large (``pools.<name>.single_placement_group``
    false); none before the first deploy, or from a release that did not record it."""
    pools = outputs.get("pools")
    if not isinstance(pools, Mapping):
        return frozenset()
    return frozenset(
        str(name)
        for name, pool in pools.items()
        if isinstance(pool, Mapping) and pool.get("single_placement_group") is False
    )


def deployed_scale_sets(outputs: Mapping[str, object]) -> dict[str, dict[str, int]]:
    """Pool name to its scale sets' capacities, from a cluster stack's last outputs (``pools.<name>.scale_sets``,
    :meth:`PoolPlan.to_dict`); ``{}`` before the first deploy."""
    pools = outputs.get("pools")
    if not isinstance(pools, Mapping):
        return {}
    out: dict[str, dict[str, int]] = {}
    for name, pool in pools.items():
        sets = pool.get("scale_sets") if isinstance(pool, Mapping) else None
        if isinstance(sets, Mapping):
            out[str(name)] = {
                str(k): int(v) for k, v in sets.items() if isinstance(v, int | float) and not isinstance(v, bool)
            }
    return out
