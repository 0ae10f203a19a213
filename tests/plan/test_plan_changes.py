"""`agk plan --base` on the real program: a base plan of dev and a changed copy of stacks/ for each
case a pull request makes (add, grow and rename a pool, change a VM size, etcd's disk, a subnet's
size, an image version). The diff, the blast radius and the change policies' verdicts are exact.

Cases that would otherwise move subnets pin the base's addresses (network.pinned), as a user does
after the first deploy; without pins the layout itself is under change (issue 13, item 4).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from agk.plan.diff import StackDiff, resources_of
from agk.review import ChangeSet, allowances, review
from agk.stack_export import parse
from modules.bootstrap.delivery import PARTS
from modules.bootstrap.host.bundle import part_name

from .changed_stacks import Edit, both, cluster, diff, export, export_after, line, pinned, stack_folder

NO_RADIUS = {
    "nodes": 0,
    "gpus": 0,
    "etcd_members": 0,
    "subnets_moved": [],
    "subnets_removed": [],
    "api_endpoint": [],
    "scale_sets": [],
    "etcd_member_names": [],
    "scale_sets_to_roll": [],
    "nodes_created": 0,
    "gpus_created": 0,
    "scale_sets_created": [],
    "restarts": [],
}


H100_SIZE = "Standard_ND96isr_H100_v5"
H200_SIZE = "Standard_ND96isr_H200_v5"


def created(*sets: tuple[str, str, str, str, int, int]) -> dict[str, Any]:
    """The blast radius' created part for scale sets ``(name, pool, size, action, nodes, gpus)``."""
    rows = [dict(zip(("name", "pool", "vm_size", "action", "nodes", "gpus"), row, strict=True)) for row in sets]
    return {
        "nodes_created": sum(r["nodes"] for r in rows),
        "gpus_created": sum(r["gpus"] for r in rows),
        "scale_sets_created": rows,
    }


def _secrets(action: str, head: str, paths: str = "[]") -> list[str]:
    """A bundle's secrets, one per part (delivery.PARTS), in the plan's order."""
    return [f"{action} Secret {part_name(head, i)} {paths}" for i in range(1, PARTS + 1)]


def _readers(action: str, head: str) -> list[str]:
    """The read grants of a bundle's secrets, in the plan's order (sorted by name)."""
    return sorted(f"{action} RoleAssignment {part_name(head, i)}-reader []" for i in range(1, PARTS + 1))


def _grants(action: str, pool: str) -> list[str]:
    """A pool's bundle read grants and its token secret's grants (the pool reads, each API server writes),
    in the plan's order (sorted by name)."""
    token = f"dev-keys-pool-{pool}-bootstrap-token"
    writers = [f"{action} RoleAssignment {token}-writer-dev-apiserver-{i} []" for i in range(3)]
    return sorted([*_readers(action, f"dev-keys-pool-{pool}"), f"{action} RoleAssignment {token}-reader []", *writers])


def _pool_secrets(action: str, pool: str) -> list[str]:
    """A pool's bundle secrets, then its bootstrap token secret."""
    return [*_secrets(action, f"dev-keys-pool-{pool}"), f"{action} Secret dev-keys-pool-{pool}-bootstrap-token []"]


# The API servers' bundles name the pools' token secrets (their issuer's configuration): adding or renaming a
# pool gives each a new version. Their flags follow the sizing step (50 nodes in dev), not the node count, so
# growing a pool inside the step touches no API server (issue 20).
APISERVER_BUNDLES = [
    line for i in range(3) for line in _secrets("update", f"dev-keys-dev-apiserver-{i}", "[properties]")
]


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return export(stack_folder(tmp_path_factory.mktemp("base")))


class Case:
    def __init__(self, folder: Path, base: dict[str, Any], head: dict[str, Any]) -> None:
        self.folder, self.base, self.head = folder, base, head
        self.diff, self.radius = diff(base, head)

    @property
    def lines(self) -> list[str]:
        return [line(c) for c in self.diff.changes]

    def verdicts(self) -> tuple[set[tuple[str, str, str]], list[Any]]:
        report = review(
            [parse(self.head, "dev", "stacks/Pulumi.dev.yaml")],
            None,
            [ChangeSet(self.diff, allowances.read(self.folder, "dev"), "stacks/Pulumi.dev.yaml")],
        )
        changes = [v for v in report.violations if v.policy in CHANGE_POLICY_NAMES]
        return {(v.policy, v.enforcement, v.urn.rsplit("::", 1)[-1]) for v in changes}, changes


CHANGE_POLICY_NAMES = {
    "no-stateful-replacement",
    "no-subnet-move",
    "no-change-azure-refuses",
    "pool-shrink-below-running",
    "change-allowance-unused",
    "control-plane-one-at-a-time",
    "allowance-takes-quorum",
    "etcd-membership-change",
}


def changed(tmp_path: Path, base: dict[str, Any], edit: Edit) -> Case:
    folder = stack_folder(tmp_path / "stacks", edit=edit)
    return Case(folder, base, export(folder))


def test_pinning_todays_addresses_changes_nothing(tmp_path: Path, base: dict[str, Any]) -> None:
    case = changed(tmp_path, base, pinned(base))
    assert case.lines == []
    assert case.radius.as_json() == NO_RADIUS
    assert case.verdicts()[0] == set()


def test_add_a_pool(tmp_path: Path, base: dict[str, Any]) -> None:
    h200 = {"vm_size": "Standard_ND96isr_H200_v5", "nodes": 4, "pod_ips": 30, "surge": 1, "infiniband": True}
    case = changed(tmp_path, base, both(pinned(base), lambda c: cluster(c)["gpu_pools"].__setitem__("h200", h200)))
    assert case.lines == [
        *APISERVER_BUNDLES,
        "create NodePool h200 []",
        "create RoleAssignment dev-controllers-replacer-h200-00 []",
        *_grants("create", "h200"),
        "create RoleAssignment dev-storage-checkpoints-h200-read-write []",
        "create RoleAssignment dev-storage-datasets-h200-read []",
        "create VirtualMachineScaleSet h200-00 []",
        *_pool_secrets("create", "h200"),
        "create UserAssignedIdentity h200-identity []",
        "create NatGateway dev-egress-h200 []",
        "create NetworkSecurityGroup dev-gpu-h200-nsg []",
        "create PublicIPPrefix dev-egress-h200-ips []",
        "create Subnet dev-gpu-h200 []",
    ]
    # The API servers' VMs are untouched (their sizing tag carries the step, 50 nodes, before and after).
    assert not [c for c in case.diff.changes if c.type.endswith(":VirtualMachine")]
    # The PR comment counts what the pool brings, not only what goes (issue 20, item 7).
    assert case.radius.as_json() == {**NO_RADIUS, **created(("h200-00", "h200", H200_SIZE, "create", 4, 32))}
    assert case.verdicts()[0] == set()


def test_grow_a_pool(tmp_path: Path, base: dict[str, Any]) -> None:
    case = changed(tmp_path, base, lambda c: cluster(c)["gpu_pools"]["h100"].__setitem__("nodes", 6))
    assert case.lines == ["update VirtualMachineScaleSet h100-00 [sku]"]
    grown = next(c for c in case.diff.changes if c.name == "h100-00")
    assert grown.paths == ("sku.capacity",)
    assert case.radius.as_json() == {**NO_RADIUS, **created(("h100-00", "h100", H100_SIZE, "scale-out", 2, 16))}
    assert case.verdicts()[0] == set()


def _rename(config: dict[str, Any]) -> None:
    pools = cluster(config)["gpu_pools"]
    pools["h100x"] = pools.pop("h100")


# The pool's secrets are retained on delete (keyvault.py): Pulumi forgets them, Azure keeps them. The
# API servers' bundles name the pools' token secrets (their issuer's configuration): a new version each.
RENAMED = [
    "delete NodePool h100 []",
    "delete RoleAssignment dev-controllers-replacer-h100-00 []",
    *_grants("delete", "h100"),
    "delete RoleAssignment dev-storage-checkpoints-h100-read-write []",
    "delete RoleAssignment dev-storage-datasets-h100-read []",
    "delete VirtualMachineScaleSet h100-00 []",
    *_pool_secrets("delete", "h100"),
    "delete UserAssignedIdentity h100-identity []",
    "delete NatGateway dev-egress-h100 []",
    "delete NetworkSecurityGroup dev-gpu-h100-nsg []",
    "delete PublicIPPrefix dev-egress-h100-ips []",
    "delete Subnet dev-gpu-h100 []",
    *APISERVER_BUNDLES,
    "create NodePool h100x []",
    "create RoleAssignment dev-controllers-replacer-h100x-00 []",
    *_grants("create", "h100x"),
    "create RoleAssignment dev-storage-checkpoints-h100x-read-write []",
    "create RoleAssignment dev-storage-datasets-h100x-read []",
    "create VirtualMachineScaleSet h100x-00 []",
    *_pool_secrets("create", "h100x"),
    "create UserAssignedIdentity h100x-identity []",
    "create NatGateway dev-egress-h100x []",
    "create NetworkSecurityGroup dev-gpu-h100x-nsg []",
    "create PublicIPPrefix dev-egress-h100x-ips []",
    "create Subnet dev-gpu-h100x []",
]


def test_rename_a_pool_is_delete_and_create(tmp_path: Path, base: dict[str, Any]) -> None:
    case = changed(tmp_path, base, _rename)
    assert case.lines == RENAMED
    assert case.radius.as_json() == {
        **NO_RADIUS,
        "nodes": 4,
        "gpus": 32,
        "subnets_removed": [
            {"subnet": "gpu-h100", "from": ["10.16.1.0/24"], "to": [], "ip_configurations": 155, "machines": 4}
        ],
        "scale_sets": [
            {
                "name": "h100-00",
                "pool": "h100",
                "vm_size": "Standard_ND96isr_H100_v5",
                "action": "delete",
                "nodes": 4,
                "gpus": 32,
                "running": 4,
            }
        ],
        **created(("h100x-00", "h100x", H100_SIZE, "create", 4, 32)),
    }
    verdicts, violations = case.verdicts()
    assert verdicts == {
        ("no-stateful-replacement", "mandatory", "dev-gpu-h100"),
        ("pool-shrink-below-running", "advisory", "azure-gpu-k8s-dev"),
    }
    stateful = next(v for v in violations if v.policy == "no-stateful-replacement")
    assert stateful.message == (
        "subnet in use (155 IP configurations in it today) dev-gpu-h100 would be deleted: if intended, declare it"
        " in stacks/Pulumi.dev.yaml under azure-gpu-k8s:changes:"
        " allow: [{name: dev-gpu-h100, action: delete, reason: <why, e.g. the change ticket>}]"
    )
    shrink = next(v for v in violations if v.policy == "pool-shrink-below-running")
    assert shrink.message == (
        "pool h100 shrinks from 4 to 0 nodes: 4 running nodes and their pods go"
        " (h100-00 4 -> 0 (deleted); a set loses its newest VMs); drain them first"
    )


def test_a_declared_allowance_lets_the_rename_pass(tmp_path: Path, base: dict[str, Any]) -> None:
    def allow(config: dict[str, Any]) -> None:
        config["azure-gpu-k8s:changes"] = {
            "allow": [
                {"name": "dev-gpu-h100", "action": "delete", "reason": "OPS-42 rename h100 to h100x"},
                {"name": "dev-etcd-0-data", "action": "replace", "reason": "left over"},
            ]
        }

    # The program accepts the allowance (modules/stackplan/config.py declares azure-gpu-k8s:changes) and the review
    # reads it from the same stack file.
    case = changed(tmp_path, base, both(_rename, allow))
    assert case.lines == RENAMED
    verdicts, violations = case.verdicts()
    assert verdicts == {
        ("pool-shrink-below-running", "advisory", "azure-gpu-k8s-dev"),
        ("change-allowance-unused", "advisory", "azure-gpu-k8s-dev"),
    }
    unused = next(v for v in violations if v.policy == "change-allowance-unused")
    assert unused.message == (
        "azure-gpu-k8s:changes allowance {name: dev-etcd-0-data, action: replace} (left over) matches no change:"
        " remove it from stacks/Pulumi.dev.yaml so it cannot permit a later one"
    )


def test_change_a_vm_size(tmp_path: Path, base: dict[str, Any]) -> None:
    case = changed(
        tmp_path, base, lambda c: cluster(c)["gpu_pools"]["a100"].__setitem__("vm_size", "Standard_ND96amsr_A100_v4")
    )
    # A scale set's size changes in place (its model; instances follow on upgrade): no replacement. What
    # the nodes read from the size goes to the pool's bundle; the scale set's customData stays.
    assert case.lines == [
        "update VirtualMachineScaleSet a100-00 [sku]",
        *_secrets("update", "dev-keys-pool-a100", "[properties]"),
    ]
    assert case.diff.changes[0].paths == ("sku.name",)
    # Running nodes keep the old size until reimaged (upgrade policy Manual): the plan says which to roll.
    assert case.radius.as_json() == {
        **NO_RADIUS,
        "scale_sets_to_roll": [
            {"name": "a100-00", "pool": "a100", "nodes": 4, "paths": list(case.diff.changes[0].paths)}
        ],
    }
    assert case.verdicts()[0] == set()


def test_grow_etcds_disk(tmp_path: Path, base: dict[str, Any]) -> None:
    case = changed(tmp_path, base, lambda c: cluster(c)["etcd"].__setitem__("disk_gib", 128))
    assert case.lines == [f"update Disk dev-etcd-{i}-data [diskSizeGB]" for i in range(3)]
    assert case.radius.as_json() == NO_RADIUS
    assert case.verdicts()[0] == set()


def test_move_etcd_to_local_nvme_loses_every_member(tmp_path: Path, base: dict[str, Any]) -> None:
    case = changed(tmp_path, base, lambda c: cluster(c)["etcd"].__setitem__("storage", "local-nvme"))
    assert case.lines == [
        *(f"delete Disk dev-etcd-{i}-data []" for i in range(3)),
        *(
            f"update VirtualMachine dev-etcd-{i} [hardwareProfile, osProfile, storageProfile] refused=osProfile.customData"
            for i in range(3)
        ),
    ]
    assert case.radius.as_json() == {
        **NO_RADIUS,
        "etcd_members": 3,
        "etcd_member_names": ["dev-etcd-0", "dev-etcd-1", "dev-etcd-2"],
        # An Lsv3 size: Azure restarts each VM to resize it, one member after the other.
        "restarts": [
            {
                "host": f"dev-etcd-{i}",
                "role": "etcd",
                "actions": ["VM restarted by Azure (hardwareProfile.vmSize)"],
                "how": "vm",
            }
            for i in range(3)
        ],
    }
    verdicts, violations = case.verdicts()
    assert verdicts == {
        *(("no-stateful-replacement", "mandatory", f"dev-etcd-{i}-data") for i in range(3)),
        *(("no-change-azure-refuses", "mandatory", f"dev-etcd-{i}") for i in range(3)),
        # Three members resized in one update: a chain is not enough for three (one rejoining, one stopping).
        ("control-plane-one-at-a-time", "mandatory", "azure-gpu-k8s-dev"),
    }
    violations = [v for v in violations if v.policy != "control-plane-one-at-a-time"]
    assert violations[0].message.startswith(
        "etcd data disk (the member's data) dev-etcd-0-data would be deleted: if intended, declare it"
    )
    # The data disk's device is in customData (cloud-init partitions it at first boot): the one kind of
    # change customData still carries, and Azure refuses it on a VM.
    refused = next(v for v in violations if v.policy == "no-change-azure-refuses")
    assert refused.message.startswith(
        "Azure refuses to change osProfile.customData of compute:VirtualMachine dev-etcd-0 in place"
        " (PropertyChangeNotAllowed), and the provider does not replace it: `pulumi up` would fail there, half-way."
        " Keep the value, or: osProfile.customData: customData is written once:"
    )
    assert refused.message.endswith("No allowance lets it through")


def test_change_a_subnets_size(tmp_path: Path, base: dict[str, Any]) -> None:
    # Every subnet pinned but the system pool's, which outgrows its /24.
    case = changed(
        tmp_path, base, both(pinned(base, "system"), lambda c: cluster(c)["system_pool"].__setitem__("nodes", 12))
    )
    # The subnet's NSG names its range in the segmentation rules (modules/stackplan/segmentation.py): it follows.
    assert case.lines == [
        "update VirtualMachineScaleSet system-00 [sku]",
        "update NetworkSecurityGroup dev-system-nsg [securityRules]",
        "update Subnet dev-system [addressPrefix]",
    ]
    assert case.radius.as_json() == {
        **NO_RADIUS,
        "subnets_moved": [
            {
                "subnet": "system",
                "from": ["10.16.2.0/24"],
                "to": ["10.16.4.0/23"],
                "ip_configurations": 124,
                "machines": 3,
            }
        ],
        **created(("system-00", "system", "Standard_D8ds_v5", "scale-out", 9, 0)),
    }
    verdicts, violations = case.verdicts()
    assert verdicts == {("no-subnet-move", "mandatory", "dev-system")}
    move = next(v for v in violations if v.policy == "no-subnet-move")
    assert move.message == (
        "subnet system moves from 10.16.2.0/24 to 10.16.4.0/23; 124 IP configurations are in it today:"
        " pin it (network.pinned) to keep its addresses; if intended, declare it in stacks/Pulumi.dev.yaml under"
        " azure-gpu-k8s:changes: allow: [{name: dev-system, action: move, reason: <why, e.g. the change ticket>}]"
    )


def _with_image_version(state: dict[str, Any], version: str) -> dict[str, Any]:
    """The base as if the h100 pool and etcd-0 had been deployed with a pinned image version."""
    edited = copy.deepcopy(state)
    for res in resources_of(edited):
        name = str(res["urn"]).rsplit("::", 1)[-1]
        if name == "h100-00":
            res["inputs"]["virtualMachineProfile"]["storageProfile"]["imageReference"]["version"] = version
        elif name == "dev-etcd-0":
            res["inputs"]["storageProfile"]["imageReference"]["version"] = version
    return edited


def test_change_an_image_version(tmp_path: Path, base: dict[str, Any]) -> None:
    # The base is edited as if h100-00 and etcd-0 had been deployed from another image (cluster.node_images
    # selects the gallery version; tests/plan/test_node_images.py plans that edit end to end).
    old = _with_image_version(base, "2204.2025.0101")
    case = Case(tmp_path, old, base)
    # A fixed host cannot take a new image in place: the program replaces it (replace_on_changes); a scale set
    # takes the new image in its model, in place, and its nodes roll.
    assert case.lines == [
        "replace VirtualMachine dev-etcd-0 [storageProfile.imageReference]",
        "update VirtualMachineScaleSet h100-00 [virtualMachineProfile]",
    ]
    assert case.diff.changes[1].paths == ("virtualMachineProfile.storageProfile.imageReference.version",)
    assert case.radius.as_json() == {
        **NO_RADIUS,
        "etcd_members": 1,
        "etcd_member_names": ["dev-etcd-0"],
        "restarts": [
            {
                "host": "dev-etcd-0",
                "role": "etcd",
                "how": "vm",
                "actions": ["VM replaced: down until the new one boots"],
            }
        ],
        "scale_sets_to_roll": [
            {
                "name": "h100-00",
                "pool": "h100",
                "nodes": 4,
                "paths": ["virtualMachineProfile.storageProfile.imageReference.version"],
            }
        ],
    }
    assert case.verdicts()[0] == {("no-stateful-replacement", "mandatory", "dev-etcd-0")}


def test_a_diff_lists_every_changed_path_once(base: dict[str, Any]) -> None:
    found: StackDiff = diff(_with_image_version(base, "1"), base)[0]
    assert all(len(set(c.paths)) == len(c.paths) for c in found.changes)


# ---- addresses stay where they are, without anyone copying pins (issue 13, item 4) ----


def _subnets(state: dict[str, Any]) -> dict[str, str]:
    return {
        r["inputs"]["subnetName"]: r["inputs"]["addressPrefix"]
        for r in resources_of(state)
        if r["type"] == "azure-native:network:Subnet"
    }


H200 = {"vm_size": "Standard_ND96isr_H200_v5", "nodes": 16, "pod_ips": 30, "surge": 1, "infiniband": True}


def _add_h200(config: dict[str, Any]) -> None:
    cluster(config)["gpu_pools"]["h200"] = H200


def test_adding_a_pool_moves_no_subnet_without_pins(tmp_path: Path, base: dict[str, Any]) -> None:
    folder = stack_folder(tmp_path / "stacks", edit=_add_h200)
    before = _subnets(base)
    # Laid out from scratch, the new pool's subnet would take space others hold today...
    fresh = _subnets(export(folder))
    assert any(fresh[name] != cidr for name, cidr in before.items())
    # ...but the next `pulumi up` reads the stack's own last outputs and keeps every subnet in place.
    after = _subnets(export_after(folder, base))
    assert {name: after[name] for name in before} == before
    assert "gpu-h200" in after
    assert not any(
        c.type.endswith(":Subnet") and c.action != "create" for c in diff(base, export_after(folder, base))[0].changes
    )


def test_pins_in_the_stack_file_still_win(tmp_path: Path, base: dict[str, Any]) -> None:
    folder = stack_folder(tmp_path / "stacks", edit=both(_add_h200, pinned(base)))
    assert {k: v for k, v in _subnets(export_after(folder, base)).items() if k in _subnets(base)} == _subnets(base)


def test_removing_a_pool_moves_no_other_subnet(tmp_path: Path, base: dict[str, Any]) -> None:
    def remove_a100(config: dict[str, Any]) -> None:
        cluster(config)["gpu_pools"].pop("a100")
        # dev's one identity team (research) queues on a100: it goes with the pool.
        cluster(config)["identity"]["teams"].pop("research")

    folder = stack_folder(tmp_path / "stacks", edit=remove_a100)
    after = _subnets(export_after(folder, base))
    assert after == {k: v for k, v in _subnets(base).items() if k != "gpu-a100"}


def test_a_pool_that_outgrows_its_deployed_subnet_is_one_line(tmp_path: Path, base: dict[str, Any]) -> None:
    from modules.errors import AgkError

    folder = stack_folder(tmp_path / "stacks", edit=lambda c: cluster(c)["gpu_pools"]["h100"].__setitem__("nodes", 64))
    with pytest.raises(AgkError) as err:
        export_after(folder, base)
    cidr = _subnets(base)["gpu-h100"]
    assert str(err.value).startswith(f"dev: azure-gpu-k8s:cluster.gpu_pools.h100: deployed subnet gpu-h100 is {cidr} ")
    assert "set network.pinned.gpu-h100 to a larger free CIDR and allow the move" in str(err.value)


def test_a_renamed_pools_subnet_never_takes_the_range_of_the_one_it_replaces(
    tmp_path: Path, base: dict[str, Any]
) -> None:
    """Pulumi creates the new subnet before it deletes the old one (deletes run last), and Azure refuses
    overlapping subnets in a VNet: the going subnet's range stays taken for this update."""
    from ipaddress import IPv4Network

    folder = stack_folder(tmp_path / "stacks", edit=_rename)
    after = _subnets(export_after(folder, base))
    before = _subnets(base)
    assert {k: v for k, v in after.items() if k in before} == {k: v for k, v in before.items() if k != "gpu-h100"}
    new = IPv4Network(after["gpu-h100x"])
    assert not any(new.overlaps(IPv4Network(cidr)) for cidr in before.values())


def test_pinning_onto_a_going_subnet_is_one_line(tmp_path: Path, base: dict[str, Any]) -> None:
    from modules.errors import AgkError

    old = _subnets(base)["gpu-h100"]

    def pin(config: dict[str, Any]) -> None:
        config["azure-gpu-k8s:network"]["pinned"] = {"gpu-h100x": old}

    folder = stack_folder(tmp_path / "stacks", edit=both(_rename, pin))
    with pytest.raises(AgkError) as err:
        export_after(folder, base)
    assert str(err.value) == (
        f"dev: azure-gpu-k8s:network.pinned.gpu-h100x: {old} overlaps subnet gpu-h100 ({old}), which this update"
        " deletes only after creating the new one (Pulumi creates first, deletes last; Azure refuses overlapping"
        " subnets): pin it elsewhere, or remove the old subnet in an update of its own first"
    )
