"""Warnings: an answer that breaks one of Azure's limits, with a stable code."""

from __future__ import annotations

from typing import NamedTuple

# NamedTuple rather than a dataclass: `subnet-calc size` imports this module, and dataclasses
# pulls in `inspect`, which alone costs a quarter of the command's start-up budget.


class Finding(NamedTuple):
    """One broken limit. ``code`` is stable (documented in docs/subnet-calc.md); ``message`` is for people."""

    code: str
    message: str
    vnet: str = ""
    """The VNet whose limit is broken, when there is one (reports filter by it)."""

    def to_dict(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}
