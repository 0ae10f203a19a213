"""What Azure refuses in place (issue 20, item 2), on the real program planned twice.

Before issue 20, rotating the admin SSH key planned an in-place update of every VM and moving the API
servers to other zones in-place zone changes of VMs, disks and the load balancer frontend; the review
passed both, and both fail at `pulumi up` with PropertyChangeNotAllowed. The plan now shows each as
refused with the fix from the one table (policies/rules/replacements.py), the review refuses it
(mandatory), and an allowance cannot let it through. Keys Azure accepts in place stay updates.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agk.plan.change_report import markdown, refused_lines
from agk.review import ChangeSet, allowances, review
from agk.stack_export import parse
from policies.rules.replacements import RULES, Effect

from .changed_stacks import Edit, both, cluster, diff, export, line, stack_folder

NEW_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB new@example"
HOSTS = [f"dev-apiserver-{i}" for i in range(3)] + [f"dev-etcd-{i}" for i in range(3)]


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return export(stack_folder(tmp_path_factory.mktemp("base")))


def _rotate_key(config: dict[str, Any]) -> None:
    config["azure-gpu-k8s:admin"]["ssh_public_keys"] = [NEW_KEY]


def _move_zones(config: dict[str, Any]) -> None:
    cluster(config)["api_servers"]["zones"] = ["2", "3", "1"]


def _allow(*names: str) -> Edit:
    def edit(config: dict[str, Any]) -> None:
        config["azure-gpu-k8s:changes"] = {
            "allow": [{"name": n, "action": "replace", "reason": "OPS-7 rotate the key"} for n in names]
        }

    return edit


def _case(tmp_path: Path, base: dict[str, Any], edit: Edit) -> tuple[Any, Any, list[Any]]:
    folder = stack_folder(tmp_path / "stacks", edit=edit)
    head = export(folder)
    found, radius = diff(base, head)
    report = review(
        [parse(head, "dev", "stacks/Pulumi.dev.yaml")],
        None,
        [ChangeSet(found, allowances.read(folder, "dev"), "stacks/Pulumi.dev.yaml")],
    )
    return found, radius, report.violations


def test_rotating_the_admin_key_is_refused_on_vms_and_rolls_scale_sets(tmp_path: Path, base: dict[str, Any]) -> None:
    found, radius, violations = _case(tmp_path, base, _rotate_key)
    ssh = "refused=osProfile.linuxConfiguration.ssh"
    assert [line(c) for c in found.changes] == [
        *(f"update VirtualMachine {h} [osProfile] {ssh}" for h in HOSTS),
        f"update VirtualMachine dev-nat-0 [osProfile] {ssh}",
        f"update VirtualMachine dev-prometheus-0 [osProfile] {ssh}",
        # A scale set's model takes new keys (new and reimaged instances get them): an update, not a refusal.
        "update VirtualMachineScaleSet a100-00 [virtualMachineProfile]",
        "update VirtualMachineScaleSet h100-00 [virtualMachineProfile]",
        "update VirtualMachineScaleSet system-00 [virtualMachineProfile]",
    ]
    assert [r["name"] for r in radius.as_json()["scale_sets_to_roll"]] == ["a100-00", "h100-00", "system-00"]
    # The JSON names the row: its fix and its source.
    (refusal,) = found.changes[0].as_json()["refusals"]
    assert refusal["path"] == "osProfile.linuxConfiguration.ssh"
    assert "az vm user update" in refusal["fix"] and "aks-engine#585" in refusal["source"]
    # The plan says it once per row, with every VM it hits.
    (refused,) = refused_lines(found)
    assert refused.startswith(
        "Azure refuses osProfile.linuxConfiguration.ssh of 8 VirtualMachines in place (dev-apiserver-0, "
    )
    assert "#### Refused by Azure (`pulumi up` would fail)" in markdown(found, radius)
    verdicts = {(v.policy, v.enforcement, v.urn.rsplit("::", 1)[-1]) for v in violations}
    assert verdicts == {("no-change-azure-refuses", "mandatory", n) for n in [*HOSTS, "dev-nat-0", "dev-prometheus-0"]}


def test_an_allowance_does_not_let_a_refused_change_through(tmp_path: Path, base: dict[str, Any]) -> None:
    _, _, violations = _case(tmp_path, base, both(_rotate_key, _allow("dev-nat-0")))
    refused = {v.urn.rsplit("::", 1)[-1] for v in violations if v.policy == "no-change-azure-refuses"}
    assert "dev-nat-0" in refused
    (named,) = [v for v in violations if v.policy == "change-allowance-unused"]
    assert "an allowance cannot make Azure accept it, so `pulumi up` would still fail" in named.message


def test_moving_the_api_servers_zones_is_refused_on_vms_disks_and_the_frontend(
    tmp_path: Path, base: dict[str, Any]
) -> None:
    found, _, violations = _case(tmp_path, base, _move_zones)
    assert [line(c) for c in found.changes] == [
        *(f"update Disk dev-etcd-{i}-data [zones] refused=zones" for i in range(3)),
        *(f"update VirtualMachine {h} [zones] refused=zones" for h in HOSTS),
        "update VirtualMachine dev-prometheus-0 [zones] refused=zones",
        "update LoadBalancer dev-apiserver-lb [frontendIPConfigurations] refused=frontendIPConfigurations[].zones",
    ]
    assert {v.urn.rsplit("::", 1)[-1] for v in violations if v.policy == "no-change-azure-refuses"} == {
        *(f"dev-etcd-{i}-data" for i in range(3)),
        *HOSTS,
        "dev-prometheus-0",
        "dev-apiserver-lb",
    }
    frontend = next(v for v in violations if v.urn.endswith("dev-apiserver-lb"))
    assert "create a new frontend with the zones" in frontend.message


def test_every_refusal_says_how_to_do_it() -> None:
    for rule in RULES:
        if rule.effect in (Effect.REFUSED, Effect.GROW_ONLY, Effect.ONE_WAY):
            assert rule.fix, rule


def test_renaming_the_admin_user_is_refused_on_scale_sets_too(tmp_path: Path, base: dict[str, Any]) -> None:
    """A scale set's update model takes no adminUsername (VirtualMachineScaleSetUpdateOSProfile): before, the
    pools showed plain updates while only the VMs were refused."""

    def rename(config: dict[str, Any]) -> None:
        config["azure-gpu-k8s:admin"]["username"] = "operator"

    found, _, _ = _case(tmp_path, base, rename)
    sets = [line(c) for c in found.changes if c.type.endswith(":VirtualMachineScaleSet")]
    assert sets == [
        f"update VirtualMachineScaleSet {s} [virtualMachineProfile]"
        " refused=virtualMachineProfile.osProfile.adminUsername"
        for s in ("a100-00", "h100-00", "system-00")
    ]
