"""Stacks planned once per test session under the mock runtime (the real infra/ program)."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from agk.plan.engine import export_state

REPO = Path(__file__).resolve().parents[2]
STACKS = REPO / "stacks"


@cache
def _state(stack: str) -> dict[str, Any]:
    return export_state(stack, STACKS)


class State:
    """A `pulumi stack export` with the look-ups the tests need."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = doc
        self.resources: list[dict[str, Any]] = doc["deployment"]["resources"]
        self.by_id = {r["id"]: r for r in self.resources if r.get("id")}

    def of_type(self, type_: str) -> list[dict[str, Any]]:
        return [r for r in self.resources if r["type"] == type_]

    def role(self, type_: str, role: str) -> list[dict[str, Any]]:
        return [r for r in self.of_type(type_) if (r["inputs"].get("tags") or {}).get("agk-role") == role]

    @property
    def outputs(self) -> dict[str, Any]:
        stack = next(r for r in self.resources if r["type"] == "pulumi:pulumi:Stack")
        return stack.get("outputs", {})


@pytest.fixture(scope="session")
def state() -> Callable[[str], State]:
    return lambda stack: State(_state(stack))
