"""Speed of the add-ons planning: spec validation and object rendering at prod-7500 scale."""

from __future__ import annotations

import time
from pathlib import Path

from modules.cluster.manifests import render_manifests
from modules.stackplan.config import load_stack
from modules.stackplan.prepare import addons_for, prepare_cluster

STACKS = Path(__file__).resolve().parents[1] / "stacks"


def _best(fn: object, runs: int = 20) -> float:
    assert callable(fn)
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def rows() -> list[tuple[str, str]]:
    config = load_stack(STACKS, "prod-7500")
    prep = prepare_cluster("prod-7500", config, STACKS)

    def spec() -> object:
        return addons_for("prod-7500", config, prep.addresses, prep.pools)

    built = spec()
    objs = render_manifests(built)
    return [
        ("cluster: addons_spec (prod-7500)", f"{_best(spec) * 1e3:.2f} ms"),
        ("cluster: render_manifests (prod-7500)", f"{_best(lambda: render_manifests(built)) * 1e3:.2f} ms"),
        ("cluster: Kubernetes objects (prod-7500)", str(len(objs))),
    ]


if __name__ == "__main__":
    for name, value in rows():
        print(f"{name}: {value}")
