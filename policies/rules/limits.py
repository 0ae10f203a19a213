"""Azure's default limits, from the project's one limits table (modules/netplan/limits.py).

A stack that depends on a raised quota declares it; the VNet carries it in its ``agk-limits``
tag, so a policy compares against the value in force and can say which one that is.
"""

from __future__ import annotations

from collections.abc import Mapping

from modules.netplan.limits import DEFAULTS

AZURE_DEFAULTS: Mapping[str, int] = {row.name: row.value for row in DEFAULTS}


def default(name: str) -> int:
    return AZURE_DEFAULTS[name]


def in_force(name: str, declared: Mapping[str, int]) -> tuple[int, bool]:
    """(value, raised): the stack's declared value where it has one, else Azure's default."""
    if name in declared:
        return declared[name], declared[name] != AZURE_DEFAULTS[name]
    return AZURE_DEFAULTS[name], False
