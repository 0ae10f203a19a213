"""Warnings: an answer that breaks one of Azure's limits, with a stable code."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Finding:
    """One broken limit. ``code`` is stable (documented in the README); ``message`` is for people."""

    code: str
    message: str
    vnet: str = ""
    """The VNet whose limit is broken, when there is one (reports filter by it)."""

    def to_dict(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}
