"""Per team, what a cluster stack gives it: GPUs, its Azure identity, its containers. One row per team, as data,
so other team features (queues) add a column here and every format shows it."""

from __future__ import annotations

from typing import Any

from modules.cluster.spec import AddonsSpec
from modules.errors import ConfigError
from modules.identity.plan import identity_name

COLUMNS: tuple[tuple[str, str], ...] = (
    ("team", "team"),
    ("gpus", "GPUs"),
    ("identity", "identity"),
    ("containers", "containers"),
)
"""Row key -> heading, in the order text and markdown show them."""


def team_rows(outputs: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows of a cluster stack's plan (its ``addons_spec`` output); none for any other stack."""
    raw = outputs.get("addons_spec")
    if not isinstance(raw, dict):
        return []
    try:
        spec = AddonsSpec.from_json(raw)
    except ConfigError:
        return []
    rows = []
    for team in spec.teams:
        access = spec.access.team(team.name) if spec.access else None
        rows.append(
            {
                "team": team.name,
                "gpus": team.gpu_quota,
                "identity": identity_name(spec.cluster_name, team.name) if access else None,
                "containers": list(access.containers) if access else [],
            }
        )
    return rows


def cell(value: Any) -> str:
    if value is None or value == []:
        return "-"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    return f"{value:,}" if isinstance(value, int) else str(value)
