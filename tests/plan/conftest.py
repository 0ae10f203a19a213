from __future__ import annotations

from pathlib import Path

import pytest

from agk.plan.engine import Planner

FIXTURE = Path(__file__).parent / "fixtures" / "project"


@pytest.fixture(scope="module")
def fixture_planner() -> Planner:
    return Planner(FIXTURE / "stacks", FIXTURE)


@pytest.fixture(scope="module")
def bad_planner() -> Planner:
    return Planner(FIXTURE / "bad-stacks", FIXTURE)
