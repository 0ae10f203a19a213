"""Pure tier: each pool counted once (nodes, surge, pod IPs, kubelet maxPods, scale sets)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from modules.address_plan.limits import Limits
from modules.cluster.manifests import render_manifests
from modules.cluster.placement import NodeTaint, daemonsets_on, lands_on, released
from modules.errors import ConfigError
from modules.stackplan.config import load_stack
from modules.stackplan.pools import ClusterPools, plan_pools
from modules.stackplan.prepare import agents_on, prepare_cluster
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
        # The node as workloads find it: preflight has passed and taken its label and taint away.
        staying = daemonsets_on(objs, *released(dict(pool.labels), taints, prep.addons.preflight_key))
        assert staying, pool.name  # node agents run everywhere (exporters, node-problem-detector)
        # Every node agent is host-network: no pod IP of the NIC goes to one.
        assert all(d.host_network for d in staying), [d.ref for d in staying if not d.host_network]
        assert pool.ip_daemons == ()
        assert pool.workload_pod_ips == pool.pod_ips
        # maxPods: the pod IPs plus every host-network pod that stays (static kube-proxy, the agents);
        # the preflight pod has left by the time workloads land, so it holds no slot.
        assert pool.kubelet_max_pods == pool.pod_ips + 1 + len(staying)
        assert set(pool.host_network_pods) == {"kube-system/kube-proxy", *(d.ref for d in staying)}
        assert "gpu-health/gpu-preflight" not in pool.host_network_pods


D = "gpu.example.com"
PENDING = {"key": f"{D}/preflight", "operator": "Exists", "effect": "NoSchedule"}


def _ds(name: str, pod: dict[str, Any], host_network: bool = True) -> dict[str, Any]:
    return {
        "kind": "DaemonSet",
        "metadata": {"namespace": "t", "name": name},
        "spec": {
            "template": {
                "spec": {**pod, "hostNetwork": host_network, "tolerations": [PENDING, *pod.get("tolerations", [])]}
            }
        },
    }


def _affinity(*exprs: dict[str, Any]) -> dict[str, Any]:
    return {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": list(exprs)}]
                }
            }
        }
    }


@pytest.mark.parametrize(
    ("pod", "host_network", "stays_on_h100"),
    [
        ({}, True, True),  # everywhere: stays
        ({"nodeSelector": {f"{D}/accelerator": "nvidia"}}, True, True),
        ({"nodeSelector": {f"{D}/preflight": "pending"}}, True, False),  # the preflight diagnostic: leaves
        ({"nodeSelector": {f"{D}/preflight": "pending", f"{D}/accelerator": "nvidia"}}, True, False),
        (_affinity({"key": f"{D}/preflight", "operator": "In", "values": ["pending"]}), True, False),
        (_affinity({"key": f"{D}/preflight", "operator": "Exists"}), True, False),
        # Runs only on a released node: absent while pending, there with the workloads.
        (_affinity({"key": f"{D}/preflight", "operator": "DoesNotExist"}), True, True),
        (_affinity({"key": f"{D}/preflight", "operator": "NotIn", "values": ["failed"]}), True, True),
        ({"nodeSelector": {f"{D}/preflight": "pending"}}, False, False),  # a pod-IP one leaves as well
    ],
    ids=[
        "everywhere",
        "gpu-nodes",
        "selects-pending",
        "selects-pending-gpu",
        "affinity-in-pending",
        "affinity-preflight-exists",
        "affinity-no-preflight-label",
        "affinity-not-failed",
        "pod-ip-selects-pending",
    ],
)
def test_max_pods_counts_only_the_pods_that_stay_after_preflight(
    pod: dict[str, Any], host_network: bool, stays_on_h100: bool
) -> None:
    config = load_stack(STACKS, "dev").cluster
    assert config is not None
    pools = plan_pools(config, Limits.default())
    h100 = agents_on(pools, [_ds("agent", pod, host_network)], f"{D}/preflight").pools["h100"]
    stays = ("t/agent",) if stays_on_h100 else ()
    assert h100.host_network_pods == ("kube-system/kube-proxy", *(stays if host_network else ()))
    assert h100.ip_daemons == (() if host_network else stays)
    # One slot per pod IP plus one per host-network pod that stays; never one for a pod that has left.
    assert h100.kubelet_max_pods == h100.pod_ips + 1 + (1 if host_network and stays_on_h100 else 0)


def test_a_node_before_preflight_must_still_admit_its_own_pods() -> None:
    config = load_stack(STACKS, "dev").cluster
    assert config is not None
    pools = plan_pools(config, Limits.default())
    narrow = ClusterPools({**pools.pools, "h100": replace(pools.pools["h100"], pod_ips=1)})
    # Two preflight-only pods that take a pod IP: the joining node needs 2, the NIC has 1.
    objs = [_ds(n, {"nodeSelector": {f"{D}/preflight": "pending"}}, host_network=False) for n in ("a", "b")]
    with pytest.raises(ConfigError) as err:
        agents_on(narrow, objs, f"{D}/preflight")
    assert str(err.value) == (
        "azure-gpu-k8s:cluster.gpu_pools.h100.pod_ips: 1 pod IPs leave no room for the 3 pods of a node before "
        "preflight (kube-system/kube-proxy, t/a, t/b): raise pod_ips to 2 or more"
    )


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
