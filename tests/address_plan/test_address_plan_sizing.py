"""Sizing formulas: the reference table (learn.microsoft.com/azure/aks/concepts-network-ip-address-planning),
each plugin, and the limit warnings."""

from __future__ import annotations

import pytest

from modules.address_plan.limits import Limits
from modules.address_plan.subnet_sizes import SizingError, parse_surge, prefix_for, size, usable

# The reference table: (plugin, nodes, max pods) -> needed, prefix, usable, warning codes.
REFERENCE = [
    ("kubenet", 50, None, 51, 26, 59, []),
    ("kubenet", 4999, None, 5000, 19, 8187, ["kubenet-node-limit", "vmss-instance-limit"]),
    ("azure-cni", 50, 250, 12801, 18, 16379, []),
    ("azure-cni", 4999, 250, 1255000, 11, 2097147, ["vnet-private-ip-limit", "vmss-instance-limit"]),
]


@pytest.mark.parametrize(("plugin", "nodes", "pods", "needed", "prefix", "usable_ips", "codes"), REFERENCE)
def test_reference_table(
    plugin: str, nodes: int, pods: int | None, needed: int, prefix: int, usable_ips: int, codes: list[str]
) -> None:
    result = size(plugin, nodes, max_pods=pods, surge=1)
    assert (result.vnet_ips_needed, result.prefix_length, result.usable_ips) == (needed, prefix, usable_ips)
    assert [w.code for w in result.warnings] == codes


def test_five_thousand_plus_one_surge() -> None:
    result = size("azure-cni", 5000, max_pods=250, surge=1)
    assert (result.vnet_ips_needed, result.prefix_length, result.usable_ips) == (1_255_251, 11, 2_097_147)
    codes = {w.code for w in result.warnings}
    assert {"vnet-private-ip-limit", "lb-backend-pool-limit", "cluster-node-limit"} <= codes


def test_vnet_limit_message_names_the_figures() -> None:
    warning = next(w for w in size("azure-cni", 4999, max_pods=250).warnings if w.code == "vnet-private-ip-limit")
    assert warning.message == (
        "1,255,000 private IPs exceed the 65,536 one VNet holds (a hard Azure limit): lower max pods or split the "
        "workload across clusters (subnet-calc fit prints what fits)"
    )


@pytest.mark.parametrize(("needed", "prefix"), [(0, 29), (3, 29), (4, 28), (11, 28), (12, 27), (59, 26), (60, 25)])
def test_prefix_for_is_the_smallest_that_holds(needed: int, prefix: int) -> None:
    assert prefix_for(needed) == prefix
    assert usable(prefix) >= needed
    assert prefix == 29 or usable(prefix + 1) < needed


def test_prefix_for_none_beyond_slash_two() -> None:
    assert prefix_for(usable(2)) == 2
    assert prefix_for(usable(2) + 1) is None


@pytest.mark.parametrize(
    ("surge", "nodes", "count"),
    [(0, 10, 0), (3, 10, 3), ("3", 10, 3), ("10%", 15, 2), ("1%", 1875, 19), ("100%", 7, 7)],
)
def test_surge_count_or_percentage_rounded_up(surge: int | str, nodes: int, count: int) -> None:
    assert parse_surge(surge, nodes) == count


def test_surge_is_counted_per_pool() -> None:
    # Microsoft's formula: (nodes + surge) + (nodes + surge) * maxPods.
    assert size("azure-cni", 10, max_pods=30, surge="50%").vnet_ips_needed == 15 + 15 * 30


def test_kubenet_pod_cidr_is_one_slash_24_per_node() -> None:
    assert size("kubenet", 50).pod_cidr_prefix == 18  # 51 nodes -> 64 /24s
    assert size("kubenet", 255).pod_cidr_prefix == 16  # 256 nodes -> exactly a /16


def test_kubenet_node_limit_counts_surge_nodes() -> None:
    assert [w.code for w in size("kubenet", 399).warnings] == []
    assert [w.code for w in size("kubenet", 400).warnings] == ["kubenet-node-limit"]


def test_azure_cni_nic_ip_config_limit() -> None:
    assert size("azure-cni", 10, max_pods=250).ip_configs_per_nic == 251
    codes = [w.code for w in size("azure-cni", 10, max_pods=300).warnings]
    assert codes == ["max-pods-range", "nic-ip-config-limit"]


def test_max_pods_below_ten_is_a_warning() -> None:
    result = size("azure-cni", 10, max_pods=5)
    assert [(w.code, w.message) for w in result.warnings] == [
        ("max-pods-range", "max pods 5 is outside Azure's 10-250")
    ]


def test_pod_subnet_dynamic_batches_of_16() -> None:
    result = size("azure-cni-pod-subnet", 100, max_pods=30, surge=0)
    assert result.vnet_ips_needed == 100  # only nodes in the node subnet
    assert result.pod_subnet is not None
    assert result.pod_subnet.ips_needed == 100 * 32  # 30 pods -> two batches of 16
    assert (result.pod_subnet.prefix_length, result.pod_subnet.usable_ips) == (20, 4091)
    small = size("azure-cni-pod-subnet", 10, max_pods=10, surge=0)
    assert small.pod_subnet is not None and small.pod_subnet.ips_needed == 160  # at least one batch


def test_pod_subnet_static_blocks() -> None:
    result = size("azure-cni-pod-subnet", 10, max_pods=31, surge=0, static_pod_blocks=True)
    assert result.pod_subnet is not None and result.pod_subnet.ips_needed == 10 * 32  # ceil(32/16) /28 blocks
    assert [w.code for w in result.warnings] == []
    wasteful = size("azure-cni-pod-subnet", 10, max_pods=30, surge=0, static_pod_blocks=True)
    assert [w.message for w in wasteful.warnings] == [
        "max pods 30 leaves part of a /28 block unused per node: 31 uses the blocks fully"
    ]


def test_pod_subnet_dynamic_limits() -> None:
    codes = [w.code for w in size("azure-cni-pod-subnet", 3000, max_pods=110, surge=0).warnings]
    assert codes == ["pod-subnet-pod-limit", "pod-subnet-too-large", "vnet-private-ip-limit", "vmss-instance-limit"]


def test_overlay_takes_only_node_addresses() -> None:
    result = size("azure-cni-overlay", 1000, surge=0)
    assert (result.vnet_ips_needed, result.max_pods, result.pod_cidr_prefix) == (1000, 250, 14)
    assert result.warnings == ()
    rows = dict(Limits.default().rows)
    rows["overlay-max-pods"] = rows["overlay-max-pods"]._replace(value=100)
    lowered = Limits(rows)
    assert [w.code for w in size("azure-cni-overlay", 10, max_pods=200, limits=lowered).warnings] == [
        "overlay-max-pods"
    ]


def test_infiniband_scale_sets_are_one_placement_group() -> None:
    ib = size("azure-cni", 1875, max_pods=26, surge="1%", infiniband=True)
    warning = next(w for w in ib.warnings if w.code == "vmss-instance-limit")
    assert warning.message == (
        "1,894 nodes exceed the 100 VMs of an InfiniBand scale set (one placement group): the pool needs 19 scale sets"
    )
    assert "vmss-instance-limit" not in {w.code for w in size("azure-cni", 200, max_pods=26).warnings}


def test_subnet_too_large() -> None:
    result = size("azure-cni", 5_000_000, max_pods=250, surge=0)
    assert result.prefix_length is None and result.usable_ips is None
    assert "subnet-too-large" in {w.code for w in result.warnings}


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: size("calico", 3),
            "plugin 'calico' is unknown: use one of kubenet, azure-cni, azure-cni-pod-subnet, azure-cni-overlay",
        ),
        (lambda: size("kubenet", 0), "nodes: 0 is not a positive count: use 1 or more"),
        (lambda: size("kubenet", -4), "nodes: -4 is not a positive count: use 1 or more"),
        (lambda: size("kubenet", 3, max_pods=0), "max pods: 0 is not a positive count: use 10 to 250"),
        (lambda: size("kubenet", 3, surge="abc"), "surge: 'abc' is not a count or a percentage: use e.g. 1 or 10%"),
        (lambda: size("kubenet", 3, surge="150%"), "surge: 150% is over 100%: use a percentage from 0% to 100%"),
        (lambda: size("kubenet", 3, surge=-1), "surge: -1 is negative: use a count >= 0 or a percentage like 10%"),
        (lambda: prefix_for(-1), "-1 addresses is negative: ask for 0 or more"),
    ],
)
def test_bad_input(call: object, message: str) -> None:
    with pytest.raises(SizingError) as err:
        call()  # type: ignore[operator]
    assert str(err.value) == message
