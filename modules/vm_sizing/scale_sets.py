"""Split one logical pool into scale sets no larger than Azure allows, with room to replace a VM.

With InfiniBand a scale set must stay one placement group (singlePlacementGroup=true, at most 100
VMs): "large scale sets (SPG=false) do not support InfiniBand". A set filled to that cap cannot take
a replacement VM before the failed one is deleted, so each set keeps ``headroom`` slots free. Sizes
are balanced (they differ by at most one), so every set has at least that headroom. Names are
stable (``<pool>-00``, ``<pool>-01``, ...): growing a pool appends sets and changes capacities in
place, it never renames one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class ScaleSetPlan:
    name: str
    capacity: int
    single_placement_group: bool


def split_pool(
    pool: str,
    nodes: int,
    *,
    infiniband: bool,
    cap_spg: int,
    cap_large: int,
    headroom: int = 0,
    max_nodes: int | None = None,
) -> list[ScaleSetPlan]:
    """Balanced scale sets for ``nodes`` VMs; enough sets that ``max_nodes`` fit with ``headroom`` free.

    Raises ``ValueError`` when the headroom leaves no room in a set at all.
    """
    cap = cap_spg if infiniband else cap_large
    room = cap - headroom
    if room < 1:
        raise ValueError(f"headroom {headroom} leaves no VM in a scale set of {cap}: use 0 to {cap - 1}")
    most = max(nodes, max_nodes or nodes)
    count = math.ceil(most / room)
    width = max(2, len(str(count - 1)))
    base, extra = divmod(nodes, count)
    # Without InfiniBand, a set that stays small enough for one placement group (at its autoscaling
    # maximum, headroom included) keeps it (faster allocation); beyond 100 VMs it must span several.
    spg = infiniband or math.ceil(most / count) + headroom <= cap_spg
    out = []
    for i in range(count):
        capacity = base + (1 if i < extra else 0)
        out.append(ScaleSetPlan(f"{pool}-{i:0{width}d}", capacity, spg))
    return out
