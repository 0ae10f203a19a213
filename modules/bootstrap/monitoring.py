"""What Prometheus keeps and alerts on: drop rules per job and the alert thresholds, as data."""

from __future__ import annotations

import re
from dataclasses import dataclass

from modules.bootstrap.alerting_config import Severity


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

ISLAND_LABEL = "island"
"""The InfiniBand island (scale set) of a GPU node on its alerts: the node label ``<domain>/ib-island``
through kube-state-metrics' ``kube_node_labels`` (rules/islands.yml records ``agk:node_island``)."""
ISLAND_ALERT = "InfinibandIslandDegraded"
ISLAND_UNHEALTHY_MIN_NODES = 3
ISLAND_UNHEALTHY_RATIO = 0.1
"""An island is degraded when at least this many of its nodes, and this share of them, are unhealthy at
once (NotReady, a fatal XID, failed preflight): more than chance failures of single nodes, the signature
of a shared part (a leaf switch, the placement group's fabric)."""
CERT_WARN_DAYS = 30
CERT_CRITICAL_DAYS = 7
"""CertificateExpiresSoon fires this many days before a certificate's notAfter; the scheduled renewal
(pki.EARLY_RENEWAL_HOURS, .github/workflows/renew-certificates.yml) acts earlier, so it means renewal failed."""


@dataclass(frozen=True)
class Alert:
    severity: Severity
    what: str
    """One line for docs/oncall.md's table: what it means."""


# Every shipped rule, its severity (the route it takes: alerting.py) and its runbook (docs/oncall.md,
# anchor = the name in lowercase). critical pages a person; warning goes to the team's queue.
ALERTS: dict[str, Alert] = {
    "KubeAPIServerThrottling": Alert("warning", "over 1% of API requests get 429 (priority and fairness)"),
    "KubeAPIErrorBudgetBurn": Alert("critical", "API 5xx burn the 30-day error budget 14.4x too fast"),
    "EtcdNoLeader": Alert("critical", "an etcd member has no leader"),
    "EtcdDatabaseNearQuota": Alert("warning", "etcd's database is above 80% of its quota"),
    "EtcdHighFsyncLatency": Alert("warning", "etcd's WAL fsync p99 is above 10 ms"),
    "GpuXidError": Alert("critical", "a GPU reported a fatal XID"),
    "GpuRowRemapFailure": Alert("critical", "a GPU failed a row remap"),
    "NodeStuckInPreflight": Alert("warning", "a node is still in preflight after the timeout"),
    "NodePreflightFailed": Alert("warning", "a node failed its preflight diagnostics"),
    "NodeNotReady": Alert("warning", "a node has not been Ready for 10 minutes"),
    "GpuRollPaused": Alert("warning", "the pool roll suspended itself after failed nodes"),
    "GpuRollRunFailed": Alert("warning", "a run of the pool roll failed: a node failed it, or an error stopped one"),
    "NetworkPolicyAgentUnavailable": Alert(
        "warning", "nodes have had no running NetworkPolicy agent for 15 minutes: their pods' policies are not enforced"
    ),
    ISLAND_ALERT: Alert("critical", "many nodes of one InfiniBand island are unhealthy at once"),
    "CertificateExpiresSoon": Alert("warning", f"a host certificate expires within {CERT_WARN_DAYS} days"),
    "CertificateExpiresVerySoon": Alert("critical", f"a host certificate expires within {CERT_CRITICAL_DAYS} days"),
    "KubeletClientCertificateExpiresSoon": Alert(
        "warning", f"a kubelet's client certificate expires within {CERT_WARN_DAYS} days"
    ),
    "KubeletServingCertificateExpiresSoon": Alert(
        "warning", f"a kubelet's serving certificate expires within {CERT_WARN_DAYS} days"
    ),
    "KubeletUnreachable": Alert(
        "warning", "a Ready node's kubelet fails its TLS scrape (so its logs and exec fail too) for 15 minutes"
    ),
    "CertificateExpiryNotReported": Alert("warning", "a control-plane host reports no certificate expiry"),
    "PrometheusPeerDown": Alert("warning", "another Prometheus host has not answered a scrape for 5 minutes"),
}
BACKUP_ALERTS: dict[str, Alert] = {
    "EtcdBackupStale": Alert("warning", "the newest etcd snapshot is older than two intervals"),
    "EtcdBackupMissing": Alert("warning", "no etcd member reports a snapshot"),
    "EtcdBackupRunFailing": Alert("warning", "a member failed its last snapshot runs"),
}
"""Rendered when the main etcd is backed up (rules/etcd-backup.yml)."""
NODE_ALERTS: tuple[str, ...] = (
    "GpuXidError",
    "GpuRowRemapFailure",
    "NodeNotReady",
    "NodeStuckInPreflight",
    "NodePreflightFailed",
)
"""Per-node alerts that carry the node's island; the island alert inhibits them (alerting.INHIBITIONS)."""


def severity(name: str) -> Severity:
    return {**ALERTS, **BACKUP_ALERTS}[name].severity


def runbook_anchor(name: str) -> str:
    return name.lower()


def ksm_node_label(key: str) -> str:
    """kube-state-metrics' name of node label ``key`` in ``kube_node_labels`` (every character that may
    not be in a Prometheus label name becomes ``_``: kube-state-metrics' SanitizeLabelName)."""
    return "label_" + re.sub(r"[^a-zA-Z0-9_]", "_", key)
