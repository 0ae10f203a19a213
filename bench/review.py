"""Speed of `agk review`: `agk review --all` against `agk plan --all`, side by side in one run with
the figures before issue 13, and the policy pass alone over the committed fixture exports (no
planning), scaled up to a 7,500-node shape."""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "policies"))

PREVIOUS = {"plan": 20.4, "review": 36.5}
"""`agk plan --all` and `agk review --all` before issue 13 (2-core machine, issue 13)."""


def _timed(call: object) -> float:
    start = time.perf_counter()
    call()  # type: ignore[operator]
    return time.perf_counter() - start


def rows() -> list[tuple[str, str]]:
    from policy_fixtures import good_cluster, vmss  # type: ignore[import-not-found]

    from agk.review import review
    from agk.stack_export import load_file
    from bench.plan import cli_seconds

    out: list[tuple[str, str]] = []
    plan_s = cli_seconds("plan", "--all", "--format", "json")
    review_s = cli_seconds("review", "--all", "--format", "json")
    out += [
        ("agk plan --all (wall)", f"{plan_s:.1f} s (before issue 13: {PREVIOUS['plan']:.1f} s)"),
        ("agk review --all (wall)", f"{review_s:.1f} s (before issue 13: {PREVIOUS['review']:.1f} s)"),
        (
            "agk review --all / agk plan --all",
            f"{review_s / plan_s:.2f}x (target < 1.3x; before: {PREVIOUS['review'] / PREVIOUS['plan']:.2f}x)",
        ),
    ]
    fixture = load_file(ROOT / "tests" / "review" / "fixtures" / "broken-stack.json")
    out.append(("review: fixture stack (policy pass only)", f"{_timed(lambda: review([fixture], None)):.2f} s"))
    big = good_cluster()
    for i in range(2, 75):
        big.add(
            "azure-native:compute:VirtualMachineScaleSet",
            f"gpu-h100-{i}",
            vmss(f"gpu-h100-{i}", "h100", "gpu-h100", 100, 26),
        )
    dep = big.deployment()
    small_s = _timed(lambda: review([good_cluster().deployment()], None))
    big_s = _timed(lambda: review([dep], None))
    out.append(("review: 75 scale sets x 27 IP configs (policy pass only)", f"{big_s:.2f} s"))
    out.append(("review: 75 vs 2 scale sets ratio", f"{big_s / small_s:.1f}x"))
    return out


if __name__ == "__main__":
    for metric, value in rows():
        print(f"{metric}: {value}")
