"""promtool unit tests for every alert: one input that fires it and one that must not."""

from __future__ import annotations

import re
from typing import Any

import yaml

from modules.bootstrap.context import BootstrapContext
from modules.bootstrap.monitoring import ALERTS, BACKUP_ALERTS, ksm_node_label
from modules.bootstrap.roles.prometheus import alert_rules
from modules.labels import XID_CONDITION

API = 'apiserver_request_total{job="kubernetes-apiservers",code="%s"}'
FSYNC = 'etcd_disk_wal_fsync_duration_seconds_bucket{job="etcd",instance="e0:2381",le="%s"}'
BUCKETS = ("0.001", "0.008", "0.016", "0.032", "+Inf")


def _fsync(slow: bool) -> list[dict[str, str]]:
    # 10 fsyncs a minute, all under 1 ms (fast) or all between 16 and 32 ms (slow).
    first = "0.032" if slow else "0.001"
    return [
        {"series": FSYNC % le, "values": "0+10x30" if BUCKETS.index(le) >= BUCKETS.index(first) else "0x30"}
        for le in BUCKETS
    ]


def _cases(domain: str, fatal_xids: tuple[int, ...]) -> dict[str, dict[str, Any]]:
    """alert -> input series that fire it, series that do not, eval time, labels of the firing alert."""
    node = {"node": "gpu-node-1"}
    preflight = ksm_node_label(f"{domain}/preflight")
    # The last fatal XID fires; XID 13 (an application's graphics engine exception) must not, unless
    # the stack lists it, when the first XID off the list stands in.
    fatal = fatal_xids[-1]
    harmless = next(x for x in (13, *range(1, 1000)) if x not in fatal_xids)
    return {
        "KubeAPIServerThrottling": {
            "fire": [{"series": API % "429", "values": "0+60x30"}, {"series": API % "200", "values": "0+600x30"}],
            "calm": [{"series": API % "429", "values": "0+1x30"}, {"series": API % "200", "values": "0+6000x30"}],
            "at": "20m",
            "labels": {},
        },
        "KubeAPIErrorBudgetBurn": {
            "fire": [{"series": API % "500", "values": "0+300x90"}, {"series": API % "200", "values": "0+600x90"}],
            "calm": [{"series": API % "500", "values": "0+6x90"}, {"series": API % "200", "values": "0+600x90"}],
            "at": "70m",
            "labels": {},
        },
        "EtcdNoLeader": {
            "fire": [{"series": 'etcd_server_has_leader{job="etcd",instance="e0:2381"}', "values": "1 1 0x10"}],
            "calm": [{"series": 'etcd_server_has_leader{job="etcd",instance="e0:2381"}', "values": "1x12"}],
            "at": "8m",
            "labels": {"job": "etcd", "instance": "e0:2381"},
        },
        "EtcdDatabaseNearQuota": {
            "fire": [
                {
                    "series": 'etcd_mvcc_db_total_size_in_bytes{job="etcd",instance="e0:2381"}',
                    "values": "7000000000x20",
                },
                {"series": 'etcd_server_quota_backend_bytes{job="etcd",instance="e0:2381"}', "values": "8589934592x20"},
            ],
            "calm": [
                {
                    "series": 'etcd_mvcc_db_total_size_in_bytes{job="etcd",instance="e0:2381"}',
                    "values": "4000000000x20",
                },
                {"series": 'etcd_server_quota_backend_bytes{job="etcd",instance="e0:2381"}', "values": "8589934592x20"},
            ],
            "at": "15m",
            "labels": {"job": "etcd", "instance": "e0:2381"},
        },
        "EtcdHighFsyncLatency": {
            "fire": _fsync(slow=True),
            "calm": _fsync(slow=False),
            "at": "25m",
            "labels": {"job": "etcd", "instance": "e0:2381"},
        },
        "GpuXidError": {
            "fire": [{"series": 'DCGM_FI_DEV_XID_ERRORS{gpu="3",node="gpu-node-1"}', "values": f"{fatal}x5"}],
            "calm": [{"series": 'DCGM_FI_DEV_XID_ERRORS{gpu="3",node="gpu-node-1"}', "values": f"{harmless}x5"}],
            "at": "2m",
            "labels": {"gpu": "3", "node": "gpu-node-1"},
            "value": str(fatal),
        },
        "GpuRowRemapFailure": {
            "fire": [{"series": 'DCGM_FI_DEV_ROW_REMAP_FAILURE{gpu="0",node="gpu-node-1"}', "values": "1x5"}],
            "calm": [{"series": 'DCGM_FI_DEV_ROW_REMAP_FAILURE{gpu="0",node="gpu-node-1"}', "values": "0x5"}],
            "at": "2m",
            "labels": {"gpu": "0", "node": "gpu-node-1"},
        },
        "NodeStuckInPreflight": {
            "fire": [
                {
                    "series": f'kube_node_spec_taint{{key="{domain}/preflight",value="pending",effect="NoSchedule",node="gpu-node-1"}}',
                    "values": "1x90",
                }
            ],
            # Diagnostics passed after 30 minutes: the taint (and its series) went away.
            "calm": [
                {
                    "series": f'kube_node_spec_taint{{key="{domain}/preflight",value="pending",effect="NoSchedule",node="gpu-node-1"}}',
                    "values": "1x30",
                }
            ],
            "at": "70m",
            "labels": {"key": f"{domain}/preflight", "value": "pending", "effect": "NoSchedule", **node},
        },
        "NodeNotReady": {
            "fire": [
                {
                    "series": 'kube_node_status_condition{condition="Ready",status="true",node="gpu-node-1"}',
                    "values": "0x20",
                }
            ],
            "calm": [
                {
                    "series": 'kube_node_status_condition{condition="Ready",status="true",node="gpu-node-1"}',
                    "values": "1x20",
                }
            ],
            "at": "15m",
            "labels": {"condition": "Ready", "status": "true", **node},
        },
        # The roll's CronJob suspended (by itself, after failures) fires; running, or another CronJob, does not.
        "GpuRollPaused": {
            "fire": [
                {"series": 'kube_cronjob_spec_suspend{namespace="gpu-health",cronjob="gpu-roll"}', "values": "1x5"},
                {
                    "series": 'kube_cronjob_spec_suspend{namespace="gpu-health",cronjob="gpu-remediation"}',
                    "values": "0x5",
                },
            ],
            "calm": [
                {"series": 'kube_cronjob_spec_suspend{namespace="gpu-health",cronjob="gpu-roll"}', "values": "0x5"},
                {"series": 'kube_cronjob_spec_suspend{namespace="gpu-health",cronjob="other"}', "values": "1x5"},
            ],
            "at": "2m",
            "labels": {},
        },
        # A failed run of the roll's CronJob fires; a failed Job of another CronJob, or any while paused, does not.
        "GpuRollRunFailed": {
            "fire": [
                {
                    "series": 'kube_job_status_failed{namespace="gpu-health",job_name="gpu-roll-29411520"}',
                    "values": "1x5",
                },
                {"series": 'kube_cronjob_spec_suspend{namespace="gpu-health",cronjob="gpu-roll"}', "values": "0x5"},
            ],
            # Only another CronJob's Job failed (the name filter), the roll running. (While the roll is paused
            # nothing fires: GpuRollPaused's case.)
            "calm": [
                {"series": 'kube_cronjob_spec_suspend{namespace="gpu-health",cronjob="gpu-roll"}', "values": "0x5"},
                {
                    "series": 'kube_job_status_failed{namespace="gpu-health",job_name="gpu-remediation-29411520"}',
                    "values": "1x5",
                },
                {
                    "series": 'kube_job_status_failed{namespace="gpu-health",job_name="gpu-roll-29411519"}',
                    "values": "0x5",
                },
            ],
            "at": "2m",
            "labels": {},
        },
        # The engine's DaemonSet short of a running agent for 15 minutes fires; another DaemonSet's, or a roll's
        # agent back within minutes, does not.
        "NetworkPolicyAgentUnavailable": {
            "fire": [
                {
                    "series": 'kube_daemonset_status_number_unavailable{namespace="kube-system",daemonset="kube-network-policies"}',
                    "values": "2x20",
                }
            ],
            "calm": [
                {
                    "series": 'kube_daemonset_status_number_unavailable{namespace="kube-system",daemonset="kube-network-policies"}',
                    "values": "150x5 0x15",
                },
                {
                    "series": 'kube_daemonset_status_number_unavailable{namespace="kube-system",daemonset="other"}',
                    "values": "3x20",
                },
            ],
            "at": "17m",
            "labels": {},
        },
        "NodePreflightFailed": {
            "fire": [{"series": f'kube_node_labels{{node="gpu-node-1",{preflight}="failed"}}', "values": "1x5"}],
            "calm": [{"series": f'kube_node_labels{{node="gpu-node-1",{preflight}="pending"}}', "values": "1x5"}],
            "at": "2m",
            "labels": node,
        },
        # 3 of an island's 4 nodes unhealthy at once (fire): one NotReady, two with a fatal XID that this host
        # sees only as node-problem-detector's condition through kube-state-metrics (their dcgm-exporters are
        # another share's); 1 of 4 is a single node's problem (calm).
        "InfinibandIslandDegraded": {
            "fire": _island(domain, 4, 1, xid=2),
            "calm": _island(domain, 4, 0, xid=1),
            "at": "10m",
            "labels": {"island": "h100-a-000"},
            "value": "3",
        },
        **_cert_cases(),
    }


def _island(domain: str, nodes: int, unready: int, *, xid: int = 0) -> list[dict[str, str]]:
    """``nodes`` nodes of one island: the first ``unready`` NotReady, the next ``xid`` with a fatal XID
    condition (kube-state-metrics' series only: no dcgm-exporter series on this host)."""
    island = ksm_node_label(f"{domain}/ib-island")
    series = []
    for n in range(nodes):
        name = f"h100-a-000-{n}"
        series.append({"series": f'kube_node_labels{{node="{name}",{island}="h100-a-000"}}', "values": "1x15"})
        ready = "0x15" if n < unready else "1x15"
        series.append(
            {"series": f'kube_node_status_condition{{condition="Ready",status="true",node="{name}"}}', "values": ready}
        )
        fatal = "1x15" if unready <= n < unready + xid else "0x15"
        series.append(
            {
                "series": f'kube_node_status_condition{{condition="{XID_CONDITION}",status="true",node="{name}"}}',
                "values": fatal,
            }
        )
    return series


DAY = 86400
PEER = 'up{job="prometheus",instance="10.0.1.5:9090"}'
CERT = 'agk_certificate_expiry_timestamp_seconds{job="control-plane-hosts",instance="10.0.0.4:9100",path="/etc/etcd/pki/server.crt",subject="CN=dev-etcd-0"}'
CERT_LABELS = {
    "job": "control-plane-hosts",
    "instance": "10.0.0.4:9100",
    "path": "/etc/etcd/pki/server.crt",
    "subject": "CN=dev-etcd-0",
}


def _expiring(days: int) -> list[dict[str, str]]:
    # notAfter is `days` days after the evaluation at 10m (600 s): the alert's value is exactly that.
    return [{"series": CERT, "values": f"{600 + days * DAY}x20"}]


def _cert_cases() -> dict[str, dict[str, Any]]:
    kubelet = 'kubelet_certificate_manager_client_ttl_seconds{job="kubernetes-nodes",node="gpu-node-1"}'
    serving = 'kubelet_certificate_manager_server_ttl_seconds{job="kubernetes-nodes",node="gpu-node-1"}'
    up = 'up{job="control-plane-hosts",instance="10.0.0.4:9100"}'
    kubelet_up = 'up{job="kubernetes-nodes",instance="gpu-node-1",node="gpu-node-1"}'
    ready = 'kube_node_status_condition{job="kubernetes-pods",condition="Ready",status="true",node="gpu-node-1"}'
    return {
        "CertificateExpiresSoon": {
            "fire": _expiring(20),
            "calm": _expiring(60),
            "at": "10m",
            "labels": CERT_LABELS,
            "value": "20d 0h 0m 0s",
        },
        "CertificateExpiresVerySoon": {
            "fire": _expiring(5),
            "calm": _expiring(20),
            "at": "10m",
            "labels": CERT_LABELS,
            "value": "5d 0h 0m 0s",
        },
        "KubeletClientCertificateExpiresSoon": {
            "fire": [{"series": kubelet, "values": f"{20 * DAY}x20"}],
            "calm": [{"series": kubelet, "values": f"{300 * DAY}x20"}],
            "at": "10m",
            "labels": {"job": "kubernetes-nodes", "node": "gpu-node-1"},
            "value": "20d 0h 0m 0s",
        },
        "KubeletServingCertificateExpiresSoon": {
            "fire": [{"series": serving, "values": f"{20 * DAY}x20"}],
            # +Inf: the kubelet has no serving certificate yet (its first CSR is pending).
            "calm": [{"series": serving, "values": " ".join(["+Inf"] * 21)}],
            "at": "10m",
            "labels": {"job": "kubernetes-nodes", "node": "gpu-node-1"},
            "value": "20d 0h 0m 0s",
        },
        # Ready and unreachable for 20 minutes (fire); unreachable because it is not Ready (NodeNotReady's), or
        # Ready and reachable (calm).
        "KubeletUnreachable": {
            "fire": [{"series": kubelet_up, "values": "0x25"}, {"series": ready, "values": "1x25"}],
            "calm": [
                {"series": kubelet_up, "values": "0x25"},
                {"series": ready, "values": "0x25"},
                {"series": kubelet_up.replace("gpu-node-1", "gpu-node-2"), "values": "1x25"},
                {"series": ready.replace("gpu-node-1", "gpu-node-2"), "values": "1x25"},
            ],
            "at": "20m",
            "labels": {"job": "kubernetes-nodes", "instance": "gpu-node-1", "node": "gpu-node-1"},
        },
        "CertificateExpiryNotReported": {
            "fire": [{"series": up, "values": "1x200"}],
            "calm": [{"series": up, "values": "1x200"}, {"series": CERT, "values": f"{400 * DAY}x200"}],
            "at": "150m",
            "labels": {"job": "control-plane-hosts", "instance": "10.0.0.4:9100"},
        },
        # The other host stops answering (fire); it misses one scrape and is back (calm).
        "PrometheusPeerDown": {
            "fire": [{"series": PEER, "values": "1 1 0x10"}],
            "calm": [{"series": PEER, "values": "1 1 0 1x10"}],
            "at": "8m",
            "labels": {"job": "prometheus", "instance": "10.0.1.5:9090"},
        },
    }


def _backup_cases(every: int) -> dict[str, dict[str, Any]]:
    """The etcd snapshot alerts for a snapshot interval of ``every`` minutes (samples every minute)."""
    member = 'etcd_role="etcd",member="dev-etcd-0",instance="10.64.2.4:9100",job="control-plane-hosts"'
    latest = f"agk_etcd_backup_latest_snapshot_timestamp_seconds{{{member}}}"
    success = f"agk_etcd_backup_last_run_success{{{member}}}"
    n = 2 * every + 20
    return {
        # The newest snapshot stays at t=0 (none since) / keeps up with the clock (one every run).
        "EtcdBackupStale": {
            "fire": [{"series": latest, "values": f"0x{n}"}],
            "calm": [{"series": latest, "values": f"0+60x{n}"}],
            "at": f"{2 * every + 10}m",
            "labels": {"etcd_role": "etcd"},
        },
        "EtcdBackupMissing": {
            "fire": [{"series": success, "values": f"0x{n}"}],
            "calm": [{"series": latest, "values": f"0+60x{n}"}],
            "at": f"{2 * every + 10}m",
            "labels": {"etcd_role": "etcd"},
        },
        "EtcdBackupRunFailing": {
            "fire": [{"series": success, "values": f"0x{every + 20}"}],
            "calm": [{"series": success, "values": f"1x{every + 20}"}],
            "at": f"{every + 10}m",
            "labels": {
                "etcd_role": "etcd",
                "member": "dev-etcd-0",
                "instance": "10.64.2.4:9100",
                "job": "control-plane-hosts",
            },
        },
    }


def _rules(ctx: BootstrapContext) -> dict[str, dict[str, Any]]:
    rules = {}
    for text in alert_rules(ctx).values():
        for group in yaml.safe_load(text)["groups"]:
            for rule in group["rules"]:
                if "alert" in rule:
                    rules[rule["alert"]] = rule
    return rules


def _expand(template: str, labels: dict[str, str], value: str) -> str:
    text = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m.group(1)], template)
    return text.replace("{{ $value | humanizeDuration }}", value).replace("{{ $value }}", value)


def unit_tests(ctx: BootstrapContext, rule_files: list[str]) -> dict[str, Any]:
    """A `promtool test rules` document with a firing and a quiet test per alert."""
    rules = _rules(ctx)
    cases = _cases(ctx.label_domain, ctx.fatal_xids)
    alerts = set(ALERTS)
    if ctx.etcd.backup is not None:
        cases |= _backup_cases(ctx.etcd.backup.every_minutes)
        alerts |= set(BACKUP_ALERTS)
    assert set(cases) == alerts == set(rules)
    tests = []
    for alert, case in cases.items():
        rule = rules[alert]
        labels = {**case["labels"], **rule["labels"]}
        annotations = {k: _expand(v, labels, case.get("value", "")) for k, v in rule["annotations"].items()}
        for kind in ("fire", "calm"):
            expected = [{"exp_labels": labels, "exp_annotations": annotations}] if kind == "fire" else []
            tests.append(
                {
                    "name": f"{alert} {kind}",
                    "interval": "1m",
                    "input_series": case[kind],
                    "alert_rule_test": [{"eval_time": case["at"], "alertname": alert, "exp_alerts": expected}],
                }
            )
    return {"rule_files": rule_files, "evaluation_interval": "1m", "tests": tests}
