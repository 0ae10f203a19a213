"""`agk plan` figures: the whole --all run, and how construction time grows from dev to prod-7500."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from agk.plan.engine import REPO_ROOT, Planner

STACKS = REPO_ROOT / "stacks"


def _cli_all() -> str:
    agk = Path(sys.executable).parent / "agk"
    started = time.perf_counter()
    done = subprocess.run(
        [str(agk), "plan", "--all", "--format", "json"], cwd=REPO_ROOT, capture_output=True, text=True
    )
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        return f"failed: {done.stderr.strip().splitlines()[-1] if done.stderr.strip() else done.returncode}"
    return f"{seconds:.1f} s"


def _subprocess_stack(stack: str) -> float:
    """One stack in a fresh interpreter: the cost of isolating stacks by process instead of by context."""
    code = (
        f"from pathlib import Path; from agk.plan.engine import Planner; Planner(Path({str(STACKS)!r})).plan({stack!r})"
    )
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, check=True, capture_output=True)
    return time.perf_counter() - started


def rows() -> list[tuple[str, str]]:
    result = [("agk plan --all (wall, one process)", _cli_all())]
    planner = Planner(STACKS)
    hub = planner.plan("hub")  # warms imports and is referenced by both clusters
    warm_hub = Planner(STACKS).plan("hub").seconds
    dev, prod = planner.plan("dev"), planner.plan("prod-7500")
    result += [
        ("plan hub: in-process (warm) vs subprocess", f"{warm_hub:.2f} s vs {_subprocess_stack('hub'):.2f} s"),
        ("plan dev construction", f"{dev.seconds:.2f} s, {len(dev.resources)} resources"),
        ("plan prod-7500 construction", f"{prod.seconds:.2f} s, {len(prod.resources)} resources"),
        (
            "program construction only (prod-7500 vs dev)",
            f"{prod.program_seconds:.2f} s vs {dev.program_seconds:.2f} s = "
            f"{prod.program_seconds / dev.program_seconds:.1f}x (target <= 2)",
        ),
        (
            "prod-7500 / dev",
            f"{prod.seconds / dev.seconds:.1f}x time, {len(prod.resources) / len(dev.resources):.1f}x resources"
            f" (hub: {len(hub.resources)} resources)",
        ),
    ]
    return result


if __name__ == "__main__":
    for name, value in rows():
        print(f"{name:<45} {value}")
