"""`agk plan` figures: wall time of the commands as a user runs them, side by side with the figures
before issue 13, and how planning grows from dev to prod-7500 (time per scale set: linear or not)."""

from __future__ import annotations

import itertools
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from agk.plan.engine import REPO_ROOT, Planner

STACKS = REPO_ROOT / "stacks"
RUNS = 3
PREVIOUS_PROD_S = 22.0
"""`agk plan --stack prod-7500` before issue 13 (2-core machine, issue 13)."""


def cli_seconds(*args: str) -> float:
    """Fastest of RUNS runs of the installed console script (the machine is shared: the minimum is the signal)."""
    agk = Path(sys.executable).parent / "agk"
    best = float("inf")
    for _ in range(RUNS):
        started = time.perf_counter()
        done = subprocess.run([str(agk), *args], cwd=REPO_ROOT, capture_output=True, text=True, check=False)
        best = min(best, time.perf_counter() - started)
        if done.returncode != 0:
            raise RuntimeError(f"agk {' '.join(args)}: {done.stderr.strip().splitlines()[-1]}")
    return best


def _fewer_scale_sets(where: Path, nodes: int) -> Path:
    for path in STACKS.glob("Pulumi.*.yaml"):
        shutil.copy(path, where / path.name)
    path = where / "Pulumi.prod-7500.yaml"
    doc = yaml.safe_load(path.read_text())
    for pool in doc["config"]["azure-gpu-k8s:cluster"]["gpu_pools"].values():
        pool["nodes"] = nodes
    path.write_text(yaml.safe_dump(doc))
    return where


def _in_process(stacks: Path, stack: str, hub: object) -> tuple[float, int, int]:
    """(seconds, resources, scale sets): the fastest of RUNS plans, the hub already planned."""
    best, plan = float("inf"), None
    for _ in range(RUNS):
        planner = Planner(stacks)
        planner._plans["hub"] = hub  # type: ignore[assignment]  # the referenced hub is planned once
        plan = planner.plan(stack)
        best = min(best, plan.seconds)
    assert plan is not None
    return best, len(plan.resources), len(plan.by_type("azure-native:compute:VirtualMachineScaleSet"))


def rows() -> list[tuple[str, str]]:
    dev_s = cli_seconds("plan", "--stack", "dev", "--format", "json")
    prod_s = cli_seconds("plan", "--stack", "prod-7500", "--format", "json")
    hub = Planner(STACKS).plan("hub")
    dev_in, dev_n, _ = _in_process(STACKS, "dev", hub)
    prod_in, prod_n, prod_sets = _in_process(STACKS, "prod-7500", hub)
    # Three sizes of the same stack: equal cost per added scale set means no superlinear part.
    sizes = []
    for nodes in (900, 1400):
        with tempfile.TemporaryDirectory() as tmp:
            seconds, _, sets = _in_process(_fewer_scale_sets(Path(tmp), nodes), "prod-7500", hub)
            sizes.append((sets, seconds))
    sizes.append((prod_sets, prod_in))
    slopes = [(b[1] - a[1]) / (b[0] - a[0]) * 1000 for a, b in itertools.pairwise(sizes)]
    # Superlinear would show as a dearer scale set at the larger size (noise: a third either way).
    verdict = (
        "no superlinear part" if slopes[-1] <= 1.3 * slopes[0] else "superlinear: the larger size costs more per set"
    )
    return [
        (
            "agk plan --stack prod-7500 (wall)",
            f"{prod_s:.1f} s (target < 8 s; before issue 13: ~{PREVIOUS_PROD_S:.0f} s)",
        ),
        ("agk plan --stack dev (wall)", f"{dev_s:.1f} s"),
        (
            "prod-7500 / dev plan (wall, each plans the hub too)",
            f"{prod_s / dev_s:.2f}x (target <= 2.2x; resources {prod_n / dev_n:.2f}x)",
        ),
        (
            "plan prod-7500 / dev (in process, hub planned once)",
            f"{prod_in:.2f} s / {dev_in:.2f} s = {prod_in / dev_in:.2f}x for {prod_n} / {dev_n} resources",
        ),
        (
            "prod-7500 with " + " / ".join(str(n) for n, _ in sizes) + " scale sets (in process)",
            " / ".join(f"{t:.2f} s" for _, t in sizes)
            + f": {' then '.join(f'{m:.0f}' for m in slopes)} ms per added scale set ({verdict})",
        ),
    ]


if __name__ == "__main__":
    for name, value in rows():
        print(f"{name:<55} {value}")
