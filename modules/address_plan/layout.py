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

from modules.address_plan.addressing import AddressError


@dataclass(frozen=True)
class Block:
    """A subnet to place: its stable name and prefix length."""

    name: str
    prefix: int


# Free space is kept as aligned (start, prefix) integer pairs sorted by start: ipaddress objects
# cost microseconds per operation, and `make bench` plans 10,000 subnets in well under a second.
_Free = list[tuple[int, int]]


def _size(prefix: int) -> int:
    return 1 << (32 - prefix)


def _split(start: int, prefix: int, taken: int, taken_prefix: int) -> _Free:
    """The free block (start, prefix) minus the aligned block it contains: its buddies, in order."""
    out: _Free = []
    while prefix < taken_prefix:
        prefix += 1
        half = _size(prefix)
        if taken < start + half:
            out.append((start + half, prefix))
        else:
            out.append((start, prefix))
            start += half
    return sorted(out)


def _take(free: _Free, start: int, prefix: int) -> bool:
    """Remove an aligned block from the free space; False when no single free block holds it."""
    end = start + _size(prefix)
    for i, (fstart, fprefix) in enumerate(free):
        if fstart <= start and end <= fstart + _size(fprefix):
            free[i : i + 1] = _split(fstart, fprefix, start, prefix)
            return True
    return False


def allocate(
    spaces: Sequence[IPv4Network],
    blocks: Sequence[Block],
    pinned: Mapping[str, IPv4Network] | None = None,
    *,
    reserved: Mapping[str, IPv4Network] | None = None,
    key_prefix: str = "",
) -> dict[str, IPv4Network]:
    """Place every block; return name -> CIDR. Raises ``AddressError`` when they cannot fit.

    ``reserved`` is space no block may take though no block is placed there: subnets that exist
    until the end of this update (Pulumi creates new resources first and deletes last, so a new
    subnet on a going one's range would overlap it, which Azure refuses). ``key_prefix`` leads the
    config keys named in errors (``<stack>: azure-gpu-k8s:``).
    """
    pins = dict(pinned or {})
    capacity = sum(space.num_addresses for space in spaces)
    free: _Free = sorted((int(n.network_address), n.prefixlen) for n in spaces)
    for name, net in sorted((reserved or {}).items()):
        clash = next((p for p in sorted(pins) if pins[p].overlaps(net)), None)
        if clash:
            raise AddressError(
                f"{key_prefix}network.pinned.{clash}: {pins[clash]} overlaps subnet {name} ({net}), which this "
                "update deletes only after creating the new one (Pulumi creates first, deletes last; Azure refuses "
                "overlapping subnets): pin it elsewhere, or remove the old subnet in an update of its own first"
            )
        if any(net.subnet_of(space) for space in spaces):
            _take(free, int(net.network_address), net.prefixlen)
    placed: dict[str, IPv4Network] = {}
    for name in sorted(pins):
        net = pins[name]
        if not any(net.subnet_of(space) for space in spaces):
            raise AddressError(
                f"{key_prefix}network.pinned.{name}: {net} is outside the address space "
                f"{', '.join(map(str, spaces))}: pin a CIDR inside it or extend network.address_space"
            )
        for other, onet in placed.items():
            if net.overlaps(onet):
                raise AddressError(
                    f"{key_prefix}network.pinned.{name}: {net} overlaps pinned {other} ({onet}): pin disjoint CIDRs"
                )
        if not _take(free, int(net.network_address), net.prefixlen):  # pragma: no cover - pins are checked above
            raise AssertionError(f"pinned {net} is free space but no free block holds it")
        placed[name] = net

    # Largest first; ties by name, so the layout depends only on names and sizes.
    for block in sorted((b for b in blocks if b.name not in pins), key=lambda b: (b.prefix, b.name)):
        slot = next((i for i, (_, fprefix) in enumerate(free) if fprefix <= block.prefix), None)
        if slot is None:
            need = sum(_size(b.prefix) for b in blocks)
            if reserved and _fits_without(spaces, blocks, pins):
                going = ", ".join(f"{n} {net}" for n, net in sorted(reserved.items()))
                raise AddressError(
                    f"{key_prefix}network.address_space: {block.name} /{block.prefix} does not fit while the subnets"
                    f" this update deletes still hold their ranges ({going}): Pulumi creates the new subnet before it"
                    " deletes the old one (deletes run last), so both must fit at once. Make the change in two"
                    " updates: first one that only removes what goes (the old pool), then one that adds the new"
                    " one; or add an address prefix"
                ) from None
            raise AddressError(
                f"{key_prefix}network.address_space: {', '.join(map(str, spaces))} ({capacity:,} addresses) cannot hold the subnets "
                f"({need:,} addresses in aligned blocks; {block.name} /{block.prefix} does not fit): "
                "use a larger or an extra address prefix, or lower node counts or pod_ips"
            )
        start, fprefix = free[slot]
        free[slot : slot + 1] = _split(start, fprefix, start, block.prefix)
        placed[block.name] = IPv4Network((start, block.prefix))
    return placed


def _fits_without(spaces: Sequence[IPv4Network], blocks: Sequence[Block], pins: Mapping[str, IPv4Network]) -> bool:
    """Whether the blocks fit once the going subnets are gone (the second of two updates)."""
    try:
        allocate(spaces, blocks, pins)
    except AddressError:
        return False
    return True


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
