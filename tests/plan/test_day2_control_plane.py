"""The rolling control plane (issue 20, item 3), on the real program planned twice.

Before issue 20 the control plane's sizes and flags followed the node count node by node: adding one node
rewrote the API servers' flag comments, audit policy and scheduler configuration (so every API server and
scheduler restarted), and a pool change that resized the etcd members resized all of them in one update
(Azure restarts a resized VM: etcd loses quorum). Sizes now follow the node count in steps, no control-plane
file carries a count, the control-plane VMs change one after another, and the plan lists every host whose
processes a change restarts.
"""

from __future__ import annotations

import copy
import itertools
from pathlib import Path
from typing import Any

import pytest

from agk.plan.change_report import sizing_line
from agk.plan.diff import resources_of
from agk.review import ChangeSet, review
from agk.stack_export import parse
from modules.vm_sizing.recommend import sizing_step
from policies.rules.change import chain_is_enough

from .changed_stacks import Edit, cluster, diff, export, line, stack_folder

ETCD = [f"dev-etcd-{i}" for i in range(3)]


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return export(stack_folder(tmp_path_factory.mktemp("base")))


def _head(tmp_path: Path, edit: Edit) -> dict[str, Any]:
    return export(stack_folder(tmp_path / "stacks", edit=edit))


def _verdicts(found: Any, head: dict[str, Any]) -> list[Any]:
    return review([parse(head, "dev", "x")], None, [ChangeSet(found, [], "stacks/Pulumi.dev.yaml")]).violations


def _cross_a_step(config: dict[str, Any]) -> None:
    # 42 nodes of 2 pod IPs still fit h100's subnet; the cluster's peak goes from 14 to 52 nodes (step 50 -> 100).
    pool = cluster(config)["gpu_pools"]["h100"]
    pool["nodes"], pool["pod_ips"] = 42, 2


def test_sizing_steps() -> None:
    assert [sizing_step(n) for n in (1, 14, 16, 50, 51, 2999, 3001, 7588, 8001)] == [
        5,
        50,
        50,
        50,
        100,
        3000,
        4000,
        8000,
        9000,
    ]


def test_growing_a_pool_inside_a_step_touches_no_control_plane_host(tmp_path: Path, base: dict[str, Any]) -> None:
    found, radius = diff(base, _head(tmp_path, lambda c: cluster(c)["gpu_pools"]["h100"].__setitem__("nodes", 6)))
    # Before issue 20: every API server's tag and Key Vault bundle changed (flag comments, audit policy and
    # scheduler configuration named the node count), so every API server and scheduler restarted.
    assert [line(c) for c in found.changes] == ["update VirtualMachineScaleSet h100-00 [sku]"]
    assert radius.restarts == []
    assert sizing_line(found) == (
        "Sized for 50 nodes (peak 14 -> 16, inside the step): no control-plane size or limit changes"
    )


def test_crossing_a_step_resizes_etcd_one_member_after_another(tmp_path: Path, base: dict[str, Any]) -> None:
    head = _head(tmp_path, _cross_a_step)
    found, radius = diff(base, head)
    assert [line(c) for c in found.changes if c.type.endswith(":VirtualMachine")] == [
        *(f"update VirtualMachine dev-apiserver-{i} [tags]" for i in range(3)),
        *(f"update VirtualMachine {h} [hardwareProfile]" for h in ETCD),
        # 100 nodes' and 3,700 pods' series with dev's queries and the host's 4 GiB need 16.3 GiB: a D8ds_v5.
        "update VirtualMachine dev-prometheus-0 [hardwareProfile]",
    ]
    assert sizing_line(found) == (
        "Sizing step crossed: sized for 50 -> 100 nodes (peak 14 -> 52): control-plane and Prometheus VM sizes,"
        " etcd IOPS, the Prometheus disk and the API server and client limits follow it"
    )
    # The plan names every host the change restarts, and how.
    assert [(r.host, r.how, r.actions) for r in radius.restarts] == [
        (h, "vm", ("VM restarted by Azure (hardwareProfile.vmSize)",)) for h in (*ETCD, "dev-prometheus-0")
    ]
    # Each member's VM waits for the one before: `pulumi up` resizes them one at a time.
    vms = {r["urn"].rsplit("::", 1)[-1]: r for r in resources_of(head) if r["type"].endswith(":VirtualMachine")}
    for earlier, later in itertools.pairwise(ETCD):
        assert vms[earlier]["urn"] in vms[later]["dependencies"]
    # But a link waits for the VM before to run again, not for its member to rejoin: two of dev's three
    # members can be down at once, so the review asks for one member per update.
    (refused,) = [v for v in _verdicts(found, head) if v.policy == "control-plane-one-at-a-time"]
    assert refused.message == (
        "3 of 3 etcd VMs (dev-etcd-0, dev-etcd-1, dev-etcd-2) would be restarted or replaced by `pulumi up` ordered,"
        " but each waits only for the VM before to run again, not for its member to rejoin, so two can be down at"
        " once and etcd loses quorum with more than 1 down: change one per update (`pulumi up --target <urn>` one"
        " VM at a time, waiting for `etcdctl endpoint health` or /readyz in between)"
    )


@pytest.mark.parametrize(
    ("role", "members", "enough"),
    [("etcd", 3, False), ("etcd", 5, True), ("events-etcd", 3, False), ("etcd", 7, True), ("apiserver", 3, True)],
)
def test_a_chain_is_enough_where_the_group_survives_two_down(role: str, members: int, enough: bool) -> None:
    assert chain_is_enough(role, members) is enough


def test_resizing_every_member_at_once_is_refused(tmp_path: Path, base: dict[str, Any]) -> None:
    """The same change in a state whose members do not wait for each other (a program without the chain)."""
    head = copy.deepcopy(_head(tmp_path, _cross_a_step))
    vm_urns = {r["urn"] for r in resources_of(head) if r["type"].endswith(":VirtualMachine")}
    for res in resources_of(head):
        if res["urn"] in vm_urns:
            res["dependencies"] = [d for d in res.get("dependencies", []) if d not in vm_urns]
    found, _ = diff(base, head)
    (refused,) = [v for v in _verdicts(found, head) if v.policy == "control-plane-one-at-a-time"]
    assert refused.enforcement == "mandatory"
    assert refused.message.startswith(
        "3 of 3 etcd VMs (dev-etcd-0, dev-etcd-1, dev-etcd-2) would be restarted or replaced by `pulumi up` at once,"
        " and etcd loses quorum with more than 1 down"
    )


def test_a_configuration_change_names_the_processes_it_restarts(tmp_path: Path, base: dict[str, Any]) -> None:
    def scrape(config: dict[str, Any]) -> None:
        config["azure-gpu-k8s:cluster"].setdefault("prometheus", {})["scrape_interval"] = "15s"

    _found, radius = diff(base, _head(tmp_path, scrape))
    # Prometheus reloads; Grafana's data source carries the scrape interval (its timeInterval), and Grafana
    # reads provisioning only at start.
    actions = ("reload prometheus.service", "restart grafana-server.service")
    assert [(r.host, r.how, r.actions) for r in radius.restarts] == [("dev-prometheus-0", "sync", actions)]
    assert radius.as_json()["restarts"] == [
        {"host": "dev-prometheus-0", "role": "prometheus", "actions": list(actions), "how": "sync"}
    ]
