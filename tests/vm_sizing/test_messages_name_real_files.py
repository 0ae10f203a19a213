"""Messages that tell a user which file to edit name a file that exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from modules.errors import ConfigError
from modules.vm_sizing.skus import sku

ROOT = Path(__file__).resolve().parents[2]


def test_the_unknown_vm_size_error_names_the_skus_table() -> None:
    with pytest.raises(ConfigError) as err:
        sku("Standard_Nope")
    named = re.findall(r"modules/[\w/]+\.py", str(err.value))
    assert named and all((ROOT / path).is_file() for path in named), str(err.value)


def test_the_api_server_size_policy_names_the_skus_table() -> None:
    # The policy's message is a literal in policies/rules/compute.py: every path it names must exist.
    text = (ROOT / "policies" / "rules" / "compute.py").read_text()
    for path in re.findall(r"add it to (modules/[\w/]+\.py)", text):
        assert (ROOT / path).is_file(), path
