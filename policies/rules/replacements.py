"""What a change to an input does to a deployed resource: one table, one source per row.

`pulumi up` asks the provider to diff old and new inputs; pulumi-azure-native answers "replace" for
the keys its schema marks ForceNew and "update" for the rest (provider/pkg/provider/diff.go). Some
updates the provider sends are then refused by Azure (``PropertyChangeNotAllowed``): the provider does
not replace the resource instead (pulumi-azure-native#577, #1117), so `pulumi up` fails half-way.
Both are rows here, so a plan says which changes replace, which update and which will be refused,
and each refusal says how to make the change in a way Azure takes (``fix``). `agk plan --base` shows
them (:mod:`agk.plan.diff`), and the change policy ``no-change-azure-refuses`` refuses them
(:mod:`policies.rules.change`), from this one table. An input without a row updates in place.

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
    RESTART = "restart"
    """Azure accepts the update in place by restarting the VM (its processes stop meanwhile)."""


ARM_PATH = "[arm-path]"
"""Stands for the inputs that form the resource's ARM id: its resource group and name(s)."""
FIXED_NAME = "[fixed-name]"
"""Stands for a replacement that keeps the resource's name and would create the new one first."""


@dataclass(frozen=True)
class Rule:
    type: str
    path: str
    effect: Effect
    source: str
    fix: str = ""
    """How to make the change in a way Azure accepts (every row that refuses has one)."""


_DIFF_GO = "pulumi-azure-native provider/pkg/provider/diff.go"
_REPLACEMENT_GO = "pulumi-azure-native provider/pkg/gen/replacement.go (forceNewMap)"
_VMSS_DOC = (
    "learn.microsoft.com virtual-machine-scale-sets-upgrade-scale-set ('Properties with restrictions on modification')"
)

_REPLACE_VM = (
    "replace the VM deliberately, one host at a time: `pulumi up --replace <urn>` (the program replaces its"
    " fixed-name VMs delete-first; an etcd member as docs/day2.md replaces one, one member at a time)"
)
_NEW_SCALE_SET = (
    "a create-time property of a scale set: add a pool with the new value (a new name), move the work to it,"
    " then remove the old pool"
)
_VM_LOGIN = (
    "a VM keeps the login it was created with: keep admin.username and admin.ssh_public_keys as the fixed hosts"
    " were created (scale sets take new keys for new instances), rotate keys on running VMs with"
    " `az vm user update -g <group> -n <vm> --username <user> --ssh-key-value <key>`, or "
) + _REPLACE_VM.removeprefix("replace the VM deliberately, ")
_ZONES = (
    "https://github.com/hashicorp/terraform-provider-azurerm/issues/3277 ('Changing property 'zones' is not allowed')"
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
    Rule(
        "*",
        FIXED_NAME,
        Effect.REFUSED,
        "pulumi.com docs, resource option deleteBeforeReplace ('By default ... Pulumi creates new instances of"
        " resources before deleting old ones'); pulumi-azure-native's Create first reads the resource and fails"
        " with 'cannot create already existing resource' (provider/pkg/provider/provider.go), and an ARM name"
        " is unique in its resource group",
        "give the resource deleteBeforeReplace (the program does for its fixed-name hosts and disks), or a new name",
    ),
    Rule("azure-native:network:PrivateEndpoint", "subnet", Effect.REPLACE, f"{_REPLACEMENT_GO}, issue #3883"),
    Rule("azure-native:network:PublicIPAddress", "publicIPAddressVersion", Effect.REPLACE, _REPLACEMENT_GO),
    Rule("azure-native:network:PublicIPAddress", "publicIPPrefix", Effect.REPLACE, _REPLACEMENT_GO),
    Rule("azure-native:network:PublicIPAddress", "sku", Effect.REPLACE, _REPLACEMENT_GO),
    Rule("azure-native:storage:StorageAccount", "isHnsEnabled", Effect.REPLACE, _REPLACEMENT_GO),
    Rule("azure-native:authorization:RoleAssignment", "principalId", Effect.REPLACE, _REPLACEMENT_GO),
    Rule("azure-native:authorization:RoleAssignment", "scope", Effect.REPLACE, _REPLACEMENT_GO),
    # -- a VM's OS profile is written once, at creation ------------------------------------------------
    Rule(
        "azure-native:compute:VirtualMachine",
        "osProfile.customData",
        Effect.REFUSED,
        "pulumi-azure-native#577; Azure/azure-sdk-for-node#2297 ('Changing property customData is not allowed')",
        "customData is written once: change what the host reads through its Key Vault bundle (docs/day2.md), or "
        + _REPLACE_VM.removeprefix("replace the VM deliberately, "),
    ),
    Rule(
        "azure-native:compute:VirtualMachine",
        "osProfile.adminUsername",
        Effect.REFUSED,
        "azure-rest-api-specs compute.json OSProfile.adminUsername: 'cannot be updated after the VM is created' (#7823)",
        _VM_LOGIN,
    ),
    Rule(
        "azure-native:compute:VirtualMachine",
        "osProfile.computerName",
        Effect.REFUSED,
        "azure-rest-api-specs compute.json OSProfile.computerName: 'cannot be updated after the VM is created'",
        _REPLACE_VM,
    ),
    Rule(
        "azure-native:compute:VirtualMachine",
        "osProfile.linuxConfiguration.ssh",
        Effect.REFUSED,
        "Azure/azure-quickstart-templates#5442, Azure/aks-engine#585 (PropertyChangeNotAllowed: 'Changing property"
        " 'linuxConfiguration.ssh.publicKeys' is not allowed')",
        _VM_LOGIN,
    ),
    Rule(
        "azure-native:compute:VirtualMachine",
        "osProfile.linuxConfiguration.disablePasswordAuthentication",
        Effect.REFUSED,
        "Azure/bicep#15273 ('Changing property 'linuxConfiguration.disablePasswordAuthentication' is not allowed',"
        " a Compute Resource Provider limitation)",
        _VM_LOGIN,
    ),
    Rule(
        "azure-native:compute:VirtualMachine",
        "osProfile.secrets",
        Effect.REFUSED,
        "MicrosoftDocs/azure-docs#12602 (Update-AzureRmVM: 'Changing property 'osProfile' is not allowed')",
        _REPLACE_VM,
    ),
    Rule(
        "azure-native:compute:VirtualMachine",
        "storageProfile.imageReference",
        Effect.REFUSED,
        "pulumi-azure-native#1117 ('Changing property imageReference.id is not allowed', the provider does not replace)",
        _REPLACE_VM,
    ),
    Rule(
        "azure-native:compute:VirtualMachine",
        "storageProfile.osDisk.createOption",
        Effect.REFUSED,
        "Azure/azure-powershell#7621 ('Changing property osDisk.createOption is not allowed')",
        _REPLACE_VM,
    ),
    Rule(
        "azure-native:compute:VirtualMachine",
        "storageProfile.osDisk.name",
        Effect.REFUSED,
        "hashicorp/terraform-provider-azurerm#16323 ('Changing property osDisk.name is not allowed')",
        _REPLACE_VM,
    ),
    # -- zones are chosen at creation ------------------------------------------------------------------
    Rule(
        "azure-native:compute:VirtualMachine",
        "zones",
        Effect.REFUSED,
        f"{_ZONES}; MicrosoftDocs/azure-docs#98839 ('Availability Zone can only be configured while deploying a"
        " Virtual machine'); Azure's later zone movement (azure-cli#33242) deallocates the VM, which an update"
        " never does",
        _REPLACE_VM + "; its data disk moves zones only by a snapshot (a new disk)",
    ),
    Rule(
        "azure-native:compute:Disk",
        "zones",
        Effect.REFUSED,
        "MicrosoftDocs/azure-docs articles/virtual-machines/disks-migrate-lrs-zrs.md (a zonal disk moves only by"
        " a snapshot and a new disk)",
        "snapshot the disk and create one in the new zone (a replacement: for etcd, a member replacement, one at"
        " a time)",
    ),
    Rule(
        "azure-native:network:LoadBalancer",
        "frontendIPConfigurations[].zones",
        Effect.REFUSED,
        "learn.microsoft.com reliability/migrate-load-balancer: 'Existing frontend IP address can't be modified to"
        " support availability zones'",
        "create a new frontend with the zones (a new load balancer or frontend name), move the API servers'"
        " address to it, then remove the old one",
    ),
    Rule(
        "azure-native:network:NatGateway",
        "zones",
        Effect.REFUSED,
        "learn.microsoft.com nat-gateway-resource: 'After a NAT gateway is deployed, the zone selection can't be"
        " changed'; replacement.go has no entry, so the provider sends an update",
        "create a NAT gateway in the new zone, move the subnets to it, then remove the old one",
    ),
    # -- disks -------------------------------------------------------------------------------------------
    Rule(
        "azure-native:compute:Disk",
        "diskSizeGB",
        Effect.GROW_ONLY,
        "azure-rest-api-specs compute DiskProperties.diskSizeGB: resizes 'can only increase the disk's size'",
        "a disk never shrinks: keep its size (set it in the stack, e.g. cluster.prometheus.data_disk_gib or"
        " cluster.etcd.disk_gib, to the size deployed), or replace the disk and restore its data",
    ),
    Rule(
        "azure-native:compute:VirtualMachine",
        "storageProfile.dataDisks[].diskSizeGB",
        Effect.GROW_ONLY,
        "azure-rest-api-specs compute DiskProperties.diskSizeGB: resizes 'can only increase the disk's size' (a VM's"
        " data disk created Empty is such a managed disk)",
        "a disk never shrinks: keep the size deployed (set cluster.prometheus.data_disk_gib to it), or replace the"
        " VM and restore its data",
    ),
    Rule(
        "azure-native:compute:Disk",
        "creationData",
        Effect.REFUSED,
        "azure-rest-api-specs compute DiskProperties.creationData: 'cannot be changed after the disk has been created'",
        "replace the disk (its data is lost: restore it)",
    ),
    Rule(
        "azure-native:compute:Disk",
        "sku",
        Effect.REFUSED,
        "MicrosoftDocs/azure-docs articles/virtual-machines/disks-convert-types.md (an attached disk changes type"
        " only while its VM is deallocated); hashicorp/terraform-provider-azurerm#1593",
        "deallocate the VM that uses it (`az vm deallocate`), change the type, start it; for etcd one member at a time",
    ),
    # -- what restarts a VM -----------------------------------------------------------------------------
    Rule(
        "azure-native:compute:VirtualMachine",
        "hardwareProfile.vmSize",
        Effect.RESTART,
        "MicrosoftDocs/azure-docs articles/virtual-machines/sizes/resize-vm.md: 'If the virtual machine is"
        " currently running, changing its size will cause it to restart' (and a size the VM's hardware cluster"
        " lacks needs it deallocated first)",
    ),
    # -- scale sets -------------------------------------------------------------------------------------
    Rule(
        "azure-native:compute:VirtualMachineScaleSet",
        "platformFaultDomainCount",
        Effect.REFUSED,
        f"{_VMSS_DOC}: fault domains are create-time properties; MicrosoftDocs/azure-docs#108952",
        _NEW_SCALE_SET,
    ),
    Rule(
        "azure-native:compute:VirtualMachineScaleSet",
        "virtualMachineProfile.storageProfile.osDisk.managedDisk.storageAccountType",
        Effect.REFUSED,
        f"{_VMSS_DOC}: the managed OS disk storage account type is a create-time property",
        _NEW_SCALE_SET,
    ),
    Rule(
        "azure-native:compute:VirtualMachineScaleSet",
        "zones",
        Effect.REFUSED,
        f"{_VMSS_DOC}: 'Create-time properties ... Availability Zones'",
        _NEW_SCALE_SET,
    ),
    Rule(
        "azure-native:compute:VirtualMachineScaleSet",
        "virtualMachineProfile.storageProfile.imageReference.publisher",
        Effect.REFUSED,
        f"{_VMSS_DOC}: 'Create-time properties ... Image reference publisher'",
        _NEW_SCALE_SET,
    ),
    Rule(
        "azure-native:compute:VirtualMachineScaleSet",
        "virtualMachineProfile.storageProfile.imageReference.offer",
        Effect.REFUSED,
        f"{_VMSS_DOC}: 'Create-time properties ... Image reference offer'",
        _NEW_SCALE_SET,
    ),
    Rule(
        "azure-native:compute:VirtualMachineScaleSet",
        "virtualMachineProfile.osProfile.adminUsername",
        Effect.REFUSED,
        "azure-rest-api-specs compute VirtualMachineScaleSetUpdateOSProfile: an update takes customData,"
        " linuxConfiguration, secrets and windowsConfiguration only (no adminUsername)",
        _NEW_SCALE_SET,
    ),
    Rule(
        "azure-native:compute:VirtualMachineScaleSet",
        "virtualMachineProfile.osProfile.computerNamePrefix",
        Effect.REFUSED,
        "azure-rest-api-specs compute VirtualMachineScaleSetUpdateOSProfile: an update takes customData,"
        " linuxConfiguration, secrets and windowsConfiguration only (no computerNamePrefix)",
        _NEW_SCALE_SET,
    ),
    Rule(
        "azure-native:compute:VirtualMachineScaleSet",
        "singlePlacementGroup",
        Effect.ONE_WAY,
        f"{_VMSS_DOC}: changes depend on the current value; REST convertToSinglePlacementGroup converts to false only",
        "a scale set that spans placement groups never returns to one: "
        + _NEW_SCALE_SET.removeprefix("a create-time property of a scale set: "),
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


def rule_for(type_: str, path: str) -> Rule | None:
    """The row that decides a change of ``path`` on ``type_`` (the most specific one), if any."""
    rows = [r for r in rules_for(type_) if r.path != ARM_PATH and covers(r.path, path)]
    return max(rows, key=lambda r: len(r.path), default=None)


def refusals(type_: str, paths: tuple[str, ...]) -> list[Rule]:
    """The rows behind each refused path (as :class:`agk.plan.diff.Change` lists them), in that order."""
    return [rule for rule in (rule_for(type_, p) for p in paths) if rule is not None]
