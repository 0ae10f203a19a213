"""Preflight's InfiniBand step (an init container of the gpu-preflight pod): the node's InfiniBand ports are all
there, up, at their rate, and have not flapped, read from the kernel's sysfs as ``ibstat`` reads it.

Per port, ``/sys/class/infiniband/<device>/ports/<n>/`` (Linux drivers/infiniband/core/sysfs.c):
``link_layer`` ``InfiniBand`` (an Ethernet port is not the fabric), ``state`` ``4: ACTIVE`` (the subnet manager
brought it up), ``phys_state`` ``5: LinkUp``, ``rate`` ``400 Gb/sec (4X NDR)``. Azure's own node health checks
for ND sizes check the same: every HCA present and Active at the size's rate (github.com/Azure/
azurehpc-health-checks, conf/nd96isr_h100_v5.conf: ``check_hw_ib 400 mlx5_ibN:1``). A port still coming up
(``INIT``/``ARMED`` waiting for the subnet manager, ``Polling``) is waited for, up to SETTLE_S.

Link flaps are not judged here: ``counters/link_downed`` is the HCA's 8-bit hardware counter, kept across
reboots and stuck at 255, so one flap months ago would fail every preflight; Azure reads flaps from the kernel
log over hours (check_ib_link_flapping). The counter is printed for a person.

What a node of each pool must show comes from the plan: ``EXPECT`` is ``{pool: [ports, Gb/s]}`` for the pools
whose size has InfiniBand (modules/vm_sizing/skus.py); a node of another pool passes this step. The node's
pool is its ``<domain>/pool`` label, read from its Node (the pod's own service account may get it).

Writes ``pass`` or ``fail`` to RESULT_FILE (the reporter container reads it beside the DCGM verdict) and
prints why, and exits 0 either way: a verdict is reported, not retried. Only a Node it cannot read (the API
server away) exits non-zero, and the kubelet runs the init container again.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

if __package__:  # imported as part of the toolkit (tests, type checking)
    from modules.cluster.scripts.kube import Api
else:  # run from the ConfigMap mount, next to kube.py
    from kube import Api  # type: ignore[import-not-found,no-redef]

SYSFS = "/sys/class/infiniband"
ACTIVE = "4: ACTIVE"
LINK_UP = "5: LinkUp"


@dataclass(frozen=True)
class Port:
    name: str
    """``<device>/<port>``, as ibstat names it."""
    state: str
    phys_state: str
    rate: str
    link_downed: int | None
    """The HCA's LinkDownedCounter (printed, not judged); None where there is none (``N/A (no PMA)``)."""


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def ports(root: Path) -> list[Port]:
    """The InfiniBand ports under ``root`` (Ethernet ports of the same devices are left out)."""
    found = []
    for device in sorted(root.iterdir()) if root.is_dir() else []:
        for port in sorted((device / "ports").iterdir()) if (device / "ports").is_dir() else []:
            if _read(port / "link_layer") != "InfiniBand":
                continue
            downed = _read(port / "counters" / "link_downed")
            found.append(
                Port(
                    f"{device.name}/{port.name}",
                    _read(port / "state"),
                    _read(port / "phys_state"),
                    _read(port / "rate"),
                    int(downed) if downed.isdigit() else None,
                )
            )
    return found


def gbps(rate: str) -> float:
    """``400 Gb/sec (4X NDR)`` -> 400.0; ``2.5 Gb/sec (1X)`` -> 2.5; anything else 0."""
    try:
        return float(rate.split(" ", 1)[0])
    except ValueError:
        return 0.0


SETTLE_S = 300.0
"""How long ports still coming up are waited for before their state is judged."""
COMING_UP = ("2: INIT", "3: ARMED")
TRAINING = ("2: Polling", "4: PortConfigurationTraining")


def settled(found: list[Port]) -> bool:
    return not any(p.state in COMING_UP or p.phys_state in TRAINING for p in found)


def wait_for(root: Path, *, settle_s: float = SETTLE_S, sleep: Callable[[float], None] = time.sleep) -> list[Port]:
    """The ports once none is still coming up, or as they are after ``settle_s``."""
    deadline = time.monotonic() + settle_s
    found = ports(root)
    while not settled(found) and time.monotonic() < deadline:
        sleep(10)
        found = ports(root)
    return found


def problems(found: list[Port], links: int, rate_gbps: int) -> list[str]:
    """What is wrong with ``found`` for a node that should have ``links`` ports at ``rate_gbps``; empty: healthy."""
    out = []
    if len(found) < links:
        out.append(f"{len(found)} InfiniBand ports, expected {links} (an HCA is missing or its driver did not load)")
    for p in found:
        if p.state != ACTIVE:
            out.append(f"{p.name}: state {p.state or 'unreadable'}, expected {ACTIVE}")
        if p.phys_state != LINK_UP:
            out.append(f"{p.name}: phys_state {p.phys_state or 'unreadable'}, expected {LINK_UP}")
        if gbps(p.rate) < rate_gbps:
            out.append(f"{p.name}: rate {p.rate or 'unreadable'}, expected {rate_gbps} Gb/sec")
    return out


def main() -> None:
    expect: dict[str, list[int]] = json.loads(os.environ["EXPECT"])
    node = Api.in_cluster().get(f"/api/v1/nodes/{os.environ['NODE_NAME']}")
    pool = (node.get("metadata", {}).get("labels") or {}).get(os.environ["POOL_KEY"], "")
    result = Path(os.environ["RESULT_FILE"])
    if pool not in expect:
        print(f"pool {pool!r}: no InfiniBand expected", flush=True)
        result.write_text("pass\n")
        return
    links, rate = expect[pool]
    found = wait_for(Path(os.environ.get("SYSFS_ROOT", SYSFS)))
    bad = problems(found, links, rate)
    for p in found:
        print(f"{p.name}: {p.state}, {p.phys_state}, {p.rate}, link_downed {p.link_downed}", flush=True)
    for line in bad:
        print(f"FAIL {line}", flush=True)
    result.write_text("fail\n" if bad else "pass\n")
    print(f"InfiniBand {'FAILED' if bad else 'passed'}: {len(found)} ports, pool {pool}", flush=True)


if __name__ == "__main__":
    main()
