"""Preflight's InfiniBand step (modules/cluster/scripts/ib_check.py) on the kernel's sysfs layout (its
stand-in, tests/cluster/ib_sysfs.py: no InfiniBand hardware here). The step run as the preflight pod's init
container, against the real API server, is tests/controlplane (run_preflight)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from modules.cluster.objects.preflight import ib_expectations
from modules.cluster.scripts.ib_check import gbps, ports, problems, wait_for
from modules.cluster.spec import AddonsSpec

from .ib_sysfs import write


def test_a_healthy_nd_h100_node_passes_and_its_ethernet_nic_is_not_counted(tmp_path: Path) -> None:
    found = ports(write(tmp_path, 8, 400))
    assert [p.name for p in found] == [f"mlx5_ib{i}/1" for i in range(8)]
    assert problems(found, 8, 400) == []


FAULTS: list[tuple[str, int, dict[str, Any], list[str]]] = [
    ("a missing HCA", 7, {}, ["7 InfiniBand ports, expected 8 (an HCA is missing or its driver did not load)"]),
    (
        "a port down",
        8,
        {"down": (3,)},
        ["mlx5_ib3/1: state 1: DOWN, expected 4: ACTIVE", "mlx5_ib3/1: phys_state 3: Disabled, expected 5: LinkUp"],
    ),
    ("a port trained at HDR", 8, {"rate": {5: 200}}, ["mlx5_ib5/1: rate 200 Gb/sec (4X HDR), expected 400 Gb/sec"]),
]


@pytest.mark.parametrize(("case", "count", "faults", "wanted"), FAULTS, ids=[f[0] for f in FAULTS])
def test_each_fault_is_one_line_naming_the_port(
    tmp_path: Path, case: str, count: int, faults: dict[str, Any], wanted: list[str]
) -> None:
    assert problems(ports(write(tmp_path, count, 400, **faults)), 8, 400) == wanted


def test_no_infiniband_at_all_is_one_line(tmp_path: Path) -> None:
    assert problems(ports(tmp_path / "absent"), 8, 200) == [
        "0 InfiniBand ports, expected 8 (an HCA is missing or its driver did not load)"
    ]


def test_rates_read_as_the_kernel_writes_them() -> None:
    assert [gbps(r) for r in ("400 Gb/sec (4X NDR)", "2.5 Gb/sec (1X)", "", "N/A")] == [400, 2.5, 0, 0]


def test_each_infiniband_pool_expects_its_sizes_ports(dev_spec: AddonsSpec, prod_spec: AddonsSpec) -> None:
    # dev: ND96asr_v4 (8 x HDR 200) and ND96isr_H100_v5 (8 x NDR 400); the system pool is no GPU pool.
    assert ib_expectations(dev_spec) == {"a100": [8, 200], "h100": [8, 400]}
    prod = ib_expectations(prod_spec)
    assert prod and all(v == [8, 400] for v in prod.values())


def test_a_flap_counter_is_printed_not_judged(tmp_path: Path) -> None:
    """link_downed is the HCA's 8-bit counter, kept across reboots: one old flap must not fail every preflight."""
    found = ports(write(tmp_path, 8, 400, flaps={0: 255}))
    assert found[0].link_downed == 255 and problems(found, 8, 400) == []


def test_ports_still_coming_up_are_waited_for(tmp_path: Path) -> None:
    root = write(tmp_path, 8, 400, coming_up=(2, 5))
    slept: list[float] = []

    def sleep(seconds: float) -> None:  # the subnet manager activates them meanwhile
        slept.append(seconds)
        write(tmp_path, 8, 400)

    found = wait_for(root, sleep=sleep)
    assert slept == [10] and problems(found, 8, 400) == []


def test_a_port_that_never_comes_up_fails_after_the_wait(tmp_path: Path) -> None:
    found = wait_for(write(tmp_path, 8, 400, coming_up=(4,)), settle_s=0, sleep=lambda _: None)
    assert problems(found, 8, 400) == ["mlx5_ib4/1: state 2: INIT, expected 4: ACTIVE"]
