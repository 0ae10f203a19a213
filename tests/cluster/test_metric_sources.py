"""Real-artefact tier: every series the Prometheus alert rules read has an exporter that is deployed
and scraped, judged from what `agk render` writes (rules, prometheus.yml, manifests)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from agk import render

STACKS = Path(__file__).resolve().parents[2] / "stacks"
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "group_left", "group_right"}
# Metric family prefix -> where it comes from: a workload of the add-ons stack (scraped through the
# pod job's prometheus.io annotations) or a scrape job of the Prometheus hosts.
IN_CLUSTER = {
    "kube_": ("Deployment", "kube-state-metrics"),
    "DCGM_": ("DaemonSet", "dcgm-exporter"),
    "iptables_exporter_": ("DaemonSet", "iptables-exporter"),
}
STATIC_JOBS = {
    "apiserver_": "kubernetes-apiservers",
    "etcd_": "etcd",
    # The etcd members' snapshot runs, through node-exporter's textfile collector on the fixed hosts.
    "agk_etcd_backup_": "control-plane-hosts",
    # Every fixed host's certificate report (cert_expiry.py), the same way; `up` of that job says who reports.
    "agk_certificate_": "control-plane-hosts",
    "up": "control-plane-hosts",
    # The kubelets' own certificate manager.
    "kubelet_": "kubernetes-nodes",
}


def metric_names(expr: str) -> set[str]:
    """Metric names a PromQL expression selects (names, not functions, labels or keywords)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)
    text = re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = re.findall(r"(?<![\w.])([A-Za-z_:][A-Za-z0-9_:]*)\b(?!\s*\()", text)
    return {n for n in names if n not in _KEYWORDS}


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("render")
    assert render.run(stack="dev", out=folder, stacks_dir=STACKS) == 0
    return folder


def _rules(out: Path) -> dict[str, set[str]]:
    alerts: dict[str, set[str]] = {}
    for path in sorted((out / "nodes" / "prometheus" / "rules").glob("*.yml")):
        for group in yaml.safe_load(path.read_text())["groups"]:
            for rule in group["rules"]:
                alerts[rule.get("alert") or rule["record"]] = metric_names(str(rule["expr"]))
    return alerts


def _manifests(out: Path) -> dict[tuple[str, str], dict[str, Any]]:
    objs = (yaml.safe_load(p.read_text()) for p in sorted((out / "manifests").glob("*.yaml")))
    return {(o["kind"], o["metadata"]["name"]): o for o in objs}


def _jobs(out: Path) -> dict[str, dict[str, Any]]:
    config = yaml.safe_load((out / "nodes" / "prometheus" / "prometheus.yml").read_text())
    return {job["job_name"]: job for job in config["scrape_configs"]}


def test_metric_names_of_an_expression() -> None:
    expr = 'histogram_quantile(0.99, sum by (job, le) (rate(etcd_x_bucket{job=~"a|b"}[5m]))) > 0.01 and up == 1'
    assert metric_names(expr) == {"etcd_x_bucket", "up"}
    assert metric_names('kube_node_spec_taint{key="a.b/preflight"} == 1') == {"kube_node_spec_taint"}


def _pod_job_keeps_annotated_pods(job: dict[str, Any]) -> bool:
    sd = [c["role"] for c in job.get("kubernetes_sd_configs", [])]
    keep = [
        r
        for r in job.get("relabel_configs", [])
        if r.get("action") == "keep"
        and r.get("source_labels") == ["__meta_kubernetes_pod_annotation_prometheus_io_scrape"]
    ]
    return sd == ["pod"] and any(re.fullmatch(r["regex"], "true") for r in keep)


def _dashboard_queries(out: Path) -> dict[str, set[str]]:
    """Every panel of the provisioned dashboards, as rules are: title -> metric names."""
    found: dict[str, set[str]] = {}
    for path in sorted((out / "nodes" / "prometheus" / "grafana" / "dashboards" / "agk").glob("*.json")):
        for panel in json.loads(path.read_text())["panels"]:
            for target in panel["targets"]:
                found[f"{path.stem}: {panel['title']}"] = metric_names(target["expr"].replace("$__rate_interval", "1m"))
    return found


def test_every_alert_and_panel_reads_series_some_deployed_exporter_produces(out: Path) -> None:
    recorded = _rules(out)
    panels = _dashboard_queries(out)
    assert len(panels) >= 20
    alerts = {**recorded, **panels}
    objs = _manifests(out)
    jobs = _jobs(out)
    pod_jobs = [name for name, job in jobs.items() if _pod_job_keeps_annotated_pods(job)]
    assert pod_jobs, "no Prometheus job scrapes pods by their prometheus.io/scrape annotation"
    assert {"NodeStuckInPreflight", "NodeNotReady"} <= set(alerts)
    for alert, names in alerts.items():
        assert names, alert
        for name in names:
            if name in recorded:  # a series the rules record (agk:node_island)
                continue
            prefix = next((p for p in [*IN_CLUSTER, *STATIC_JOBS] if name.startswith(p)), None)
            assert prefix is not None, f"{alert}: no known exporter produces {name}: deploy one and map it here"
            if prefix in STATIC_JOBS:
                assert STATIC_JOBS[prefix] in jobs, f"{alert}: {name} needs the scrape job {STATIC_JOBS[prefix]}"
                continue
            kind, workload = IN_CLUSTER[prefix]
            assert (kind, workload) in objs, f"{alert}: {name} comes from {workload}, which is not deployed"
            template = objs[kind, workload]["spec"]["template"]
            notes = template["metadata"]["annotations"]
            ports = [p["containerPort"] for c in template["spec"]["containers"] for p in c.get("ports", [])]
            assert notes["prometheus.io/scrape"] == "true" and int(notes["prometheus.io/port"]) in ports, workload


def test_node_alerts_come_from_kube_state_metrics(out: Path) -> None:
    alerts = _rules(out)
    # A node's island comes from kube_node_labels through the recorded agk:node_island.
    assert alerts["NodeStuckInPreflight"] == {"kube_node_spec_taint", "kube_node_labels", "agk:node_island"}
    assert alerts["NodeNotReady"] == {"kube_node_status_condition", "agk:node_island"}
    assert alerts["NodePreflightFailed"] == {"kube_node_labels", "agk:node_island"}
    deploy = _manifests(out)["Deployment", "kube-state-metrics"]
    args = deploy["spec"]["template"]["spec"]["containers"][0]["args"]
    # Both families are node metrics: the nodes collector must be on.
    assert "nodes" in next(a for a in args if a.startswith("--resources=")).split("=", 1)[1].split(",")
    assert deploy["spec"]["replicas"] == 1
    # kube_node_labels carries only the labels kube-state-metrics is told to export.
    allow = next(a for a in args if a.startswith("--metric-labels-allowlist="))
    assert allow == (
        "--metric-labels-allowlist=nodes=[gpu.example.com/ib-island,gpu.example.com/pool,"
        "gpu.example.com/team,gpu.example.com/preflight]"
    )
