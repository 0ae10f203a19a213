"""Recommended VM sizes per role from the cluster's node count, each rule with its source.

A stack may override any size; the plan shows recommended next to chosen so a reviewer sees
when a stack runs below what the rules suggest.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from modules.vm_sizing.skus import SKUS, Sku

GCE_TABLE = "https://kubernetes.io/docs/setup/best-practices/cluster-large/#size-of-master-and-master-components"
OPENAI_7500 = "https://openai.com/research/scaling-kubernetes-to-7500-nodes"
ETCD_HW = "https://etcd.io/docs/v3.5/op-guide/hardware/#example-hardware-configurations"
PROM_STORAGE = "https://prometheus.io/docs/prometheus/latest/storage/#operational-aspects"

# GCE's control-plane sizing table (vCPUs by node count); DOMAIN.md: >500 nodes 32, >3,000 nodes 64.
APISERVER_VCPUS = ((5, 1), (10, 2), (100, 4), (250, 8), (500, 16), (3000, 32))
APISERVER_VCPUS_ABOVE = 64
# OpenAI: up to 70 GB of API server heap at 7,500 nodes; memory grows linearly with nodes.
APISERVER_HEAP_GB_AT_7500 = 70.0
APISERVER_MEMORY_HEADROOM = 1.5
# etcd's example hardware: (nodes up to, vCPUs, memory GB, IOPS).
ETCD_TIERS = ((50, 2, 8, 3600), (250, 4, 16, 6000), (1000, 8, 32, 8000), (3000, 16, 64, 15000))
ETCD_ABOVE = (32, 128, 20000)  # extrapolated beyond the guide's 3,000-node row
# Prometheus: series per node (node-exporter, kubelet/cAdvisor, dcgm-exporter on 8 GPUs), bytes of
# head memory per active series, bytes per sample on disk (the storage docs: 1-2 bytes).
SERIES_PER_NODE = 3000
HEAD_BYTES_PER_SERIES = 4096
BYTES_PER_SAMPLE = 2
SCRAPE_INTERVAL_S = 30

GENERAL = ("Standard_D", "Standard_E")

# Node-count-derived sizes (VM sizes, etcd IOPS, the Prometheus disk, API server and client limits) follow
# the cluster's node count in steps, not node by node: a change inside a step resizes nothing and rewrites
# no control-plane file, so adding one node restarts no API server (issue 20). The steps hold the rules'
# own boundaries (GCE's 5/10/100/250/500/3,000 rows, etcd's 50/250/1,000/3,000 tiers) and every 500 nodes
# up to 3,000, every 1,000 beyond; `agk plan --base` says when a change crosses one.
SIZING_STEPS = (5, 10, 50, 100, 250, 500, 1000, 1500, 2000, 2500, 3000)
SIZING_STEP_ABOVE = 1000


@dataclass(frozen=True)
class Recommendation:
    role: str
    vm_size: str
    vcpus: int
    memory_gib: int
    rule: str
    source: str


def sizing_step(nodes: int) -> int:
    """The node count a cluster of ``nodes`` is sized for: the smallest step at or above it."""
    step = next((s for s in SIZING_STEPS if nodes <= s), None)
    if step is not None:
        return step
    return -(-nodes // SIZING_STEP_ABOVE) * SIZING_STEP_ABOVE


def _smallest(vcpus: int, memory_gib: float, prefixes: tuple[str, ...], *, nvme: bool = False) -> Sku:
    fits = [
        s
        for s in SKUS.values()
        if s.gpus == 0
        and s.name.startswith(prefixes)
        and s.vcpus >= vcpus
        and s.memory_gib >= memory_gib
        and (s.local_nvme_gib > 0) == nvme
    ]
    if not fits:
        return max((s for s in SKUS.values() if s.name.startswith(prefixes)), key=lambda s: (s.memory_gib, s.vcpus))
    return min(fits, key=lambda s: (s.vcpus, s.memory_gib))


def apiserver_min_vcpus(nodes: int) -> int:
    """GCE's control-plane table: the vCPUs an API server needs for ``nodes``."""
    return next((v for limit, v in APISERVER_VCPUS if nodes <= limit), APISERVER_VCPUS_ABOVE)


def apiserver_heap_gib(nodes: int) -> float:
    """The API server heap OpenAI's figure implies for ``nodes`` (linear, 70 GB at 7,500)."""
    return APISERVER_HEAP_GB_AT_7500 * 1e9 * nodes / 7500 / 2**30


def apiserver(nodes: int) -> Recommendation:
    vcpus = apiserver_min_vcpus(nodes)
    memory = max(16.0, apiserver_heap_gib(nodes) * APISERVER_MEMORY_HEADROOM)
    sku = _smallest(vcpus, memory, GENERAL)
    return Recommendation(
        "apiserver",
        sku.name,
        sku.vcpus,
        sku.memory_gib,
        f"{nodes:,} nodes: >= {vcpus} vCPU (GCE table), >= {memory:.0f} GiB (heap, 70 GB at 7,500 nodes, x1.5)",
        f"{GCE_TABLE} ; {OPENAI_7500}",
    )


def apiserver_min_memory_gib(nodes: int) -> int:
    """The memory floor the policy pack checks API server VMs against: the heap alone, no headroom."""
    return math.ceil(apiserver_heap_gib(nodes))


def etcd(nodes: int, *, local_nvme: bool) -> Recommendation:
    vcpus, memory, iops = next(((c, m, i) for limit, c, m, i in ETCD_TIERS if nodes <= limit), ETCD_ABOVE)
    sku = _smallest(vcpus, memory, ("Standard_L",) if local_nvme else GENERAL, nvme=local_nvme)
    return Recommendation(
        "etcd",
        sku.name,
        sku.vcpus,
        sku.memory_gib,
        f"{nodes:,} nodes: {vcpus} vCPU, {memory} GB, {iops:,} IOPS (etcd hardware guide"
        + (", extrapolated past 3,000 nodes)" if nodes > 3000 else ")"),
        ETCD_HW,
    )


def etcd_iops(nodes: int) -> int:
    """Provisioned IOPS for an etcd data disk (the guide's figure for the tier)."""
    return next((i for limit, _, _, i in ETCD_TIERS if nodes <= limit), ETCD_ABOVE[2])


def prometheus_series(nodes: int) -> int:
    return nodes * SERIES_PER_NODE


def prometheus(nodes: int) -> Recommendation:
    series = prometheus_series(nodes)
    memory = max(16.0, 2 * series * HEAD_BYTES_PER_SERIES / 2**30)
    sku = _smallest(8 if nodes > 100 else 4, memory, GENERAL)
    return Recommendation(
        "prometheus",
        sku.name,
        sku.vcpus,
        sku.memory_gib,
        f"{nodes:,} nodes x {SERIES_PER_NODE:,} series x {HEAD_BYTES_PER_SERIES} B head memory x2",
        PROM_STORAGE,
    )


def prometheus_disk_gib(nodes: int, retention_days: int) -> int:
    """Data disk: retention x ingestion (samples/s x bytes/sample) with 30% headroom, at least 128 GiB."""
    samples_per_s = prometheus_series(nodes) / SCRAPE_INTERVAL_S
    raw = retention_days * 86400 * samples_per_s * BYTES_PER_SAMPLE * 1.3
    return max(128, math.ceil(raw / 2**30))
