"""Split one logical pool into scale sets no larger than Azure allows, with room to replace a VM.

With InfiniBand a scale set must stay one placement group (singlePlacementGroup=true, at most 100
VMs): "large scale sets (SPG=false) do not support InfiniBand". A set filled to that cap cannot take
a replacement VM before the failed one is deleted, so each set keeps ``headroom`` slots free.

The split is stable, because every capacity that drops deletes running VMs that Azure's scale-in
picks, and nobody can drain them first (issue 20): sets are filled in order, each to its room (cap less
headroom), so growing a pool fills the newest set and then appends sets, and shrinking it takes VMs
from the newest sets only. A pool deployed with another split (balanced, by an earlier release) keeps
the capacities it runs with: ``deployed`` gives them, and only the difference is added or taken, the
same way. Names are stable (``<pool>-00``, ``<pool>-01``, ..., ``<pool>-100``): never renamed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class ScaleSetPlan:
    name: str
    capacity: int
    single_placement_group: bool


def set_name(pool: str, index: int, width: int = 2) -> str:
    """The scale set's name: its index padded to ``width`` digits (wider indexes keep all theirs)."""
    return f"{pool}-{index:0{width}d}"


def _deployed_capacities(pool: str, deployed: Mapping[str, int] | None) -> tuple[list[int], int]:
    """The deployed sets' capacities by index (a gap is an empty set) and the width of their names."""
    if not deployed:
        return [], 2
    pattern = re.compile(rf"^{re.escape(pool)}-([0-9]+)$")
    found: dict[int, int] = {}
    width = 2
    for name, capacity in deployed.items():
        match = pattern.match(name)
        if match is None or isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 0:
            continue
        found[int(match.group(1))] = capacity
        width = max(width, len(match.group(1))) if match.group(1).startswith("0") else width
    if not found:
        return [], 2
    return [found.get(i, 0) for i in range(max(found) + 1)], width


def split_pool(
    pool: str,
    nodes: int,
    *,
    infiniband: bool,
    cap_spg: int,
    cap_large: int,
    headroom: int = 0,
    max_nodes: int | None = None,
    deployed: Mapping[str, int] | None = None,
    deployed_large: bool = False,
) -> list[ScaleSetPlan]:
    """Scale sets for ``nodes`` VMs, filled in order; enough sets that ``max_nodes`` fit with ``headroom``
    free in each. ``deployed``: the pool's scale sets as its last `pulumi up` left them (name to capacity);
    ``deployed_large``: they were deployed as large sets (singlePlacementGroup false).

    Raises ``ValueError`` when the headroom leaves no room in a set at all.
    """
    cap = cap_spg if infiniband else cap_large
    room = cap - headroom
    if room < 1:
        raise ValueError(f"headroom {headroom} leaves no VM in a scale set of {cap}: use 0 to {cap - 1}")
    most = max(nodes, max_nodes or nodes)
    # A set never holds more than Azure's cap, whatever was deployed (a cap the stack lowered).
    caps, width = _deployed_capacities(pool, deployed)
    caps = [min(c, cap) for c in caps]
    held = sum(caps)
    if nodes > held:
        # Growth: the newest set that holds VMs fills up to its room, then new sets; older sets keep
        # what they run (a set already above its room, from a smaller headroom, is left as it is).
        need = nodes - held
        i = max((k for k, c in enumerate(caps) if c > 0), default=0)
        while need:
            if i == len(caps):
                caps.append(0)
            add = min(need, max(0, room - caps[i]))
            caps[i] += add
            need -= add
            i += 1
    elif nodes < held:
        # Shrink: VMs go from the newest sets first, so the plan can name them.
        remove = held - nodes
        for i in reversed(range(len(caps))):
            take = min(remove, caps[i])
            caps[i] -= take
            remove -= take
    # Empty sets stand ready up to the autoscaling maximum; empty sets beyond it go.
    while sum(max(c, room) for c in caps) < most:
        caps.append(0)
    while caps and caps[-1] == 0 and sum(max(c, room) for c in caps[:-1]) >= most:
        caps.pop()
    # Without InfiniBand, a pool that stays small enough for one placement group (at its autoscaling
    # maximum, headroom included) keeps it (faster allocation); beyond 100 VMs it must span several. The
    # change is one way: Azure converts a set to large (singlePlacementGroup false) but never back
    # (VirtualMachineScaleSets convertToSinglePlacementGroup takes false only), so a large set stays large
    # when its pool shrinks.
    spg = infiniband or (not deployed_large and most + headroom <= cap_spg)
    return [ScaleSetPlan(set_name(pool, i, width), capacity, spg) for i, capacity in enumerate(caps)]


def scale_in_order(before: Mapping[str, int], after: Mapping[str, int]) -> list[tuple[str, int, int]]:
    """``(set, before, after)`` for every set of a pool whose capacity drops (deleted sets: after 0),
    newest first: the VMs a change removes, set by set."""
    out = []
    for name in sorted(before, key=_index, reverse=True):
        now = after.get(name, 0)
        if now < before[name]:
            out.append((name, before[name], now))
    return out


def _index(name: str) -> tuple[int, str]:
    tail = name.rsplit("-", 1)[-1]
    return (int(tail), name) if tail.isdigit() else (-1, name)
