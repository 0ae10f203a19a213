"""Per team, what the cluster gives it (from the cluster stack's ``addons_spec`` output): its GPUs and its
queue. One row per team, a dict per concern, so another concern (identity, storage) adds its own key."""

from __future__ import annotations

from typing import Any

from agk.plan import wire
from agk.plan.engine import StackPlan
from modules.cluster.objects import queues
from modules.cluster.spec import AddonsSpec


def rows(plan: StackPlan) -> list[dict[str, Any]]:
    """``[{"team", "gpus", "pools", "queue": {...} | None}]``; empty for a stack without teams."""
    exported = plan.outputs.get("addons_spec")
    if exported is None or wire.is_secret(exported):
        return []
    spec = AddonsSpec.from_json(wire.plain(exported))
    out = []
    for team in spec.teams:
        queue = None
        if spec.queues.enabled:
            queue = {
                "cluster_queue": team.name,
                "local_queue": f"{team.name}/{team.name}",
                "nominal_gpus": sum(queues.nominal(spec, team).values()),
                "cohort": spec.queues.cohort,
            }
        out.append({"team": team.name, "gpus": team.gpu_quota, "pools": list(team.pools), "queue": queue})
    return out


def _queue(row: dict[str, Any]) -> str:
    q = row["queue"]
    if q is None:
        return "ResourceQuota (no queue)"
    return f"ClusterQueue {q['cluster_queue']} ({q['nominal_gpus']:,} GPUs nominal, cohort {q['cohort']})"


def text(plan: StackPlan) -> list[str]:
    found = rows(plan)
    if not found:
        return []
    lines = ["", "Teams (GPUs, queue):"]
    for r in found:
        lines.append(f"  {r['team']:<18} {r['gpus']:>7,} GPUs  pools {', '.join(r['pools']) or '-'}  {_queue(r)}")
    return lines


def markdown(plan: StackPlan) -> list[str]:
    found = rows(plan)
    if not found:
        return []
    out = ["#### Teams", "", "| team | GPUs | pools | queue |", "|---|--:|---|---|"]
    out += [f"| {r['team']} | {r['gpus']:,} | {', '.join(r['pools']) or '-'} | {_queue(r)} |" for r in found]
    return [*out, ""]
