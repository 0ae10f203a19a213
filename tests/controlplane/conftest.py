"""One real control plane per test session (per xdist worker: every test here is in one xdist group)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agk.render import render_manifests_dir
from modules.stackplan.config import load_stack
from modules.stackplan.prepare import ClusterPrep, prepare_cluster
from modules.vm_sizing.skus import sku
from tests.bootstrap.conftest import STACKS, context
from tests.cluster import ib_sysfs
from tests.cluster.fake_azure import azure  # noqa: F401  (the Azure stand-in's fixture)

from .cluster import ControlPlane, build, start, wait
from .containers import Runtime, wait_pods
from .kwok import FakeNode, Kwok, initialize, pool_nodes, register
from .kwok import ready as kwok_ready

GROUP = "controlplane"


def prepared(stack: str) -> ClusterPrep:
    """What the cluster program plans for ``stack``: its bootstrap context and its add-ons."""
    return prepare_cluster(stack, load_stack(STACKS, stack), STACKS)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # One worker runs the whole tier against one control plane (make test: --dist loadgroup). First: xdist's
    # worker reads the group marker in its own hook of the same name, which otherwise runs before this one
    # wherever this conftest is loaded before the worker plugin (a run naming tests/controlplane), and the
    # tier then starts its control planes on every worker.
    for item in items:
        if "tests/controlplane/" in str(item.path):
            item.add_marker(pytest.mark.xdist_group(GROUP))
            item.add_marker(pytest.mark.realtool)


@pytest.fixture(scope="session")
def dev_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """dev's control plane, started from its rendered files: 3 etcd members, 3 API server hosts."""
    cp = build(context("dev"), tmp_path_factory.mktemp("dev-plane"))
    try:
        start(cp)
        yield cp
    finally:
        cp.stop()


@pytest.fixture(scope="session")
def dev_cluster(dev_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> ControlPlane:
    """dev's control plane with every add-on object of dev applied, as the dev-addons stack deploys them."""
    folder = tmp_path_factory.mktemp("dev-addons")
    render_manifests_dir(prepared("dev").addons, folder)
    without_kueue_webhooks(folder / "manifests")
    argv = ("apply", "--server-side", "--field-manager=agk", "-f", str(folder / "manifests"))
    run = dev_plane.kubectl(*argv)
    if run.returncode != 0 and "ensure CRDs are installed first" in run.stderr:
        # Custom resources whose CRD the same apply creates (Kueue's queues): again once the CRDs are established.
        dev_plane.kubectl("wait", "--for=condition=established", "--timeout=120s", "crd", "--all")
        run = dev_plane.kubectl(*argv)
    assert run.returncode == 0, run.stdout + run.stderr
    wait_for_default_service_account(dev_plane, [t.name for t in prepared("dev").addons.teams])
    return dev_plane


def without_kueue_webhooks(manifests: Path) -> list[Path]:
    """Remove Kueue's webhook configurations from a rendered folder (and return them). No Kueue runs on these
    planes (its behaviour is proven on a plane of its own, test_queues.py), and its webhooks fail closed: with
    them registered, every ClusterQueue, ResourceFlavor and team-namespace pod would be refused for want of
    Kueue's Service. Everything else of the add-ons, Kueue's CRDs and queues included, is applied."""
    removed = sorted(manifests.glob("*webhookconfiguration-kueue-*.yaml"))
    for path in removed:
        path.unlink()
    return removed


def wait_for_default_service_account(cp: ControlPlane, namespaces: list[str]) -> None:
    """Pods are admitted in a namespace once the controller-manager has created its default ServiceAccount."""
    for ns in namespaces:
        wait(
            f"{ns}/default ServiceAccount",
            lambda n=ns: cp.call("GET", f"/api/v1/namespaces/{n}/serviceaccounts/default")[0] == 200,
            cp.processes(),
        )


@pytest.fixture(scope="session")
def prod_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """prod-7500's control plane from its rendered files: 5 etcd members, 5 events etcd members, and the first
    of its 5 API server hosts (its API server, controller-manager and scheduler). Its one test applies the
    add-ons, which each API server validates alike; the five hosts' failover is dev's three hosts' (test_start)."""
    cp = build(context("prod-7500"), tmp_path_factory.mktemp("prod-plane"))
    try:
        start(cp, hosts=1)
        yield cp
    finally:
        cp.stop()


@dataclass
class Nodes:
    """dev's pools as kwok nodes on dev's control plane, and the container stand-in for their pods."""

    prep: ClusterPrep
    pools: dict[str, list[FakeNode]]
    kwok: Kwok
    runtime: Runtime

    @property
    def all(self) -> list[FakeNode]:
        return [n for nodes in self.pools.values() for n in nodes]

    def pool_of(self, name: str) -> str:
        (pool,) = [n.pool for n in self.all if n.name == name]
        return pool


@pytest.fixture(scope="session")
def dev_nodes(dev_cluster: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nodes]:
    """Every node of dev's pools registered as its kubelet would, initialized as cloud-provider-azure would
    (both stand-ins, tests/controlplane/kwok.py), kept Ready by kwok."""
    root = tmp_path_factory.mktemp("dev-nodes")
    prep = prepared("dev")
    kwok = Kwok(dev_cluster, root / "kwok")
    runtime = Runtime(dev_cluster, root / "containers")
    try:
        pools = {name: pool_nodes(prep, name) for name in prep.pools.pools}
        nodes = Nodes(prep, pools, kwok, runtime)
        register(dev_cluster, nodes.all)
        initialize(dev_cluster, nodes.all)
        kwok_ready(dev_cluster, [n.name for n in nodes.all])
        yield nodes
    finally:
        runtime.stop()
        kwok.stop()


@dataclass
class Released:
    nodes: Nodes
    held: FakeNode
    """A GPU node left in preflight (its diagnostics never ran): it must take no workload."""
    reports: dict[str, str]
    """Node -> what the preflight reporter printed."""


@pytest.fixture(scope="session")
def released(dev_cluster: ControlPlane, dev_nodes: Nodes) -> Released:
    """Preflight as a new node goes through it: the rendered gpu-preflight DaemonSet's pod on each GPU node
    (created by the real DaemonSet controller, bound by the real scheduler), its diagnostics' result (the
    stand-in: no GPU here, so the init container's ``pass`` is written for it), and its real ``report``
    container (modules/cluster/scripts/preflight_report.py with the pod's own service account) releasing
    the node. One GPU node is held back in preflight."""
    gpu = [n for n in dev_nodes.all if n.pool != "system"]
    held = gpu[-1]
    reports = run_preflight(dev_cluster, dev_nodes, [n.name for n in gpu if n is not held], expect=len(gpu))
    return Released(dev_nodes, held, reports)


def run_preflight(
    cp: ControlPlane,
    nodes: Nodes,
    names: list[str],
    *,
    result: str = "pass",
    expect: int | None = None,
    ib_faults: dict[str, Any] | None = None,
) -> dict[str, str]:
    """Preflight on ``names``: the gpu-preflight DaemonSet's pod on each (``expect``: how many GPU nodes
    carry one); its real ``ib-check`` init container (modules/cluster/scripts/ib_check.py, reading its Node
    with the pod's service account) over a stand-in sysfs of the node's size (tests/cluster/ib_sysfs.py, with
    ``ib_faults``); the diagnostics' ``result`` written for the DCGM init container (no GPU here); its real
    ``report`` container run until the node's preflight label changes. Node -> what ib-check and the reporter
    printed."""
    key = prepared("dev").addons.preflight_key
    pods = wait_pods(cp, "gpu-health", "app.kubernetes.io/name=gpu-preflight", expect or len(names))
    by_node = {p["spec"]["nodeName"]: p for p in pods}
    assert set(names) <= set(by_node), (names, sorted(by_node))
    reports = {}
    for name in names:
        pod = by_node[name]
        results = nodes.runtime.volume(pod, "results")
        size = sku(prepared("dev").pools.pools[nodes.pool_of(name)].vm_size)
        ib_sysfs.write(results / "sysfs", size.ib_links, size.ib_gbps, **(ib_faults or {}))
        check = nodes.runtime.start(pod, "ib-check", extra_env={"SYSFS_ROOT": "/results/sysfs"})
        assert check.wait(60) == 0, check.output()
        (results / "status").write_text(f"{result}\n")
        run = nodes.runtime.start(pod, "report")
        wait(
            f"preflight to report on {name}",
            lambda n=name: cp.get(f"/api/v1/nodes/{n}")["metadata"]["labels"].get(key) != "pending",
            [],
            timeout=60,
        )
        # The reporter prints its verdict just after the label is written: stopping it at the label cut the
        # line off (seen once in a full run).
        wait(f"the reporter's verdict on {name}", lambda n=name, r=run: f" on {n}" in r.output(), [], timeout=30)
        run.stop()
        reports[name] = check.output() + run.output()
    return reports
