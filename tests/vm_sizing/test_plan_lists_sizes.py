"""`agk plan` shows the sizes it chose (issue 22, item 3): text, markdown and JSON, from the program's output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from modules.stackplan.config import load_stack
from modules.stackplan.prepare import prepare_cluster
from tests.cli.badinput import run

STACKS = Path(__file__).resolve().parents[2] / "stacks"


@pytest.fixture(scope="module")
def planned(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, object], str, str]:
    out = tmp_path_factory.mktemp("plan")
    done = run("agk", "plan", "--stack", "dev", "--format", "json", "--out", str(out))
    assert done.code == 0, done.err
    text = run("agk", "plan", "--stack", "dev")
    assert text.code == 0, text.err
    return json.loads(done.out), text.out, (out / "dev" / "plan.md").read_text()


def test_the_plan_lists_every_size_in_force(planned: tuple[dict[str, object], str, str]) -> None:
    as_json, text, markdown = planned
    expected = prepare_cluster("dev", load_stack(STACKS, "dev"), STACKS).chosen_sizes()
    assert as_json["sizes"] == expected
    assert "Sizes for 50 nodes (the sizing step of 14 peak nodes; modules/vm_sizing/formulas.py):" in text
    assert "#### Sizes for 50 nodes (the sizing step of 14 peak nodes; modules/vm_sizing/formulas.py)" in markdown
    for row in expected:
        assert str(row["name"]) in text and f"`{row['formula']}`" in markdown
    disk = next(r for r in expected if r["formula"] == "prometheus_disk_gib")
    assert disk["name"] == "Prometheus data disk GiB (15 d at 30s)" and disk["value"] == 128


def test_the_plan_lists_each_teams_queue(planned: tuple[dict[str, object], str, str]) -> None:
    """Per team its GPUs and its queue (issue 23), from the same plan: one row per team, a key per concern."""
    as_json, text, markdown = planned
    queue = {"cluster_queue": "research", "local_queue": "research/research", "nominal_gpus": 32, "cohort": "gpus"}
    identity = {
        "identity": "dev-workload-identity-research",
        "containers": ["research-datasets", "research-checkpoints"],
    }
    assert as_json["teams"] == [{"team": "research", "gpus": 32, "pools": ["a100"], "queue": queue, **identity}]
    assert "\nTeams:\n" in text
    assert "ClusterQueue research (32 GPUs nominal, cohort gpus)" in text
    assert "| research | 32 | a100 | ClusterQueue research (32 GPUs nominal, cohort gpus) |" in markdown
