"""Split one logical GPU pool into scale sets no larger than Azure allows.

With InfiniBand a scale set must stay one placement group (singlePlacementGroup=true, 100 VMs by
default): "large scale sets (SPG=false) do not support InfiniBand". Names are stable
(``<pool>-00``, ``<pool>-01``, ...) so growing a pool only appends scale sets.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class ScaleSetPlan:
    name: str
    capacity: int
    single_placement_group: bool


def split_pool(pool: str, nodes: int, *, infiniband: bool, cap_spg: int, cap_large: int) -> list[ScaleSetPlan]:
    """Fill scale sets to the cap in order; the last one takes the remainder."""
    cap = cap_spg if infiniband else cap_large
    count = math.ceil(nodes / cap)
    width = max(2, len(str(count - 1)))
    out = []
    for i in range(count):
        capacity = min(cap, nodes - i * cap)
        # Without InfiniBand, a set small enough for one placement group keeps it (faster
        # allocation); beyond 100 VMs it must span several.
        spg = infiniband or capacity <= cap_spg
        out.append(ScaleSetPlan(f"{pool}-{i:0{width}d}", capacity, spg))
    return out
