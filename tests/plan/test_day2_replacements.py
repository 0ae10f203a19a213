"""Replacements that work (issue 20, item 4), on the real program planned twice.

Before issue 20: `pulumi up --replace` of a fixed-name VM created the new VM first and collided with the old
one's name; the remediation role's GUID and name derived from the cluster name alone (role definitions are
unique per tenant, so the same stack in a second subscription failed); a spoke's new address prefix never
reached the hub's peering; and a renamed pool in a packed VNet failed with "cannot hold the subnets".
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from agk.plan import cloud
from agk.plan.change_report import text as changes_text
from agk.plan.diff import resources_of
from agk.review import ChangeSet, review
from agk.stack_export import parse
from modules.errors import AgkError

from .changed_stacks import cluster, diff, export, export_after, line, stack_folder


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return export(stack_folder(tmp_path_factory.mktemp("base")))


def _by_name(state: dict[str, Any], name: str) -> dict[str, Any]:
    return next(r for r in resources_of(state) if r["urn"].rsplit("::", 1)[-1] == name)


def _moved_nat(base: dict[str, Any]) -> dict[str, Any]:
    """The base as if the NAT host had been deployed in another region: its VM must be replaced (location)."""
    old = copy.deepcopy(base)
    _by_name(old, "dev-nat-0")["inputs"]["location"] = "westus3"
    return old


def test_a_fixed_name_vm_is_replaced_delete_first(tmp_path: Path, base: dict[str, Any]) -> None:
    found, radius = diff(_moved_nat(base), base)
    (vm,) = [c for c in found.changes if c.name == "dev-nat-0"]
    assert (line(vm), vm.delete_first, vm.refused) == ("replace VirtualMachine dev-nat-0 [location]", True, ())
    assert vm.as_json()["delete_first"] is True
    assert [(r.host, r.actions) for r in radius.restarts] == [
        ("dev-nat-0", ("VM replaced: down until the new one boots",))
    ]
    assert any("deleted first: down until the new one is up" in x for x in changes_text(found, radius))


def test_a_create_first_replacement_of_a_fixed_name_is_refused(tmp_path: Path, base: dict[str, Any]) -> None:
    """A state whose VM lacks deleteBeforeReplace (an earlier release): the new VM would collide."""
    head = copy.deepcopy(base)
    _by_name(head, "dev-nat-0").pop("deleteBeforeReplace")
    found, _ = diff(_moved_nat(base), head)
    (vm,) = [c for c in found.changes if c.name == "dev-nat-0"]
    assert (vm.action, vm.delete_first, vm.refused) == ("replace", False, ("[fixed-name]",))
    report = review([parse(head, "dev", "x")], None, [ChangeSet(found, [], "stacks/Pulumi.dev.yaml")])
    (refused,) = [v for v in report.violations if v.policy == "no-change-azure-refuses"]
    assert "cannot create already existing resource" not in refused.message  # the fix, not the source
    assert "give the resource deleteBeforeReplace" in refused.message


def test_the_remediation_role_is_unique_per_subscription_and_stack(
    tmp_path: Path, base: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    role = _by_name(base, "dev-controllers-replacer-role")["inputs"]
    monkeypatch.setattr(cloud, "_RG", "/subscriptions/11111111-1111-1111-1111-111111111111/resourceGroups/")
    other = _by_name(export(stack_folder(tmp_path / "stacks")), "dev-controllers-replacer-role")["inputs"]
    assert role["roleDefinitionId"] != other["roleDefinitionId"]
    assert role["roleName"] != other["roleName"]
    assert role["roleName"] == ("agk dev scale-set instance replacer (00000000-0000-0000-0000-000000000000/agk-dev)")


def test_a_new_spoke_prefix_is_synced_into_the_hubs_peering(tmp_path: Path, base: dict[str, Any]) -> None:
    def grow(config: dict[str, Any]) -> None:
        config["azure-gpu-k8s:network"]["address_space"] = ["10.16.0.0/20", "10.17.0.0/24"]

    found, _ = diff(base, export_after(stack_folder(tmp_path / "stacks", edit=grow), base))
    (peering,) = [c for c in found.changes if c.name == "dev-from-hub"]
    assert line(peering) == "update VirtualNetworkPeering dev-from-hub [remoteVirtualNetworkAddressSpace]"
    inputs = peering.after["inputs"]  # type: ignore[index]
    assert inputs["remoteVirtualNetworkAddressSpace"] == {"addressPrefixes": ["10.16.0.0/20", "10.17.0.0/24"]}
    assert inputs["syncRemoteAddressSpace"] == "true"


def test_a_rename_that_fits_only_after_the_old_pool_goes_says_how(tmp_path: Path, base: dict[str, Any]) -> None:
    def rename_packed(config: dict[str, Any]) -> None:
        # Two new pools take dev's free /21 and /22; the renamed h100x needs a /24, and the only /24 left is
        # the one the old h100 subnet holds until the update's deletes run.
        pools = cluster(config)["gpu_pools"]
        pools["h100x"] = pools.pop("h100")
        pools["big"] = {**pools["h100x"], "nodes": 40}
        pools["mid"] = {**pools["h100x"], "nodes": 20}

    with pytest.raises(AgkError) as err:
        export_after(stack_folder(tmp_path / "stacks", edit=rename_packed), base)
    message = str(err.value)
    assert "does not fit while the subnets this update deletes still hold their ranges (gpu-h100 10.16.1.0/24)" in (
        message
    )
    assert "Make the change in two updates: first one that only removes what goes" in message
