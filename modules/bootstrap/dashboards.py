"""The platform team's Grafana dashboards, provisioned from files on the Prometheus hosts (pure).

Which Grafana: self-hosted, one beside each Prometheus (its own Prometheus the default data source, the
other replica's a second one), not Azure Managed Grafana. The Prometheus hosts have no public address
and no Azure-managed endpoint; Managed Grafana reaches such a data source privately only through a
managed private endpoint to a Private Link service in front of an internal load balancer (Azure Managed
Grafana docs, "Connect to a data source privately"), which this design would add only for Grafana; and its
dashboards would be pushed through Grafana's HTTP API with an Entra token by another provider, where file
provisioning here rides the same bundle, sync and review as every other host file (a dashboard change is
a reviewed diff that `agk render` shows). The cost: the team runs Grafana's upgrades (pinned:
the versions table's grafana row) and its login (the admin password is a Key Vault secret, below).

Each dashboard is data (``DASHBOARDS``); every panel's query names only series the cluster's exporters
produce, and the tests evaluate every query against a real Prometheus fed such series.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import yaml

from modules import labels
from modules.bootstrap.alerting import secret_file
from modules.bootstrap.context import GRAFANA_PORT, PROMETHEUS_PORT, BootstrapContext, Host
from modules.bootstrap.monitoring import ksm_node_label

PROVISIONING = "/etc/grafana/provisioning"
DASHBOARD_DIR = "/var/lib/grafana/dashboards/agk"
"""Where the dashboard files go (the provider's ``options.path``); the sync keeps them current."""
ADMIN_SECRET = "grafana-admin-password"
"""Receiver-style secret (alerting.SECRETS_DIR) the Grafana admin password is read from (``$__file{}``)."""
DATASOURCE_UID = "agk-prometheus"
PEER_DATASOURCE_UID = "agk-prometheus-peer"
SCHEMA_VERSION = 39
"""Grafana's dashboard JSON schema version these files are written in (Grafana 10.4 and later migrate it)."""
RATE = "$__rate_interval"


@dataclass(frozen=True)
class Panel:
    title: str
    queries: tuple[tuple[str, str], ...]
    """(PromQL, legend)."""
    kind: str = "timeseries"
    unit: str = "short"


@dataclass(frozen=True)
class Dashboard:
    uid: str
    title: str
    panels: tuple[Panel, ...]
    island_variable: bool = False


API = 'job="kubernetes-apiservers"'
ISLAND = 'island=~"$island"'
"""The selector of the island variable's choice."""


def _team(ctx: BootstrapContext) -> str:
    """kube-state-metrics' name of the team node label."""
    return ksm_node_label(labels.key(ctx.label_domain, labels.TEAM))


def _node_team(ctx: BootstrapContext) -> str:
    """(node, team) of every team node, from kube-state-metrics' node labels."""
    team = _team(ctx)
    return f'max by (node, team) (label_replace(kube_node_labels{{{team}!=""}}, "team", "$1", "{team}", "(.+)"))'


def _apiserver(ctx: BootstrapContext) -> Dashboard:
    return Dashboard(
        "agk-apiserver",
        "API servers",
        (
            Panel(
                "Request latency p99 by verb (no WATCH)",
                (
                    (
                        "histogram_quantile(0.99, sum by (le, verb) (rate(apiserver_request_duration_seconds_bucket"
                        f'{{{API},verb!~"WATCH|CONNECT"}}[{RATE}])))',
                        "{{verb}}",
                    ),
                ),
                unit="s",
            ),
            Panel(
                "Requests by code",
                ((f"sum by (code) (rate(apiserver_request_total{{{API}}}[{RATE}]))", "{{code}}"),),
                unit="reqps",
            ),
            Panel(
                "Share of requests rejected 429 (priority and fairness)",
                (
                    (
                        f'sum(rate(apiserver_request_total{{{API},code="429"}}[{RATE}])) / '
                        f"sum(rate(apiserver_request_total{{{API}}}[{RATE}]))",
                        "429",
                    ),
                ),
                unit="percentunit",
            ),
            Panel(
                "Rejected by priority level",
                (
                    (
                        "sum by (priority_level) (rate(apiserver_flowcontrol_rejected_requests_total"
                        f"{{{API}}}[{RATE}]))",
                        "{{priority_level}}",
                    ),
                ),
                unit="reqps",
            ),
            Panel(
                "In-flight requests by server",
                (
                    (
                        f"sum by (instance, request_kind) (apiserver_current_inflight_requests{{{API}}})",
                        "{{instance}} {{request_kind}}",
                    ),
                ),
            ),
        ),
    )


def _etcd(ctx: BootstrapContext) -> Dashboard:
    return Dashboard(
        "agk-etcd",
        "etcd",
        (
            Panel(
                "Members with a leader",
                (('sum by (job) (etcd_server_has_leader{job=~"etcd|events-etcd"})', "{{job}}"),),
                "stat",
            ),
            Panel(
                "Leader changes (1h)",
                (
                    (
                        'sum by (job) (increase(etcd_server_leader_changes_seen_total{job=~"etcd|events-etcd"}[1h]))',
                        "{{job}}",
                    ),
                ),
                "stat",
            ),
            Panel(
                "Database size / quota",
                (
                    (
                        'etcd_mvcc_db_total_size_in_bytes{job=~"etcd|events-etcd"} / '
                        'etcd_server_quota_backend_bytes{job=~"etcd|events-etcd"}',
                        "{{job}} {{instance}}",
                    ),
                ),
                unit="percentunit",
            ),
            Panel(
                "WAL fsync p99",
                (
                    (
                        "histogram_quantile(0.99, sum by (job, instance, le) (rate("
                        f'etcd_disk_wal_fsync_duration_seconds_bucket{{job=~"etcd|events-etcd"}}[{RATE}])))',
                        "{{job}} {{instance}}",
                    ),
                ),
                unit="s",
            ),
            Panel(
                "Backend commit p99",
                (
                    (
                        "histogram_quantile(0.99, sum by (job, instance, le) (rate("
                        f'etcd_disk_backend_commit_duration_seconds_bucket{{job=~"etcd|events-etcd"}}[{RATE}])))',
                        "{{job}} {{instance}}",
                    ),
                ),
                unit="s",
            ),
        ),
    )


def _gpu_islands(ctx: BootstrapContext) -> Dashboard:
    return Dashboard(
        "agk-gpu-islands",
        "GPU health by InfiniBand island",
        (
            Panel(
                "Unhealthy nodes per island",
                ((f"agk:island_unhealthy_nodes{{{ISLAND}}}", "{{island}}"),),
            ),
            Panel("Nodes per island", ((f"agk:island_nodes{{{ISLAND}}}", "{{island}}"),), "table"),
            Panel(
                "GPUs reporting an XID, per island",
                (
                    (
                        "count by (island) ((DCGM_FI_DEV_XID_ERRORS > 0) * on(node) group_left(island) "
                        f"agk:node_island{{{ISLAND}}})",
                        "{{island}}",
                    ),
                ),
            ),
            Panel(
                "Last XID of each GPU reporting one",
                (
                    (
                        f"(DCGM_FI_DEV_XID_ERRORS > 0) * on(node) group_left(island) agk:node_island{{{ISLAND}}}",
                        "{{island}} {{node}} GPU {{gpu}}",
                    ),
                ),
                "table",
            ),
            Panel(
                "GPU utilisation by island",
                (
                    (
                        "avg by (island) (DCGM_FI_DEV_GPU_UTIL * on(node) group_left(island) "
                        f"agk:node_island{{{ISLAND}}})",
                        "{{island}}",
                    ),
                ),
                unit="percent",
            ),
            Panel(
                "Hottest GPU by island",
                (
                    (
                        "max by (island) (DCGM_FI_DEV_GPU_TEMP * on(node) group_left(island) "
                        f"agk:node_island{{{ISLAND}}})",
                        "{{island}}",
                    ),
                ),
                unit="celsius",
            ),
        ),
        island_variable=True,
    )


def _egress(ctx: BootstrapContext) -> Dashboard:
    node_team = _node_team(ctx)
    return Dashboard(
        "agk-egress",
        "Egress to the internet by node and team",
        (
            Panel(
                "Pod egress by node (top 20)",
                (
                    (
                        'topk(20, sum by (node) (rate(iptables_exporter_bytes_total{traffic="internet-out"}'
                        f"[{RATE}])))",
                        "{{node}}",
                    ),
                ),
                unit="Bps",
            ),
            Panel(
                "Pod egress by team",
                (
                    (
                        'sum by (team) (sum by (node) (rate(iptables_exporter_bytes_total{traffic="internet-out"}'
                        f"[{RATE}])) * on(node) group_left(team) {node_team})",
                        "{{team}}",
                    ),
                ),
                unit="Bps",
            ),
            Panel(
                "Host egress by node (top 20)",
                (
                    (
                        'topk(20, sum by (node) (rate(iptables_exporter_bytes_total{traffic="host-internet-out"}'
                        f"[{RATE}])))",
                        "{{node}}",
                    ),
                ),
                unit="Bps",
            ),
        ),
    )


def _preflight(ctx: BootstrapContext) -> Dashboard:
    preflight = ksm_node_label(labels.key(ctx.label_domain, labels.PREFLIGHT))
    return Dashboard(
        "agk-preflight",
        "Preflight",
        (
            Panel(
                "GPU nodes by preflight state",
                (
                    (
                        f'count by (state) (label_replace(kube_node_labels{{{preflight}!=""}}, "state", "$1", '
                        f'"{preflight}", "(.+)"))',
                        "{{state}}",
                    ),
                ),
                "stat",
            ),
            Panel(
                "Nodes failed preflight",
                ((f'max by (node) (kube_node_labels{{{preflight}="failed"}})', "{{node}}"),),
                "table",
            ),
            Panel(
                "Nodes tainted preflight",
                ((f'count(kube_node_spec_taint{{key="{ctx.preflight_taint_key}"}})', "tainted"),),
                "stat",
            ),
        ),
    )


def dashboards(ctx: BootstrapContext) -> tuple[Dashboard, ...]:
    return tuple(build(ctx) for build in (_apiserver, _etcd, _gpu_islands, _egress, _preflight))


def _panel(panel: Panel, n: int) -> dict[str, Any]:
    width = 12
    return {
        "id": n + 1,
        "type": panel.kind,
        "title": panel.title,
        "gridPos": {"h": 8, "w": width, "x": (n % 2) * width, "y": (n // 2) * 8},
        "datasource": {"type": "prometheus", "uid": DATASOURCE_UID},
        "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
        "options": {},
        "targets": [
            {
                "refId": chr(ord("A") + i),
                "datasource": {"type": "prometheus", "uid": DATASOURCE_UID},
                "expr": expr,
                "legendFormat": legend,
                **({"instant": True, "format": "table"} if panel.kind == "table" else {}),
            }
            for i, (expr, legend) in enumerate(panel.queries)
        ],
    }


def dashboard_json(d: Dashboard) -> dict[str, Any]:
    variables = []
    if d.island_variable:
        variables.append(
            {
                "name": "island",
                "label": "InfiniBand island",
                "type": "query",
                "datasource": {"type": "prometheus", "uid": DATASOURCE_UID},
                "query": {"query": "label_values(agk:node_island, island)", "refId": "island"},
                "definition": "label_values(agk:node_island, island)",
                "includeAll": True,
                "multi": True,
                "allValue": ".*",
                "refresh": 2,
                "current": {"text": "All", "value": "$__all"},
            }
        )
    return {
        "uid": d.uid,
        "title": d.title,
        "tags": ["agk"],
        "editable": False,
        "schemaVersion": SCHEMA_VERSION,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "1m",
        "timezone": "utc",
        "templating": {"list": variables},
        "panels": [_panel(p, n) for n, p in enumerate(d.panels)],
    }


def datasources(ctx: BootstrapContext, host: Host) -> dict[str, Any]:
    """provisioning/datasources/agk.yaml: this host's Prometheus, and the other replica's."""
    peers = [h for h in ctx.prometheus.hosts if h != host]
    sources = [
        {
            "name": "Prometheus",
            "uid": DATASOURCE_UID,
            "type": "prometheus",
            "access": "proxy",
            "url": f"http://localhost:{PROMETHEUS_PORT}",
            "isDefault": True,
            "editable": False,
            "jsonData": {"timeInterval": ctx.prometheus.scrape_interval, "httpMethod": "POST"},
        }
    ]
    if peers:
        sources.append(
            {
                "name": f"Prometheus ({peers[0].name})",
                "uid": PEER_DATASOURCE_UID,
                "type": "prometheus",
                "access": "proxy",
                "url": f"http://{peers[0].ip}:{PROMETHEUS_PORT}",
                "editable": False,
                "jsonData": {"timeInterval": ctx.prometheus.scrape_interval, "httpMethod": "POST"},
            }
        )
    return {"apiVersion": 1, "datasources": sources}


def providers() -> dict[str, Any]:
    """provisioning/dashboards/agk.yaml: the dashboards folder, read-only in the UI (changes are reviewed)."""
    return {
        "apiVersion": 1,
        "providers": [
            {
                "name": "agk",
                "folder": "Platform",
                "type": "file",
                "disableDeletion": True,
                "allowUiUpdates": False,
                "updateIntervalSeconds": 60,
                "options": {"path": DASHBOARD_DIR, "foldersFromFilesStructure": False},
            }
        ],
    }


def grafana_ini(secret_path: str) -> str:
    return (
        "# Grafana on a Prometheus host (modules/bootstrap/dashboards.py). Reached from the hub's private\n"
        '# network only; the admin password is a Key Vault secret (docs/oncall.md "Dashboards").\n'
        "[server]\n"
        f"http_port = {GRAFANA_PORT}\n"
        "[security]\n"
        "admin_user = admin\n"
        f"admin_password = $__file{{{secret_path}}}\n"
        "cookie_secure = false\n"
        "[users]\n"
        "allow_sign_up = false\n"
        "[auth.anonymous]\n"
        "enabled = false\n"
        "[analytics]\n"
        "reporting_enabled = false\n"
        "check_for_updates = false\n"
        "check_for_plugin_updates = false\n"
        "[paths]\n"
        f"provisioning = {PROVISIONING}\n"
    )


def files(ctx: BootstrapContext, host: Host) -> dict[str, str]:
    """Absolute path -> content of every Grafana file of ``host``."""
    out = {
        "/etc/grafana/grafana.ini": grafana_ini(secret_file(ADMIN_SECRET)),
        f"{PROVISIONING}/datasources/agk.yaml": yaml.safe_dump(datasources(ctx, host), sort_keys=False),
        f"{PROVISIONING}/dashboards/agk.yaml": yaml.safe_dump(providers(), sort_keys=False),
    }
    for d in dashboards(ctx):
        out[f"{DASHBOARD_DIR}/{d.uid}.json"] = json.dumps(dashboard_json(d), indent=2) + "\n"
    return out
