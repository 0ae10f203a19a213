"""The network planner and the limits table: layout, counted limits, overrides."""

from __future__ import annotations

from ipaddress import IPv4Network
from pathlib import Path

import pytest

from modules.address_plan.host_addresses import host
from modules.address_plan.layout import Block, allocate, naive_in_order
from modules.address_plan.limits import DEFAULTS, Limits
from modules.address_plan.plan import SubnetRequest, VNetSpec, plan_network, plan_vnet
from modules.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def spoke(name: str, space: str, *needs: int, limits: Limits | None = None) -> VNetSpec:
    return VNetSpec(
        name,
        "spoke",
        (space,),
        tuple(SubnetRequest(f"s{i}", "gpu-pool", n) for i, n in enumerate(needs)),
        limits or Limits.default(),
        peers=("hub",),
    )


def hub(*spokes: str, limits: Limits | None = None) -> VNetSpec:
    return VNetSpec(
        "hub",
        "hub",
        ("10.0.0.0/22",),
        (SubnetRequest("jump", "jump", 3), SubnetRequest("AzureBastionSubnet", "bastion", 3, longest_prefix=26)),
        limits or Limits.default(),
        peers=spokes,
    )


def test_every_limit_row_has_a_value_and_a_source() -> None:
    names = [row.name for row in DEFAULTS]
    assert len(names) == len(set(names))
    for row in DEFAULTS:
        assert row.source.startswith("https://learn.microsoft.com/") and row.description
        assert row.value == row.default and not row.overridden
        if row.adjustable:
            # Quotas are the subscription's own: unknown until the stack declares what it was granted.
            assert row.name.startswith("vcpus-") and row.value is None
        else:
            assert isinstance(row.value, int) and row.value > 0


def test_hard_limits_are_the_ones_microsoft_documents_as_not_adjustable() -> None:
    adjustable = {row.name for row in DEFAULTS if row.adjustable}
    hard = {row.name for row in DEFAULTS if not row.adjustable}
    assert {"vnet-private-ips", "peered-group-private-ips", "nic-private-ips", "vmss-instances-spg"} <= hard
    assert "vcpus-regional" in adjustable and "vcpus-standardNDSH100v5Family" in adjustable
    # Every VM size this toolkit knows has its family's quota row.
    from modules.vm_sizing.skus import SKUS

    assert {f"vcpus-{s.family.replace(' ', '')}" for s in SKUS.values()} <= adjustable


def test_domain_limits_are_in_the_table() -> None:
    limits = Limits.default()
    expected = {
        "vnet-private-ips": 65_536,
        "peered-group-private-ips": 128_000,
        "nic-private-ips": 256,
        "subnets-per-vnet": 3_000,
        "vnet-peerings": 500,
        "route-table-routes": 400,
        "lb-backend-pool": 5_000,
        "vmss-instances-spg": 100,
        "vmss-instances-large": 1_000,
        "vmss-instances-large-custom-image": 600,
        "aks-nodes-per-cluster": 5_000,
        "aks-nodes-per-pool": 1_000,
        "aks-pools": 100,
        "kubenet-nodes": 400,
        "max-pods-min": 10,
        "max-pods-max": 250,
        "pod-subnet-dynamic-pods": 65_000,
        "pod-subnet-dynamic-min-prefix": 16,
        "subnet-min-prefix": 2,
        "subnet-max-prefix": 29,
    }
    assert {name: limits[name] for name in expected} == expected


def test_override_keeps_default_and_reason() -> None:
    limits = Limits.default().with_overrides({"vcpus-standardNDSH100v5Family": (730_000, "ticket 42")})
    (row,) = limits.overridden()
    assert (row.name, row.value, row.default, row.reason, row.overridden) == (
        "vcpus-standardNDSH100v5Family",
        730_000,
        None,
        "ticket 42",
        True,
    )
    assert Limits.default().overridden() == []


QUOTAS = ", ".join(row.name for row in DEFAULTS if row.adjustable)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"vnet-ips": (5, "x")},
            f"azure-gpu-k8s:limits.vnet-ips: unknown limit: declare one of the adjustable quotas ({QUOTAS})",
        ),
        (
            {"vcpus-regional": (0, "x")},
            "azure-gpu-k8s:limits.vcpus-regional: 0 is not positive: use the quota granted, a count > 0",
        ),
        (
            {"vnet-private-ips": (262_144, "ticket")},
            "azure-gpu-k8s:limits.vnet-private-ips: private IP addresses per VNet (65,536) is a hard Azure limit "
            "that no support request raises: remove the override and lower the pools' pod_ips (subnet-calc fit "
            "prints the most that fit) or split the workload across clusters",
        ),
        (
            {"peered-group-private-ips": (300_000, "ticket")},
            "azure-gpu-k8s:limits.peered-group-private-ips: private IP addresses in a VNet plus its directly peered "
            "VNets (128,000) is a hard Azure limit that no support request raises: "
            "remove the override and lower pod_ips in the hub's spokes or move a cluster to another hub (its own "
            "peered group)",
        ),
        (
            {"vmss-instances-spg": (150, "ticket")},
            "azure-gpu-k8s:limits.vmss-instances-spg: VMs per scale set with singlePlacementGroup=true (InfiniBand) "
            "(100) is a hard Azure limit that no support request raises: remove the override and split the pool "
            "into more scale sets",
        ),
    ],
)
def test_bad_overrides(overrides: dict[str, tuple[int, str]], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        Limits.default().with_overrides(overrides)
    assert str(err.value) == message


def test_limits_in_force_ignore_declared_hard_values() -> None:
    declared = {"vnet-private-ips": 262_144, "vcpus-regional": 1_000}
    in_force = Limits.in_force(declared)
    assert (in_force["vnet-private-ips"], in_force["vcpus-regional"]) == (65_536, 1_000)
    assert Limits.hard_overrides(declared) == ["vnet-private-ips"]
    assert Limits.hard_overrides({"vnet-private-ips": 65_536}) == []


def test_bastion_subnet_is_at_least_a_slash_26() -> None:
    plan, findings = plan_vnet(hub())
    assert plan.subnets["AzureBastionSubnet"].cidr == IPv4Network("10.0.0.0/26")
    assert plan.subnets["jump"].cidr == IPv4Network("10.0.0.64/29")
    assert findings == []


def test_utilization_and_group_counts() -> None:
    network = plan_network([hub("a", "b"), spoke("a", "10.16.0.0/20", 100, 20), spoke("b", "10.32.0.0/24", 7)])
    a = network.vnets["a"]
    assert (a.ips_needed, a.size, a.allocated) == (120, 4096, 128 + 32)
    assert a.utilization == pytest.approx(120 / 4096)
    assert network.group_ips("hub") == 6 + 120 + 7
    assert network.group_ips("a") == 6 + 120


def test_vnet_and_peered_group_limits_are_counted() -> None:
    specs = [hub("a", "b"), spoke("a", "10.64.0.0/14", 60_000, 10_000), spoke("b", "10.128.0.0/14", 60_000)]
    codes = sorted((f.vnet, f.code) for f in plan_network(specs).warnings)
    # a + hub = 70,006 stays under the group limit; the hub's group (hub, a, b) does not.
    assert codes == [("a", "vnet-private-ip-limit"), ("hub", "peered-group-ip-limit")]
    assert [f.message for f in plan_network(specs).warnings] == [
        "a: 70,000 private IPs exceed the 65,536 one VNet holds (a hard Azure limit): lower the pools' pod_ips "
        "(subnet-calc fit prints the most that fit) or split the workload across clusters",
        "hub and its peers (a, b) use 130,006 private IPs, over the 128,000 a peered group holds (a hard Azure "
        "limit): lower pod_ips in the hub's spokes or move a cluster to another hub (its own peered group)",
    ]
    # No message ever advises raising a hard limit.
    assert not any("raise the quota" in f.message for f in plan_network(specs).warnings)
    within = [hub("a", "b"), spoke("a", "10.64.0.0/14", 60_000, 5_000), spoke("b", "10.128.0.0/14", 60_000)]
    assert [(f.vnet, f.code) for f in plan_network(within).warnings] == []


def _tight(**values: int) -> Limits:
    rows = dict(Limits.default().rows)
    for name, value in values.items():
        rows[name.replace("_", "-")] = rows[name.replace("_", "-")]._replace(value=value)
    return Limits(rows)


def test_subnet_and_peering_counts_against_the_limits_in_force() -> None:
    tight = _tight(subnets_per_vnet=2, vnet_peerings=1)
    _, findings = plan_vnet(spoke("a", "10.16.0.0/20", 3, 3, 3, limits=tight))
    assert [f.message for f in findings] == ["a: 3 subnets exceed 2"]
    _, findings = plan_vnet(hub("a", "b", limits=tight))
    assert [f.message for f in findings] == ["hub: 2 peerings exceed 1"]


def test_adding_a_pool_moves_nothing_that_is_pinned() -> None:
    before, _ = plan_vnet(spoke("a", "10.16.0.0/20", 500, 60, 10))
    pins = {name: str(s.cidr) for name, s in before.subnets.items()}
    grown = VNetSpec(
        "a",
        "spoke",
        ("10.16.0.0/20",),
        (*spoke("a", "10.16.0.0/20", 500, 60, 10).subnets, SubnetRequest("new", "gpu-pool", 2000)),
        Limits.default(),
        pinned=pins,
    )
    after, _ = plan_vnet(grown)
    assert {name: str(after.subnets[name].cidr) for name in pins} == pins
    assert after.subnets["new"].cidr == IPv4Network("10.16.8.0/21")


def test_allocate_spans_several_address_prefixes() -> None:
    spaces = [IPv4Network("10.64.0.0/14"), IPv4Network("10.68.0.0/20")]
    placed = allocate(spaces, [Block(f"g{i}", 16) for i in range(4)] + [Block("sys", 23), Block("cp", 28)])
    assert placed["sys"] == IPv4Network("10.68.0.0/23") and placed["cp"] == IPv4Network("10.68.2.0/28")


def test_naive_in_order_wastes_alignment() -> None:
    # /28 then /16: cidrsubnets puts the /16 at the next /16 boundary, leaving 65,520 addresses unused.
    assert naive_in_order(IPv4Network("10.0.0.0/8"), [28, 16]) == [
        IPv4Network("10.0.0.0/28"),
        IPv4Network("10.1.0.0/16"),
    ]


def test_host_addresses_skip_azure_reserved() -> None:
    assert str(host(IPv4Network("10.0.0.0/29"), 0)) == "10.0.0.4"
    assert str(host(IPv4Network("10.0.0.0/29"), 2)) == "10.0.0.6"
    with pytest.raises(ValueError, match=r"does not fit in 10\.0\.0\.0/29"):
        host(IPv4Network("10.0.0.0/29"), 3)


def test_bench_planning_input_plans(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT))
    from bench.address_plan import hub_and_spokes

    network = plan_network(hub_and_spokes(50, 10))
    assert len(network.vnets) == 51
    assert all(len(v.subnets) == 10 for name, v in network.vnets.items() if name != "hub")


def test_make_bench_reports_a_failing_area_in_its_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT))
    from bench.__main__ import collect, table

    pkg = tmp_path / "fakebench"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "__main__.py").write_text("raise SystemExit('never imported')\n")
    (pkg / "good.py").write_text("def rows():\n    return [('speed', '1.0 s')]\n")
    (pkg / "bad.py").write_text("def rows():\n    raise RuntimeError('no figures')\n")
    (pkg / "helper.py").write_text("X = 1\n")  # no rows(): not an area
    monkeypatch.syspath_prepend(str(tmp_path))
    rows = collect(pkg, "fakebench")
    assert rows == [("bad", "error", "RuntimeError: no figures (bad.py:2)"), ("good", "speed", "1.0 s")]
    assert table(rows).splitlines() == [
        "area  metric  value",
        "----  ------  -----",
        "bad   error   RuntimeError: no figures (bad.py:2)",
        "good  speed   1.0 s",
    ]
