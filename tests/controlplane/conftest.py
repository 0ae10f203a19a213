"""One real control plane per test session (per xdist worker: every test here is in one xdist group)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agk.render import render_manifests_dir
from modules.stackplan.config import load_stack
from modules.stackplan.prepare import ClusterPrep, prepare_cluster
from tests.bootstrap.conftest import STACKS, context

from .cluster import ControlPlane, build, start, wait

GROUP = "controlplane"


def prepared(stack: str) -> ClusterPrep:
    """What the cluster program plans for ``stack``: its bootstrap context and its add-ons."""
    return prepare_cluster(stack, load_stack(STACKS, stack), STACKS)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # One worker runs the whole tier against one control plane (make test: --dist loadgroup).
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
    run = dev_plane.kubectl("apply", "--server-side", "--field-manager=agk", "-f", str(folder / "manifests"))
    assert run.returncode == 0, run.stdout + run.stderr
    wait_for_default_service_account(dev_plane, [t.name for t in prepared("dev").addons.teams])
    return dev_plane


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
    """prod-7500's control plane from its rendered files: 5 etcd members, 5 events etcd members, 5 API
    server hosts (each with its controller-manager and scheduler)."""
    cp = build(context("prod-7500"), tmp_path_factory.mktemp("prod-plane"))
    try:
        start(cp)
        yield cp
    finally:
        cp.stop()
