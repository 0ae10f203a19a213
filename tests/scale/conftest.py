"""prod-7500's fleet on a real API server: the scale tier's shared fixtures.

``fleet_api`` (in `make test`): prod-7500's rendered etcd members (5, and the events etcd's 5) and its first API server
host's kube-apiserver, exactly as rendered, with no controller-manager or scheduler: the controllers under
test are the only clients that act. Every node of prod-7500's pools at their deployed capacity (7,500 GPU nodes in 76 islands and
the 10 system nodes: 7,510; the 76 nodes of surge exist only during a roll) is registered as its kubelet would register it, and every node agent's pod is bound to
its node and Running (tests/scale/load.py) in ``fleet_with_pods``, which only the ``fleet``-marked tests use
(`make bench-scale`). The whole tier shares one such API server on one worker.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from agk.render import render_manifests_dir
from modules.stackplan.prepare import ClusterPrep
from tests.bootstrap.conftest import context
from tests.cluster.fake_azure import azure  # noqa: F401  (the Azure stand-in's fixture)
from tests.controlplane.cluster import ControlPlane, build, start
from tests.controlplane.conftest import prepared
from tests.controlplane.kwok import FakeNode

from .load import Loader, fleet, place_agents, register_fleet

GROUP = "scale"


@pytest.hookimpl(tryfirst=True)  # before xdist's worker reads the group (tests/controlplane/conftest.py)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/scale/" in str(item.path):
            item.add_marker(pytest.mark.xdist_group(GROUP))
            item.add_marker(pytest.mark.realtool)
            if "fleet_with_pods" in getattr(item, "fixturenames", ()):
                item.add_marker(pytest.mark.fleet)


@dataclass
class Fleet:
    cp: ControlPlane
    prep: ClusterPrep
    nodes: list[FakeNode]
    register_s: float
    pods: int
    pods_s: float


@pytest.fixture(scope="session")
def fleet_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    prep = prepared("prod-7500")
    cp = build(context("prod-7500"), tmp_path_factory.mktemp("fleet"))
    try:
        start(cp, hosts=1, controllers=False)
        folder = tmp_path_factory.mktemp("fleet-addons")
        render_manifests_dir(prep.addons, folder)
        apply = cp.kubectl("apply", "--server-side", "--field-manager=agk", "-f", str(folder / "manifests"))
        assert apply.returncode == 0, apply.stderr
        root_ca(cp)
        nodes = fleet(prep)
        loader = Loader(cp)
        register_s = register_fleet(cp, prep, nodes, loader)
        yield Fleet(cp, prep, nodes, register_s, 0, 0.0)
    finally:
        cp.stop()


@pytest.fixture(scope="session")
def fleet_with_pods(fleet_api: Fleet) -> Fleet:
    """The fleet with every node agent's pod bound and Running on its node (~45,000 pods at prod-7500:
    minutes of writes on 2 cores, so only the ``fleet`` tests, which `make bench-scale` runs, use it)."""
    if fleet_api.pods == 0:
        fleet_api.pods, fleet_api.pods_s = place_agents(fleet_api.cp, fleet_api.prep, fleet_api.nodes)
    return fleet_api


def root_ca(cp: ControlPlane) -> None:
    """What kube-controller-manager writes in every namespace (no controller-manager runs here):
    ``kube-root-ca.crt`` (root-ca-cert-publisher), read by every pod's service-account volume, and the
    ``default`` ServiceAccount (serviceaccount controller), which the ServiceAccount admission plugin requires
    of a pod that names none (the agents that need no API access)."""
    from modules.bootstrap import pki

    ca = cp.pems[f"cert:{pki.KUBERNETES_CA}"]
    for ns in cp.get("/api/v1/namespaces")["items"]:
        name = ns["metadata"]["name"]
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "kube-root-ca.crt"},
            "data": {"ca.crt": ca},
        }
        code, out = cp.call("POST", f"/api/v1/namespaces/{name}/configmaps", body)
        assert code in (201, 409), out
        account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}}
        code, out = cp.call("POST", f"/api/v1/namespaces/{name}/serviceaccounts", account)
        assert code in (201, 409), out
