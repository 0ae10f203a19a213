"""Lay subnets out inside a VNet's address space: aligned, non-overlapping, stable by name.

Largest-first packing: placing blocks in descending size onto the lowest free aligned slot never
leaves an alignment gap, which in-order allocation (Terraform's ``cidrsubnets`` way) does as
soon as a small subnet precedes a large one. Pinned subnets (those that already exist) are
placed first, exactly where they are, so adding a subnet never moves an existing one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from ipaddress import IPv4Network

from modules.netplan.addressing import AddressError


@dataclass(frozen=True)
class Block:
    """A subnet to place: its stable name and prefix length."""

    name: str
    prefix: int


def _carve(free: list[IPv4Network], taken: IPv4Network) -> list[IPv4Network]:
    out: list[IPv4Network] = []
    for block in free:
        if taken.subnet_of(block):
            out.extend(block.address_exclude(taken))
        elif not block.overlaps(taken):
            out.append(block)
    return out


def allocate(
    spaces: Sequence[IPv4Network],
    blocks: Sequence[Block],
    pinned: Mapping[str, IPv4Network] | None = None,
    *,
    where: str = "network.address_space",
) -> dict[str, IPv4Network]:
    """Place every block; return name -> CIDR. Raises ``AddressError`` when they cannot fit."""
    pins = dict(pinned or {})
    capacity = sum(space.num_addresses for space in spaces)
    free = sorted(spaces, key=lambda n: (int(n.network_address), n.prefixlen))
    placed: dict[str, IPv4Network] = {}
    for name in sorted(pins):
        net = pins[name]
        if not any(net.subnet_of(space) for space in spaces):
            raise AddressError(
                f"network.pinned.{name}: {net} is outside the address space "
                f"{', '.join(map(str, spaces))}: pin a CIDR inside it or extend network.address_space"
            )
        for other, onet in placed.items():
            if net.overlaps(onet):
                raise AddressError(f"network.pinned.{name}: {net} overlaps pinned {other} ({onet}): pin disjoint CIDRs")
        placed[name] = net
        free = _carve(free, net)

    # Largest first; ties by name, so the layout depends only on names and sizes.
    for block in sorted((b for b in blocks if b.name not in pins), key=lambda b: (b.prefix, b.name)):
        slot = next((f for f in free if f.prefixlen <= block.prefix), None)
        if slot is None:
            need = sum(2 ** (32 - b.prefix) for b in blocks)
            raise AddressError(
                f"{where}: {', '.join(map(str, spaces))} ({capacity:,} addresses) cannot hold the subnets "
                f"({need:,} addresses in aligned blocks; {block.name} /{block.prefix} does not fit): "
                "use a larger or an extra address prefix, or lower node counts or max pods"
            )
        net = IPv4Network((slot.network_address, block.prefix))
        placed[block.name] = net
        free = sorted(_carve(free, net), key=lambda n: (int(n.network_address), n.prefixlen))
    return placed


def naive_in_order(start: IPv4Network, prefixes: Sequence[int]) -> list[IPv4Network]:
    """Terraform's ``cidrsubnets``: each block at the next aligned address after the previous one.

    Only for comparison (``make bench``): the span it covers shows the alignment waste.
    """
    cursor = int(start.network_address)
    out: list[IPv4Network] = []
    for prefix in prefixes:
        size = 2 ** (32 - prefix)
        cursor = (cursor + size - 1) // size * size
        out.append(IPv4Network((cursor, prefix)))
        cursor += size
    return out
