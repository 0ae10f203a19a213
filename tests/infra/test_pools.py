"""Pure tier: each pool counted once (nodes, surge, pod IPs, kubelet maxPods, scale sets)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from modules.cluster.manifests import render_manifests
from modules.cluster.placement import NodeTaint, daemonsets_on, lands_on
from modules.errors import ConfigError
from modules.netplan.limits import Limits
from modules.stackplan.config import load_stack
from modules.stackplan.pools import ClusterPools, plan_pools
from modules.stackplan.prepare import prepare_cluster
from tests.infra.conftest import STACKS

GPU = {"d/accelerator": "nvidia", "d/pool": "h100", "d/preflight": "pending"}
PREFLIGHT = NodeTaint("d/preflight", "pending", "NoSchedule")
TEAM = NodeTaint("d/team", "research", "NoSchedule")


@pytest.mark.parametrize(
    ("pod", "labels", "taints", "lands"),
    [
        ({}, GPU, [], True),
        ({}, GPU, [PREFLIGHT], False),  # an untolerated NoSchedule taint keeps it off
        ({"tolerations": [{"operator": "Exists"}]}, GPU, [PREFLIGHT, TEAM], True),
        ({"tolerations": [{"key": "d/preflight", "operator": "Exists"}]}, GPU, [PREFLIGHT, TEAM], False),
        ({"tolerations": [{"key": "d/team", "operator": "Equal", "value": "research"}]}, GPU, [TEAM], True),
        ({"tolerations": [{"key": "d/team", "operator": "Equal", "value": "vision"}]}, GPU, [TEAM], False),
        ({"tolerations": [{"key": "d/team", "operator": "Exists", "effect": "NoExecute"}]}, GPU, [TEAM], False),
        ({}, GPU, [NodeTaint("d/x", "y", "PreferNoSchedule")], True),  # only steers
        ({"nodeSelector": {"d/accelerator": "nvidia"}}, GPU, [], True),
        ({"nodeSelector": {"d/accelerator": "nvidia"}}, {"d/pool": "system"}, [], False),
        ({"nodeSelector": {"kubernetes.io/os": "linux"}}, {}, [], True),  # the kubelet's own labels
        (
            {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {"matchExpressions": [{"key": "d/accelerator", "operator": "DoesNotExist"}]}
                            ]
                        }
                    }
                }
            },
            GPU,
            [],
            False,
        ),
        (
            {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {"matchExpressions": [{"key": "d/pool", "operator": "In", "values": ["a100"]}]},
                                {"matchExpressions": [{"key": "d/pool", "operator": "NotIn", "values": ["a100"]}]},
                            ]
                        }
                    }
                }
            },
            GPU,
            [],
            True,  # terms are ORed
        ),
    ],
)
def test_lands_on(pod: dict[str, Any], labels: dict[str, str], taints: list[NodeTaint], lands: bool) -> None:
    assert lands_on(pod, labels, taints) is lands


def _pools(stack: str) -> ClusterPools:
    return prepare_cluster(stack, load_stack(STACKS, stack), STACKS).pools


@pytest.mark.parametrize("stack", ["dev", "prod-7500"])
def test_gpu_node_agents_leave_every_pod_ip_to_workloads(stack: str) -> None:
    prep = prepare_cluster(stack, load_stack(STACKS, stack), STACKS)
    objs = render_manifests(prep.addons)
    for pool in prep.pools.pools.values():
        taints = [NodeTaint(t.key, t.value, t.effect) for t in pool.taints]
        landing = daemonsets_on(objs, dict(pool.labels), taints)
        assert landing, pool.name  # node agents run everywhere (exporters, node-problem-detector)
        # Every node agent is host-network: no pod IP of the NIC goes to one.
        assert all(d.host_network for d in landing), [d.ref for d in landing if not d.host_network]
        assert pool.ip_daemons == ()
        assert pool.workload_pod_ips == pool.pod_ips
        # maxPods: the pod IPs plus every host-network pod (static kube-proxy, the agents).
        assert pool.kubelet_max_pods == pool.pod_ips + 1 + len(landing)
        assert set(pool.host_network_pods) == {"kube-system/kube-proxy", *(d.ref for d in landing)}


def test_prod_7500_pools_counted_once() -> None:
    pools = _pools("prod-7500")
    config = load_stack(STACKS, "prod-7500").cluster
    assert config is not None
    gpu = {p.name: p for p in pools.gpu}
    assert set(gpu) == set(config.gpu_pools)
    for name, pool in gpu.items():
        declared = config.gpu_pools[name]
        assert (pool.nodes, pool.max_nodes) == (declared.nodes, declared.nodes)
        assert pool.surge == -(-declared.nodes // 100)  # "1%" rounded up
        assert sum(s.capacity for s in pool.scale_sets) == pool.nodes
        assert pool.subnet_ips == (pool.nodes + pool.surge) * (1 + declared.pod_ips)
    assert pools.deployed_nodes == 7_500 + config.system_pool.nodes
    assert pools.peak_nodes == sum(p.nodes + p.surge for p in pools.pools.values())


def test_pod_ips_must_leave_one_for_workloads() -> None:
    config = load_stack(STACKS, "dev").cluster
    assert config is not None
    pools = plan_pools(config, Limits.default())
    host = {name: () for name in pools.pools}
    takers = {name: ("gpu-health/a", "gpu-health/b") if name == "h100" else () for name in pools.pools}
    narrow = ClusterPools({**pools.pools, "h100": replace(pools.pools["h100"], pod_ips=2)})
    with pytest.raises(ConfigError) as err:
        narrow.with_agents(host, takers)
    assert str(err.value) == (
        "azure-gpu-k8s:cluster.gpu_pools.h100.pod_ips: 2 pod IPs but 2 node agent(s) (gpu-health/a, gpu-health/b) "
        "take one on every node: raise pod_ips to 3 or more"
    )
