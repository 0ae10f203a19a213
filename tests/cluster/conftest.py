from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from infra.addresses import cluster_addresses, plan_stack
from infra.config import load_stack
from modules.cluster.config import AddonsConfig
from modules.cluster.spec import AddonsSpec, PoolFacts, addons_spec
from modules.sizing.skus import gpus_per_vm

STACKS = Path(__file__).resolve().parents[2] / "stacks"


def spec_of(stack: str, *, version: str | None = None, addons: AddonsConfig | None = None) -> AddonsSpec:
    """What the cluster stack program computes and exports, with a different version or addons section."""
    config = load_stack(STACKS, stack)
    cluster = config.cluster
    assert cluster is not None
    pools = {
        name: PoolFacts(name, p.vm_size, gpus_per_vm(p.vm_size), p.nodes, p.team)
        for name, p in cluster.gpu_pools.items()
    }
    return addons_spec(
        cluster.name,
        version or cluster.kubernetes_version,
        cluster.label_domain,
        pools,
        addons if addons is not None else config.addons,
        dns_service_ip=str(cluster_addresses(plan_stack(STACKS, stack)).dns_service_ip),
        system_nodes=cluster.system_pool.nodes,
    )


@pytest.fixture(scope="session")
def make_spec() -> Callable[..., AddonsSpec]:
    return spec_of


@pytest.fixture(scope="session")
def stacks_dir() -> Path:
    return STACKS


@pytest.fixture(scope="session")
def dev_spec() -> AddonsSpec:
    return spec_of("dev", addons=AddonsConfig(balloons={"a100": 2, "h100": 0}))


@pytest.fixture(scope="session")
def prod_spec() -> AddonsSpec:
    return spec_of("prod-7500")


@pytest.fixture(scope="session")
def spec_136() -> AddonsSpec:
    """The newest declared version: MutatingAdmissionPolicy exists (GA in 1.36)."""
    return spec_of("dev", version="1.36", addons=AddonsConfig(gang={"image_tag": "v0.34.7"}))
