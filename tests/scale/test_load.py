"""The fleet's fake nodes are what kwok can play: pure checks of tests/scale/load.py's node bodies."""

from __future__ import annotations

import yaml

from .load import machine_id


def test_every_machine_id_stays_a_string_through_kwoks_yaml() -> None:
    """kwok renders node stages through YAML: a machine ID that reads as a number fails them (see machine_id)."""
    ids = [machine_id(i) for i in range(7510)]
    assert all(isinstance(yaml.safe_load(m), str) and len(m) == 32 for m in ids)
    assert len(set(ids)) == len(ids)
