"""Per team, what a cluster stack gives it (from the cluster stack's ``addons_spec`` output): its GPUs and
pools, its queue, its Azure identity and its containers. One row per team, as data: a new team feature adds
a key to the row and a column to ``COLUMNS``, and text, markdown and JSON all show it."""

from __future__ import annotations

from typing import Any

from agk.plan import wire
from agk.plan.engine import StackPlan
from modules.cluster.objects import queues
from modules.cluster.spec import AddonsSpec
from modules.errors import ConfigError
from modules.identity.plan import identity_name

COLUMNS: tuple[tuple[str, str], ...] = (
    ("team", "team"),
    ("gpus", "GPUs"),
    ("pools", "pools"),
    ("queue", "queue"),
    ("identity", "identity"),
    ("containers", "containers"),
)
"""Row key -> heading, in the order text and markdown show them."""


def team_rows(outputs: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows of a cluster stack's plan (its ``addons_spec`` output); none for any other stack."""
    exported = outputs.get("addons_spec")
    if exported is None or wire.is_secret(exported):
        return []
    raw = wire.plain(exported)
    if not isinstance(raw, dict):
        return []
    try:
        spec = AddonsSpec.from_json(raw)
    except ConfigError:
        return []
    rows = []
    for team in spec.teams:
        queue = None
        if spec.queues.enabled:
            queue = {
                "cluster_queue": team.name,
                "local_queue": f"{team.name}/{team.name}",
                "nominal_gpus": sum(queues.nominal(spec, team).values()),
                "cohort": spec.queues.cohort,
            }
        access = spec.access.team(team.name) if spec.access else None
        rows.append(
            {
                "team": team.name,
                "gpus": team.gpu_quota,
                "pools": list(team.pools),
                "queue": queue,
                "identity": identity_name(spec.cluster_name, team.name) if access else None,
                "containers": list(access.containers) if access else [],
            }
        )
    return rows


def rows(plan: StackPlan) -> list[dict[str, Any]]:
    return team_rows(plan.outputs)


def cell(key: str, value: Any) -> str:
    if key == "queue":
        if value is None:
            return "ResourceQuota (no queue)"
        return (
            f"ClusterQueue {value['cluster_queue']} ({value['nominal_gpus']:,} GPUs nominal, cohort {value['cohort']})"
        )
    if value is None or value == []:
        return "-"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    return f"{value:,}" if isinstance(value, int) else str(value)


def text(plan: StackPlan) -> list[str]:
    found = rows(plan)
    if not found:
        return []
    grid = [[h for _, h in COLUMNS]] + [[cell(k, r[k]) for k, _ in COLUMNS] for r in found]
    widths = [max(len(row[i]) for row in grid) for i in range(len(COLUMNS))]
    return ["", "Teams:"] + [
        "  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in grid
    ]


def markdown(plan: StackPlan) -> list[str]:
    found = rows(plan)
    if not found:
        return []
    out = ["#### Teams", "", "| " + " | ".join(h for _, h in COLUMNS) + " |", "|---|--:|" + "---|" * (len(COLUMNS) - 2)]
    out += ["| " + " | ".join(cell(k, r[k]) for k, _ in COLUMNS) + " |" for r in found]
    return [*out, ""]
