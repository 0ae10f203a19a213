"""The pool roll's choices (modules/cluster/scripts/roll_pool.py ``pick``), a table of fleets: which nodes
start, within the pool's and the island's share. Its behaviour against the real API server (eviction,
budgets, preflight, the CronJob it suspends) is tests/controlplane/test_roll.py; at prod-7500's size,
tests/scale."""

from __future__ import annotations

from typing import Any

import pytest

from modules.cluster.objects.roll import roll_rule, schedule
from modules.cluster.scripts.azure import Instance
from modules.cluster.scripts.roll_pool import Node, cap, evictable, pick, slim, unmanaged
from modules.cluster.spec import AddonsSpec

RULE = {"max_unavailable_percent": 5, "island_max_unavailable_percent": 10}
SUB = "00000000-0000-0000-0000-000000000000"


def fleet(pool: str, islands: int, per_island: int, **overrides: dict[str, Any]) -> dict[str, Node]:
    out = {}
    for i in range(islands):
        for j in range(per_island):
            name = f"{pool}-{i:02d}{j:03d}"
            provider = (
                f"azure:///subscriptions/{SUB}/resourceGroups/agk-x/providers/Microsoft.Compute/"
                f"virtualMachineScaleSets/{pool}-{i:02d}/virtualMachines/{j}"
            )
            fields: dict[str, Any] = {
                "name": name,
                "uid": f"uid-{name}",
                "pool": pool,
                "island": f"{pool}-{i:02d}",
                "provider_id": provider,
                "preflight": None,
                "fenced": False,
                "unschedulable": False,
            }
            fields |= overrides.get(name, {})
            out[name] = Node(**fields)
    return out


def state(nodes: dict[str, Any] | None = None, failed: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"nodes": nodes or {}, "failed": failed or {}, "acknowledged": {}, "paused_at": None}


def everything_behind(vm: Instance) -> bool:
    return True


def test_a_pools_share_starts_at_once_islands_without_work_are_not_held() -> None:
    nodes = fleet("h100", 2, 100)
    chosen = pick(nodes, state(), set(), RULE, everything_behind)
    assert [n.name for n in chosen.nodes] == [f"h100-00{j:03d}" for j in range(10)]  # 5% of 200
    assert not chosen.held


def test_nodes_out_of_service_for_any_reason_use_the_share() -> None:
    nodes = fleet(
        "h100",
        1,
        100,
        **{
            "h100-00000": {"unschedulable": True},
            "h100-00001": {"preflight": "failed"},
            "h100-00002": {"fenced": True},
        },
    )
    # 5 of 100; 3 out, 1 rolling (its Node deleted, so not in the fleet): one starts.
    del nodes["h100-00050"]
    chosen = pick(nodes, state({"h100-00050": {"pool": "h100", "island": "h100-00"}}), set(), RULE, everything_behind)
    assert [n.name for n in chosen.nodes] == ["h100-00003"]


def test_an_island_with_training_work_keeps_most_of_its_nodes_and_busy_nodes_go_last() -> None:
    nodes = fleet("h100", 2, 100)
    busy = {f"h100-00{j:03d}" for j in range(0, 100, 2)}  # half of island 0 runs a gang
    chosen = pick(nodes, state(), busy, RULE | {"max_unavailable_percent": 50}, everything_behind)
    island0 = [n.name for n in chosen.nodes if n.island == "h100-00"]
    island1 = [n.name for n in chosen.nodes if n.island == "h100-01"]
    assert len(island0) == 10 and not set(island0) & busy  # 10% of the island, idle nodes first
    assert len(island1) == 90  # no work there: only the pool's share (100 of 200) bounds it
    # Held by the island alone: its other 40 idle nodes (the busy ones find the pool's share used first).
    assert chosen.held == {"h100-00": 40}


def test_only_nodes_behind_the_model_start_and_azure_is_asked_only_while_there_is_room() -> None:
    nodes = fleet("a100", 1, 40)
    asked: list[str] = []

    def behind(vm: Instance) -> bool:
        asked.append(vm.instance)
        return int(vm.instance) % 2 == 1

    chosen = pick(nodes, state(), set(), RULE, behind)
    assert [n.name for n in chosen.nodes] == ["a100-00001", "a100-00003"]  # 5% of 40
    assert asked == ["0", "1", "2", "3"]


def test_a_failed_node_is_skipped_until_it_is_a_new_node() -> None:
    nodes = fleet("a100", 1, 20)
    failed = {"a100-00000": {"uid": "uid-a100-00000", "why": "failed preflight"}}
    assert [n.name for n in pick(nodes, state(failed=failed), set(), RULE, everything_behind).nodes] == ["a100-00001"]
    failed["a100-00000"]["uid"] = "an-older-node"
    assert [n.name for n in pick(nodes, state(failed=failed), set(), RULE, everything_behind).nodes] == ["a100-00000"]


@pytest.mark.parametrize(("size", "percent", "room"), [(4, 5, 1), (100, 5, 5), (1000, 5, 50), (99, 10, 9), (1, 100, 1)])
def test_the_share_is_a_floor_of_at_least_one(size: int, percent: int, room: int) -> None:
    assert cap(size, percent) == room


def test_drain_leaves_daemonset_mirror_and_finished_pods() -> None:
    ds = {"metadata": {"ownerReferences": [{"kind": "DaemonSet"}]}, "status": {"phase": "Running"}}
    mirror = {"metadata": {"annotations": {"kubernetes.io/config.mirror": "x"}}, "status": {"phase": "Running"}}
    done = {"metadata": {}, "status": {"phase": "Succeeded"}}
    work = {"metadata": {"ownerReferences": [{"kind": "ReplicaSet"}]}, "status": {"phase": "Running"}}
    assert [evictable(p) for p in (ds, mirror, done, work)] == [False, False, False, True]
    owned = {"metadata": {"ownerReferences": [{"kind": "ReplicaSet", "controller": True}]}}
    assert [unmanaged(p) for p in (work, owned, done)] == [True, False, True]


def test_the_rule_reads_the_nodes_the_bootstrap_labels(dev_spec: AddonsSpec) -> None:
    rule = roll_rule(dev_spec)
    body = {
        "metadata": {
            "name": "n",
            "uid": "u",
            "labels": {rule["pool_key"]: "h100", rule["island_key"]: "h100-00", rule["preflight_key"]: "pending"},
        },
        "spec": {"providerID": "p", "taints": [{"key": rule["fence_key"], "effect": "NoExecute"}]},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }
    assert slim(body, rule) == Node("n", "u", "h100", "h100-00", "p", "pending", True, False)
    assert rule["node_selector"] == "gpu.example.com/accelerator=nvidia"
    assert [schedule(m) for m in (1, 5, 60)] == ["* * * * *", "*/5 * * * *", "0 * * * *"]


def test_a_node_that_is_not_ready_is_out_and_a_failed_vm_without_a_node_still_counts() -> None:
    nodes = fleet("a100", 1, 40, **{"a100-00000": {"ready": False}})
    chosen = pick(nodes, state(), set(), RULE, everything_behind)
    assert [n.name for n in chosen.nodes] == ["a100-00001"]  # 2 of 40: the NotReady node is one of them
    failed = {"a100-00039": {"uid": "u", "why": "no new Node", "pool": "a100", "island": "a100-00"}}
    del nodes["a100-00039"]
    assert pick(nodes, state(failed=failed), set(), RULE, everything_behind).nodes == []


def test_a_failure_acknowledged_on_resume_still_counts_while_its_vm_has_no_node() -> None:
    nodes = fleet("a100", 1, 40)
    del nodes["a100-00039"], nodes["a100-00038"]
    gone = {"uid": "u", "why": "no new Node", "pool": "a100", "island": "a100-00"}
    st = state()
    st["acknowledged"] = {"a100-00039": gone, "a100-00038": gone}
    assert pick(nodes, st, set(), RULE, everything_behind).nodes == []  # 2 of 40 out: the share is used
