"""Speed of `agk review`: every shipped stack once the plan engine can plan them, and always the
policy pass alone over the committed fixture exports (no planning), scaled up to a 7,500-node shape."""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "policies"))


def _timed(call: object) -> float:
    start = time.perf_counter()
    call()  # type: ignore[operator]
    return time.perf_counter() - start


def rows() -> list[tuple[str, str]]:
    from policy_fixtures import good_cluster, vmss  # type: ignore[import-not-found]

    from agk.review import planned, review, stack_names
    from agk.review.export import load_file

    out: list[tuple[str, str]] = []
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

    stacks = ROOT / "stacks"
    plan_s: dict[str, float] = {}
    review_s: dict[str, float] = {}
    try:
        for name in stack_names(stacks):
            start = time.perf_counter()
            deployment = planned(name, stacks)
            plan_s[name] = time.perf_counter() - start
            start = time.perf_counter()
            review([deployment], None)
            review_s[name] = time.perf_counter() - start
    except Exception as err:  # the plan engine cannot plan the stacks yet: say so, do not invent a figure
        out.append(("agk review --all", f"not measured: planning failed ({type(err).__name__}: {err})"[:160]))
        return out
    out.append(("agk review --all (plan + review)", f"{sum(plan_s.values()) + sum(review_s.values()):.1f} s"))
    out.append(("agk review --all (policy pass only)", f"{sum(review_s.values()):.2f} s"))
    if "prod-7500" in review_s and "dev" in review_s:
        ratio = (plan_s["prod-7500"] + review_s["prod-7500"]) / (plan_s["dev"] + review_s["dev"])
        out.append(("agk review prod-7500 vs dev (plan + review)", f"{ratio:.1f}x"))
    return out


if __name__ == "__main__":
    for metric, value in rows():
        print(f"{metric}: {value}")
