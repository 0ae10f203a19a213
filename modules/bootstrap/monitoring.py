"""What Prometheus keeps and alerts on: drop rules per job and the alert thresholds, as data."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DropRule:
    labels: tuple[str, ...]
    regex: str


# kube-prometheus' drops (kubernetes-mixin ServiceMonitors): series no dashboard or alert reads
# that multiply with every node, pod or API resource.
_FINE_BUCKETS = "0.15|0.2|0.3|0.35|0.4|0.45|0.6|0.7|0.8|0.9|1.25|1.5|1.75|2|3|3.5|4|4.5|6|7|8|9|15|25|40|50"
DROP_RULES: dict[str, tuple[DropRule, ...]] = {
    "kubernetes-apiservers": (
        # The API server's own etcd client histograms; etcd is scraped directly.
        DropRule(("__name__",), "etcd_(debugging|disk|server).*"),
        DropRule(("__name__",), "apiserver_admission_controller_admission_latencies_seconds_.*"),
        DropRule(("__name__",), "apiserver_admission_step_admission_latencies_seconds_.*"),
        DropRule(("__name__", "le"), f"apiserver_request_duration_seconds_bucket;({_FINE_BUCKETS})"),
    ),
    "kubernetes-nodes": (
        DropRule(("__name__",), "kubelet_(pod_worker_latency_microseconds|pod_start_latency_microseconds)"),
        DropRule(("__name__",), "kubelet_(cgroup_manager|pod_worker_start|pleg_relist)_duration_seconds_bucket"),
        DropRule(("__name__",), "storage_operation_(errors_total|status_count)"),
        DropRule(("__name__",), "rest_client_request_(latency|duration)_seconds_bucket"),
    ),
    "kubernetes-cadvisor": (
        DropRule(
            ("__name__",),
            "container_(network_tcp_usage_total|network_udp_usage_total|tasks_state|cpu_load_average_10s)",
        ),
        DropRule(("__name__",), "container_(fs_.*|blkio_device_usage_total|memory_failures_total)"),
    ),
    "kubernetes-pods": (DropRule(("__name__",), "go_(gc_duration_seconds|memstats_.*)"),),
}

API_AVAILABILITY_SLO = 0.99
API_THROTTLE_RATIO = 0.01
ETCD_QUOTA_RATIO = 0.8
ETCD_FSYNC_P99_SECONDS = 0.01
"""etcd's hardware guide: p99 WAL fsync should stay under 10 ms."""
ETCD_BACKUP_STALE_INTERVALS = 2
"""EtcdBackupStale: the newest snapshot is older than this many snapshot intervals (one was missed)."""

ALERTS = (
    "KubeAPIServerThrottling",
    "KubeAPIErrorBudgetBurn",
    "EtcdNoLeader",
    "EtcdDatabaseNearQuota",
    "EtcdHighFsyncLatency",
    "GpuXidError",
    "GpuRowRemapFailure",
    "NodeStuckInPreflight",
    "NodeNotReady",
)
BACKUP_ALERTS = ("EtcdBackupStale", "EtcdBackupMissing", "EtcdBackupRunFailing")
"""Rendered when the main etcd is backed up (rules/etcd-backup.yml)."""
