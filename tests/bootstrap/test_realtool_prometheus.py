"""promtool checks the rendered config, rules and alert behaviour; a live Prometheus proves the drops."""

from __future__ import annotations

import http.server
import json
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from modules.bootstrap import pki
from modules.bootstrap.context import BootstrapContext
from modules.bootstrap.roles import alert_rules, bundle, names, prometheus_config
from modules.cluster.config import AddonsConfig

from .certs import issue
from .prom_unit_tests import unit_tests


def _install(ctx: BootstrapContext, root: Path) -> Path:
    """The Prometheus host's files under ``root`` (paths rewritten), with real certificates."""
    spec = pki.pki_spec(ctx)
    pems = issue(spec, only={pki.PROMETHEUS})
    node = bundle(ctx, "prometheus", names(ctx, "prometheus")[0])
    for secret in node.secrets:
        path = root / secret.path.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(pems[secret.secret])
    for f in node.files:
        if f.path.startswith("/etc/prometheus/"):
            path = root / f.path.lstrip("/")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f.content.replace("/etc/prometheus/", f"{root}/etc/prometheus/"))
    return root / "etc/prometheus/prometheus.yml"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, check=False)


SD_ROLES = {"node", "service", "pod", "endpoints", "endpointslice", "ingress"}


def _without_kubernetes_sd(ctx: BootstrapContext, config: dict[str, Any], root: Path) -> dict[str, Any]:
    """Debian's promtool is built without Kubernetes SD: check those blocks here (upstream's rules:
    known role, API server URL, readable TLS files) and hand promtool the rest, the SD turned into
    the API server's address."""
    for job in config["scrape_configs"]:
        blocks = job.pop("kubernetes_sd_configs", None)
        if blocks is None:
            continue
        for block in blocks:
            assert set(block) == {"role", "api_server", "tls_config"}, job["job_name"]
            assert block["role"] in SD_ROLES
            assert block["api_server"] == ctx.apiserver_url
            for key in ("ca_file", "cert_file", "key_file"):
                assert Path(block["tls_config"][key]).is_file(), block["tls_config"][key]
                assert Path(block["tls_config"][key]).is_relative_to(root)
        job["static_configs"] = [{"targets": [f"{ctx.apiserver_vip}:6443"]}]
    return config


@pytest.mark.realtool
def test_promtool_check_config(ctx: BootstrapContext, require: Callable[[str], str], tmp_path: Path) -> None:
    rendered = _install(ctx, tmp_path)
    config = yaml.safe_load(rendered.read_text())
    checked = tmp_path / "checked.yml"
    checked.write_text(yaml.safe_dump(_without_kubernetes_sd(ctx, config, tmp_path), sort_keys=False))
    run = _run(require("promtool"), "check", "config", str(checked))
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"SUCCESS: {len(alert_rules(ctx))} rule files found" in run.stdout
    jobs = [j["job_name"] for j in config["scrape_configs"]]
    expected = [
        "prometheus",
        "kubernetes-apiservers",
        "kubernetes-nodes",
        "kubernetes-cadvisor",
        "kubernetes-pods",
        "kubernetes-exporters",
        "etcd",
    ]
    assert jobs[: len(expected)] == expected
    assert ("events-etcd" in jobs) == (ctx.events_etcd is not None)


@pytest.mark.realtool
def test_promtool_rejects_a_broken_config(require: Callable[[str], str], tmp_path: Path) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text("scrape_configs:\n  - job_name: x\n    metric_relabel_configs: [{action: drop, regex: '('}]\n")
    assert _run(require("promtool"), "check", "config", str(bad)).returncode != 0


@pytest.mark.realtool
def test_promtool_check_and_test_rules(ctx: BootstrapContext, require: Callable[[str], str], tmp_path: Path) -> None:
    promtool = require("promtool")
    files = []
    for name, text in alert_rules(ctx).items():
        (tmp_path / name).write_text(text)
        files.append(name)
    check = _run(promtool, "check", "rules", *(str(tmp_path / f) for f in files))
    assert check.returncode == 0, check.stdout + check.stderr
    assert check.stdout.count("SUCCESS") == len(files)
    tests = tmp_path / "alerts_test.yml"
    tests.write_text(yaml.safe_dump(unit_tests(ctx, files), sort_keys=False))
    run = _run(promtool, "test", "rules", str(tests))
    assert run.returncode == 0, run.stdout + run.stderr
    assert "SUCCESS" in run.stdout


def _rule_files(ctx: BootstrapContext, folder: Path) -> list[str]:
    folder.mkdir(exist_ok=True)
    for name, text in alert_rules(ctx).items():
        (folder / name).write_text(text)
    return sorted(alert_rules(ctx))


@pytest.mark.realtool
def test_gpu_xid_alert_follows_the_stacks_fatal_xids(
    dev: BootstrapContext, require: Callable[[str], str], tmp_path: Path
) -> None:
    """The alert reads addons.health.fatal_xids (the list the node-problem-detector rule reads)."""
    from modules.stackplan.config import parse_config
    from modules.stackplan.prepare import prepare_cluster

    from .conftest import STACKS, context

    assert dev.fatal_xids == tuple(sorted(AddonsConfig().health.fatal_xids))
    raw = yaml.safe_load((STACKS / "Pulumi.dev.yaml").read_text())["config"]
    raw.setdefault("azure-gpu-k8s:addons", {}).setdefault("health", {})["fatal_xids"] = [31, 13]
    changed = prepare_cluster("dev", parse_config(raw), STACKS).bootstrap
    assert changed.fatal_xids == (13, 31)
    assert changed == replace(context("dev"), fatal_xids=(13, 31))

    promtool = require("promtool")
    files = _rule_files(changed, tmp_path)
    # XID 13 now fires and 79 (on the default list) no longer does...
    own = tmp_path / "own.yml"
    own.write_text(yaml.safe_dump(unit_tests(changed, files), sort_keys=False))
    run = _run(promtool, "test", "rules", str(own))
    assert run.returncode == 0, run.stdout + run.stderr
    # ...so the default list's expectations fail against the changed rules.
    default = tmp_path / "default.yml"
    default.write_text(yaml.safe_dump(unit_tests(dev, files), sort_keys=False))
    run = _run(promtool, "test", "rules", str(default))
    assert run.returncode != 0
    assert "GpuXidError" in run.stdout + run.stderr


@pytest.mark.realtool
def test_promtool_test_rules_can_fail(dev: BootstrapContext, require: Callable[[str], str], tmp_path: Path) -> None:
    # Swapping the inputs of one alert's two cases must make promtool report failures.
    files = []
    for name, text in alert_rules(dev).items():
        (tmp_path / name).write_text(text)
        files.append(name)
    doc = unit_tests(dev, files)
    fire, calm = doc["tests"][0], doc["tests"][1]
    fire["input_series"], calm["input_series"] = calm["input_series"], fire["input_series"]
    (tmp_path / "t.yml").write_text(yaml.safe_dump(doc))
    run = _run(require("promtool"), "test", "rules", str(tmp_path / "t.yml"))
    assert run.returncode != 0
    assert "KubeAPIServerThrottling" in run.stdout + run.stderr


EXPOSITION = """\
etcd_debugging_mvcc_keys_total 5
etcd_server_has_leader 1
etcd_disk_wal_fsync_duration_seconds_count 3
apiserver_request_total{code="200"} 10
apiserver_request_duration_seconds_bucket{le="0.15"} 1
apiserver_request_duration_seconds_bucket{le="1"} 2
apiserver_admission_controller_admission_latencies_seconds_count 1
kubelet_pleg_relist_duration_seconds_bucket{le="1"} 1
kubelet_running_pods 3
container_tasks_state 1
container_cpu_usage_seconds_total 2
go_memstats_alloc_bytes 100
go_goroutines 10
"""

# job -> (series that must be dropped, series that must be kept); "name" or "name;le".
EXPECT = {
    "kubernetes-apiservers": (
        {
            "etcd_debugging_mvcc_keys_total",
            "etcd_server_has_leader",
            "etcd_disk_wal_fsync_duration_seconds_count",
            "apiserver_request_duration_seconds_bucket;0.15",
            "apiserver_admission_controller_admission_latencies_seconds_count",
        },
        {"apiserver_request_total", "apiserver_request_duration_seconds_bucket;1", "go_goroutines"},
    ),
    "kubernetes-nodes": ({"kubelet_pleg_relist_duration_seconds_bucket;1"}, {"kubelet_running_pods"}),
    "kubernetes-cadvisor": ({"container_tasks_state"}, {"container_cpu_usage_seconds_total"}),
    "kubernetes-pods": ({"go_memstats_alloc_bytes"}, {"go_goroutines"}),
    # etcd is scraped directly: its own server and disk series are what the etcd alerts read.
    "etcd": (set(), {"etcd_server_has_leader", "etcd_disk_wal_fsync_duration_seconds_count"}),
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def exporter() -> Iterator[int]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = EXPOSITION.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield int(server.server_address[1])
    server.shutdown()
    server.server_close()


def _loopback_config(ctx: BootstrapContext, target: str, rules_dir: Path) -> dict[str, Any]:
    """The rendered config with only targets and paths rewritten: discovery becomes the loopback exporter."""
    host = ctx.prometheus.hosts[0]
    config = yaml.safe_load(prometheus_config(ctx, host))
    config["global"]["scrape_interval"] = "1s"
    config["global"]["scrape_timeout"] = "1s"
    config["rule_files"] = [f"{rules_dir}/*.yml"]
    for job in config["scrape_configs"]:
        for key in ("kubernetes_sd_configs", "relabel_configs", "tls_config", "scheme", "metrics_path"):
            job.pop(key, None)
        job["static_configs"] = [{"targets": [target]}]
    return config


def _series(base: str, job: str) -> set[str]:
    query = urllib.parse.urlencode({"match[]": f'{{job="{job}"}}'})
    with urllib.request.urlopen(f"{base}/api/v1/series?{query}", timeout=5) as resp:
        data = json.load(resp)["data"]
    return {s["__name__"] + (f";{s['le']}" if "le" in s else "") for s in data}


@pytest.mark.realtool
def test_live_scrape_drops_only_unused_series(
    dev: BootstrapContext, require: Callable[[str], str], tmp_path: Path, exporter: int
) -> None:
    prometheus = require("prometheus")
    rules = tmp_path / "rules"
    rules.mkdir()
    for name, text in alert_rules(dev).items():
        (rules / name).write_text(text)
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump(_loopback_config(dev, f"127.0.0.1:{exporter}", rules)))
    port = _free_port()
    proc = subprocess.Popen(
        [
            prometheus,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        seen: dict[str, set[str]] = {}
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                seen = {job: _series(base, job) for job in EXPECT}
            except OSError:
                seen = {}
            if seen and all(
                "go_goroutines" in s or (job == "etcd" and "etcd_server_has_leader" in s) for job, s in seen.items()
            ):
                break
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.5)
        for job, (dropped, kept) in EXPECT.items():
            assert kept <= seen[job], (job, kept - seen[job])
            assert not dropped & seen[job], (job, dropped & seen[job])
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.realtool
@pytest.mark.parametrize(
    ("job", "path"), [("kubernetes-nodes", "metrics"), ("kubernetes-cadvisor", "metrics/cadvisor")]
)
def test_kubelets_are_scraped_through_the_api_server(
    ctx: BootstrapContext, require: Callable[[str], str], tmp_path: Path, job: str, path: str
) -> None:
    """Kubelet serving certificates are self-signed: Prometheus verifies the API server instead, which
    proxies. promtool runs the job's relabeling on a target shaped like Kubernetes node discovery's."""
    config = yaml.safe_load(_install(ctx, tmp_path).read_text())
    (scrape,) = [j for j in config["scrape_configs"] if j["job_name"] == job]
    assert scrape["scheme"] == "https"
    assert scrape["tls_config"] == scrape["kubernetes_sd_configs"][0]["tls_config"]
    assert scrape["kubernetes_sd_configs"][0]["role"] == "node"
    node = "prod-gpu-h100-a000042"
    discovered = {
        "__address__": "10.64.8.9:10250",
        "__meta_kubernetes_node_name": node,
        "__meta_kubernetes_node_label_kubernetes_io_hostname": node,
        "__meta_kubernetes_node_address_InternalIP": "10.64.8.9",
    }
    targets = tmp_path / "nodes.json"
    targets.write_text(json.dumps([{"targets": [discovered.pop("__address__")], "labels": discovered}]))
    del scrape["kubernetes_sd_configs"]
    scrape["file_sd_configs"] = [{"files": [str(targets)]}]
    config["scrape_configs"] = [scrape]
    checked = tmp_path / "sd.yml"
    checked.write_text(yaml.safe_dump(config, sort_keys=False))
    run = _run(require("promtool"), "check", "service-discovery", "--timeout=10s", str(checked), job)
    assert run.returncode == 0, run.stdout + run.stderr
    (target,) = json.loads(run.stdout)
    labels = target["labels"]
    assert labels["__address__"] == f"{ctx.apiserver_vip}:6443"
    assert labels["__scheme__"] == "https"
    assert labels["__metrics_path__"] == f"/api/v1/nodes/{node}/proxy/{path}"
    assert labels["instance"] == node
    assert labels["node"] == node
    assert labels["kubernetes_io_hostname"] == node
