"""Pure tier: the spec, its JSON round trip and every bad-config line."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from modules.cluster.config import AddonsConfig
from modules.cluster.spec import AddonsSpec, PoolFacts, addons_spec
from modules.errors import ConfigError
from modules.stackplan.config import load_stack

POOLS = {
    "a100": PoolFacts("a100", "Standard_ND96asr_v4", 8, 4, "research"),
    "h100": PoolFacts("h100", "Standard_ND96isr_H100_v5", 8, 4, None),
}
CLUSTER: dict[str, Any] = {
    "dns_service_ip": "172.20.0.10",
    "system_nodes": 3,
    "peak_nodes": 3 + 1 + 8 + 2,
    "pods_per_node": 16,
    "scrapers": 1,
}


@pytest.mark.parametrize("stack", ["dev", "prod-7500"])
def test_shipped_stacks_need_no_addons_section(
    stack: str, make_spec: Callable[..., AddonsSpec], stacks_dir: Path
) -> None:
    spec = make_spec(stack)
    assert load_stack(stacks_dir, stack).addons == AddonsConfig()
    assert spec.preflight.level == 2 and spec.gang.enabled
    assert all(b.replicas == 0 for b in spec.balloons)


def test_teams_derive_from_pools_with_quota_of_their_gpus(dev_spec: AddonsSpec) -> None:
    assert [(t.name, t.gpu_quota, t.pools) for t in dev_spec.teams] == [("research", 32, ("a100",))]


def test_json_round_trip(dev_spec: AddonsSpec, spec_136: AddonsSpec) -> None:
    import json

    for spec in (dev_spec, spec_136):
        assert AddonsSpec.from_json(json.loads(json.dumps(spec.to_json()))) == spec
        assert AddonsSpec.from_json(json.dumps(spec.to_json())) == spec


def test_from_json_of_something_else_is_one_line() -> None:
    with pytest.raises(ConfigError, match=r"^addons_spec output is not an add-ons spec \('system_nodes'\): run"):
        AddonsSpec.from_json({"cluster_name": "x", "kubernetes_version": "1.31", "label_domain": "a.b"})


BAD: list[tuple[str, dict[str, Any], dict[str, Any], str]] = [
    (
        "unknown team in a pool",
        {"teams": {"reserch": {}}},
        {},
        "azure-gpu-k8s:cluster.gpu_pools.a100.team: team 'research' is not declared in addons.teams "
        "(declared: reserch): fix the pool's team or add it under addons.teams",
    ),
    (
        "balloons exceed pool",
        {"balloons": {"h100": 9}},
        {},
        "azure-gpu-k8s:addons.balloons.h100: 9 replicas exceed pool h100's 4 nodes: lower replicas",
    ),
    (
        "balloons for an unknown pool",
        {"balloons": {"h200": 1}},
        {},
        "azure-gpu-k8s:addons.balloons.h200: no GPU pool named 'h200' (pools: a100, h100): fix the name",
    ),
    (
        "negative balloons",
        {"balloons": {"h100": -1}},
        {},
        "azure-gpu-k8s:addons.balloons.h100: -1 replicas is negative: use 0 to 4",
    ),
    (
        "preflight level 9",
        {"preflight": {"level": 9}},
        {},
        "azure-gpu-k8s:addons.preflight.level: 9 is not a DCGM diagnostic level: use 1 to 4 (dcgmi diag -r)",
    ),
    (
        "preflight level 0",
        {"preflight": {"level": 0}},
        {},
        "azure-gpu-k8s:addons.preflight.level: 0 is not a DCGM diagnostic level: use 1 to 4 (dcgmi diag -r)",
    ),
    (
        "team without pool or quota",
        {"teams": {"research": {}, "vision": {}}},
        {},
        "azure-gpu-k8s:addons.teams.vision: owns no GPU pool and has no gpu_quota: set team on a gpu_pool "
        "or set gpu_quota",
    ),
    (
        "team named after a system namespace",
        {},
        {"a100": PoolFacts("a100", "Standard_ND96asr_v4", 8, 4, "kube-system")},
        "azure-gpu-k8s:cluster.gpu_pools.a100.team: team 'kube-system' would take over a system namespace: "
        "pick another team name",
    ),
    (
        "team not a namespace name",
        {},
        {"a100": PoolFacts("a100", "Standard_ND96asr_v4", 8, 4, "Research_1")},
        "azure-gpu-k8s:cluster.gpu_pools.a100.team: team 'Research_1' is not a valid namespace name: "
        "use lowercase letters, digits and '-'",
    ),
    (
        "pool without GPUs",
        {},
        {"cpu": PoolFacts("cpu", "Standard_D8ds_v5", 0, 4, None)},
        "azure-gpu-k8s:cluster.gpu_pools.cpu.vm_size: Standard_D8ds_v5 has no GPUs: use a GPU size or move "
        "the pool to system_pool",
    ),
    (
        "duplicate XID",
        {"health": {"fatal_xids": [79, 48, 79]}},
        {},
        "azure-gpu-k8s:addons.health.fatal_xids: 79 is listed twice: remove the duplicate",
    ),
    (
        "empty XID list",
        {"health": {"fatal_xids": []}},
        {},
        "azure-gpu-k8s:addons.health.fatal_xids: empty: list the XIDs that fail a node (Azure's list: github.com/Azure/azurehpc-health-checks)",
    ),
    (
        "bad scheduler image tag",
        {"gang": {"image_tag": "latest"}},
        {},
        "azure-gpu-k8s:addons.gang.image_tag: 'latest' is not a release tag: use e.g. v0.34.7",
    ),
    (
        "bad scheduler name",
        {"gang": {"scheduler_name": "Gang_Scheduler"}},
        {},
        "azure-gpu-k8s:addons.gang.scheduler_name: 'Gang_Scheduler' is not a valid scheduler name: use "
        "lowercase letters, digits and '-'",
    ),
    (
        "roll interval that does not divide the hour",
        {"roll": {"every_minutes": 7}},
        {},
        "azure-gpu-k8s:addons.roll.every_minutes: 7 does not divide the hour: use 1, 2, 3, 4, 5, 6, 10, 12, 15, 20, "
        "30 or 60",
    ),
    (
        "roll node timeout inside the preflight timeout",
        {"roll": {"node_timeout_minutes": 60}},
        {},
        "azure-gpu-k8s:addons.roll.node_timeout_minutes: 60 is not more than addons.preflight.timeout_minutes (60): "
        "a rolled node needs its reimage, boot and diagnostics inside it; raise it to at least 90",
    ),
]


@pytest.mark.parametrize(("case", "addons", "pools", "message"), BAD, ids=[b[0] for b in BAD])
def test_bad_config_is_one_clear_line(
    case: str, addons: dict[str, Any], pools: dict[str, PoolFacts], message: str
) -> None:
    with pytest.raises(ConfigError) as err:
        addons_spec("dev", "1.35", "gpu.example.com", pools or POOLS, AddonsConfig.model_validate(addons), **CLUSTER)
    assert str(err.value) == message
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("version", "domain", "addons", "message"),
    [
        (
            "1.31",
            "gpu.example.com",
            {},
            "azure-gpu-k8s:cluster.kubernetes_version: kubernetes_version '1.31' is not supported: "
            "use 1.35, 1.36 or 1.37",
        ),
        (
            "1.35",
            "gpu_example",
            {},
            "azure-gpu-k8s:cluster.label_domain: 'gpu_example' is not a DNS domain: use one your organisation "
            "owns, e.g. gpu.example.com",
        ),
        (
            "1.37",
            "gpu.example.com",
            {},
            "azure-gpu-k8s:addons.gang.enabled: Kubernetes 1.37 has no scheduler-plugins release within the "
            "version skew (the newest, v0.35.7, is for 1.35; a kube-scheduler may be at most one minor older than "
            "the API server): use cluster.kubernetes_version 1.35 or 1.36, or set addons.gang.enabled: false",
        ),
        (
            "1.37",
            "gpu.example.com",
            {"gang": {"image_tag": "v0.34.7"}},
            "azure-gpu-k8s:addons.gang.image_tag: v0.34.7 is built for Kubernetes 1.34, outside the version skew "
            "of 1.37 (a kube-scheduler may be one minor older than the API server, never newer): use a v0.37.x or "
            "v0.36.x release, or set addons.gang.enabled: false",
        ),
        (
            "1.35",
            "gpu.example.com",
            {"gang": {"image_tag": "v0.36.1"}},
            "azure-gpu-k8s:addons.gang.image_tag: v0.36.1 is built for Kubernetes 1.36, outside the version skew "
            "of 1.35 (a kube-scheduler may be one minor older than the API server, never newer): use a v0.35.x or "
            "v0.34.x release, or set addons.gang.enabled: false",
        ),
    ],
)
def test_cluster_level_errors(version: str, domain: str, addons: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        addons_spec("dev", version, domain, POOLS, AddonsConfig.model_validate(addons), **CLUSTER)
    assert str(err.value) == message
    assert "\n" not in str(err.value)


def test_unknown_addons_key_is_refused_by_the_model() -> None:
    with pytest.raises(ValueError, match="extra"):
        AddonsConfig.model_validate({"balloon": {"h100": 1}})


def test_gang_scheduler_follows_the_skew_rule() -> None:
    from modules.bootstrap import versions

    spec = addons_spec("d", "1.35", "a.b", POOLS, AddonsConfig(), **CLUSTER)
    assert spec.gang.scheduler_image == "registry.k8s.io/scheduler-plugins/kube-scheduler:v0.35.7"
    # Every row's gang scheduler is its own minor or one older, never newer (version-skew policy).
    for minor, row in versions.TABLE.items():
        if row.gang_scheduler is not None:
            assert versions.gang_within_skew(row.gang_scheduler, minor), minor
    # A minor without one still deploys with the gang scheduler off.
    off = addons_spec("d", "1.37", "a.b", POOLS, AddonsConfig(gang={"enabled": False}), **CLUSTER)
    assert not off.gang.enabled


def test_from_json_survives_the_engine(dev_spec: AddonsSpec) -> None:
    """Stack outputs carry numbers as doubles and drop None-valued keys."""

    def engine(value: Any) -> Any:
        if isinstance(value, bool):
            return value
        if isinstance(value, int):
            return float(value)
        if isinstance(value, dict):
            return {k: engine(v) for k, v in value.items() if v is not None}
        if isinstance(value, list | tuple):
            return [engine(v) for v in value]
        return value

    assert AddonsSpec.from_json(engine(dev_spec.to_json())) == dev_spec


@pytest.mark.parametrize(
    ("system_nodes", "gpu_nodes", "replicas", "required"),
    [
        (1, 8, 2, False),  # one system node: two replicas still, kept apart only where possible
        (2, 8, 2, True),
        (3, 8, 2, True),
        (10, 7500, 8, True),  # one per ~1,000 nodes
        (4, 7500, 4, True),  # never more than the system pool keeps apart
    ],
)
def test_dns_replicas(system_nodes: int, gpu_nodes: int, replicas: int, required: bool) -> None:
    pools = {"h100": PoolFacts("h100", "Standard_ND96isr_H100_v5", 8, gpu_nodes, None)}
    spec = addons_spec(
        "d",
        "1.35",
        "a.b",
        pools,
        AddonsConfig(),
        dns_service_ip="10.0.0.10",
        system_nodes=system_nodes,
        peak_nodes=system_nodes + gpu_nodes,
        pods_per_node=16,
        scrapers=1,
    )
    assert (spec.dns.replicas, spec.dns.spread_required) == (replicas, required)


@pytest.mark.parametrize(
    ("version", "coredns", "ksm"),
    [
        ("1.35", "v1.13.1", "v2.19.1"),
        ("1.36", "v1.14.2", "v2.20.0"),
        ("1.37", "v1.14.6", "v2.20.0"),
    ],
)
def test_dns_and_state_metrics_images_follow_the_version(version: str, coredns: str, ksm: str) -> None:
    from modules.bootstrap import versions

    spec = addons_spec("d", version, "a.b", POOLS, AddonsConfig(gang={"enabled": version != "1.37"}), **CLUSTER)
    # Tag for people, digest for the runtime, where a public source pairs them (the versions table).
    row = versions.TABLE[version]
    assert spec.dns.image.split("@")[0] == f"registry.k8s.io/coredns/coredns:{coredns}"
    assert spec.state_metrics.image.split("@")[0] == f"registry.k8s.io/kube-state-metrics/kube-state-metrics:{ksm}"
    assert spec.state_metrics.image.endswith(f"@{row.digests['kube-state-metrics']}")


def test_the_versions_table_is_the_only_one() -> None:
    # One table: config, bootstrap and add-ons accept exactly its minors, and every row is complete.
    from modules.bootstrap import versions
    from modules.stackplan.config import ClusterConfig

    assert versions.SUPPORTED == ("1.35", "1.36", "1.37")
    assert ClusterConfig.model_fields["kubernetes_version"].default == versions.DEFAULT_MINOR == "1.36"
    assert versions.TABLE[versions.DEFAULT_MINOR].gang_scheduler is not None  # addons.gang is on by default
    for minor, row in versions.TABLE.items():
        assert row.minor == minor and row.patch >= 0 and row.end_of_life > "2026-12-01"
        assert row.pause.startswith("3.") and row.coredns.startswith("v") and row.kube_state_metrics.startswith("v")
        for v in ("1.34", "1.38"):
            with pytest.raises(ConfigError):
                addons_spec("d", v, "a.b", POOLS, AddonsConfig(gang={"enabled": False}), **CLUSTER)


@pytest.mark.parametrize(
    ("cluster", "message"),
    [
        (
            {"dns_service_ip": "172.20.0.10", "system_nodes": 0, "peak_nodes": 8, "pods_per_node": 16, "scrapers": 1},
            "azure-gpu-k8s:cluster.system_pool.nodes: 0: cluster services need at least 1 system node",
        ),
        (
            {"dns_service_ip": "172.20.0", "system_nodes": 3, "peak_nodes": 11, "pods_per_node": 16, "scrapers": 1},
            "azure-gpu-k8s:cluster.service_cidr: DNS service address '172.20.0' is not an IPv4 address: use an IPv4 "
            "service_cidr",
        ),
    ],
)
def test_cluster_facts_are_checked(cluster: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        addons_spec("dev", "1.35", "gpu.example.com", POOLS, AddonsConfig(), **cluster)
    assert str(err.value) == message


def test_cluster_stack_inputs_default_to_listed_placeholders() -> None:
    from modules.cluster.spec import CloudSpec, NetworkSpec

    spec = addons_spec("dev", "1.35", "gpu.example.com", POOLS, AddonsConfig(), **CLUSTER)
    assert set(spec.placeholders) == {f"cloud.{f}" for f in CloudSpec.__dataclass_fields__} | {
        "network.apiserver_cidrs",
        "network.monitoring_cidrs",
    }
    wired = addons_spec(
        "dev",
        "1.35",
        "gpu.example.com",
        POOLS,
        AddonsConfig(),
        **CLUSTER,
        cloud=CloudSpec(*(f"v{i}" for i in range(len(CloudSpec.__dataclass_fields__)))),
        network=NetworkSpec(("10.16.0.0/26",), 6443, ("10.16.0.64/27",)),
    )
    assert wired.placeholders == ()


@pytest.mark.parametrize(
    ("network", "message"),
    [
        (
            {"apiserver_cidrs": ("10.16.0.0/33",)},
            "azure-gpu-k8s:addons_spec.network.apiserver_cidrs: '10.16.0.0/33' is not an IPv4 network: "
            "pass e.g. 10.16.0.0/24",
        ),
        (
            {"monitoring_cidrs": ()},
            "azure-gpu-k8s:addons_spec.network.monitoring_cidrs: empty: pass the subnet CIDRs from the address plan",
        ),
        (
            {"apiserver_port": 0},
            "azure-gpu-k8s:addons_spec.network.apiserver_port: 0 is not a TCP port: use 1-65535",
        ),
    ],
)
def test_network_inputs_are_checked(network: dict[str, Any], message: str) -> None:
    from modules.cluster.spec import NetworkSpec

    with pytest.raises(ConfigError) as err:
        addons_spec("dev", "1.35", "gpu.example.com", POOLS, AddonsConfig(), **CLUSTER, network=NetworkSpec(**network))
    assert str(err.value) == message
