"""The provisioned dashboards: every panel's query parses (promtool) and returns series from a real
Prometheus fed the exporters' series (on loopback, with the rendered recording rules), and the
provisioning files agree with each other.

Grafana itself does not run here (no Debian package; its Go module is AGPL, which this project does not
build): what Grafana's file provider needs of a dashboard (a uid, a title, panels whose data source is a
provisioned one) is checked from the files, and each query, which is what Grafana hands Prometheus, runs
on Prometheus itself, with Grafana's ``$__rate_interval`` and the ``$island`` variable (All) filled in as
Grafana would.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from modules.bootstrap import dashboards
from modules.bootstrap.context import BootstrapContext
from modules.bootstrap.monitoring import ksm_node_label
from modules.bootstrap.roles import bundle, names
from modules.bootstrap.roles.prometheus import alert_rules


def _queries(ctx: BootstrapContext) -> list[tuple[str, str, str]]:
    """(dashboard, panel, PromQL as Grafana sends it: 1m for $__rate_interval, All for $island)."""
    out = []
    for d in dashboards.dashboards(ctx):
        for p in d.panels:
            for expr, _ in p.queries:
                out.append((d.uid, p.title, expr.replace("$__rate_interval", "1m").replace("$island", ".*")))
    return out


def _files(ctx: BootstrapContext) -> dict[str, str]:
    node = bundle(ctx, "prometheus", names(ctx, "prometheus")[0])
    return {f.path: f.content for f in node.files if "grafana" in f.path}


def test_the_provisioning_files_agree(ctx: BootstrapContext) -> None:
    files = _files(ctx)
    sources = yaml.safe_load(files[f"{dashboards.PROVISIONING}/datasources/agk.yaml"])
    uids = {s["uid"] for s in sources["datasources"]}
    assert [s["isDefault"] for s in sources["datasources"] if s.get("isDefault")] == [True]
    (provider,) = yaml.safe_load(files[f"{dashboards.PROVISIONING}/dashboards/agk.yaml"])["providers"]
    assert provider["type"] == "file" and provider["allowUiUpdates"] is False
    boards = {p: json.loads(t) for p, t in files.items() if p.endswith(".json")}
    assert {Path(p).parent.as_posix() for p in boards} == {provider["options"]["path"]}
    assert {b["title"] for b in boards.values()} == {
        "API servers",
        "etcd",
        "GPU health by InfiniBand island",
        "Egress to the internet by node and team",
        "Preflight",
    }
    seen_uids = [b["uid"] for b in boards.values()]
    assert len(set(seen_uids)) == len(seen_uids) and all(len(u) <= 40 for u in seen_uids)
    for board in boards.values():
        assert board["schemaVersion"] == dashboards.SCHEMA_VERSION
        ids = [p["id"] for p in board["panels"]]
        assert len(set(ids)) == len(ids)
        for panel in board["panels"]:
            assert panel["datasource"]["uid"] in uids
            assert all(t["datasource"]["uid"] in uids and t["expr"] for t in panel["targets"])
    # The admin password is a file the host's secrets program fills from Key Vault, never in the bundle.
    ini = files["/etc/grafana/grafana.ini"]
    assert f"admin_password = $__file{{/etc/alertmanager/secrets/{dashboards.ADMIN_SECRET}}}" in ini
    assert "[auth.anonymous]\nenabled = false" in ini


@pytest.mark.realtool
def test_every_query_parses(dev: BootstrapContext, require: Callable[[str], str], tmp_path: Path) -> None:
    queries = _queries(dev)
    rules = {
        "groups": [
            {
                "name": "dashboards",
                "rules": [{"record": f"dashboard:q{n}", "expr": q} for n, (_, _, q) in enumerate(queries)],
            }
        ]
    }
    path = tmp_path / "dashboards.yml"
    path.write_text(yaml.safe_dump(rules))
    run = subprocess.run([require("promtool"), "check", "rules", str(path)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"SUCCESS: {len(queries)} rules found" in run.stdout
    # The check reads each query: one broken bracket fails it.
    rules["groups"][0]["rules"][0]["expr"] = queries[0][2] + ")"
    path.write_text(yaml.safe_dump(rules))
    assert subprocess.run([require("promtool"), "check", "rules", str(path)], capture_output=True).returncode != 0


def _exposition(domain: str) -> str:
    """The exporters' series for two GPU nodes of one island (n1 failed preflight, an XID; n2 healthy)."""
    now = time.time()
    counter = int(now * 10)  # rises every scrape, so rates are real
    island = ksm_node_label(f"{domain}/ib-island")
    team = ksm_node_label(f"{domain}/team")
    preflight = ksm_node_label(f"{domain}/preflight")
    api = 'job="kubernetes-apiservers",instance="10.0.0.10:6443"'
    etcd = 'job="etcd",instance="10.0.0.20:2381"'
    lines = [
        *(
            f'apiserver_request_duration_seconds_bucket{{{api},verb="GET",le="{le}"}} {counter}'
            for le in ("0.1", "1", "+Inf")
        ),
        f'apiserver_request_total{{{api},code="200"}} {counter * 9}',
        f'apiserver_request_total{{{api},code="429"}} {counter}',
        f'apiserver_flowcontrol_rejected_requests_total{{{api},priority_level="workload-low"}} {counter}',
        f'apiserver_current_inflight_requests{{{api},request_kind="readOnly"}} 40',
        f"etcd_server_has_leader{{{etcd}}} 1",
        f"etcd_server_leader_changes_seen_total{{{etcd}}} {counter // 100}",
        f"etcd_mvcc_db_total_size_in_bytes{{{etcd}}} 2000000000",
        f"etcd_server_quota_backend_bytes{{{etcd}}} 8589934592",
        *(
            f'etcd_disk_wal_fsync_duration_seconds_bucket{{{etcd},le="{le}"}} {counter}'
            for le in ("0.001", "0.01", "+Inf")
        ),
        *(f'etcd_disk_backend_commit_duration_seconds_bucket{{{etcd},le="{le}"}} {counter}' for le in ("0.01", "+Inf")),
    ]
    ksm = 'job="kubernetes-exporters",instance="10.0.1.5:8080"'
    for node, state in (("h100-a-000-1", "failed"), ("h100-a-000-2", None)):
        extra = f',{preflight}="{state}"' if state else ""
        lines += [
            f'kube_node_labels{{{ksm},node="{node}",{island}="h100-a-000",{team}="research"{extra}}} 1',
            f'kube_node_status_condition{{{ksm},node="{node}",condition="Ready",status="true"}} 1',
            f'DCGM_FI_DEV_GPU_UTIL{{job="kubernetes-exporters",node="{node}",gpu="0",Hostname="{node}"}} 87',
            f'DCGM_FI_DEV_GPU_TEMP{{job="kubernetes-exporters",node="{node}",gpu="0",Hostname="{node}"}} 61',
            f'iptables_exporter_bytes_total{{job="kubernetes-pods",node="{node}",table="mangle",chain="AGK-POD-OUT",traffic="internet-out"}} {counter * 1000}',
            f'iptables_exporter_bytes_total{{job="kubernetes-pods",node="{node}",table="mangle",chain="AGK-HOST-OUT",traffic="host-internet-out"}} {counter * 10}',
        ]
    lines += [
        'DCGM_FI_DEV_XID_ERRORS{job="kubernetes-exporters",node="h100-a-000-1",gpu="3",Hostname="h100-a-000-1"} 79',
        f'kube_node_spec_taint{{{ksm},node="h100-a-000-1",key="{domain}/preflight",value="pending",effect="NoSchedule"}} 1',
    ]
    return "\n".join(lines) + "\n"


@contextlib.contextmanager
def _exporter(domain: str) -> Iterator[int]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = _exposition(domain).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


def _query(base: str, expr: str) -> list[dict[str, Any]]:
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as resp:
        data = json.load(resp)
    assert data["status"] == "success", data
    return list(data["data"]["result"])


@pytest.mark.realtool
def test_every_panel_shows_data_from_a_real_prometheus(
    dev: BootstrapContext, require: Callable[[str], str], tmp_path: Path
) -> None:
    from .test_realtool_alertmanager import Processes, _free_port, _ready

    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "islands.yml").write_text(alert_rules(dev)["islands.yml"])  # agk:node_island and the island counts
    running = Processes()
    try:
        with _exporter(dev.label_domain) as port:
            config = {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"},
                "rule_files": [f"{rules}/*.yml"],
                # honor_labels: each series carries the job, node and instance its exporter's job gives it.
                "scrape_configs": [
                    {
                        "job_name": "exporters",
                        "honor_labels": True,
                        "static_configs": [{"targets": [f"127.0.0.1:{port}"]}],
                    }
                ],
            }
            (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
            web = _free_port()
            log = tmp_path / "prometheus.log"
            proc = running.start(
                [
                    require("prometheus"),
                    f"--config.file={tmp_path / 'prometheus.yml'}",
                    f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{web}",
                ],
                log,
            )
            base = f"http://127.0.0.1:{web}"
            _ready(f"{base}/-/ready", proc, log)
            empty: list[tuple[str, str, str]] = []
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                empty = [q for q in _queries(dev) if not _query(base, q[2])]
                if not empty:
                    break
                time.sleep(1)
            assert not empty, empty
            # And the values mean what the panels say.
            (failed,) = _query(base, _queries_of(dev, "Nodes failed preflight"))
            assert failed["metric"]["node"] == "h100-a-000-1"
            (xid,) = _query(base, _queries_of(dev, "Last XID of each GPU reporting one"))
            assert xid["metric"]["island"] == "h100-a-000" and xid["value"][1] == "79"
            (research,) = _query(base, _queries_of(dev, "Pod egress by team"))
            assert research["metric"]["team"] == "research" and float(research["value"][1]) > 0
    finally:
        running.stop()


def _queries_of(ctx: BootstrapContext, title: str) -> str:
    (expr,) = [q for _, t, q in _queries(ctx) if t == title]
    return expr
