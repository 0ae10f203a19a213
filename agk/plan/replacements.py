"""What a change to an input does to a deployed resource: one table, one source per row.

`pulumi up` asks the provider to diff old and new inputs; pulumi-azure-native answers "replace" for
the keys its schema marks ForceNew and "update" for the rest (provider/pkg/provider/diff.go). Some
updates the provider sends are then refused by Azure (``PropertyChangeNotAllowed``): the provider does
not replace the resource instead (pulumi-azure-native#577, #1117), so `pulumi up` fails half-way.
Both are rows here, so a plan says which changes replace, which update and which will be refused.

``path`` is an input path in the provider's wire form, ``[]`` standing for every element of a list;
a row matches a change at that path or below it. ``type`` ``"*"`` applies to every azure-native type.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Effect(Enum):
    REPLACE = "replace"
    """The provider deletes and re-creates the resource (ForceNew)."""
    REFUSED = "refused"
    """The provider updates in place and Azure refuses the change (PropertyChangeNotAllowed)."""
    GROW_ONLY = "grow-only"
    """An in-place update that Azure accepts only when the new number is not smaller."""
    ONE_WAY = "one-way"
    """Azure accepts the change from ``true`` to ``false`` only."""


ARM_PATH = "[arm-path]"
"""Stands for the inputs that form the resource's ARM id: its resource group and name(s)."""


@dataclass(frozen=True)
class Rule:
    type: str
    path: str
    effect: Effect
    source: str


_DIFF_GO = "pulumi-azure-native provider/pkg/provider/diff.go"
_REPLACEMENT_GO = "pulumi-azure-native provider/pkg/gen/replacement.go (forceNewMap)"
_VMSS_DOC = (
    "learn.microsoft.com virtual-machine-scale-sets-upgrade-scale-set ('Properties with restrictions on modification')"
)

RULES: tuple[Rule, ...] = (
    Rule("*", ARM_PATH, Effect.REPLACE, f"{_DIFF_GO}: every parameter of the resource's path causes a replacement"),
    Rule(
        "*",
        "location",
        Effect.REPLACE,
        "ARM guideline RPC-Put-V1-14 (a tracked resource's location is x-ms-mutability read, create);"
        " pulumi-azure-native gen/properties.go: create-only is ForceNew; diff.go ignores case and spaces",
    ),
    Rule("azure-native:network:PrivateEndpoint", "subnet", Effect.REPLACE, f"{_REPLACEMENT_GO}, issue #3883"),
    Rule("azure-native:network:PublicIPAddress", "publicIPAddressVersion", Effect.REPLACE, _REPLACEMENT_GO),
    Rule("azure-native:network:PublicIPAddress", "publicIPPrefix", Effect.REPLACE, _REPLACEMENT_GO),
    Rule("azure-native:network:PublicIPAddress", "sku", Effect.REPLACE, _REPLACEMENT_GO),
    Rule("azure-native:storage:StorageAccount", "isHnsEnabled", Effect.REPLACE, _REPLACEMENT_GO),
    Rule("azure-native:authorization:RoleAssignment", "principalId", Effect.REPLACE, _REPLACEMENT_GO),
    Rule("azure-native:authorization:RoleAssignment", "scope", Effect.REPLACE, _REPLACEMENT_GO),
    Rule(
        "azure-native:compute:VirtualMachine",
        "osProfile.customData",
        Effect.REFUSED,
        "pulumi-azure-native#577; Azure/azure-sdk-for-node#2297 ('Changing property customData is not allowed')",
    ),
    Rule(
        "azure-native:compute:VirtualMachine",
        "osProfile.adminUsername",
        Effect.REFUSED,
        "azure-rest-api-specs compute.json OSProfile.adminUsername: 'cannot be updated after the VM is created' (#7823)",
    ),
    Rule(
        "azure-native:compute:VirtualMachine",
        "osProfile.computerName",
        Effect.REFUSED,
        "azure-rest-api-specs compute.json OSProfile.computerName: 'cannot be updated after the VM is created'",
    ),
    Rule(
        "azure-native:compute:VirtualMachine",
        "storageProfile.imageReference",
        Effect.REFUSED,
        "pulumi-azure-native#1117 ('Changing property imageReference.id is not allowed', the provider does not replace)",
    ),
    Rule(
        "azure-native:compute:VirtualMachine",
        "storageProfile.osDisk.createOption",
        Effect.REFUSED,
        "Azure/azure-powershell#7621 ('Changing property osDisk.createOption is not allowed')",
    ),
    Rule(
        "azure-native:compute:VirtualMachine",
        "storageProfile.osDisk.name",
        Effect.REFUSED,
        "hashicorp/terraform-provider-azurerm#16323 ('Changing property osDisk.name is not allowed')",
    ),
    Rule(
        "azure-native:compute:Disk",
        "diskSizeGB",
        Effect.GROW_ONLY,
        "azure-rest-api-specs compute DiskProperties.diskSizeGB: resizes 'can only increase the disk's size'",
    ),
    Rule(
        "azure-native:compute:Disk",
        "creationData",
        Effect.REFUSED,
        "azure-rest-api-specs compute DiskProperties.creationData: 'cannot be changed after the disk has been created'",
    ),
    Rule(
        "azure-native:compute:VirtualMachineScaleSet",
        "platformFaultDomainCount",
        Effect.REFUSED,
        f"{_VMSS_DOC}: fault domains are create-time properties",
    ),
    Rule(
        "azure-native:compute:VirtualMachineScaleSet",
        "virtualMachineProfile.storageProfile.osDisk.managedDisk.storageAccountType",
        Effect.REFUSED,
        f"{_VMSS_DOC}: the managed OS disk storage account type is a create-time property",
    ),
    Rule(
        "azure-native:compute:VirtualMachineScaleSet",
        "zones",
        Effect.REFUSED,
        f"{_VMSS_DOC}: 'Create-time properties ... Availability Zones'",
    ),
    Rule(
        "azure-native:compute:VirtualMachineScaleSet",
        "virtualMachineProfile.storageProfile.imageReference.publisher",
        Effect.REFUSED,
        f"{_VMSS_DOC}: 'Create-time properties ... Image reference publisher'",
    ),
    Rule(
        "azure-native:compute:VirtualMachineScaleSet",
        "virtualMachineProfile.storageProfile.imageReference.offer",
        Effect.REFUSED,
        f"{_VMSS_DOC}: 'Create-time properties ... Image reference offer'",
    ),
    Rule(
        "azure-native:network:NatGateway",
        "zones",
        Effect.REFUSED,
        "learn.microsoft.com nat-gateway-resource: 'After a NAT gateway is deployed, the zone selection can't be"
        " changed'; replacement.go has no entry, so the provider sends an update",
    ),
    Rule(
        "azure-native:compute:VirtualMachineScaleSet",
        "singlePlacementGroup",
        Effect.ONE_WAY,
        f"{_VMSS_DOC}: changes depend on the current value; REST convertToSinglePlacementGroup converts to false only",
    ),
)
"""Network Subnet and VirtualNetwork have no ForceNew input but location (replacement.go): a subnet's
prefix changes in place, which is why moving one is a change policy, not a replacement."""


def rules_for(type_: str) -> list[Rule]:
    if not type_.startswith("azure-native:"):
        return []
    return [rule for rule in RULES if rule.type in ("*", type_)]


def covers(rule_path: str, changed_path: str) -> bool:
    """Whether a row about ``rule_path`` applies to a change at ``changed_path`` (the same or below)."""
    return changed_path == rule_path or changed_path.startswith((f"{rule_path}.", f"{rule_path}[]"))
