"""The rendered control plane of dev starts on the real binaries: every API server ready, one leader each."""

from __future__ import annotations

from tests.bootstrap.conftest import tool

from .cluster import ControlPlane, leader, ready


def test_every_api_server_is_ready_and_the_controllers_elect_one_leader(dev_plane: ControlPlane) -> None:
    assert all(ready(dev_plane, h) for h in dev_plane.hosts)
    version = dev_plane.get("/version")
    assert version["gitVersion"] == f"v{dev_plane.ctx.kubernetes_version}", version
    hosts = {h.name for h in dev_plane.hosts}
    for lease in ("kube-controller-manager", "kube-scheduler"):
        holder = leader(dev_plane, lease)  # "<hostname>_<uuid>"
        assert holder is not None and holder.rsplit("_", 1)[0] in hosts, (lease, holder)
    # Every process of every host still runs: the ones that lost the election wait, they do not exit.
    assert all(p.alive() for p in dev_plane.processes())
    assert [p.argv[7] for h in dev_plane.hosts[:1] for p in h.processes.values()] == [
        tool("kube-apiserver"),
        tool("kube-controller-manager"),
        tool("kube-scheduler"),
    ]
