"""Growing and shrinking prod-7500's pools (issue 20, item 1), on the real program planned twice.

Before issue 20, adding 25 nodes to `h100-a` re-split the pool: all 19 scale sets dropped from 99 to 95
and a 20th was added, so Azure's scale-in removed 76 running H100 VMs of its own choosing while the
blast radius said "0 nodes". A shrink deleted a whole set plus VMs Azure picked from the others, and
the blast radius left out the VMs removed from the sets that stay.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agk.plan.change_report import quota_delta, radius_lines
from agk.plan.diff import resources_of
from agk.review import ChangeSet, review
from agk.stack_export import parse

from .changed_stacks import cluster, diff, export, line, stack_folder

STACK = "prod-7500"
H100 = "Standard_ND96isr_H100_v5"


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return export(stack_folder(tmp_path_factory.mktemp("base")), STACK)


def _nodes(nodes: int) -> Any:
    return lambda c: cluster(c)["gpu_pools"]["h100-a"].__setitem__("nodes", nodes)


def _plan(tmp_path: Path, base: dict[str, Any], nodes: int) -> tuple[Any, Any, dict[str, Any]]:
    head = export(stack_folder(tmp_path / "stacks", STACK, _nodes(nodes)), STACK)
    found, radius = diff(base, head, STACK)
    return found, radius, head


def _scale_sets(changes: Any) -> list[str]:
    return [line(c) for c in changes if c.type.endswith(":VirtualMachineScaleSet")]


def _verdicts(found: Any, head: dict[str, Any]) -> list[tuple[str, str, str]]:
    report = review([parse(head, STACK, "x")], None, [ChangeSet(found, [], f"stacks/Pulumi.{STACK}.yaml")])
    return [(v.policy, v.enforcement, v.message) for v in report.violations]


def test_growing_a_pool_fills_its_newest_set_and_adds_one(tmp_path: Path, base: dict[str, Any]) -> None:
    found, radius, head = _plan(tmp_path, base, 1875 + 25)
    # 18 full sets of 99 and one of 93 today: the 93 fills to 99, the other 19 go to a new set.
    assert _scale_sets(found.changes) == [
        "update VirtualMachineScaleSet h100-a-18 [sku]",
        "create VirtualMachineScaleSet h100-a-19 []",
    ]
    grown = next(c for c in found.changes if c.name == "h100-a-18")
    assert grown.paths == ("sku.capacity",)
    body = radius.as_json()
    assert (body["nodes"], body["gpus"], body["scale_sets"]) == (0, 0, [])
    assert (body["nodes_created"], body["gpus_created"]) == (25, 200)
    assert [(s["name"], s["action"], s["nodes"]) for s in body["scale_sets_created"]] == [
        ("h100-a-18", "scale-out", 6),
        ("h100-a-19", "create", 19),
    ]
    # The PR comment's quota line: what the 25 new H100 VMs take from the region's vCPU quota (96 each).
    assert quota_delta(found) == {"standardNDSH100v5Family": 25 * 96}
    assert not [v for v in _verdicts(found, head) if v[1] == "mandatory"]


def test_scale_sets_are_created_in_waves(base: dict[str, Any]) -> None:
    """Issue 20, item 5: all 76 InfiniBand scale sets were submitted at once. Each now waits for the set
    cluster.scale_sets_in_flight (10) places before it, across pools."""
    sets = [r for r in resources_of(base) if r["type"].endswith(":VirtualMachineScaleSet")]
    assert len(sets) == 77
    urns = {r["urn"] for r in sets}
    waits = {r["urn"]: [d for d in r.get("dependencies", []) if d in urns] for r in sets}
    # Ten sets start at once; every other waits for exactly one, and no set is waited for twice: ten chains.
    assert sum(not w for w in waits.values()) == 10
    assert all(len(w) <= 1 for w in waits.values())
    waited = [w[0] for w in waits.values() if w]
    assert len(waited) == len(set(waited)) == 67


def test_shrinking_a_pool_names_the_vms_it_removes(tmp_path: Path, base: dict[str, Any]) -> None:
    found, radius, head = _plan(tmp_path, base, 1875 - 100)
    # The pool's 1% surge drops from 19 to 18 VMs: every set's agk-surge tag follows (an update Azure takes in
    # place, no VM touched). Capacity changes only in the two newest sets.
    sets = [c for c in found.changes if c.type.endswith(":VirtualMachineScaleSet")]
    assert [line(c) for c in sets if c.paths != ("tags.agk-surge",)] == [
        "delete VirtualMachineScaleSet h100-a-18 []",
        "update VirtualMachineScaleSet h100-a-17 [sku, tags]",
    ]
    assert len(sets) == 1 + 18  # the deleted set and every set that stays
    body = radius.as_json()
    # Every VM that goes is counted: the 93 of the deleted set and the 7 taken from the one before it.
    assert (body["nodes"], body["gpus"]) == (100, 800)
    assert [(s["name"], s["action"], s["nodes"], s["running"]) for s in body["scale_sets"]] == [
        ("h100-a-18", "delete", 93, 93),
        ("h100-a-17", "scale-in", 7, 99),
    ]
    assert radius_lines(radius)[:2] == [
        "100 nodes (800 GPUs) in 2 scale sets replaced, deleted or scaled in",
        "VMs removed: h100-a-18: all 93 VMs, the set is deleted; h100-a-17: the newest 7 of its 99 VMs;"
        " drain them first (docs/day2.md)",
    ]
    assert quota_delta(found) == {"standardNDSH100v5Family": -100 * 96}
    assert ("pool-shrink-below-running", "advisory") in {v[:2] for v in _verdicts(found, head)}
    shrink = next(v[2] for v in _verdicts(found, head) if v[0] == "pool-shrink-below-running")
    assert shrink == (
        "pool h100-a shrinks from 1,875 to 1,775 nodes: 100 running nodes and their pods go"
        " (h100-a-18 93 -> 0 (deleted); h100-a-17 99 -> 92; a set loses its newest VMs); drain them first"
    )


def test_the_next_up_keeps_the_split_it_finds_deployed(tmp_path: Path) -> None:
    """A pool an earlier release split differently (here dev's h100 as two sets of 2) is not re-split: the
    program reads its own last outputs (``pools.<pool>.scale_sets``) and keeps the capacities it runs with."""
    from agk.plan.engine import Planner, deployment

    from .changed_stacks import outputs_of

    folder = stack_folder(tmp_path / "stacks")
    last = outputs_of(export(folder))
    assert last["pools"]["h100"]["scale_sets"] == {"h100-00": 4}
    last["pools"]["h100"]["scale_sets"] = {"h100-00": 2, "h100-01": 2}
    head = deployment(Planner(folder, last_outputs=lambda name: last if name == "dev" else {}).plan("dev"))
    capacities = {
        r["urn"].rsplit("::", 1)[-1]: r["inputs"]["sku"]["capacity"]
        for r in head["deployment"]["resources"]
        if r["type"].endswith(":VirtualMachineScaleSet") and r["urn"].rsplit("::", 1)[-1].startswith("h100-")
    }
    assert capacities == {"h100-00": 2, "h100-01": 2}


def test_a_large_pool_shrunk_below_one_placement_group_stays_large(tmp_path: Path) -> None:
    """Azure converts a scale set to large (singlePlacementGroup false) and never back, so a system pool shrunk
    from 120 nodes to 50 keeps its large sets: before, the flag followed the new size, and the review refused
    the routine shrink as a change Azure refuses in place."""
    from agk.plan.engine import Planner, deployment

    from .changed_stacks import outputs_of

    def system(nodes: int) -> Any:
        def edit(config: dict[str, Any]) -> None:
            pool = cluster(config)["system_pool"]
            pool["nodes"], pool["pod_ips"] = nodes, 2

        return edit

    big = export(stack_folder(tmp_path / "big", edit=system(120)))
    last = outputs_of(big)
    assert last["pools"]["system"]["single_placement_group"] is False
    folder = stack_folder(tmp_path / "small", edit=system(50))
    head = deployment(Planner(folder, last_outputs=lambda name: last if name == "dev" else {}).plan("dev"))
    found, _ = diff(big, head, "dev")
    sets = [c for c in found.changes if c.type.endswith(":VirtualMachineScaleSet")]
    assert [line(c) for c in sets] == ["update VirtualMachineScaleSet system-00 [sku]"]
    assert not [c for c in found.changes if c.refused]
    # A stack planned afresh at 50 nodes (no large set deployed) still takes one placement group.
    fresh = outputs_of(export(stack_folder(tmp_path / "fresh", edit=system(50))))
    assert fresh["pools"]["system"]["single_placement_group"] is True
