"""The pull-request workflow plans each side once and reviews those plans; actionlint accepts it."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "review.yml"


def _runs() -> list[str]:
    doc = yaml.safe_load(WORKFLOW.read_text())
    steps = doc["jobs"]["plan-and-review"]["steps"]
    return [str(step.get("run", "")) for step in steps]


def test_each_side_is_planned_once() -> None:
    commands = [line.strip() for run in _runs() for line in run.splitlines()]
    plans = [c for c in commands if re.search(r"\bagk plan\b", c)]
    assert len(plans) == 2, plans
    assert plans[0].startswith(".venv/bin/agk plan --all --out") and "base-plan" in plans[0]
    assert plans[1] == '.venv/bin/agk plan --all "${base[@]}" --out out/ > /dev/null'
    reviews = [c for c in commands if c.startswith(".venv/bin/agk review")]
    # The review reads the exports the plan wrote (--file), never --all or --stack (a second plan).
    assert reviews and all('"${args[@]}"' in c and "--all" not in c and "--stack" not in c for c in reviews)
    assert any("args+=(--base base-plan)" in c for c in commands)


def test_actionlint_accepts_the_workflow() -> None:
    actionlint = shutil.which("actionlint", path=str(Path(sys.executable).parent))
    assert actionlint is not None, "actionlint is missing: `make test` installs it with the dev extras"
    done = subprocess.run([actionlint, str(WORKFLOW)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
