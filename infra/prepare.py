"""Everything a cluster stack decides before its first resource: the pure half of the program.

Validation, address plan, sizes and scale sets are all computed here from the config alone, so
bad input fails with one line and nothing built, and tests can check the decisions without
running Pulumi.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from infra.addresses import StackPlan, cluster_addresses, plan_stack
from infra.bootstrap import bootstrap_context
from infra.config import StackConfig
from infra.sizing import SizeChoice, cluster_nodes, size_cluster
from modules.bootstrap.context import BootstrapContext
from modules.cluster.spec import AddonsSpec, PoolFacts, addons_spec
from modules.errors import AgkError, ConfigError
from modules.netplan.hosts import ClusterAddresses
from modules.sizing.scale_sets import ScaleSetPlan, split_pool
from modules.sizing.skus import gpus_per_vm


@dataclass(frozen=True)
class ClusterPrep:
    stack: str
    config: StackConfig
    plan: StackPlan
    addresses: ClusterAddresses
    sizes: dict[str, SizeChoice]
    nodes: int
    """Nodes the control plane is sized for (every pool at its maximum, surge included)."""
    scale_sets: dict[str, list[ScaleSetPlan]]
    """GPU pool name to its scale sets."""
    system_scale_sets: list[ScaleSetPlan]
    bootstrap: BootstrapContext
    """What every node boots with (cloud-init, PKI subjects), from the same addresses."""
    addons: AddonsSpec
    """What the `<cluster>-addons` stack builds, validated with the pools (exported as `addons_spec`)."""


def addons_for(config: StackConfig, addresses: ClusterAddresses) -> AddonsSpec:
    """The add-ons spec: the ``addons`` section checked against the pools, plus the cluster DNS address."""
    cluster = config.cluster
    assert cluster is not None
    pools = {
        name: PoolFacts(name, pool.vm_size, gpus_per_vm(pool.vm_size), pool.nodes, pool.team)
        for name, pool in cluster.gpu_pools.items()
    }
    return addons_spec(
        cluster.name,
        cluster.kubernetes_version,
        cluster.label_domain,
        pools,
        config.addons,
        dns_service_ip=str(addresses.dns_service_ip),
        system_nodes=cluster.system_pool.nodes,
    )


def prepare_cluster(stack: str, config: StackConfig, stacks_dir: Path) -> ClusterPrep:
    cluster = config.cluster
    if cluster is None:
        raise ValueError(f"{stack} is a {config.kind} stack, not a cluster")
    plan = plan_stack(stacks_dir, stack, config)
    addresses = cluster_addresses(plan)
    try:
        sizes, addons = size_cluster(cluster), addons_for(config, addresses)
        boot = bootstrap_context(config, addresses)
    except AgkError as err:
        raise ConfigError(f"{stack}: {err}") from None
    limits = plan.limits
    caps = {"cap_spg": limits["vmss-instances-spg"], "cap_large": limits["vmss-instances-large"]}
    return ClusterPrep(
        stack=stack,
        config=config,
        plan=plan,
        addresses=addresses,
        sizes=sizes,
        nodes=cluster_nodes(cluster),
        scale_sets={
            name: split_pool(name, pool.nodes, infiniband=pool.infiniband, **caps)
            for name, pool in cluster.gpu_pools.items()
        },
        system_scale_sets=split_pool(f"{cluster.name}-system", cluster.system_pool.nodes, infiniband=False, **caps),
        bootstrap=boot,
        addons=addons,
    )
