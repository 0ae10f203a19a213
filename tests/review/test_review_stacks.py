"""The shipped stacks, planned by the mock-runtime engine, review clean of mandatory violations,
and reviewing a stack's exported state.json gives the same result as reviewing the stack."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agk.plan.engine import export_state
from agk.review import review
from agk.stack_export import load_file, parse

STACKS = Path(__file__).resolve().parents[2] / "stacks"


@pytest.fixture(scope="module")
def exports() -> dict[str, dict[str, Any]]:
    return {name: export_state(name, STACKS) for name in ("hub", "dev", "prod-7500")}


def _verdict(report: Any) -> list[tuple[str, str, str, str]]:
    return sorted((v.policy, v.enforcement, v.urn, v.message) for v in report.violations)


def test_shipped_stacks_have_no_mandatory_violation(exports: dict[str, dict[str, Any]]) -> None:
    for name, data in exports.items():
        report = review([parse(data, name, f"stacks/Pulumi.{name}.yaml")], None)
        assert report.mandatory == [], name
        assert len(data["deployment"]["resources"]) > 10, name


def test_prod_7500_fits_azures_hard_limits(exports: dict[str, dict[str, Any]]) -> None:
    report = review([parse(exports["prod-7500"], "prod-7500", "stacks/Pulumi.prod-7500.yaml")], None)
    assert report.violations == []


def test_file_review_equals_stack_review(exports: dict[str, dict[str, Any]], tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text(json.dumps(exports["prod-7500"]))
    from_stack = review([parse(exports["prod-7500"], "prod-7500", "stacks/Pulumi.prod-7500.yaml")], None)
    from_file = review([load_file(path)], None)
    assert _verdict(from_file) == _verdict(from_stack)
    assert from_file.stacks == from_stack.stacks == ["prod-7500"]
