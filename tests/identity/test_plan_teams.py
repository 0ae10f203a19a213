"""`agk plan` shows per team its GPUs, its Azure identity and its containers."""

from __future__ import annotations

from agk.plan import teams
from modules.stackplan.config import load_stack
from modules.stackplan.prepare import prepare_cluster
from tests.bootstrap.conftest import STACKS


def test_plan_rows_per_team() -> None:
    spec = prepare_cluster("dev", load_stack(STACKS, "dev"), STACKS).addons
    rows = teams.team_rows({"addons_spec": spec.to_json()})
    assert rows == [
        {
            "team": "research",
            "gpus": 32,
            "pools": ["a100"],
            "queue": {
                "cluster_queue": "research",
                "local_queue": "research/research",
                "nominal_gpus": 32,
                "cohort": "gpus",
            },
            "identity": "dev-workload-identity-research",
            "containers": ["research-datasets", "research-checkpoints"],
        }
    ]
    assert teams.team_rows({}) == []
