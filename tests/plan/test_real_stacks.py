"""The real infra/ program, every shipped stack, under the mock runtime."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agk.plan.engine import REPO_ROOT, Planner, deployment
from agk.plan.topology import topology

from .graph_checks import check_graph

STACKS = REPO_ROOT / "stacks"
SHIPPED = ["hub", "dev", "prod-7500", "dev-addons", "prod-7500-addons"]


@pytest.fixture(scope="module")
def planner() -> Planner:
    return Planner(STACKS)


@pytest.mark.parametrize("stack", SHIPPED)
def test_every_stack_plans_to_a_well_formed_graph(planner: Planner, stack: str) -> None:
    check_graph(deployment(planner.plan(stack)), stack, "azure-gpu-k8s")


def test_all_orders_hub_and_images_then_clusters_then_addons(planner: Planner) -> None:
    order = [p.stack for p in planner.plan_all()]
    # The images stack goes before the clusters whose hosts boot its images (their StackReference to it).
    assert order == ["hub", "images", "dev", "prod-7500", "dev-addons", "prod-7500-addons"]


def test_cluster_spokes_peer_with_the_hub(planner: Planner) -> None:
    hub_vnet = next(iter(planner.plan("hub").by_type("azure-native:network:VirtualNetwork")))
    for stack in ("dev", "prod-7500"):
        topo = topology(planner.plan(stack), (planner.plan("hub"),))
        assert {p.remote for p in topo.peerings} >= {hub_vnet.id}
        assert topo.pools and all(pool.nodes > 0 for pool in topo.pools)


def test_prod_7500_has_7500_gpu_nodes(planner: Planner) -> None:
    pools = topology(planner.plan("prod-7500")).pools
    assert sum(p.nodes for p in pools if p.role == "gpu-node") == 7500
    # InfiniBand pools: one placement group per scale set, at most 100 VMs each.
    assert all(p.scale_sets * 100 >= p.nodes for p in pools if p.role == "gpu-node")


def test_cli_out_writes_state_plan_and_addresses(tmp_path: Path) -> None:
    done = subprocess.run(
        [str(Path(sys.executable).parent / "agk"), "plan", "--stack", "dev", "--out", str(tmp_path)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    folder = tmp_path / "dev"
    check_graph(json.loads((folder / "state.json").read_text()), "dev", "azure-gpu-k8s")
    assert json.loads((folder / "addresses.json").read_text())["stack"] == "dev"
    assert "```mermaid" in (folder / "plan.md").read_text()
    assert "nothing was deployed" in done.stdout


def test_cli_unknown_stack_is_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [str(Path(sys.executable).parent / "agk"), "plan", "--stack", "nope", "--out", str(tmp_path / "o")],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr == (
        "error: unknown stack 'nope': no stacks/Pulumi.nope.yaml: use one of "
        "dev, dev-addons, hub, images, prod-7500, prod-7500-addons\n"
    )
    assert not (tmp_path / "o").exists()


def test_two_plans_of_one_input_export_the_same_bytes(planner: Planner, monkeypatch: pytest.MonkeyPatch) -> None:
    """A plan is reproducible: the exports `agk plan --out` writes for a pull request differ only where the
    change does. The SDK sends dependencies from a set, so the export sorts them. (The patched environment
    also keeps the suite's plan cache out of the way: both plans run.)"""
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1767225600")
    first = json.dumps(deployment(Planner(STACKS).plan("dev-addons")), indent=1)
    again = json.dumps(deployment(Planner(STACKS).plan("dev-addons")), indent=1)
    assert first == again
