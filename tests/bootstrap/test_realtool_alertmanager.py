"""Alerts reach a person: the rendered Prometheus and Alertmanager configurations, run by the real programs.

The pinned Prometheus (tools/bin, `make components`) and Debian's prometheus-alertmanager (0.25) run the
live paths; the configuration the hosts
get is checked by amtool at the pinned release (the versions table's alertmanager row), built from
its Go module, since Debian's predates the Teams (msteamsv2) integration. Only addresses and paths are
rewritten (every host becomes a loopback port); routes, receivers, inhibition, flags and rules are the
rendered ones.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import http.server
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from modules.bootstrap import alerting, pki
from modules.bootstrap.alerting_config import AlertingConfig
from modules.bootstrap.context import BootstrapContext
from modules.bootstrap.monitoring import ISLAND_ALERT
from modules.bootstrap.roles import bundle, names
from modules.bootstrap.roles.prometheus import alert_rules, prometheus_config
from modules.bootstrap.roles.upkeep import CERT_DIRS
from modules.stackplan.config import parse_section

from .certs import issue
from .conftest import ROOT

HOST = ROOT / "modules/bootstrap/host"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, check=False)


# ---- receivers: every kind, as a stack file gives them ----

ALL_KINDS = {
    "receivers": {
        "pager": {"pagerduty": [{"routing_key_secret": "pagerduty-platform"}]},
        "teams": {"msteams": [{"webhook_url_secret": "teams-platform-alerts"}]},
        "mail": {
            "email": [
                {
                    "to": ["oncall@example.com"],
                    "sender": "alertmanager@example.com",
                    "smarthost": "smtp.example.com:587",
                    "username": "alertmanager",
                    "password_secret": "smtp-password",
                }
            ]
        },
        "tickets": {"webhook": [{"url": "https://tickets.example.com/hook", "bearer_token_secret": "tickets-token"}]},
    },
    "routes": {"critical": ["pager", "teams", "mail"], "warning": ["teams", "tickets"], "info": ["tickets"]},
}


def _with(ctx: BootstrapContext, raw: dict[str, Any]) -> BootstrapContext:
    return replace(ctx, alerting=alerting.from_config(parse_section(AlertingConfig, raw, "alerting")))


@pytest.fixture(scope="session")
def pinned_amtool(prod: BootstrapContext) -> str:
    """amtool at the release the hosts install, built once from github.com/prometheus/alertmanager."""
    version = prod.prometheus.alertmanager_version
    where = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "agk" / f"alertmanager-v{version}"
    amtool = where / "amtool"
    if not amtool.is_file():
        go = shutil.which("go") or shutil.which("go", path="/usr/local/go/bin")
        if go is None:
            pytest.fail(
                f"go is not installed: amtool {version} (the hosts' release) is built from its Go module "
                "github.com/prometheus/alertmanager; install Go 1.24 or newer",
                pytrace=False,
            )
        env = {**os.environ, "GOBIN": str(where), "GOFLAGS": "-mod=mod"}
        build = subprocess.run(
            [go, "install", f"github.com/prometheus/alertmanager/cmd/amtool@v{version}"],
            capture_output=True,
            text=True,
            env=env,
            timeout=1200,
            check=False,
        )
        assert build.returncode == 0, build.stderr[-3000:]
    return str(amtool)


@pytest.mark.realtool
@pytest.mark.parametrize("stack", ["shipped", "every-kind"])
def test_amtool_accepts_the_rendered_config(
    ctx: BootstrapContext, pinned_amtool: str, tmp_path: Path, stack: str
) -> None:
    """What the hosts get (the shipped stacks' receivers, and one of every kind) passes check-config of
    the release they run."""
    use = ctx if stack == "shipped" else _with(ctx, ALL_KINDS)
    node = bundle(use, "prometheus", names(use, "prometheus")[0])
    path = tmp_path / "alertmanager.yml"
    path.write_text(node.file("alertmanager/alertmanager.yml").content)
    run = _run(pinned_amtool, "check-config", str(path))
    assert run.returncode == 0, run.stdout + run.stderr
    kinds = len(use.alerting.receivers) + 1  # and the null receiver
    assert f"{kinds} receivers" in run.stdout
    assert "1 inhibit rules" in run.stdout


@pytest.mark.realtool
def test_debian_amtool_accepts_every_kind_it_knows(
    dev: BootstrapContext, require: Callable[[str], str], tmp_path: Path
) -> None:
    """Debian's Alertmanager (the live tests' program) reads the same rendering: every receiver kind but
    Teams, which it predates."""
    raw = json.loads(json.dumps(ALL_KINDS))
    del raw["receivers"]["teams"]
    raw["routes"] = {"critical": ["pager", "mail"], "warning": ["tickets"], "info": ["tickets"]}
    path = tmp_path / "alertmanager.yml"
    path.write_text(alerting.render_config(_with(dev, raw).alerting, dev.cluster))
    run = _run(require("amtool"), "check-config", str(path))
    assert run.returncode == 0, run.stdout + run.stderr
    # The check reads what it is given: a route to a receiver that does not exist fails it.
    doc = yaml.safe_load(path.read_text())
    doc["route"]["routes"][0]["receiver"] = "nobody"
    path.write_text(yaml.safe_dump(doc))
    assert _run(require("amtool"), "check-config", str(path)).returncode != 0


# ---- live: a webhook on loopback, Alertmanager (a clustered pair), Prometheus ----


@dataclass
class Hook:
    port: int
    posts: list[dict[str, Any]]

    def wait(self, what: Callable[[list[dict[str, Any]]], bool], seconds: float) -> bool:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if what(list(self.posts)):
                return True
            time.sleep(0.2)
        return what(list(self.posts))


@pytest.fixture
def hook() -> Iterator[Hook]:
    posts: list[dict[str, Any]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            posts.append(json.loads(body))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield Hook(int(server.server_address[1]), posts)
    server.shutdown()
    server.server_close()


def _hook_alerting(port: int) -> dict[str, Any]:
    return {
        "receivers": {"oncall": {"webhook": [{"url": f"http://127.0.0.1:{port}/alerts"}]}},
        "routes": {"critical": ["oncall"], "warning": ["oncall"]},
        "group_wait": "1s",
        "group_interval": "1m",
    }


def _flags(unit: str) -> list[str]:
    """The ExecStart flags of a rendered unit."""
    start = unit.split("ExecStart=", 1)[1].split("\nExecReload", 1)[0]
    return [part for part in start.replace("\\\n", " ").split()[1:]]


class Processes:
    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[str]] = []

    def start(self, args: list[str], log: Path) -> subprocess.Popen[str]:
        out = log.open("w")
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, text=True)
        self.procs.append(proc)
        return proc

    def stop(self) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


@pytest.fixture
def processes() -> Iterator[Processes]:
    running = Processes()
    yield running
    running.stop()


def _ready(url: str, proc: subprocess.Popen[str], log: Path, seconds: float = 60) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        assert proc.poll() is None, log.read_text()
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.3)
    raise AssertionError(f"{url} did not answer: {log.read_text()[-2000:]}")


def _alertmanagers(ctx: BootstrapContext, require: Callable[[str], str], root: Path, processes: Processes) -> list[int]:
    """Every Prometheus host's Alertmanager, as its rendered unit starts it, each host a loopback port pair."""
    program = require("prometheus-alertmanager")
    hosts = ctx.prometheus.hosts
    web = {str(h.ip): _free_port() for h in hosts}
    gossip = {str(h.ip): _free_port() for h in hosts}
    for h in hosts:
        node = bundle(ctx, "prometheus", h.name)
        home = root / h.name
        home.mkdir()
        config = home / "alertmanager.yml"
        config.write_text(node.file("alertmanager/alertmanager.yml").content)
        args = [program]
        for flag in _flags(node.file("systemd/alertmanager.service").content):
            key, _, value = flag.partition("=")
            if key == "--config.file":
                value = str(config)
            elif key == "--storage.path":
                value = str(home / "data")
            elif key == "--web.listen-address":
                value = f"127.0.0.1:{web[str(h.ip)]}"
            elif key in ("--cluster.listen-address", "--cluster.advertise-address", "--cluster.peer") and value:
                ip = value.rsplit(":", 1)[0]
                value = f"127.0.0.1:{gossip[ip]}"
            args.append(f"{key}={value}")
        proc = processes.start(args, home / "log")
        _ready(f"http://127.0.0.1:{web[str(h.ip)]}/-/ready", proc, home / "log")
    return [web[str(h.ip)] for h in hosts]


@contextlib.contextmanager
def _serve_file(path: Path) -> Iterator[int]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = path.read_bytes()
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


def _host_certificates(ctx: BootstrapContext, root: Path, expiring: str, days: int) -> Path:
    """The etcd members' real certificates (the cluster's PKI spec) under ``root``, ``expiring`` issued for
    ``days`` days only; keys beside them, as on a member."""
    spec = pki.pki_spec(ctx)
    short = replace(spec.cert(expiring), validity_hours=days * 24)
    spec = replace(spec, certs=tuple(short if c.name == expiring else c for c in spec.certs))
    member = ctx.etcd.members[0].name
    wanted = {pki.etcd_server_cert(member), pki.etcd_peer_cert(member), pki.ETCD_HEALTHCHECK}
    pems = issue(spec, only=wanted)
    etcd_pki = root / CERT_DIRS[1].lstrip("/")
    etcd_pki.mkdir(parents=True)
    (etcd_pki / "ca.crt").write_text(pems[f"cert:{pki.ETCD_CA}"])
    for name in wanted:
        (etcd_pki / f"{name}.crt").write_text(pems[f"cert:{name}"])
        (etcd_pki / f"{name}.key").write_text(pems[f"key:{name}"])
    return etcd_pki


@pytest.mark.realtool
def test_an_expiring_certificate_pages_through_prometheus_and_the_clustered_alertmanagers(
    prod: BootstrapContext,
    require: Callable[[str], str],
    tmp_path: Path,
    hook: Hook,
    processes: Processes,
) -> None:
    """The whole path with real programs: the host's certificate report (cert_expiry.py on real
    certificates, openssl) -> node-exporter's textfile, served on loopback -> Prometheus with the
    rendered config and rules -> every Alertmanager of prod-7500's hosts, clustered as rendered -> the webhook.
    One notification, though every Alertmanager received the alert: they gossip."""
    require("openssl")
    ctx = _with(prod, _hook_alerting(hook.port))
    member = ctx.etcd.members[0].name
    expiring = pki.etcd_server_cert(member)
    certs = _host_certificates(ctx, tmp_path / "host", expiring, days=20)
    textfile = tmp_path / "agk_certificates.prom"
    report = _run(sys.executable, str(HOST / "cert_expiry.py"), "--textfile", str(textfile), str(certs))
    assert report.returncode == 0, report.stderr
    assert "4 certificates reported" in report.stdout
    lint = subprocess.run(
        [require("promtool"), "check", "metrics"], input=textfile.read_text(), capture_output=True, text=True
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr

    am_ports = _alertmanagers(ctx, require, tmp_path, processes)
    assert len(am_ports) == len(ctx.prometheus.hosts) == 4
    with _serve_file(textfile) as port:
        rules = tmp_path / "rules"
        rules.mkdir()
        for name, text in alert_rules(ctx).items():
            (rules / name).write_text(text)
        config = yaml.safe_load(prometheus_config(ctx, ctx.prometheus.hosts[0]))
        config["global"]["scrape_interval"] = config["global"]["evaluation_interval"] = "1s"
        config["global"]["scrape_timeout"] = "1s"
        config["rule_files"] = [f"{rules}/*.yml"]
        (jobs,) = [j for j in config["scrape_configs"] if j["job_name"] == "control-plane-hosts"]
        jobs["static_configs"] = [{"targets": [f"127.0.0.1:{port}"]}]
        config["scrape_configs"] = [jobs]
        (ams,) = config["alerting"]["alertmanagers"]
        ams["static_configs"] = [{"targets": [f"127.0.0.1:{p}" for p in am_ports]}]
        (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
        web = _free_port()
        proc = processes.start(
            [
                require("prometheus"),
                f"--config.file={tmp_path / 'prometheus.yml'}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{web}",
            ],
            tmp_path / "prometheus.log",
        )
        _ready(f"http://127.0.0.1:{web}/-/ready", proc, tmp_path / "prometheus.log")

        def soon(posts: list[dict[str, Any]]) -> list[dict[str, Any]]:
            return [p for p in posts if p["groupLabels"].get("alertname") == "CertificateExpiresSoon"]

        assert hook.wait(lambda posts: bool(soon(posts)), 90), (tmp_path / "prometheus.log").read_text()[-3000:]
        # The n-th Alertmanager waits n peer timeouts (15 s each) and then finds the first one's notification
        # in the gossiped log: nothing more arrives for this group.
        time.sleep(15 * (len(am_ports) - 1) + 5)
        (post,) = soon(hook.posts)
        assert post["receiver"] == "oncall"
        assert post["status"] == "firing"
        (alert,) = post["alerts"]
        labels = alert["labels"]
        assert labels["path"].endswith(f"/{expiring}.crt")
        assert labels["subject"] == f"CN={member}"
        assert labels["severity"] == "warning"
        assert labels["cluster"] == ctx.cluster
        assert "replica" not in labels  # both Prometheus replicas' copies are one alert
        assert alert["annotations"]["runbook_url"] == "docs/oncall.md#certificateexpiressoon"
        assert re.search(r"expires in 19d 23h|expires in 20d", alert["annotations"]["summary"])
        # Only the 20-day certificate: the CA and the year-long leaves are quiet, and 20 days is not 7.
        everything = [a for p in hook.posts for a in p["alerts"]]
        assert {a["labels"]["alertname"] for a in everything} == {"CertificateExpiresSoon"}


def _post_alerts(port: int, alerts: list[dict[str, Any]]) -> None:
    body = json.dumps(alerts).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/api/v2/alerts", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=5) as resp:
        assert resp.status == 200


def _alert(name: str, island: str, severity: str, **extra: str) -> dict[str, Any]:
    start = dt.datetime.now(dt.UTC).isoformat()
    labels = {"alertname": name, "cluster": "dev", "island": island, "severity": severity, **extra}
    return {"labels": labels, "annotations": {"summary": name}, "startsAt": start}


@pytest.mark.realtool
def test_one_broken_island_is_one_page(
    dev: BootstrapContext, require: Callable[[str], str], tmp_path: Path, hook: Hook, processes: Processes
) -> None:
    """The rendered inhibition on a real Alertmanager: the island's alert holds back its nodes' alerts;
    the same alerts of another island still go out."""
    ctx = _with(dev, _hook_alerting(hook.port))
    (port,) = _alertmanagers(ctx, require, tmp_path, processes)
    _post_alerts(
        port,
        [
            _alert(ISLAND_ALERT, "h100-000", "critical"),
            _alert("GpuXidError", "h100-000", "critical", node="h100-000-1", gpu="3"),
            _alert("GpuXidError", "h100-000", "critical", node="h100-000-2", gpu="0"),
            _alert("NodeNotReady", "h100-000", "warning", node="h100-000-3"),
            _alert("NodePreflightFailed", "h100-000", "warning", node="h100-000-4"),
            _alert("GpuXidError", "a100-000", "critical", node="a100-000-1", gpu="5"),
        ],
    )

    def groups(posts: list[dict[str, Any]]) -> set[tuple[str, str]]:
        return {(p["groupLabels"]["alertname"], p["groupLabels"].get("island", "")) for p in posts}

    want = {(ISLAND_ALERT, "h100-000"), ("GpuXidError", "a100-000")}
    assert hook.wait(lambda posts: want <= groups(posts), 30), hook.posts
    time.sleep(3)  # anything the inhibition let through would have been sent with these
    assert groups(hook.posts) == want
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v2/alerts", timeout=5) as resp:
        seen = json.load(resp)
    held = {a["labels"].get("node") for a in seen if a["status"]["inhibitedBy"]}
    assert held == {"h100-000-1", "h100-000-2", "h100-000-3", "h100-000-4"}


@pytest.mark.realtool
def test_every_shipped_rule_routes_to_its_severitys_receivers(
    ctx: BootstrapContext, pinned_amtool: str, tmp_path: Path
) -> None:
    """amtool resolves each shipped alert, with the labels its rule gives it, through the rendered route
    tree: critical reaches the stack's critical receivers (the pager first), warning its warning ones."""
    node = bundle(ctx, "prometheus", names(ctx, "prometheus")[0])
    path = tmp_path / "alertmanager.yml"
    path.write_text(node.file("alertmanager/alertmanager.yml").content)
    routes = dict(ctx.alerting.routes)
    assert routes  # the shipped stacks route every severity they use
    for text in alert_rules(ctx).values():
        for group in yaml.safe_load(text)["groups"]:
            for rule in group["rules"]:
                if "alert" not in rule:
                    continue
                labels = [
                    f"alertname={rule['alert']}",
                    f"cluster={ctx.cluster}",
                    *(f"{k}={v}" for k, v in rule["labels"].items()),
                ]
                run = _run(pinned_amtool, "config", "routes", "test", f"--config.file={path}", *labels)
                assert run.returncode == 0, run.stdout + run.stderr
                assert run.stdout.strip().split(",") == list(routes[rule["labels"]["severity"]]), rule["alert"]
