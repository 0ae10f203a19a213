"""The sizing formulas (modules/vm_sizing/formulas.py) at the shipped stacks' counts, and what uses them.

The table's expected values are worked out by hand from each formula's published rule (the arithmetic is in the
comments), not read back from the code; ``test_the_table_is_the_shipped_stacks`` ties its inputs to the stacks.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from modules.cluster.manifests import render_manifests
from modules.stackplan.config import load_stack, parse_config, read_stack_file, stack_file
from modules.stackplan.prepare import ClusterPrep, prepare_cluster
from modules.vm_sizing import formulas as f

STACKS = Path(__file__).resolve().parents[2] / "stacks"

# The counts each shipped stack is sized for: peak nodes (every pool at its maximum plus surge) rounded up to
# the sizing step; API servers; the GPU pools' kubelet maxPods; Prometheus shards, hosts, retention and scrape.
DEV = {
    "peak": 14,
    "step": 50,
    "apiservers": 3,
    "pods_per_node": 38,
    "shards": 1,
    "hosts": 1,
    "retention": 15,
    "scrape": 30,
    "query_samples": 15_000_000,
}
PROD = {
    "peak": 7588,
    "step": 8000,
    "apiservers": 5,
    "pods_per_node": 15,
    "shards": 2,
    "hosts": 4,
    "retention": 15,
    "scrape": 30,
    "query_samples": 50_000_000,
}


def series(c: dict[str, int]) -> int:
    """One Prometheus host's series for the stack's counts."""
    return f.prometheus_series(c["step"], f.cluster_pods(c["step"], c["pods_per_node"]), c["shards"])


TABLE: list[tuple[str, Any, Any, Any]] = [
    # (what, call, dev, prod-7500)
    ("step", lambda c: f.sizing_step(c["peak"]), 50, 8000),
    # GCE table: <=100 nodes 4 vCPUs; above 3,000 the project's 64.
    ("apiserver vCPUs", lambda c: f.apiserver_min_vcpus(c["step"]), 4, 64),
    # 70e9 B x 8,000 / 7,500 = 74.67e9 B = 69.54 GiB -> 70; 50 nodes: 0.43 GiB -> 1.
    ("apiserver heap floor GiB", lambda c: f.apiserver_min_memory_gib(c["step"]), 1, 70),
    # etcd guide: <=50 nodes 2 vCPU 8 GB 3,600 IOPS; past 3,000 the extrapolated row.
    ("etcd tier", lambda c: f.etcd_tier(c["step"]), (2, 8, 3600), (32, 128, 20000)),
    # kube-up's tiers: <=500 nodes the defaults; above 3,000 nodes 3,000/1,000.
    ("inflight", lambda c: f.apiserver_inflight(c["step"]), (400, 200), (3000, 1000)),
    ("client QPS", lambda c: f.client_qps(c["step"]), 20, 200),
    ("client burst", lambda c: f.client_burst(f.client_qps(c["step"])), 40, 400),
    # 50 <= 500 -> all; ceil(100 x 500 / 8,000) = ceil(6.25) = 7.
    ("score percent", lambda c: f.scheduler_score_percent(c["step"]), 100, 7),
    # hashmod splits 8,000 nodes in 2 like a fair coin: 4,000 + 3 x sqrt(8,000 x 1/2 x 1/2) = 4,134.2 -> 4,135.
    ("shard nodes", lambda c: f.shard_nodes(c["step"], c["shards"]), 50, 4135),
    # Its share's nodes x 3,000, and kube-state-metrics' 32 a Node and 37 a Pod (Pods: maxPods a node): dev
    # 150,000 + 1,600 + 1,900 x 37 = 221,900; prod 4,135 x 3,000 + 8,000 x 32 + 120,000 x 37 = 12,405,000 + 256,000
    # + 4,440,000 = 17,101,000.
    ("series", series, 221_900, 17_101_000),
    # 17,101,000 x 8,221 B = 140.59e9 B, + 20 x 50e6 x 16 B x 2 = 32e9 B: 172.59e9 B = 160.7 GiB, + 4 GiB for the
    # host = 164.7; dev 221,900 series: 1.82e9 + 20 x 15e6 x 32 = 9.6e9 B: 11.42e9 B = 10.6 GiB + 4 = 14.6, below
    # the 16 GiB floor.
    (
        "prometheus memory GiB",
        lambda c: round(f.prometheus_memory_gib(series(c), c["query_samples"]), 1),
        16.0,
        164.7,
    ),
    # 17,101,000 / 30 s = 570,033 samples/s x 15 d x 86,400 s x 2 B x 1.3 = 1.921e12 B = 1,788.9 GiB -> 1,789;
    # dev: 7,397 samples/s -> 23.2 GiB, below the 128 GiB floor.
    ("prometheus disk GiB", lambda c: f.prometheus_disk_gib(series(c), c["retention"], c["scrape"]), 128, 1789),
    # 50 / 1,000 -> 1, at least 2; 8,000 / 1,000 = 8 (prod-7500 has more system nodes than that).
    ("dns replicas", lambda c: f.dns_replicas(c["step"], 10), 2, 8),
    # Series: dev 50 x 32 + 1,900 x 37 = 71,900; prod 8,000 x 32 + 120,000 x 37 = 4,696,000. Memory 250 MiB + 1.25
    # x series x 911 B, rounded up to 64 MiB: dev 250 + 78.1 = 328.1 -> 384; prod 250 + 5,099.8 = 5,349.8 -> 5,376.
    # CPU 100m + 1.25 x hosts x series x 853 ns / 10 s: dev 1 x 0.0613 s / 10 = 6.13m x 1.25 = 7.67 -> 8: 108m; prod
    # 4 x 4.0057 s / 10 = 1,602.3m x 1.25 = 2,002.8 -> 2,003: 2,103m; limits twice that.
    (
        "kube-state-metrics",
        lambda c: f.kube_state_metrics(c["step"], f.cluster_pods(c["step"], c["pods_per_node"]), c["hosts"]),
        f.Resources(108, 216, 384),
        f.Resources(2103, 4206, 5376),
    ),
    # 512 MiB + 1.25 x (nodes x 80 KiB + pods x 15 KiB), rounded up to 64 MiB: dev 1.25 x (50 x 80 + 1,900 x 15)
    # = 40,625 KiB -> 551.7 -> 576; prod 1.25 x (8,000 x 80 + 120,000 x 15) = 3,050,000 KiB = 2,978.5 MiB -> 3,490.5
    # -> 3,520.
    (
        "gang scheduler",
        lambda c: f.gang_scheduler(c["step"], f.cluster_pods(c["step"], c["pods_per_node"])),
        f.Resources(500, 2000, 576),
        f.Resources(500, 2000, 3520),
    ),
    # 128 MiB + 1.25 x pods x 15 KiB, rounded up to 64 MiB: dev 128 + 34.8 = 162.8 -> 192; prod 128 + 2,197.3
    # = 2,325.3 -> 2,368. 0.1 core requested, 1 core limit.
    (
        "policy agent",
        lambda c: f.policy_agent(f.cluster_pods(c["step"], c["pods_per_node"])),
        f.Resources(100, 1000, 192),
        f.Resources(100, 1000, 2368),
    ),
    # 512 MiB + 1.25 x nodes x 80 KiB: dev 516.9 -> 576; prod 512 + 781.3 = 1,293.3 -> 1,344.
    (
        "cloud-controller-manager",
        lambda c: f.cloud_controller_manager(c["step"]),
        f.Resources(100, 2000, 576),
        f.Resources(100, 2000, 1344),
    ),
]


@pytest.mark.parametrize(("what", "call", "dev", "prod"), TABLE, ids=[row[0] for row in TABLE])
def test_each_formula_at_the_shipped_stacks(what: str, call: Any, dev: Any, prod: Any) -> None:
    assert (call(DEV), call(PROD)) == (dev, prod)


@pytest.fixture(scope="module")
def preps() -> dict[str, ClusterPrep]:
    return {s: prepare_cluster(s, load_stack(STACKS, s), STACKS) for s in ("dev", "prod-7500")}


@pytest.mark.parametrize(("stack", "counts"), [("dev", DEV), ("prod-7500", PROD)])
def test_the_table_is_the_shipped_stacks(preps: dict[str, ClusterPrep], stack: str, counts: dict[str, int]) -> None:
    prep = preps[stack]
    assert prep.pools.peak_nodes == counts["peak"] and prep.pools.sizing_nodes == counts["step"]
    assert len(prep.bootstrap.control_plane.apiservers) == counts["apiservers"]
    assert max(p.kubelet_max_pods for p in prep.pools.gpu) == counts["pods_per_node"]
    assert prep.bootstrap.prometheus.retention_days == counts["retention"]
    assert f.duration_seconds(prep.bootstrap.prometheus.scrape_interval) == counts["scrape"]
    assert prep.bootstrap.prometheus.query_max_samples == counts["query_samples"]
    assert prep.bootstrap.prometheus.shards == counts["shards"]
    assert len(prep.bootstrap.prometheus.hosts) == counts["hosts"]


def _millis(cpu: str) -> int:
    return int(cpu[:-1]) if cpu.endswith("m") else 1000 * int(cpu)


@pytest.mark.parametrize(("stack", "counts", "column"), [("dev", DEV, 2), ("prod-7500", PROD, 3)])
def test_the_stacks_are_built_with_the_table(
    preps: dict[str, ClusterPrep], stack: str, counts: dict[str, int], column: int
) -> None:
    """What the hosts and the add-ons are built with is the formula's figure, through every caller."""
    row = {r[0]: r[column] for r in TABLE}
    prep = preps[stack]
    cp = prep.bootstrap.control_plane
    assert (cp.max_requests_inflight, cp.max_mutating_requests_inflight) == row["inflight"]
    assert (cp.client_qps, cp.client_burst) == (row["client QPS"], row["client burst"])
    assert prep.bootstrap.prometheus.data_disk_gib == row["prometheus disk GiB"]
    # The smallest size with the memory (and 4 or 8 vCPUs): dev's floor of 16 GiB; prod-7500's hosts each hold
    # half the nodes, 162.5 GiB: an E32ds_v5 (256 GiB; the E20ds_v5's 160 GiB is short).
    wanted = {"dev": "Standard_D4ds_v5", "prod-7500": "Standard_E32ds_v5"}[stack]
    assert prep.sizes["prometheus"].recommended == wanted
    objs = {(o["kind"], o["metadata"]["name"]): o for o in render_manifests(prep.addons)}

    def limits(kind: str, name: str, container: str) -> dict[str, str]:
        spec = objs[(kind, name)]["spec"]["template"]["spec"]
        (c,) = [c for c in spec["containers"] if c["name"] == container]
        return dict(c["resources"]["limits"])

    for (kind, name, container), size in {
        ("Deployment", "kube-state-metrics", "kube-state-metrics"): row["kube-state-metrics"],
        ("Deployment", "scheduler-plugins-scheduler", "kube-scheduler"): row["gang scheduler"],
        ("Deployment", "cloud-controller-manager", "cloud-controller-manager"): row["cloud-controller-manager"],
    }.items():
        got = limits(kind, name, container)
        assert (_millis(got["cpu"]), got["memory"]) == (size.cpu_limit_millis, f"{size.memory_mib}Mi")
    # The plan lists every one of them (the program's `sizes` output, agk plan's "Sizes for" section).
    shown = {r["formula"]: r["value"] for r in prep.chosen_sizes()}
    assert shown["prometheus_disk_gib"] == row["prometheus disk GiB"]
    assert shown["gang_scheduler"] == f"{row['gang scheduler'].cpu_millis}m / {row['gang scheduler'].memory_mib}Mi"
    assert shown["scheduler_score_percent"] == row["score percent"]


def test_the_prometheus_disk_follows_the_scrape_interval(tmp_path: Path) -> None:
    """Halving the scrape interval doubles the samples ingested and so the disk (the storage docs' formula);
    before, the disk was worked out at a fixed 30 s whatever the stack scraped at."""
    doc = yaml.safe_load(stack_file(STACKS, "prod-7500").read_text())
    doc["config"]["azure-gpu-k8s:cluster"].setdefault("prometheus", {})["scrape_interval"] = "15s"
    path = tmp_path / "Pulumi.prod-7500.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    fast = prepare_cluster("prod-7500", parse_config(read_stack_file(path)), STACKS)
    base = prepare_cluster("prod-7500", load_stack(STACKS, "prod-7500"), STACKS)
    # 1,140,067 samples/s x 15 d x 86,400 s x 2 B x 1.3 = 3.842e12 B = 3,577.7 GiB -> 3,578 (twice 1,788.9, rounded up).
    assert (base.bootstrap.prometheus.data_disk_gib, fast.bootstrap.prometheus.data_disk_gib) == (1789, 3578)


@pytest.mark.parametrize("text", ["0s", "30", "1d", "s", "-5m"])
def test_a_duration_it_cannot_read_is_one_line(text: str) -> None:
    with pytest.raises(ValueError, match=r"^'.*' is not a duration: use e.g. '30s', '5m' or '1h'$"):
        f.duration_seconds(text)


def _dev_with(tmp_path: Path, h100_nodes: int) -> ClusterPrep:
    doc = yaml.safe_load(stack_file(STACKS, "dev").read_text())
    doc["config"]["azure-gpu-k8s:cluster"]["gpu_pools"]["h100"]["nodes"] = h100_nodes
    path = tmp_path / f"Pulumi.dev-{h100_nodes}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return prepare_cluster("dev", parse_config(read_stack_file(path)), STACKS)


def test_sizes_change_only_when_the_step_does(preps: dict[str, ClusterPrep], tmp_path: Path) -> None:
    """Two more h100 nodes stay inside dev's step of 50: no size moves, so no add-on rolls and no control-plane
    file changes. Before, kube-state-metrics followed the peak node count itself and grew 4 MiB."""
    base = preps["dev"]
    grown = _dev_with(tmp_path, 6)
    assert (base.pools.peak_nodes, grown.pools.peak_nodes, grown.pools.sizing_nodes) == (14, 16, 50)
    assert grown.chosen_sizes() == base.chosen_sizes()
    assert (grown.addons.state_metrics, grown.addons.gang, grown.addons.cloud_provider) == (
        base.addons.state_metrics,
        base.addons.gang,
        base.addons.cloud_provider,
    )
    # 60 h100 nodes cross into the step of 100: the sizes that follow the count move together.
    crossed = _dev_with(tmp_path, 60)
    assert (crossed.pools.peak_nodes, crossed.pools.sizing_nodes) == (14 - 5 + 61, 100)
    # 250 MiB + 1.25 x (100 x 32 + 100 x 38 x 37) series x 911 B = 250 + 156.1, rounded up to 64 MiB.
    assert crossed.addons.state_metrics.memory_mib == 448
    assert crossed.chosen_sizes() != base.chosen_sizes()


def test_a_size_that_did_not_move_is_the_same_text(preps: dict[str, ClusterPrep]) -> None:
    """Quantities are written as the manifests wrote them before ("2" cores, not "2000m"), so a size the
    formulas leave where it was changes no object and rolls no pod: the paged controllers, measured under
    their 128 Mi at prod-7500, keep exactly their resources; the gang scheduler keeps its CPU."""
    objs = {(o["kind"], o["metadata"]["name"]): o for o in render_manifests(preps["prod-7500"].addons)}
    paged = {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"cpu": "500m", "memory": "128Mi"}}
    jobs = [o for (kind, _), o in objs.items() if kind == "CronJob"]
    containers = {
        c["name"]: c["resources"]
        for j in jobs
        for c in j["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    }
    assert (containers["remediate"], containers["retest"]) == (paged, paged)
    (gang,) = objs[("Deployment", "scheduler-plugins-scheduler")]["spec"]["template"]["spec"]["containers"]
    assert (gang["resources"]["requests"]["cpu"], gang["resources"]["limits"]["cpu"]) == ("500m", "2")


def test_an_addons_spec_exported_before_the_formulas_still_reads(preps: dict[str, ClusterPrep]) -> None:
    """The add-ons stack reads the cluster stack's last `addons_spec` output: one exported before these sizes
    existed lacks their keys, and reads as the fixed sizes it was deployed with (512 Mi, KSM's CPU limit twice
    its request), so the add-ons stack is not stuck between the two updates."""
    from modules.cluster.spec import AddonsSpec

    raw = json.loads(json.dumps(preps["prod-7500"].addons.to_json()))
    for key in ("cpu_millis", "cpu_limit_millis", "memory_mib"):
        del raw["gang"][key]
    for key in ("controller_cpu_millis", "controller_cpu_limit_millis", "controller_memory_mib"):
        del raw["cloud_provider"][key]
    del raw["state_metrics"]["cpu_limit_millis"]
    raw["state_metrics"] |= {"cpu_millis": 7688, "memory_mib": 15316}  # what main exported for prod-7500
    old = AddonsSpec.from_json(json.dumps(raw))
    objs = {(o["kind"], o["metadata"]["name"]): o for o in render_manifests(old)}

    def resources(name: str) -> dict[str, Any]:
        (c, *_) = objs[("Deployment", name)]["spec"]["template"]["spec"]["containers"]
        return dict(c["resources"])

    assert resources("scheduler-plugins-scheduler")["limits"] == {"cpu": "2", "memory": "512Mi"}
    assert resources("cloud-controller-manager")["limits"] == {"cpu": "2", "memory": "512Mi"}
    assert resources("kube-state-metrics")["limits"] == {"cpu": "15376m", "memory": "15316Mi"}
