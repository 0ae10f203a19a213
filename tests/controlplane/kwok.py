"""kwok, the stand-in for kubelets: fake Nodes shaped exactly as a stack's pools render them.

A node here is what the pool's kubelet would register (``tests/controlplane/test_node_join.py`` proves
that registration on the real API server with the node's own credentials): the kubelet unit's
``--node-labels`` (with the InfiniBand island that node-identity.sh adds on GPU pools), the kubelet
configuration's ``registerWithTaints``, ``maxPods``, and capacity from the VM size with allocatable as
the kubelet computes it (capacity minus kubeReserved, systemReserved and the hard eviction
threshold). GPUs and InfiniBand come as the device plugins advertise them (``nvidia.com/gpu``,
``rdma/ib``). kwok (the pinned build, with the node and pod stages its release ships) then keeps the
nodes Ready with leases and moves every pod bound to them to Running, so the scheduler, the
DaemonSet controller and the node lifecycle controller act as on a real cluster.

What stands in for cloud-provider-azure (which needs Azure): ``initialize`` removes the
``node.cloudprovider.kubernetes.io/uninitialized`` taint and sets the scale-set providerID, as its
node controller does once it has read the VM.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from modules.bootstrap.roles import bundle
from modules.cluster.objects.rdma import HCA_MAX
from modules.cluster.objects.rdma import RESOURCE as RDMA_RESOURCE
from modules.stackplan.prepare import ClusterPrep
from modules.vm_sizing.skus import sku
from tests.bootstrap.conftest import BUILT, tool

from .cluster import ControlPlane, Process

FAKE = "kwok.x-k8s.io/node"
"""The annotation kwok manages nodes by (its docs' convention: ``kwok.x-k8s.io/node: fake``)."""
UNINITIALIZED = "node.cloudprovider.kubernetes.io/uninitialized"
STAGES = (
    "node/fast/node-initialize.yaml",
    "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "pod/fast/pod-ready.yaml",
    "pod/fast/pod-complete.yaml",
    "pod/fast/pod-delete.yaml",
)


def base36(n: int, width: int = 6) -> str:
    """A scale set instance's computer-name suffix (Uniform orchestration: base-36 instance id)."""
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while n:
        n, r = divmod(n, 36)
        out = digits[r] + out
    return out.rjust(width, "0")


def _kubelet(prep: ClusterPrep, pool: str) -> tuple[dict[str, str], list[dict[str, str]], dict[str, Any], bool]:
    """The pool's rendered kubelet: labels (without the island), taints, configuration, and whether
    node-identity.sh adds the island label."""
    role = "system-node" if pool == "system" else "gpu-node"
    node = bundle(prep.bootstrap, role, pool)
    unit = node.file("systemd/kubelet.service.d/10-agk.conf").content
    (start,) = [line for line in unit.splitlines() if line.startswith("ExecStart=/")]
    words = shlex.split(start.replace("${AGK_NODE_LABELS}", "AGK"))
    (flag,) = [w for w in words if w.startswith("--node-labels=")]
    labels = dict(i.split("=", 1) for i in flag.removeprefix("--node-labels=").split(",") if i != "AGK")
    config = yaml.safe_load(node.file("kubelet/config.yaml").content)
    taints = list(config.get("registerWithTaints") or [])
    if "--cloud-provider=external" in words:
        taints.append({"key": UNINITIALIZED, "value": "true", "effect": "NoSchedule"})
    has_island = any(f.rel == "node-identity.sh" for f in node.files)
    return labels, taints, config, has_island


def _allocatable(capacity: dict[str, str], config: dict[str, Any]) -> dict[str, str]:
    """Node allocatable = capacity - kube-reserved - system-reserved - hard eviction (memory), as the kubelet."""

    def gib(q: str) -> float:
        return float(q.removesuffix("Gi")) if q.endswith("Gi") else float(q) / 2**30

    reserved = [config.get("kubeReserved") or {}, config.get("systemReserved") or {}]
    cpu = int(capacity["cpu"]) - sum(float(r.get("cpu", 0)) for r in reserved)
    memory = gib(capacity["memory"]) - sum(gib(r.get("memory", "0Gi")) for r in reserved)
    memory -= gib((config.get("evictionHard") or {}).get("memory.available", "0Gi"))
    return capacity | {"cpu": f"{int(cpu * 1000)}m", "memory": f"{int(memory * 1024)}Mi"}


@dataclass(frozen=True)
class FakeNode:
    name: str
    pool: str
    scale_set: str
    instance: int
    body: dict[str, Any]


def pool_nodes(prep: ClusterPrep, pool: str, per_scale_set: int | None = None) -> list[FakeNode]:
    """The nodes of ``pool`` as its scale sets hold them (``per_scale_set`` caps each set, for small tests)."""
    plan = prep.pools.pools[pool]
    labels, taints, config, has_island = _kubelet(prep, pool)
    vm = sku(plan.vm_size)
    capacity = {"cpu": str(vm.vcpus), "memory": f"{vm.memory_gib}Gi", "pods": str(config["maxPods"])}
    if vm.gpus:
        capacity["nvidia.com/gpu"] = str(vm.gpus)
    if plan.infiniband:
        capacity[RDMA_RESOURCE] = str(HCA_MAX)  # the shared device plugin's rdmaHcaMax
    out = []
    for s in plan.scale_sets:
        count = s.capacity if per_scale_set is None else min(per_scale_set, s.capacity)
        for i in range(count):
            name = f"{s.name}{base36(i)}"
            node_labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
            node_labels |= labels
            if has_island:
                node_labels[f"{prep.bootstrap.label_domain}/ib-island"] = s.name
            body = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": node_labels, "annotations": {FAKE: "fake"}},
                "spec": {"taints": taints},
                "status": {"capacity": capacity, "allocatable": _allocatable(capacity, config)},
            }
            out.append(FakeNode(name, pool, s.name, i, body))
    return out


def register(cp: ControlPlane, nodes: Iterable[FakeNode]) -> None:
    """Create the Nodes (a kubelet registers with its status; the API server keeps status on create)."""
    for n in nodes:
        code, body = cp.call("POST", "/api/v1/nodes", n.body)
        assert code in (201, 409), body


def initialize(
    cp: ControlPlane, nodes: Iterable[FakeNode], subscription: str = "00000000-0000-0000-0000-000000000000"
) -> None:
    """What cloud-provider-azure's node controller does to a registered node: providerID, no uninitialized taint."""
    for n in nodes:
        code, node = cp.call("GET", f"/api/v1/nodes/{n.name}")
        assert code == 200, node
        taints = [t for t in node["spec"].get("taints") or [] if t["key"] != UNINITIALIZED]
        provider = (
            f"azure:///subscriptions/{subscription}/resourceGroups/agk-{cp.ctx.cluster}/providers/"
            f"Microsoft.Compute/virtualMachineScaleSets/{n.scale_set}/virtualMachines/{n.instance}"
        )
        patch = {"spec": {"taints": taints, "providerID": provider}}
        code, body = cp.call_patch(f"/api/v1/nodes/{n.name}", patch)
        assert code == 200, body


KWOK_WORKERS = 4
"""kwok v0.8.0's default parallelism of each stage kind (pkg/apis/config/v1alpha1/zz_generated.defaults.go)."""


def config(
    root: Path,
    *,
    heartbeat_ms: int | None = None,
    stages: Iterable[str] = STAGES,
    pod_workers: int | None = None,
    node_workers: int | None = None,
) -> Path:
    """kwok's configuration: its release's stages; ``heartbeat_ms`` retunes the heartbeat (scale tier);
    ``stages`` leaves some out (a training job's pods run until stopped: no pod-complete); ``pod_workers`` and
    ``node_workers`` are how many pod and node stages kwok plays at once (``podPlayStageParallelism`` and
    ``nodePlayStageParallelism``, 4 each by default in kwok v0.8.0, whose client has no rate limit: its pace is
    the workers over the API server's latency)."""
    docs: list[dict[str, Any]] = []
    if pod_workers is not None or node_workers is not None:
        docs.append(
            {
                "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
                "kind": "KwokConfiguration",
                # A configuration file is not defaulted: kwok v0.8.0's defaults (its
                # pkg/apis/config/v1alpha1/zz_generated.defaults.go) are written out, with the pod workers.
                "options": {
                    "enableDebuggingHandlers": True,
                    "enableContentionProfiling": False,
                    "enableProfilingHandler": True,
                    "manageAllNodes": False,
                    "podPlayStageParallelism": pod_workers or KWOK_WORKERS,
                    "nodePlayStageParallelism": node_workers or KWOK_WORKERS,
                    "nodeLeaseParallelism": KWOK_WORKERS,
                    "podsOnNodeSyncParallelism": 1,
                    "enablePodsOnNodeSyncListPager": True,
                    "enablePodsOnNodeSyncStreamWatch": False,
                },
            }
        )
    for stage in stages:
        doc = yaml.safe_load((BUILT / "kwok-stages" / stage).read_text())
        if heartbeat_ms is not None and doc["metadata"]["name"] == "node-heartbeat-with-lease":
            doc["spec"]["delay"] = {"durationMilliseconds": heartbeat_ms, "jitterDurationMilliseconds": heartbeat_ms}
        docs.append(doc)
    path = root / "kwok.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return path


class Kwok:
    """One kwok process managing every node annotated ``kwok.x-k8s.io/node: fake``."""

    def __init__(
        self,
        cp: ControlPlane,
        root: Path,
        *,
        lease_seconds: int = 40,
        extra: Iterable[str] = (),
        stages: Iterable[str] = STAGES,
        pod_workers: int | None = None,
        node_workers: int | None = None,
    ) -> None:
        root.mkdir(parents=True, exist_ok=True)
        argv = [
            tool("kwok"),
            f"--kubeconfig={cp.admin}",
            f"--config={config(root, stages=stages, pod_workers=pod_workers, node_workers=node_workers)}",
            f"--manage-nodes-with-annotation-selector={FAKE}=fake",
            f"--node-lease-duration-seconds={lease_seconds}",
            "--cidr=10.200.0.0/16",
            *extra,
        ]
        self.cp = cp
        self.process = Process("kwok", argv, root / "kwok.log")
        self.process.start()

    def stop(self) -> None:
        self.process.stop()


def ready(cp: ControlPlane, names: Iterable[str], timeout: float = 120) -> None:
    """Wait until every named node reports Ready (kwok's node-initialize stage). Listed in pages, as a
    client of a 7,500-node cluster must: one whole LIST is ~100 MB and outlasts a 30 s read."""
    want = set(names)
    deadline = time.monotonic() + timeout
    while True:
        done: set[str] = set()
        token = ""
        while True:
            body = cp.get("/api/v1/nodes?limit=500" + (f"&continue={token}" if token else ""))
            done |= {
                n["metadata"]["name"]
                for n in body["items"]
                if any(
                    c["type"] == "Ready" and c["status"] == "True" for c in n.get("status", {}).get("conditions") or []
                )
            }
            token = body["metadata"].get("continue", "")
            if not token:
                break
        if want <= done:
            return
        assert time.monotonic() < deadline, f"not Ready: {sorted(want - done)[:10]}"
        time.sleep(0.5 if len(want) < 1000 else 5)


def nodes_json(cp: ControlPlane, selector: str = "") -> Iterator[dict[str, Any]]:
    code, body = cp.call("GET", "/api/v1/nodes" + (f"?labelSelector={selector}" if selector else ""))
    assert code == 200, body
    yield from body["items"]
