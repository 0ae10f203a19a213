"""The change rules (policies/rules/change.py) as plain functions over hand-made change sets."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from policies.changes import CHANGE_POLICIES
from policies.rules import change
from policies.rules.change import Allowance, ChangeArgs, ChangedResource, PoolChange, SubnetChange

URN = "urn:pulumi:dev::azure-gpu-k8s::"
VNET = "azure-native:network:VirtualNetwork"
SUBNET = "azure-native:network:Subnet"
VM = "azure-native:compute:VirtualMachine"
DISK = "azure-native:compute:Disk"
ACCOUNT = "azure-native:storage:StorageAccount"
VMSS = "azure-native:compute:VirtualMachineScaleSet"


def run(rule: Callable[[ChangeArgs, change.Report], None], args: ChangeArgs) -> list[tuple[str | None, str]]:
    found: list[tuple[str | None, str]] = []
    rule(args, lambda message, urn: found.append((urn, message)))
    return found


def res(type_: str, name: str, action: str, role: str | None = None, **extra: object) -> ChangedResource:
    return ChangedResource(f"{URN}{type_}::{name}", type_, name, action, role=role, **extra)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("changed", "what"),
    [
        (res(VNET, "dev-vnet", "replace", keys=("location",)), "VNet (every subnet, peering and address in it)"),
        (res(ACCOUNT, "stdev", "delete"), "storage account (datasets and checkpoints)"),
        (res(VM, "dev-etcd-0", "replace", "etcd"), "etcd member VM (one of the quorum)"),
        # A fixed host replaced (a new node image): down until the new one boots, so only by intent.
        (
            res(VM, "dev-apiserver-0", "replace", "apiserver"),
            "apiserver VM (a running host, down until its replacement boots)",
        ),
        (res(DISK, "dev-events-etcd-0-data", "delete", "events-etcd"), "events-etcd data disk (the member's data)"),
    ],
)
def test_stateful_replacements_are_refused(changed: ChangedResource, what: str) -> None:
    found = run(change.no_stateful_replacement, ChangeArgs("dev", [changed]))
    assert len(found) == 1 and found[0][0] == changed.urn
    assert found[0][1].startswith(f"{what} {changed.name} would be ")


@pytest.mark.parametrize(
    "changed",
    [
        res(DISK, "dev-prometheus-0-data", "delete", "prometheus"),
        res(VMSS, "h100-00", "delete", "gpu-node"),
        res(VM, "dev-etcd-0", "update", "etcd"),
        res(SUBNET, "dev-spare", "delete"),
    ],
)
def test_stateless_or_unused_go_freely(changed: ChangedResource) -> None:
    assert run(change.no_stateful_replacement, ChangeArgs("dev", [changed])) == []


def test_a_subnet_in_use_is_stateful() -> None:
    gone = res(SUBNET, "dev-gpu-h100", "delete")
    subnet = SubnetChange(gone.urn, "dev-gpu-h100", "gpu-h100", ("10.16.1.0/24",), (), 1)
    assert run(change.no_stateful_replacement, ChangeArgs("dev", [gone], [subnet])) == [
        (
            gone.urn,
            "subnet in use (1 IP configuration in it today) dev-gpu-h100 would be deleted: if intended, declare it in"
            " stacks/Pulumi.dev.yaml under azure-gpu-k8s:changes: allow: [{name: dev-gpu-h100, action: delete,"
            " reason: <why, e.g. the change ticket>}]",
        )
    ]


def test_an_allowance_must_name_the_action() -> None:
    disk = res(DISK, "dev-etcd-0-data", "replace", "etcd", keys=("creationData",))
    by_name = Allowance("replace", "OPS-1", name="dev-etcd-0-data")
    by_urn = Allowance("replace", "OPS-1", urn=disk.urn)
    wrong_action = Allowance("delete", "OPS-1", name="dev-etcd-0-data")
    assert run(change.no_stateful_replacement, ChangeArgs("dev", [disk], allowances=[by_name])) == []
    assert run(change.no_stateful_replacement, ChangeArgs("dev", [disk], allowances=[by_urn])) == []
    (found,) = run(change.no_stateful_replacement, ChangeArgs("dev", [disk], allowances=[wrong_action]))
    assert "would be replaced (deleted, then created empty) because creationData changes" in found[1]


def test_every_existing_subnet_that_moves_is_reported() -> None:
    used = SubnetChange(f"{URN}{SUBNET}::dev-system", "dev-system", "system", ("10.16.2.0/24",), ("10.16.4.0/23",), 124)
    empty = SubnetChange(f"{URN}{SUBNET}::dev-spare", "dev-spare", "spare", ("10.16.9.0/28",), ("10.16.9.16/28",), 0)
    gone = SubnetChange(f"{URN}{SUBNET}::dev-old", "dev-old", "old", ("10.16.8.0/28",), (), 0)
    found = run(change.no_subnet_move, ChangeArgs("dev", [], [used, empty, gone]))
    assert [urn for urn, _ in found] == [used.urn, empty.urn]
    assert found[1][1].startswith("subnet spare moves from 10.16.9.0/28 to 10.16.9.16/28: pin it (network.pinned)")
    allowed = ChangeArgs("dev", [], [used], allowances=[Allowance("move", "OPS-2", name="dev-system")])
    assert run(change.no_subnet_move, allowed) == []


def test_an_allowance_never_lets_through_what_azure_refuses() -> None:
    """Issue 20, item 6: a `replace` allowance made a refused change pass review, though `pulumi up` still
    failed on it (the provider updates; Azure refuses). The refusal stays mandatory and the allowance is named."""
    vm = res(VM, "dev-apiserver-0", "update", "apiserver", refused=("osProfile.customData",))
    (alone,) = run(change.no_change_azure_refuses, ChangeArgs("dev", [vm]))
    # The fix comes from the same table row the plan shows.
    assert "osProfile.customData: customData is written once: change what the host reads" in alone[1]
    replace = Allowance("replace", "rebuild the API servers", name="dev-apiserver-0")
    assert run(change.no_change_azure_refuses, ChangeArgs("dev", [vm], allowances=[replace])) == [alone]
    (named,) = run(change.change_allowance_unused, ChangeArgs("dev", [vm], allowances=[replace]))
    assert named[1].startswith(
        "azure-gpu-k8s:changes allowance {name: dev-apiserver-0, action: replace} (rebuild the API servers) names"
        " dev-apiserver-0, whose change Azure refuses in place (osProfile.customData): an allowance cannot make"
        " Azure accept it"
    )


def test_shrinking_below_running_nodes_is_reported() -> None:
    pools = [PoolChange("h100", 100, 80), PoolChange("a100", 4, 8), PoolChange("same", 4, 4)]
    assert run(change.pool_shrink_below_running, ChangeArgs("dev", [], pools=pools)) == [
        (None, "pool h100 shrinks from 100 to 80 nodes: 20 running nodes and their pods go; drain them first")
    ]


def test_unused_allowances_are_reported() -> None:
    stale = Allowance("delete", "done last week", name="dev-gpu-h100")
    assert run(change.change_allowance_unused, ChangeArgs("dev", [], allowances=[stale])) == [
        (
            None,
            "azure-gpu-k8s:changes allowance {name: dev-gpu-h100, action: delete} (done last week) matches no change:"
            " remove it from stacks/Pulumi.dev.yaml so it cannot permit a later one",
        )
    ]


def test_policies_have_unique_names_and_levels() -> None:
    names = [p.name for p in CHANGE_POLICIES]
    assert len(set(names)) == len(names)
    levels = {p.name: (p.enforcement_level.value if p.enforcement_level else "mandatory") for p in CHANGE_POLICIES}
    assert levels == {
        "no-stateful-replacement": "mandatory",
        "no-subnet-move": "mandatory",
        "no-change-azure-refuses": "mandatory",
        "control-plane-one-at-a-time": "mandatory",
        "allowance-takes-quorum": "advisory",
        "pool-shrink-below-running": "advisory",
        "change-allowance-unused": "advisory",
        "etcd-membership-change": "mandatory",
    }
