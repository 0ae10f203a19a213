"""A stand-in for a GPU node's ``/sys/class/infiniband`` (no InfiniBand hardware here): the files and formats
Linux writes (drivers/infiniband/core/sysfs.c: ``state`` "4: ACTIVE", ``phys_state`` "5: LinkUp", ``rate``
"400 Gb/sec (4X NDR)", ``link_layer``, ``counters/link_downed``), as an ND-series VM shows them: one mlx5
device per GPU's HCA, plus the accelerated-networking NIC's device, whose link layer is Ethernet."""

from __future__ import annotations

from pathlib import Path

SPEED = {400: "NDR", 200: "HDR", 100: "EDR"}


def write(
    root: Path,
    links: int,
    gbps: int,
    *,
    down: tuple[int, ...] = (),
    rate: dict[int, int] | None = None,
    flaps: dict[int, int] | None = None,
    coming_up: tuple[int, ...] = (),
) -> Path:
    """``links`` InfiniBand ports at ``gbps``; ``down``: ports not Active; ``rate``: port -> a lower rate;
    ``flaps``: port -> link_downed count; ``coming_up``: ports the subnet manager has not activated yet."""
    for i in range(links):
        port = root / f"mlx5_ib{i}" / "ports" / "1"
        (port / "counters").mkdir(parents=True, exist_ok=True)
        speed = (rate or {}).get(i, gbps)
        (port / "link_layer").write_text("InfiniBand\n")
        (port / "state").write_text("1: DOWN\n" if i in down else "2: INIT\n" if i in coming_up else "4: ACTIVE\n")
        (port / "phys_state").write_text("3: Disabled\n" if i in down else "5: LinkUp\n")
        (port / "rate").write_text(f"{speed} Gb/sec (4X {SPEED.get(speed, '')})\n".replace(" )", ")"))
        (port / "counters" / "link_downed").write_text(f"{(flaps or {}).get(i, 0)}\n")
    nic = root / "mlx5_an0" / "ports" / "1"
    nic.mkdir(parents=True, exist_ok=True)
    (nic / "link_layer").write_text("Ethernet\n")
    (nic / "state").write_text("4: ACTIVE\n")
    (nic / "phys_state").write_text("5: LinkUp\n")
    (nic / "rate").write_text("100 Gb/sec (4X EDR)\n")
    return root
