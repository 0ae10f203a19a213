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
from modules.bootstrap.context import PROMETHEUS_PORT, BootstrapContext
from modules.bootstrap.roles import bundle, names
from modules.bootstrap.roles.prometheus import alert_rules, prometheus_config
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


@pytest.mark.realtool
def test_promtool_check_config(ctx: BootstrapContext, require: Callable[[str], str], tmp_path: Path) -> None:
    """The pinned promtool (built with Kubernetes service discovery, as the release is) checks the host's file
    whole, the SD blocks included. It checks that their client certificate and key exist but not the CA file,
    and any API server URL passes: so each block is checked here to be exactly the rendered shape, aimed at this
    cluster's API servers, with files the bundle writes."""
    rendered = _install(ctx, tmp_path)
    config = yaml.safe_load(rendered.read_text())
    blocks = [(j["job_name"], sd) for j in config["scrape_configs"] for sd in j.get("kubernetes_sd_configs", [])]
    assert blocks
    for job, sd in blocks:
        assert set(sd) == {"role", "api_server", "tls_config"}, job
        assert sd["api_server"] == ctx.apiserver_url, job
        for key in ("ca_file", "cert_file", "key_file"):
            assert Path(sd["tls_config"][key]).is_file() and Path(sd["tls_config"][key]).is_relative_to(tmp_path)
    run = _run(require("promtool"), "check", "config", str(rendered))
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
@pytest.mark.parametrize(
    ("change", "error"),
    [
        (lambda sd: sd.update(role="nodes"), "unknown Kubernetes SD role"),
        (lambda sd: sd.update(api_server="https://[::1"), "missing ']' in host"),
    ],
)
def test_promtool_checks_the_kubernetes_sd_blocks(
    dev: BootstrapContext,
    require: Callable[[str], str],
    tmp_path: Path,
    change: Callable[[dict[str, Any]], None],
    error: str,
) -> None:
    rendered = _install(dev, tmp_path)
    config = yaml.safe_load(rendered.read_text())
    sd = next(j for j in config["scrape_configs"] if "kubernetes_sd_configs" in j)["kubernetes_sd_configs"][0]
    change(sd)
    rendered.write_text(yaml.safe_dump(config, sort_keys=False))
    run = _run(require("promtool"), "check", "config", str(rendered))
    assert run.returncode != 0 and error in run.stdout + run.stderr, run.stdout + run.stderr


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


KUBELET_JOBS = {"kubernetes-nodes": "/metrics", "kubernetes-cadvisor": "/metrics/cadvisor"}


def _node_targets(count: int) -> list[dict[str, Any]]:
    """Targets shaped as Kubernetes node discovery gives them (address: InternalIP and the kubelet's port),
    each node with the labels a pool node carries."""
    out = []
    for i in range(count):
        name, ip = f"prod-gpu-h100-a{i:06d}", f"10.64.{8 + i // 250}.{4 + i % 250}"
        labels = {
            "__meta_kubernetes_node_name": name,
            "__meta_kubernetes_node_label_kubernetes_io_hostname": name,
            "__meta_kubernetes_node_label_gpu_example_com_ib_island": f"h100-a-{i // 99:02d}",
            "__meta_kubernetes_node_address_InternalIP": ip,
        }
        out.append({"targets": [f"{ip}:10250"], "labels": labels})
    return out


def _relabelled(
    config: dict[str, Any], job: str, targets: list[dict[str, Any]], promtool: str, root: Path, role: str = "node"
) -> dict[str, dict[str, str]]:
    """promtool's relabelling of ``targets`` (shaped as ``role`` discovery's) by ``job`` of ``config``: node
    (or pod) name -> labels, kept targets only."""
    (scrape,) = [j for j in config["scrape_configs"] if j["job_name"] == job]
    assert scrape["kubernetes_sd_configs"][0]["role"] == role
    scrape = {k: v for k, v in scrape.items() if k != "kubernetes_sd_configs"}
    (root / f"{role}s.json").write_text(json.dumps(targets))
    scrape["file_sd_configs"] = [{"files": [str(root / f"{role}s.json")]}]
    checked = root / f"{job}.yml"
    checked.write_text(yaml.safe_dump({**config, "scrape_configs": [scrape]}, sort_keys=False))
    run = _run(promtool, "check", "service-discovery", "--timeout=10s", str(checked), job)
    assert run.returncode == 0, run.stdout + run.stderr
    key = f"__meta_kubernetes_{role}_name"
    return {t["discoveredLabels"][key]: t["labels"] for t in json.loads(run.stdout) if t["labels"]}


def _pod_targets(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Targets shaped as pod discovery gives them: a node agent (a DaemonSet's dcgm-exporter pod) on each of
    ``nodes``, and one kube-state-metrics pod (a ReplicaSet's), both exporters (honor_labels)."""

    def pod(name: str, ip: str, node: str, kind: str, port: str) -> dict[str, Any]:
        labels = {
            "__meta_kubernetes_namespace": "kube-system",
            "__meta_kubernetes_pod_name": name,
            "__meta_kubernetes_pod_ip": ip,
            "__meta_kubernetes_pod_node_name": node,
            "__meta_kubernetes_pod_phase": "Running",
            "__meta_kubernetes_pod_controller_kind": kind,
            "__meta_kubernetes_pod_annotation_prometheus_io_scrape": "true",
            "__meta_kubernetes_pod_annotation_prometheus_io_honor_labels": "true",
            "__meta_kubernetes_pod_annotation_prometheus_io_port": port,
        }
        return {"targets": [f"{ip}:{port}"], "labels": labels}

    out = [pod("kube-state-metrics-7d9f-abcde", "10.65.0.2", "prod-system-000000", "ReplicaSet", "8080")]
    for i, n in enumerate(nodes):
        node = n["labels"]["__meta_kubernetes_node_name"]
        out.append(pod(f"dcgm-exporter-{i:05d}", f"10.65.{1 + i // 250}.{4 + i % 250}", node, "DaemonSet", "9400"))
    return out


@pytest.mark.realtool
def test_a_nodes_agents_are_scraped_by_the_hosts_that_scrape_its_kubelet(
    ctx: BootstrapContext, require: Callable[[str], str], tmp_path: Path
) -> None:
    """A DaemonSet's pod (dcgm-exporter: 7,500 targets at full size) belongs to its node's share, so each host
    scrapes the node agents of exactly the nodes whose kubelets it scrapes; kube-state-metrics (one target whose
    series describe every node) is scraped by every host. promtool runs the real relabelling."""
    promtool = require("promtool")
    nodes = _node_targets(300)
    pods = _pod_targets(nodes)
    agent_of = {p["labels"]["__meta_kubernetes_pod_name"]: p["labels"]["__meta_kubernetes_pod_node_name"] for p in pods}
    for host in ctx.prometheus.hosts:
        (tmp_path / host.name).mkdir()
        config = yaml.safe_load(prometheus_config(ctx, host))
        kubelets = set(_relabelled(config, "kubernetes-nodes", nodes, promtool, tmp_path / host.name))
        exporters = set(_relabelled(config, "kubernetes-exporters", pods, promtool, tmp_path / host.name, "pod"))
        assert "kube-state-metrics-7d9f-abcde" in exporters, host.name
        agents = {agent_of[p] for p in exporters if p.startswith("dcgm-exporter-")}
        assert agents == kubelets, (host.name, len(agents), len(kubelets), len(agents ^ kubelets))
        assert 0 < len(kubelets) < len(nodes) if ctx.prometheus.shards > 1 else len(kubelets) == len(nodes)


@pytest.mark.realtool
@pytest.mark.parametrize(("job", "path"), sorted(KUBELET_JOBS.items()))
def test_kubelets_are_scraped_directly_with_the_kubelet_serving_ca(
    ctx: BootstrapContext, require: Callable[[str], str], tmp_path: Path, job: str, path: str
) -> None:
    """Each kubelet at its node's address and port, over HTTPS verified against the kubelet serving CA with
    Prometheus' client certificate: no request through the API servers' node proxy. promtool runs the
    job's relabelling on targets shaped as node discovery's; every node label stays off the series."""
    config = yaml.safe_load(_install(ctx, tmp_path).read_text())
    (scrape,) = [j for j in config["scrape_configs"] if j["job_name"] == job]
    assert scrape["scheme"] == "https"
    assert scrape["tls_config"]["ca_file"].endswith(f"/pki/{pki.KUBELET_SERVING_CA}.crt")  # not the cluster CA
    assert "insecure_skip_verify" not in scrape["tls_config"]
    targets = _node_targets(40)
    kept = _relabelled(config, job, targets, require("promtool"), tmp_path)
    assert kept, "no kubelet kept"
    addresses = {t["labels"]["__meta_kubernetes_node_name"]: t["targets"][0] for t in targets}
    for name, labels in kept.items():
        # The node itself, not the API server's node proxy.
        assert labels["__address__"] == addresses[name], (labels["__address__"], labels["__metrics_path__"])
        assert labels["__scheme__"] == "https"
        assert labels["__metrics_path__"] == path
        assert labels["instance"] == labels["node"] == name
        # Only Prometheus' own labels, instance and node: no node label copied onto the series.
        assert {k for k in labels if not k.startswith("__")} == {"job", "instance", "node"}, labels


@pytest.mark.realtool
@pytest.mark.parametrize("job", sorted(KUBELET_JOBS))
def test_the_prometheus_hosts_split_the_kubelets_into_shares(
    ctx: BootstrapContext, require: Callable[[str], str], tmp_path: Path, job: str
) -> None:
    """Each host keeps its share of the nodes (promtool's hashmod): hosts with the same share keep the same
    nodes, the shares are disjoint and together hold every node once."""
    promtool = require("promtool")
    targets = _node_targets(400)
    shards, hosts = ctx.prometheus.shards, ctx.prometheus.hosts
    kept: dict[int, set[str]] = {}
    for i, host in enumerate(hosts):
        (tmp_path / host.name).mkdir()
        config = yaml.safe_load(prometheus_config(ctx, host))
        share = set(_relabelled(config, job, targets, promtool, tmp_path / host.name))
        assert kept.setdefault(i % shards, share) == share, f"{host.name} is not a replica of share {i % shards}"
    every = {t["labels"]["__meta_kubernetes_node_name"] for t in targets}
    assert set().union(*kept.values()) == every
    assert sum(len(s) for s in kept.values()) == len(every)  # disjoint
    for share in kept.values():
        # hashmod spreads 400 addresses evenly enough: each share within 25% of its fair part.
        assert abs(len(share) - len(every) / shards) <= 0.25 * len(every) / shards, {k: len(v) for k, v in kept.items()}
    assert len(kept) == shards


def test_prod_shards_its_kubelets_across_its_prometheus_hosts(prod: BootstrapContext) -> None:
    # prod-7500's four hosts: two shares of the nodes, each held by two (the stack file says why).
    assert (len(prod.prometheus.hosts), prod.prometheus.shards) == (4, 2)


def test_every_host_scrapes_every_prometheus_host(prod: BootstrapContext) -> None:
    """PrometheusPeerDown's series: a host that stops answering is ``up == 0`` on the others."""
    targets = [f"{h.ip}:{PROMETHEUS_PORT}" for h in prod.prometheus.hosts]
    for host in prod.prometheus.hosts:
        config = yaml.safe_load(prometheus_config(prod, host))
        (job,) = [j for j in config["scrape_configs"] if j["job_name"] == "prometheus"]
        assert job["static_configs"] == [{"targets": targets}]


KUBELET_EXPOSITION = """\
kubelet_running_pods 3
container_cpu_usage_seconds_total{container="trainer",namespace="research",pod="job-0"} 2
"""


def _serving_cert(ca_key: Any, ca_cert: Any, root: Path, name: str, *, signed: bool) -> tuple[Path, Path]:
    """A kubelet serving certificate for 127.0.0.1: from ``ca_cert`` (the kubelet serving CA: what the
    kubelet-serving signer issues, CN system:node:<name>, O system:nodes, the node's IP) or self-signed (a
    kubelet without serverTLSBootstrap)."""
    import datetime as dt
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
            x509.NameAttribute(NameOID.COMMON_NAME, f"system:node:{name}"),
        ]
    )
    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject if signed else subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + dt.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False)
        .sign(ca_key if signed else key, hashes.SHA256())
    )
    crt, pem = root / f"{name}.crt", root / f"{name}.key"
    crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pem.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
        )
    )
    return crt, pem


@pytest.fixture
def kubelets(prod: BootstrapContext, tmp_path: Path) -> Iterator[tuple[dict[str, int], str, dict[str, str], list[str]]]:
    """Loopback HTTPS 'kubelets' that, like a kubelet with webhook authentication, accept only client
    certificates from the cluster CA, and serve certificates of the kubelet serving CA: node -> port. One
    (``rogue``) serves a self-signed certificate, one (``cluster-ca``) a certificate of the cluster CA (what a
    kubelet-serving request signed by the cluster CA, or an API server's certificate, would be). Also the
    PKI's PEMs and the client subjects each kubelet saw."""
    import ssl

    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    pems = issue(pki.pki_spec(prod), only={pki.PROMETHEUS})

    def ca(name: str) -> tuple[Any, Any]:
        return (
            serialization.load_pem_private_key(pems[f"key:{name}"].encode(), None),
            x509.load_pem_x509_certificate(pems[f"cert:{name}"].encode()),
        )

    ca_file = tmp_path / "ca.crt"  # what the kubelets authenticate clients against
    ca_file.write_text(pems[f"cert:{pki.KUBERNETES_CA}"])
    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            peer = self.connection.getpeercert()  # type: ignore[attr-defined]
            seen.append(dict(x[0] for x in peer["subject"])["commonName"])
            body = KUBELET_EXPOSITION.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    servers, ports = [], {}
    names = [f"prod-gpu-h100-a{i:06d}" for i in range(16)] + ["rogue", "cluster-ca"]
    for name in names:
        signer = ca(pki.KUBERNETES_CA if name == "cluster-ca" else pki.KUBELET_SERVING_CA)
        crt, key = _serving_cert(*signer, tmp_path, name, signed=name != "rogue")
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(str(crt), str(key))
        tls.verify_mode = ssl.CERT_REQUIRED  # anonymous requests are refused (authentication.anonymous off)
        tls.load_verify_locations(str(ca_file))
        server.socket = tls.wrap_socket(server.socket, server_side=True)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        ports[name] = int(server.server_address[1])
    try:
        yield ports, pems, seen
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()


def _targets(base: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{base}/api/v1/targets?state=active", timeout=5) as resp:
        return list(json.load(resp)["data"]["activeTargets"])


@pytest.mark.realtool
def test_live_prometheus_scrapes_its_share_of_kubelets_over_verified_tls(
    prod: BootstrapContext,
    require: Callable[[str], str],
    tmp_path: Path,
    kubelets: tuple[dict[str, int], str, dict[str, str], list[str]],
) -> None:
    """prod-7500's rendered configs (only discovery, file paths and the interval changed) in a real Prometheus
    process per host: each scrapes its share of 18 loopback HTTPS kubelets with Prometheus' client
    certificate, verifies their serving certificates against the kubelet serving CA, as the rendered
    tls_config names it (the self-signed one and the one with a cluster CA certificate are down with a
    certificate error), and keeps no node label on the series."""
    prometheus = require("prometheus")
    ports, pems, seen = kubelets
    # The Prometheus host's PKI files, at their rendered paths under tmp_path.
    for secret in bundle(prod, "prometheus", prod.prometheus.hosts[0].name).secrets:
        placed = tmp_path / secret.path.lstrip("/")
        placed.parent.mkdir(parents=True, exist_ok=True)
        placed.write_text(pems[secret.secret])
    discovered = tmp_path / "nodes.json"
    discovered.write_text(
        json.dumps(
            [
                {
                    "targets": [f"127.0.0.1:{port}"],
                    "labels": {
                        "__meta_kubernetes_node_name": name,
                        "__meta_kubernetes_node_label_gpu_example_com_ib_island": "h100-a-00",
                    },
                }
                for name, port in ports.items()
            ]
        )
    )
    shares: dict[str, dict[str, dict[str, Any]]] = {}
    bases: dict[str, str] = {}
    procs = []
    try:
        for host in prod.prometheus.hosts:
            config = yaml.safe_load(prometheus_config(prod, host))
            config.pop("rule_files", None)
            config.pop("alerting", None)
            config["global"]["scrape_interval"] = "1s"
            config["global"]["scrape_timeout"] = "1s"
            jobs = [j for j in config["scrape_configs"] if j["job_name"] in KUBELET_JOBS]
            for job in jobs:
                del job["kubernetes_sd_configs"]
                job["file_sd_configs"] = [{"files": [str(discovered)]}]
                job["tls_config"] = {k: f"{tmp_path}{v}" for k, v in job["tls_config"].items()}
            config["scrape_configs"] = jobs
            path = tmp_path / f"{host.name}.yml"
            path.write_text(yaml.safe_dump(config))
            port = _free_port()
            procs.append(
                subprocess.Popen(
                    [
                        prometheus,
                        f"--config.file={path}",
                        f"--storage.tsdb.path={tmp_path / host.name}",
                        f"--web.listen-address=127.0.0.1:{port}",
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
            bases[host.name] = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 90
        for host, proc in zip(prod.prometheus.hosts, procs, strict=True):
            base = bases[host.name]
            while True:
                assert proc.poll() is None, f"{host.name}'s prometheus exited"
                try:
                    targets = _targets(base)
                except OSError:
                    targets = []
                if targets and all(t["lastScrape"] != "0001-01-01T00:00:00Z" for t in targets):
                    break
                assert time.monotonic() < deadline, targets
                time.sleep(0.5)
            shares[host.name] = {f"{t['labels']['job']}/{t['labels']['node']}": t for t in targets}
            query = urllib.parse.urlencode({"match[]": "container_cpu_usage_seconds_total"})
            with urllib.request.urlopen(f"{base}/api/v1/series?{query}", timeout=5) as resp:
                for series in json.load(resp)["data"]:
                    assert "gpu_example_com_ib_island" not in series and series["node"], series
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=30)
    every = {f"{job}/{name}" for job in KUBELET_JOBS for name in ports}
    # Host i holds share i mod shards: the replicas of a share hold the same targets, the shares are disjoint
    # and together every target, and each has some.
    held: dict[int, set[str]] = {}
    for i, h in enumerate(prod.prometheus.hosts):
        assert held.setdefault(i % prod.prometheus.shards, set(shares[h.name])) == set(shares[h.name]), h.name
    parts = list(held.values())
    assert len(parts) == prod.prometheus.shards and all(parts)
    assert set().union(*parts) == every and sum(map(len, parts)) == len(every), [sorted(p) for p in parts]
    for share in shares.values():
        for target, t in share.items():
            if target.endswith(("/rogue", "/cluster-ca")):
                assert t["health"] == "down" and "certificate" in t["lastError"], t
            else:
                assert t["health"] == "up", t
    # Every scrape that reached a kubelet came with Prometheus' own client certificate.
    assert seen and set(seen) == {pki.pki_spec(prod).cert(pki.PROMETHEUS).common_name}
