"""Recommended VM sizes per role from the cluster's node count, each rule with its source.

A stack may override any size; the plan shows recommended next to chosen so a reviewer sees
when a stack runs below what the rules suggest.
"""

from __future__ import annotations

from dataclasses import dataclass

from modules.vm_sizing.formulas import (
    ETCD_ABOVE,
    ETCD_HW,
    GCE_TABLE,
    HEAD_RESIDENT_BYTES_PER_SERIES,
    OPENAI_7500,
    PROM_FLAGS,
    PROM_HEAD_BENCH,
    QUERY_CONCURRENCY,
    QUERY_RESIDENT_FACTOR,
    QUERY_SAMPLE_BYTES,
    SIZING_STEPS,
    apiserver_heap_gib,
    apiserver_memory_gib,
    apiserver_min_memory_gib,
    apiserver_min_vcpus,
    etcd_iops,
    etcd_tier,
    prometheus_memory_gib,
    prometheus_series,
    prometheus_vcpus,
    sizing_step,
)
from modules.vm_sizing.skus import SKUS, Sku

# The numbers come from modules.vm_sizing.formulas (every node-count rule, with its source); this module only
# picks the smallest VM size that meets them. Re-exported for the callers that import them from here.
__all__ = [
    "SIZING_STEPS",
    "Recommendation",
    "apiserver",
    "apiserver_heap_gib",
    "apiserver_min_memory_gib",
    "apiserver_min_vcpus",
    "etcd",
    "etcd_iops",
    "prometheus",
    "sizing_step",
]

GENERAL = ("Standard_D", "Standard_E")


@dataclass(frozen=True)
class Recommendation:
    role: str
    vm_size: str
    vcpus: int
    memory_gib: int
    rule: str
    source: str


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


def apiserver(nodes: int) -> Recommendation:
    vcpus = apiserver_min_vcpus(nodes)
    memory = apiserver_memory_gib(nodes)
    sku = _smallest(vcpus, memory, GENERAL)
    return Recommendation(
        "apiserver",
        sku.name,
        sku.vcpus,
        sku.memory_gib,
        f"{nodes:,} nodes: >= {vcpus} vCPU (GCE table), >= {memory:.0f} GiB (heap, 70 GB at 7,500 nodes, x1.5)",
        f"{GCE_TABLE} ; {OPENAI_7500}",
    )


def etcd(nodes: int, *, local_nvme: bool) -> Recommendation:
    vcpus, memory, iops = etcd_tier(nodes)
    sku = _smallest(vcpus, memory, ("Standard_L",) if local_nvme else GENERAL, nvme=local_nvme)
    return Recommendation(
        "etcd",
        sku.name,
        sku.vcpus,
        sku.memory_gib,
        f"{nodes:,} nodes: {vcpus} vCPU, {memory} GB, {iops:,} IOPS (etcd hardware guide"
        + (", extrapolated past its last row)" if (vcpus, memory, iops) == ETCD_ABOVE else ")"),
        ETCD_HW,
    )


def prometheus(nodes: int, pods: int, shards: int, query_max_samples: int) -> Recommendation:
    """One Prometheus host: its share of ``nodes`` in ``shards`` and kube-state-metrics' series of ``nodes`` and
    ``pods`` (:func:`prometheus_series`)."""
    series = prometheus_series(nodes, pods, shards)
    sku = _smallest(prometheus_vcpus(nodes), prometheus_memory_gib(series, query_max_samples), GENERAL)
    return Recommendation(
        "prometheus",
        sku.name,
        sku.vcpus,
        sku.memory_gib,
        f"{series:,} series a host ({nodes:,} nodes in {shards} share(s), {pods:,} pods) x "
        f"{HEAD_RESIDENT_BYTES_PER_SERIES:,} B resident + {QUERY_CONCURRENCY} queries x {query_max_samples:,} "
        f"samples x {QUERY_SAMPLE_BYTES} B x {QUERY_RESIDENT_FACTOR}",
        f"{PROM_FLAGS} ; {PROM_HEAD_BENCH}",
    )
