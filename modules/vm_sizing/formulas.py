"""Every size that follows the cluster's node or pod count, in one place, each with its source.

Pure arithmetic (no Pulumi, no config objects): the callers pass counts in and put the results where they
belong (VM sizes in ``recommend``, API server flags in the boot context, add-on requests and limits in the
add-ons spec, the Prometheus data disk). tests/vm_sizing/test_formulas_only_here.py fails when node-count
arithmetic appears anywhere else, so a reviewer reads this file to know how a cluster is sized.

Counts passed in are the *sizing step* (``sizing_step``), not the node count itself: a size that a
control-plane process or a Deployment reads changes only when the cluster crosses a step, so adding one
node restarts nothing (issue 20, tests/plan/test_day2_control_plane.py).

Where a figure is the project's own estimate rather than a published or measured one, the docstring says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

GCE_TABLE = "https://kubernetes.io/docs/setup/best-practices/cluster-large/#size-of-master-and-master-components"
OPENAI_7500 = "https://openai.com/research/scaling-kubernetes-to-7500-nodes"
ETCD_HW = "https://etcd.io/docs/v3.5/op-guide/hardware/#example-hardware-configurations"
PROM_STORAGE = "https://prometheus.io/docs/prometheus/latest/storage/#operational-aspects"
APF = "https://kubernetes.io/docs/concepts/cluster-administration/flow-control/"
KSM_RESOURCES = "https://github.com/kubernetes/kube-state-metrics#resource-recommendation"
SCHEDULER_TUNING = "https://kubernetes.io/docs/concepts/scheduling-eviction/scheduler-perf-tuning/"
SIG_SCALABILITY_FAQ = "https://github.com/kubernetes/community/blob/master/sig-scalability/configs-and-limits/faq.md"
# The project's own figures: object sizes of the realistic fleet (tests/scale/load.py) and the paginated
# controllers' peak memory under their cgroup limit (tests/scale/test_controllers_at_scale.py, commit ada11c2).
SCALE_TIER = "tests/scale/load.py, tests/scale/test_controllers_at_scale.py"

# -- the step -------------------------------------------------------------------------------------
# Node-count-derived sizes (VM sizes, etcd IOPS, the Prometheus disk, API server and client limits, add-on
# memory) follow the cluster's node count in steps, not node by node: a change inside a step resizes
# nothing and rewrites no control-plane file, so adding one node restarts no API server (issue 20). The
# steps hold the rules' own boundaries (GCE's 5/10/100/250/500/3,000 rows, etcd's 50/250/1,000/3,000 tiers)
# and every 500 nodes up to 3,000, every 1,000 beyond; `agk plan --base` says when a change crosses one.
SIZING_STEPS = (5, 10, 50, 100, 250, 500, 1000, 1500, 2000, 2500, 3000)
SIZING_STEP_ABOVE = 1000


def sizing_step(nodes: int) -> int:
    """The node count a cluster of ``nodes`` is sized for: the smallest step at or above it."""
    step = next((s for s in SIZING_STEPS if nodes <= s), None)
    if step is not None:
        return step
    return -(-nodes // SIZING_STEP_ABOVE) * SIZING_STEP_ABOVE


def cluster_pods(nodes: int, pods_per_node: int) -> int:
    """The most Pod objects a cluster of ``nodes`` can hold: every node at its kubelet ``maxPods`` (the
    pool's pod IPs plus its host-network pods, ``PoolPlan.kubelet_max_pods``; the caller passes the GPU pools'
    largest)."""
    return nodes * pods_per_node


# -- API server VMs (GCE table, OpenAI's heap figure) ----------------------------------------------
# GCE's control-plane sizing table (vCPUs by node count: >500 nodes 32, >3,000 nodes 64), from
# kubernetes.io/docs/setup/best-practices/cluster-large (the section older releases of the page carried).
APISERVER_VCPUS = ((5, 1), (10, 2), (100, 4), (250, 8), (500, 16), (3000, 32))
APISERVER_VCPUS_ABOVE = 64
# OpenAI: up to 70 GB of API server heap at 7,500 nodes; memory grows linearly with nodes.
APISERVER_HEAP_GB_AT_7500 = 70.0
APISERVER_MEMORY_HEADROOM = 1.5
APISERVER_MEMORY_FLOOR_GIB = 16.0


def apiserver_min_vcpus(nodes: int) -> int:
    """GCE's control-plane table (``GCE_TABLE``): the vCPUs an API server needs for ``nodes``."""
    return next((v for limit, v in APISERVER_VCPUS if nodes <= limit), APISERVER_VCPUS_ABOVE)


def apiserver_heap_gib(nodes: int) -> float:
    """The API server heap OpenAI's figure implies for ``nodes`` (``OPENAI_7500``: linear, 70 GB at 7,500)."""
    return APISERVER_HEAP_GB_AT_7500 * 1e9 * nodes / 7500 / 2**30


def apiserver_memory_gib(nodes: int) -> float:
    """An API server VM's memory: the heap x1.5 headroom (GC, watch cache bursts), at least 16 GiB."""
    return max(APISERVER_MEMORY_FLOOR_GIB, apiserver_heap_gib(nodes) * APISERVER_MEMORY_HEADROOM)


def apiserver_min_memory_gib(nodes: int) -> int:
    """The memory floor the policy pack checks API server VMs against: the heap alone, no headroom."""
    return math.ceil(apiserver_heap_gib(nodes))


# -- etcd (the etcd hardware guide) ---------------------------------------------------------------
# etcd's example hardware (``ETCD_HW``): (nodes up to, vCPUs, memory GB, IOPS).
ETCD_TIERS = ((50, 2, 8, 3600), (250, 4, 16, 6000), (1000, 8, 32, 8000), (3000, 16, 64, 15000))
ETCD_ABOVE = (32, 128, 20000)  # extrapolated beyond the guide's 3,000-node row


def etcd_tier(nodes: int) -> tuple[int, int, int]:
    """(vCPUs, memory GB, IOPS) of the etcd hardware guide's row for ``nodes`` (``ETCD_HW``)."""
    return next(((c, m, i) for limit, c, m, i in ETCD_TIERS if nodes <= limit), ETCD_ABOVE)


def etcd_iops(nodes: int) -> int:
    """Provisioned IOPS for an etcd data disk (the guide's figure for the tier)."""
    return etcd_tier(nodes)[2]


# -- API server flags and control-plane clients ----------------------------------------------------
# kube-apiserver's defaults (``APF``: with Priority and Fairness the server's concurrency limit is the sum of
# these two flags, shared among the priority levels by their nominal concurrency shares).
INFLIGHT_DEFAULT = 400
MUTATING_INFLIGHT_DEFAULT = 200
KUBE_UP_APISERVER = "https://github.com/kubernetes/kubernetes/blob/v1.36.4/cluster/gce/gci/configure-kubeapiserver.sh"
# (nodes up to, --max-requests-inflight, --max-mutating-requests-inflight): what Kubernetes' own large-cluster
# setup gives its one API server (``KUBE_UP_APISERVER``: above 500 nodes 1,500/500, above 3,000 3,000/1,000), the
# configuration the upstream scalability tests run. Each server here gets the whole-cluster figure, so one can
# carry the cluster while the others are down. Not derived from the heartbeats alone: the kubelets' lease and
# status writes are a small part of a server's load next to pod status writes, relists and the controllers.
INFLIGHT_TIERS = ((500, INFLIGHT_DEFAULT, MUTATING_INFLIGHT_DEFAULT), (3000, 1500, 500))
INFLIGHT_ABOVE = (3000, 1000)


def apiserver_inflight(nodes: int) -> tuple[int, int]:
    """``--max-requests-inflight`` and ``--max-mutating-requests-inflight`` for each API server of a cluster
    of ``nodes`` (``INFLIGHT_TIERS``)."""
    return next(((r, m) for limit, r, m in INFLIGHT_TIERS if nodes <= limit), INFLIGHT_ABOVE)


def apiserver_inflight_mutating(reads: int) -> int:
    """``--max-mutating-requests-inflight`` beside a ``reads`` limit set by hand: a third (kube-up's ratio
    above 500 nodes), never below the default of 200."""
    return max(MUTATING_INFLIGHT_DEFAULT, reads // 3)


# (nodes up to, QPS) of kube-controller-manager's and kube-scheduler's API clients: the default of 20
# (kube-controller-manager --kube-api-qps) up to 500 nodes; 100, what Kubernetes' 5,000-node scalability tests
# run both with (``SCALE_VALIDATION``: CONTROLLER_MANAGER_TEST_ARGS=--kube-api-qps=100, SCHEDULER_TEST_ARGS the
# same); above 3,000 nodes the project's own 200, for 7,500 nodes, 1.5x the tested envelope, where the node
# lifecycle, the DaemonSet controller and the scheduler's bindings issue requests per node and per pod.
SCALE_VALIDATION = (
    "https://github.com/kubernetes/sig-release/blob/master/releases/release-1.9/scalability_validation_report.md"
)
CLIENT_QPS = ((500, 20), (3000, 100))
CLIENT_QPS_ABOVE = 200


def client_qps(nodes: int) -> int:
    """kube-controller-manager's ``--kube-api-qps`` and kube-scheduler's ``clientConnection.qps``."""
    return next((q for limit, q in CLIENT_QPS if nodes <= limit), CLIENT_QPS_ABOVE)


def client_burst(qps: int) -> int:
    """Their burst: twice the QPS (the ratio of client-go's defaults, 5 QPS / 10 burst)."""
    return 2 * qps


# Whole-node GPU pods: the scheduler's default percentage falls linearly from 50% at 100 nodes to 10% at 5,000,
# never below 5% (``SCHEDULER_TUNING``), so beyond the 5,000-node envelope it scores fewer nodes than it does at
# 5,000; keep scoring as many as the default does there (10% of 5,000 = 500).
SCORED_NODES = 500
SCORE_PERCENT_FLOOR = 5


def scheduler_score_percent(nodes: int) -> int:
    """``percentageOfNodesToScore`` that scores about ``SCORED_NODES`` feasible nodes (all in small clusters)."""
    if nodes <= SCORED_NODES:
        return 100
    return max(SCORE_PERCENT_FLOOR, math.ceil(100 * SCORED_NODES / nodes))


# -- Prometheus (the storage docs) -----------------------------------------------------------------
# Series per node from the node targets (kubelet and cAdvisor, and the node agents' pods: dcgm-exporter on 8
# GPUs, the egress exporter, node-problem-detector: the project's estimate), bytes per sample on disk
# (``PROM_STORAGE``: "around 1-2 bytes per sample"; the upper figure).
SERIES_PER_NODE = 3000
BYTES_PER_SAMPLE = 2
DISK_HEADROOM = 1.3  # WAL (at least 2 h of raw samples), compaction's temporary second copy, indexes
PROMETHEUS_DISK_FLOOR_GIB = 128
PROMETHEUS_MEMORY_FLOOR_GIB = 16.0
PROM_HEAD_BENCH = "bench/prometheus_head.py (make bench)"
# Resident memory per active series of the pinned release, measured (``PROM_HEAD_BENCH``, 2026-12-04, Prometheus
# 3.13.4 from its Go module: the slope between 40,000 and 120,000 cAdvisor-shaped series, the median of 5 pairs
# of runs): 8,221 B resident (6,293-9,272 B), of which 6,183 B is Go heap in use; the rest is the garbage
# collector's room to grow (GOGC=100) and the runtime.
HEAD_RESIDENT_BYTES_PER_SERIES = 8221
PROM_FLAGS = "https://prometheus.io/docs/prometheus/latest/command-line/prometheus/"
# Queries on top of the head (``PROM_FLAGS``): at most --query.max-concurrency queries run at once (default 20,
# not set by the hosts), each loading at most --query.max-samples samples (cluster.prometheus.query_max_samples)
# of 16 bytes (promql.FPoint: an int64 timestamp and a float64), counted resident as the head is: twice what is
# live, the room the collector leaves the heap to grow (GOGC=100).
QUERY_CONCURRENCY = 20
QUERY_SAMPLE_BYTES = 16
QUERY_RESIDENT_FACTOR = 2
# Sharding (cluster.prometheus.shards, modules/bootstrap/templates/prometheus.yml.j2) splits the node targets by
# ``hashmod`` of the node's name (Prometheus' relabel_config: an MD5 of the value, modulo the shard count), so a
# share's node count is binomial(nodes, 1 / shards): a host is sized for the mean plus SHARD_SIGMAS standard
# deviations (at 8,000 nodes in 2 shards 4,000 + 135). kube-state-metrics is scraped whole by every host: its
# series per Node and per Pod, measured at prod-7500's size (``SCALE_TIER``, the kube-state-metrics test, 2026-12-04:
# the pinned v2.20.0 with the rendered collectors and node-label allowlist served 217,750 kube_node_* series for
# 7,510 Nodes, 28.99 each, and 1,666,130 kube_pod_* series for 45,030 agent Pods, 37.00 each; 320 others). A
# Node counts 3 more: kube_node_status_condition's true/false/unknown for node-problem-detector's GPUFatalXid,
# which the fleet's Nodes did not carry. Workload Pods with more containers than the agents' would count more.
SHARD_SIGMAS = 3
KSM_SERIES_PER_NODE = 29 + 3
KSM_SERIES_PER_POD = 37
# What else a Prometheus host runs beside Prometheus (the OS, Alertmanager, node-exporter, Grafana when
# enabled): the project's estimate, kept out of Prometheus' share of the VM.
PROMETHEUS_HOST_RESERVE_GIB = 4.0


def shard_nodes(nodes: int, shards: int) -> int:
    """The most nodes one of ``shards`` shares holds (all of them with one share): the binomial mean plus
    ``SHARD_SIGMAS`` standard deviations."""
    if shards == 1:
        return nodes
    p = 1 / shards
    return min(nodes, math.ceil(nodes * p + SHARD_SIGMAS * math.sqrt(nodes * p * (1 - p))))


def state_metrics_series(nodes: int, pods: int) -> int:
    """The series kube-state-metrics serves for ``nodes`` Nodes and ``pods`` Pods."""
    return nodes * KSM_SERIES_PER_NODE + pods * KSM_SERIES_PER_POD


def prometheus_series(nodes: int, pods: int, shards: int) -> int:
    """Active series on one Prometheus host: ``SERIES_PER_NODE`` for each node of its share
    (:func:`shard_nodes`), and kube-state-metrics' series for every Node and Pod of the cluster. The fixed
    targets (API servers, etcd, the hosts' node-exporters) do not follow the node count and are not counted."""
    return shard_nodes(nodes, shards) * SERIES_PER_NODE + state_metrics_series(nodes, pods)


def prometheus_memory_gib(series: int, query_max_samples: int) -> float:
    """A Prometheus VM's memory for ``series`` (:func:`prometheus_series`): each at its measured resident cost,
    plus the most the concurrent queries may load (``QUERY_CONCURRENCY`` x ``query_max_samples`` x 16 B, x2
    resident), plus the host's other programs (``PROMETHEUS_HOST_RESERVE_GIB``), at least 16 GiB."""
    head = series * HEAD_RESIDENT_BYTES_PER_SERIES
    queries = QUERY_CONCURRENCY * query_max_samples * QUERY_SAMPLE_BYTES * QUERY_RESIDENT_FACTOR
    return max(PROMETHEUS_MEMORY_FLOOR_GIB, (head + queries) / 2**30 + PROMETHEUS_HOST_RESERVE_GIB)


def prometheus_vcpus(nodes: int) -> int:
    """A Prometheus VM's vCPUs: 8 beyond 100 nodes (rule evaluation and compaction), else 4."""
    return 8 if nodes > 100 else 4


def duration_seconds(text: str) -> int:
    """A Prometheus-style duration of one unit (``30s``, ``5m``, ``1h``: what cluster.prometheus accepts)."""
    units = {"s": 1, "m": 60, "h": 3600}
    if len(text) < 2 or text[-1] not in units or not text[:-1].isdigit() or int(text[:-1]) < 1:
        raise ValueError(f"{text!r} is not a duration: use e.g. '30s', '5m' or '1h'")
    return int(text[:-1]) * units[text[-1]]


def prometheus_disk_gib(series: int, retention_days: int, scrape_interval_s: int) -> int:
    """A host's TSDB data disk for ``series`` (:func:`prometheus_series`): the storage docs'
    ``retention_time_seconds x ingested_samples_per_second x bytes_per_sample`` (``PROM_STORAGE``), ingestion =
    series / scrape interval, x1.3 headroom, at least 128 GiB. Halving the scrape interval doubles the samples and
    so the disk."""
    samples_per_s = series / scrape_interval_s
    raw = retention_days * 86400 * samples_per_s * BYTES_PER_SAMPLE * DISK_HEADROOM
    return max(PROMETHEUS_DISK_FLOOR_GIB, math.ceil(raw / 2**30))


# -- cluster DNS -----------------------------------------------------------------------------------
DNS_NODES_PER_REPLICA = 1000
DNS_MIN_REPLICAS = 2


def dns_replicas(nodes: int, system_nodes: int) -> int:
    """CoreDNS replicas: two survive a node loss; beyond that one per ~1,000 nodes, never more than the
    system pool can keep apart (query load at this scale is node-local caching's job; the project's rule)."""
    return max(DNS_MIN_REPLICAS, min(system_nodes, math.ceil(nodes / DNS_NODES_PER_REPLICA)))


# -- add-ons: requests and limits ------------------------------------------------------------------
@dataclass(frozen=True)
class Resources:
    """A container's CPU request and limit (millicores) and memory (MiB, request = limit: no overcommit)."""

    cpu_millis: int
    cpu_limit_millis: int
    memory_mib: int


# kube-state-metrics. Its README's general rule (``KSM_RESOURCES``): 250 MiB and 0.1 core. The rule it gave until
# April 2021 (beyond 100 nodes at least 2 MiB and 0.001 core a node, from tests at 30 pods a node; removed by
# kubernetes/kube-state-metrics commit a045719a), which sized it here before, asked 16,200 MiB and 8.1 cores at
# prod-7500's step. It keeps each object's metrics rendered and writes them all out at every scrape, so its memory
# and CPU follow the series it serves (:func:`state_metrics_series`), fitted to the scale tier (``SCALE_TIER``, the
# kube-state-metrics test, 2026-12-04): serving 1,876,733 series (7,510 Nodes, 45,030 Pods) while prod-7500's 4
# Prometheus hosts scraped it at once (plain text: it gzips only with --enable-gzip-encoding, off here), it peaked
# at 1,631 MiB, all of it counted per series as its idle base was not measured: 911 B a series, the README's 250 MiB
# on top; the 4 scrapes took 6.4 CPU-seconds, 853 ns a series each. A second point, every Node and no agent Pod
# (248,275 series, 289 MiB), puts the line at 864 B a series over an 84 MiB base: at prod-7500's step the formula
# holds 36% more than the two points predict. One run at 6 Pods a Node, stretched to maxPods: KSM_HEADROOM on top of
# both, which also holds the finished Pods it still exports until pod GC (12,500 by default, kube-controller-manager
# --terminated-pod-gc-threshold) that nodes x maxPods does not count. The Prometheus hosts' scrapes are spread over
# the interval (each host's external labels seed its scrape offsets), but may coincide: the CPU request lets all of
# them finish inside Prometheus' scrape timeout (``SCRAPE_TIMEOUT_S``), the worst case, beyond which a scrape fails
# and every kube_* series (the node alerts, the island rule) goes stale. One scrape is written by one goroutine, so
# it takes at least series x 853 ns however many cores it gets: 3.8 s at prod-7500's step; near the timeout the fix
# is kube-state-metrics' own sharding (--shard/--total-shards). The CPU limit is twice the request: its queues fall
# behind when throttled, the README warns.
KSM_BASE_CPU_MILLIS = 100
KSM_BASE_MEMORY_MIB = 250
KSM_BYTES_PER_SERIES = 911
KSM_CPU_NS_PER_SERIES = 853
KSM_HEADROOM = 1.25
SCRAPE_TIMEOUT_S = 10
"""Prometheus' scrape timeout on the hosts (modules/bootstrap/templates/prometheus.yml.j2 ``global``)."""


def kube_state_metrics(nodes: int, pods: int, scrapers: int) -> Resources:
    """kube-state-metrics serving ``nodes`` Nodes and ``pods`` Pods to ``scrapers`` Prometheus hosts at once."""
    series = state_metrics_series(nodes, pods)
    memory = KSM_BASE_MEMORY_MIB + KSM_HEADROOM * series * KSM_BYTES_PER_SERIES / 2**20
    cores = scrapers * series * KSM_CPU_NS_PER_SERIES / 1e9 / SCRAPE_TIMEOUT_S
    cpu = KSM_BASE_CPU_MILLIS + math.ceil(KSM_HEADROOM * cores * 1000)
    return Resources(cpu, 2 * cpu, _round_up(memory))


# An informer holds every object it watches, decoded; a scheduler holds each Node and Pod twice more (its cache
# and the snapshot of NodeInfo it schedules from). Object sizes as JSON from the project's realistic fleet
# (tests/scale/load.py at prod-7500: a registered Node with kubelet status 12.1 KiB, an agent Pod 2.2 KiB),
# times what the gang scheduler holds resident per JSON byte, measured (``SCALE_TIER``, 2026-12-04: the pinned
# scheduler-plugins build under its rendered limit peaked at 1,724 MiB with 7,510 Nodes and 45,030 Pods and a
# 99-node gang placed; less the 512 MiB base that is 1,212 MiB for 185.5 MiB of JSON, 6.5x): a Node 80 KiB and
# a Pod 15 KiB (the x4 estimate before, 48 and 8 KiB, gave 1,216 MiB there: under what was used). One run, and
# the 512 MiB base is dev's limit, not a measured empty process: the cache gets CACHE_HEADROOM on top. No
# kube-scheduler memory at this scale is published: SIG Scalability gives no per-component figure, its
# 5,000-node tests run the whole control plane on one 64-core, 256 GB VM (``SIG_SCALABILITY_FAQ``).
CACHED_NODE_KIB = 80
CACHED_POD_KIB = 15
# The 512 MiB under which the gang scheduler and cloud-controller-manager run dev's fleet in the
# real-control-plane tier (tests/controlplane) is the base: the process without the cache's growth.
CACHE_BASE_MEMORY_MIB = 512
CACHE_HEADROOM = 1.25
MEMORY_ROUND_MIB = 64


def _round_up(mib: float) -> int:
    return math.ceil(mib / MEMORY_ROUND_MIB) * MEMORY_ROUND_MIB


def _cache_mib(nodes: int, pods: int) -> int:
    """A process that caches every Node and Pod, as the gang scheduler does (measured above)."""
    return _round_up(CACHE_BASE_MEMORY_MIB + CACHE_HEADROOM * (nodes * CACHED_NODE_KIB + pods * CACHED_POD_KIB) / 1024)


def gang_scheduler(nodes: int, pods: int) -> Resources:
    """scheduler-plugins' kube-scheduler (the gang scheduler): it caches every Node and Pod of the cluster
    (``SCALE_TIER`` object sizes and resident cost, measured above). CPU follows the pods scheduled per second, not the node
    count: 0.5 core requested, 2 cores limit."""
    return Resources(500, 2000, _cache_mib(nodes, pods))


def cloud_controller_manager(nodes: int) -> Resources:
    """cloud-provider-azure's cloud-controller-manager: its node lifecycle and service controllers cache every
    Node, no Pod (``SCALE_TIER`` node size and the gang scheduler's resident cost: an estimate, not measured). 0.1 core requested, 2 cores limit."""
    memory = CACHE_BASE_MEMORY_MIB + CACHE_HEADROOM * nodes * CACHED_NODE_KIB / 1024
    return Resources(100, 2000, _round_up(memory))


# kube-network-policies' agent (standard flavour) on every node holds every Pod of the cluster (its informer, managed
# fields dropped) and every Namespace and NetworkPolicy. One copy of each Pod, at the size the gang scheduler's
# measured cache gives a Pod (``CACHED_POD_KIB``, which holds each Pod more than once), over a 128 MiB process.
# Measured (``SCALE_TIER``, 2026-12-05): one agent under this limit listed the fleet's 52,540 Pods in 8 s and peaked
# at 693 MiB, 13.5 KiB a Pod with everything counted; the formula gives 1,090 MiB there, and at prod-7500's step
# (120,000 Pods) 2,368 MiB, 1.5x the measured line (1,583 MiB). A relist, which holds the old cache while the new
# one fills, was not measured. CPU: upstream's 0.1 core request (its install.yaml); each Pod change and each
# diverted packet is a little work, so 1 core limit.
POLICY_AGENT_BASE_MIB = 128


def policy_agent(pods: int) -> Resources:
    """kube-network-policies' node agent in a cluster of ``pods`` Pods."""
    return Resources(100, 1000, _round_up(POLICY_AGENT_BASE_MIB + CACHE_HEADROOM * pods * CACHED_POD_KIB / 1024))


# The in-cluster controllers (XID remediation, the idle re-test) LIST nodes in pages of a few hundred and keep
# only the fields they need, so their memory does not follow the node count: 38 and 49 MiB peak at prod-7500's
# 7,510 nodes under this 128 MiB cgroup limit (``SCALE_TIER``, measured).
PAGED_CONTROLLER = Resources(50, 500, 128)
