"""The ``azure-gpu-k8s:changes`` reader: allowances, and one exact line for each mistake."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agk.review import allowances
from modules.errors import ConfigError
from policies.rules.change import Allowance


def test_reads_names_and_urns() -> None:
    raw = {
        "allow": [
            {"name": "dev-etcd-0-data", "action": "replace", "reason": " OPS-1 "},
            {"urn": "urn:pulumi:dev::p::t::x", "action": "move", "reason": "OPS-2"},
        ]
    }
    assert allowances.parse(raw, "dev") == [
        Allowance("replace", "OPS-1", name="dev-etcd-0-data"),
        Allowance("move", "OPS-2", urn="urn:pulumi:dev::p::t::x"),
    ]
    assert allowances.parse(None, "dev") == []


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ([], "dev: azure-gpu-k8s:changes: [] is not a mapping: write it as 'key: value' lines"),
        (
            {"allow": [], "deny": []},
            "dev: azure-gpu-k8s:changes.deny: unknown key: remove it or fix the spelling (see stacks/schema.json)",
        ),
        ({"allow": {}}, "dev: azure-gpu-k8s:changes.allow: {} is not a list: write it as '- item' lines"),
        ({"allow": ["x"]}, "dev: azure-gpu-k8s:changes.allow[0]: 'x' is not a mapping: write it as 'key: value' lines"),
        (
            {"allow": [{"name": "a", "action": "delete", "reason": "r", "ticket": 1}]},
            "dev: azure-gpu-k8s:changes.allow[0].ticket: unknown key: remove it or fix the spelling (see stacks/schema.json)",
        ),
        (
            {"allow": [{"name": "a", "urn": "u", "action": "delete", "reason": "r"}]},
            "dev: azure-gpu-k8s:changes.allow[0]: give exactly one of urn and name (the resource's logical name)",
        ),
        (
            {"allow": [{"name": 3, "action": "delete", "reason": "r"}]},
            "dev: azure-gpu-k8s:changes.allow[0].name: 3 is a number, not text: quote it in the stack file",
        ),
        (
            {"allow": [{"name": "a", "action": "update", "reason": "r"}]},
            "dev: azure-gpu-k8s:changes.allow[0].action: 'update' is not allowed: use 'replace', 'delete', 'move' or 'add'",
        ),
        (
            {"allow": [{"name": "a", "action": "delete", "reason": " "}]},
            "dev: azure-gpu-k8s:changes.allow[0].reason: blank: say which resource, and why the change is intended (e.g. the change ticket)",
        ),
    ],
)
def test_bad_allowances_are_one_line(raw: Any, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        allowances.parse(raw, "dev")
    assert str(err.value) == message


def test_a_missing_stack_file_declares_nothing(tmp_path: Path) -> None:
    assert allowances.read(tmp_path, "dev") == []
