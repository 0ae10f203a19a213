"""The idle re-test sweeps the whole fleet in the configured period, at prod-7500's size: the CronJob's
per-run count (derived from fleet size and period in spec.retest_per_run) fed to the re-test script's own
selection (scripts/retest_idle.py, oldest test first), run for as many runs as the period holds."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from modules.cluster.objects.preflight import RETEST
from modules.cluster.scripts.retest_idle import idle_nodes
from modules.cluster.spec import AddonsSpec, retest_per_run, retest_schedule

from .test_objects import by_name


def _env(spec: AddonsSpec) -> dict[str, str]:
    job = by_name(spec, "CronJob", RETEST)
    (container,) = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e["value"] for e in container["env"]}


def _fleet(spec: AddonsSpec) -> list[dict[str, Any]]:
    accelerator = dict(term.split("=") for term in _env(spec)["NODE_SELECTOR"].split(","))
    return [
        {"metadata": {"name": f"{p.name}-{i:05d}", "labels": dict(accelerator), "annotations": {}}, "spec": {}}
        for p in spec.pools
        for i in range(p.nodes)
    ]


def test_the_idle_retest_sweeps_every_gpu_node_of_prod_7500_within_the_period(prod_spec: AddonsSpec) -> None:
    pre = prod_spec.preflight
    fleet = _fleet(prod_spec)
    assert len(fleet) == 7500
    env = _env(prod_spec)
    per_run = int(env["MAX_NODES"])
    runs = pre.retest_period_days * 24 * 60 // pre.retest_every_minutes
    assert by_name(prod_spec, "CronJob", RETEST)["spec"]["schedule"] == retest_schedule(pre.retest_every_minutes)
    key = env["PREFLIGHT_KEY"]
    start = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
    tested: dict[str, int] = {}
    for run in range(runs):
        now = (start + dt.timedelta(minutes=run * pre.retest_every_minutes)).isoformat(timespec="seconds")
        chosen = idle_nodes(fleet, [], selector=env["NODE_SELECTOR"], key=key, limit=per_run)
        assert len(chosen) == per_run
        for node in fleet:
            if node["metadata"]["name"] in chosen:
                # What the preflight reporter stamps when the diagnostics finish.
                node["metadata"]["annotations"][f"{key}-last-run"] = now
                tested[node["metadata"]["name"]] = tested.get(node["metadata"]["name"], 0) + 1
    assert len(tested) == len(fleet)  # every node, within the period
    # And no faster than needed: one node fewer per run would leave some untested.
    assert (per_run - 1) * runs < len(fleet)


@pytest.mark.parametrize(
    ("nodes", "days", "every", "per_run"),
    [(7500, 14, 60, 23), (7500, 7, 60, 45), (8, 14, 60, 1), (7500, 14, 360, 134), (1000, 1, 10, 7)],
)
def test_nodes_per_run_follow_from_fleet_and_period(nodes: int, days: int, every: int, per_run: int) -> None:
    assert retest_per_run(nodes, days, every) == per_run


def test_schedules_repeat_at_the_interval() -> None:
    assert retest_schedule(60) == "17 * * * *"
    assert retest_schedule(360) == "17 */6 * * *"
    assert retest_schedule(15) == "2-59/15 * * * *"
    assert retest_schedule(1440) == "17 0 * * *"
