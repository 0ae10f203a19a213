"""The diff's rules as a table: each row of policies/rules/replacements.py decides what a change does."""

from __future__ import annotations

from typing import Any

import pytest

from agk.plan import wire
from agk.plan.diff import changed_paths, classify, diff_states
from policies.rules.replacements import RULES, Effect, covers

VM = "azure-native:compute:VirtualMachine"
VMSS = "azure-native:compute:VirtualMachineScaleSet"
DISK = "azure-native:compute:Disk"


def _vm(**changes: Any) -> dict[str, Any]:
    vm: dict[str, Any] = {
        "resourceGroupName": "rg",
        "vmName": "etcd-0",
        "location": "eastus2",
        "hardwareProfile": {"vmSize": "Standard_D8ds_v5"},
        "osProfile": {"computerName": "etcd-0", "adminUsername": "azureuser", "customData": "AAA"},
        "storageProfile": {"imageReference": {"publisher": "Canonical", "version": "latest"}},
    }
    for path, value in changes.items():
        *parents, last = path.split("__")
        node = vm
        for part in parents:
            node = node[part]
        node[last] = value
    return vm


@pytest.mark.parametrize(
    ("changes", "action", "keys", "refused"),
    [
        ({"hardwareProfile__vmSize": "Standard_D16ds_v5"}, "update", ("hardwareProfile",), ()),
        ({"vmName": "etcd-9"}, "replace", ("vmName",), ()),
        ({"resourceGroupName": "rg2"}, "replace", ("resourceGroupName",), ()),
        ({"location": "westus3"}, "replace", ("location",), ()),
        ({"osProfile__customData": "BBB"}, "update", ("osProfile",), ("osProfile.customData",)),
        ({"osProfile__adminUsername": "root2"}, "update", ("osProfile",), ("osProfile.adminUsername",)),
        (
            {"storageProfile__imageReference__version": "1.2.3"},
            "update",
            ("storageProfile",),
            ("storageProfile.imageReference",),
        ),
    ],
)
def test_virtual_machine_rows(
    changes: dict[str, Any], action: str, keys: tuple[str, ...], refused: tuple[str, ...]
) -> None:
    found = classify(VM, _vm(), _vm(**changes))
    assert found is not None
    assert (found.action, found.keys, found.refused) == (action, keys, refused)


def test_location_compares_like_azure() -> None:
    # pulumi-azure-native diff.go: case and spaces in a location are not significant.
    assert classify(VM, _vm(location="East US 2"), _vm(location="eastus2")) is None


def test_unchanged_is_none() -> None:
    assert classify(VM, _vm(), _vm()) is None


def test_a_disk_grows_in_place_and_never_shrinks() -> None:
    old = {"resourceGroupName": "rg", "diskName": "d", "diskSizeGB": 64}
    grown = classify(DISK, old, {**old, "diskSizeGB": 128})
    shrunk = classify(DISK, old, {**old, "diskSizeGB": 32})
    assert grown is not None and (grown.action, grown.refused) == ("update", ())
    assert shrunk is not None and (shrunk.action, shrunk.refused) == ("update", ("diskSizeGB",))


def test_single_placement_group_converts_to_false_only() -> None:
    old = {"resourceGroupName": "rg", "vmScaleSetName": "s", "singlePlacementGroup": True}
    off = classify(VMSS, old, {**old, "singlePlacementGroup": False})
    back = classify(VMSS, {**old, "singlePlacementGroup": False}, old)
    assert off is not None and off.refused == ()
    assert back is not None and back.refused == ("singlePlacementGroup",)


@pytest.mark.parametrize(
    ("type_", "old", "new", "refused"),
    [
        (VMSS, {"zones": ["1"]}, {"zones": ["2"]}, ("zones",)),
        (
            VMSS,
            {"virtualMachineProfile": {"storageProfile": {"imageReference": {"offer": "ubuntu-hpc", "version": "1"}}}},
            {
                "virtualMachineProfile": {
                    "storageProfile": {"imageReference": {"offer": "ubuntu-hpc-next", "version": "1"}}
                }
            },
            ("virtualMachineProfile.storageProfile.imageReference.offer",),
        ),
        (
            VMSS,
            {"virtualMachineProfile": {"storageProfile": {"imageReference": {"publisher": "a", "version": "1"}}}},
            {"virtualMachineProfile": {"storageProfile": {"imageReference": {"publisher": "b", "version": "1"}}}},
            ("virtualMachineProfile.storageProfile.imageReference.publisher",),
        ),
        # A new image version is what a scale set's model update is for: new instances boot it.
        (
            VMSS,
            {"virtualMachineProfile": {"storageProfile": {"imageReference": {"offer": "o", "version": "1"}}}},
            {"virtualMachineProfile": {"storageProfile": {"imageReference": {"offer": "o", "version": "2"}}}},
            (),
        ),
        ("azure-native:network:NatGateway", {"zones": ["1"]}, {"zones": ["3"]}, ("zones",)),
    ],
)
def test_create_time_properties_azure_refuses_to_change(
    type_: str, old: dict[str, Any], new: dict[str, Any], refused: tuple[str, ...]
) -> None:
    base = {"resourceGroupName": "rg", "name": "x"}
    found = classify(type_, {**base, **old}, {**base, **new})
    assert found is not None and (found.action, found.refused) == ("update", refused)


def test_private_endpoint_subnet_forces_replacement() -> None:
    old = {"resourceGroupName": "rg", "privateEndpointName": "pe", "subnet": {"id": "a"}}
    found = classify("azure-native:network:PrivateEndpoint", old, {**old, "subnet": {"id": "b"}})
    assert found is not None and (found.action, found.keys) == ("replace", ("subnet",))


def test_a_subnet_prefix_moves_in_place() -> None:
    # replacement.go: Subnet has no ForceNew input; a move is an update (and a change policy's matter).
    old = {"resourceGroupName": "rg", "virtualNetworkName": "v", "subnetName": "s", "addressPrefix": "10.0.0.0/24"}
    found = classify("azure-native:network:Subnet", old, {**old, "addressPrefix": "10.0.1.0/24"})
    assert found is not None and (found.action, found.keys) == ("update", ("addressPrefix",))


def test_other_providers_never_replace_by_table() -> None:
    found = classify("tls:index/privateKey:PrivateKey", {"algorithm": "RSA"}, {"algorithm": "ECDSA"})
    assert found is not None and found.action == "update"


def test_every_row_has_a_source_and_a_full_type_token() -> None:
    for rule in RULES:
        assert rule.source
        assert rule.type == "*" or (rule.type.count(":") == 2 and rule.type.startswith("azure-native:"))
        assert isinstance(rule.effect, Effect)


def test_list_paths_are_generic() -> None:
    old = {"ipConfigurations": [{"name": "a", "subnet": {"id": "1"}}, {"name": "b", "subnet": {"id": "1"}}]}
    new = {"ipConfigurations": [{"name": "a", "subnet": {"id": "2"}}, {"name": "b", "subnet": {"id": "2"}}]}
    assert changed_paths(old, new) == {"ipConfigurations[].subnet.id"}
    assert changed_paths(old, {"ipConfigurations": old["ipConfigurations"][:1]}) == {"ipConfigurations[]"}
    assert covers("ipConfigurations", "ipConfigurations[].subnet.id")
    assert not covers("ipConfig", "ipConfigurations")


def _res(urn: str, type_: str = VM, **extra: Any) -> dict[str, Any]:
    return {"urn": urn, "type": type_, "custom": True, "inputs": _vm(), **extra}


def test_an_alias_matches_a_renamed_resource() -> None:
    old_urn, new_urn = (
        "urn:pulumi:s::p::azure-native:compute:VirtualMachine::old",
        "urn:pulumi:s::p::azure-native:compute:VirtualMachine::new",
    )
    found = diff_states("s", [_res(old_urn)], [_res(new_urn, aliases=[old_urn])], "base")
    assert [(c.action, c.urn, c.renamed_from) for c in found.changes] == [("update", new_urn, old_urn)]
    without = diff_states("s", [_res(old_urn)], [_res(new_urn)], "base")
    assert [(c.action, c.name) for c in without.changes] == [("delete", "old"), ("create", "new")]


def test_encrypted_secrets_in_the_base_are_not_compared_and_say_so() -> None:
    urn = "urn:pulumi:s::p::azure-native:compute:VirtualMachine::vm"
    old = _res(urn)
    old["inputs"]["osProfile"]["customData"] = {wire.SIG: wire.SECRET_SIG, "ciphertext": "v1:abc"}
    found = diff_states("s", [old], [_res(urn)], "prod.json")
    assert found.changes == []
    assert found.warnings == [
        "prod.json: some inputs are encrypted secrets and were not compared:"
        " export the base with 'pulumi stack export --show-secrets'"
    ]


def test_plaintext_secrets_compare_by_value() -> None:
    urn = "urn:pulumi:s::p::azure-native:compute:VirtualMachine::vm"
    old, new = _res(urn), _res(urn)
    old["inputs"]["osProfile"]["customData"] = {wire.SIG: wire.SECRET_SIG, "plaintext": '"AAA"'}
    assert diff_states("s", [old], [new], "b").changes == []


def test_reads_and_the_stack_are_never_changes() -> None:
    ref = {
        "urn": "urn:pulumi:s::p::pulumi:pulumi:StackReference::hub",
        "type": "pulumi:pulumi:StackReference",
        "custom": True,
        "external": True,
    }
    stack = {"urn": "urn:pulumi:s::p::pulumi:pulumi:Stack::p-s", "type": "pulumi:pulumi:Stack", "outputs": {"a": 1}}
    found = diff_states("s", [], [ref, stack], "b")
    assert found.changes == [] and found.root == stack["urn"]


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ({}, {"automaticRepairsPolicy": {"enabled": True, "gracePeriod": "PT60M", "repairAction": "Replace"}}),
        (
            {"automaticRepairsPolicy": {"enabled": True, "gracePeriod": "PT60M", "repairAction": "Replace"}},
            {"automaticRepairsPolicy": {"enabled": True, "gracePeriod": "PT30M", "repairAction": "Reimage"}},
        ),
        (
            {"virtualMachineProfile": {}},
            {
                "virtualMachineProfile": {
                    "scheduledEventsProfile": {
                        "terminateNotificationProfile": {"enable": True, "notBeforeTimeout": "PT10M"}
                    }
                }
            },
        ),
    ],
)
def test_repairs_and_terminate_notification_change_a_scale_set_in_place(
    old: dict[str, Any], new: dict[str, Any]
) -> None:
    """Turning them on for deployed scale sets, or retuning them, is an update Azure takes (both are in the scale
    set's update model: learn.microsoft.com virtual-machine-scale-sets-automatic-instance-repairs and
    virtual-machine-scale-sets-terminate-notification enable them on existing sets): no node is deleted."""
    base = {"resourceGroupName": "rg", "vmScaleSetName": "gpu-00", "location": "eastus2"}
    found = classify(VMSS, {**base, **old}, {**base, **new})
    assert found is not None
    assert (found.action, found.refused, found.restarts) == ("update", (), ())
