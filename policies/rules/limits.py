"""The limits a deployment runs under, from the project's one limits table (modules/address_plan/limits.py).

Hard Azure limits are the table's values whatever a deployment declares; only adjustable quotas come
from the ``agk-limits`` tag a stack's VNet carries. The planner reads the same table the same way
(``Limits.in_force``), so a plan the planner accepts is never refused here for a different number.
"""

from __future__ import annotations

from collections.abc import Mapping

from modules.address_plan.limits import Limits

AZURE = Limits.default()


def in_force(name: str, declared: Mapping[str, int]) -> int:
    """The value of ``name`` for a deployment that declares ``declared`` (hard limits ignore it)."""
    return Limits.in_force(declared)[name]


def hard_overrides(declared: Mapping[str, int]) -> list[str]:
    return Limits.hard_overrides(declared)


def describe(name: str) -> str:
    row = AZURE.rows[name]
    return f"{row.description} ({row.kind})"


def fix(name: str) -> str:
    return AZURE.rows[name].fix
