"""Reading resources in the provider's wire form (camelCase, ARM ``properties`` flattened).

Props arrive wrapped in the SDK's unknown-checking proxies: they are ``Mapping`` and ``Sequence``
but not ``dict`` and ``list``, and touching an unknown value raises ``UnknownValueError`` (which
the SDK turns into an advisory "can't run during preview"), so every helper here only reads.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from modules import tags as tagnames

AZ = "azure-native:"
VNET = "azure-native:network:VirtualNetwork"
SUBNET = "azure-native:network:Subnet"
PEERING = "azure-native:network:VirtualNetworkPeering"
NSG = "azure-native:network:NetworkSecurityGroup"
SECURITY_RULE = "azure-native:network:SecurityRule"
NIC = "azure-native:network:NetworkInterface"
PUBLIC_IP = "azure-native:network:PublicIPAddress"
LOAD_BALANCER = "azure-native:network:LoadBalancer"
PRIVATE_ENDPOINT = "azure-native:network:PrivateEndpoint"
VM = "azure-native:compute:VirtualMachine"
VMSS = "azure-native:compute:VirtualMachineScaleSet"
DISK = "azure-native:compute:Disk"
STORAGE_ACCOUNT = "azure-native:storage:StorageAccount"
BLOB_CONTAINER = "azure-native:storage:BlobContainer"

# ARM path segment and the input that names each resource whose id other resources cite.
_ARM_PATH = {
    VNET: ("microsoft.network/virtualnetworks", "virtualNetworkName"),
    NSG: ("microsoft.network/networksecuritygroups", "networkSecurityGroupName"),
    NIC: ("microsoft.network/networkinterfaces", "networkInterfaceName"),
    PUBLIC_IP: ("microsoft.network/publicipaddresses", "publicIpAddressName"),
    DISK: ("microsoft.compute/disks", "diskName"),
    VM: ("microsoft.compute/virtualmachines", "vmName"),
    VMSS: ("microsoft.compute/virtualmachinescalesets", "vmScaleSetName"),
}


def is_map(value: Any) -> bool:
    return isinstance(value, Mapping)


def is_list(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, str | bytes)


def get(props: Any, path: str, default: Any = None) -> Any:
    """``props["a"]["b"]`` for ``path="a.b"``; ``default`` where a key is missing or not a map."""
    value = props
    for key in path.split("."):
        if not is_map(value) or key not in value:
            return default
        value = value[key]
    return default if value is None else value


def items(props: Any, path: str) -> list[Any]:
    value = get(props, path, [])
    return list(value) if is_list(value) else []


def tags(props: Any) -> Mapping[str, Any]:
    value = get(props, "tags", {})
    return value if is_map(value) else {}


def tag(props: Any, name: str) -> str | None:
    value = tags(props).get(name)
    return value if isinstance(value, str) else None


def role(props: Any) -> str | None:
    return tag(props, tagnames.ROLE)


def int_tag(props: Any, name: str) -> int | None:
    text = tag(props, name)
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        return None


def number(value: Any) -> int | None:
    """Wire numbers arrive as floats (protobuf Struct); counts are whole numbers."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value)


def arm_key(resource_id: str) -> str:
    """A resource id without its subscription, lower-case: ARM ids compare case-insensitively, and
    a policy never knows the subscription a reference was written with."""
    text = resource_id.strip().strip("/").lower()
    start = text.find("resourcegroups/")
    return text[start:] if start >= 0 else text


def ref_id(props: Any, path: str) -> str | None:
    value = get(props, path)
    if is_map(value):
        value = get(value, "id")
    return arm_key(value) if isinstance(value, str) and value else None


def resource_key(resource_type: str, props: Any) -> str | None:
    """The ARM id of a resource: its ``id`` output where the export has one, else rebuilt from the
    inputs that name it (resource group, parent, name), as ARM would form it."""
    own = get(props, "id")
    if isinstance(own, str) and "/" in own:
        return arm_key(own)
    rg = get(props, "resourceGroupName")
    if not isinstance(rg, str):
        return None
    if resource_type == SUBNET:
        vnet, name = get(props, "virtualNetworkName"), get(props, "subnetName") or get(props, "name")
        if isinstance(vnet, str) and isinstance(name, str):
            return arm_key(f"resourceGroups/{rg}/providers/microsoft.network/virtualnetworks/{vnet}/subnets/{name}")
        return None
    if resource_type not in _ARM_PATH:
        return None
    path, name_key = _ARM_PATH[resource_type]
    name = get(props, name_key) or get(props, "name")
    return arm_key(f"resourceGroups/{rg}/providers/{path}/{name}") if isinstance(name, str) else None


def networks(values: Iterable[Any]) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    out = []
    for value in values:
        if isinstance(value, str):
            try:
                out.append(ipaddress.ip_network(value, strict=False))
            except ValueError:
                continue
    return out


def prefixes(props: Any, single: str, multiple: str) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """A subnet's or rule's prefixes, from the singular and the plural wire field together."""
    values = items(props, multiple)
    one = get(props, single)
    if isinstance(one, str):
        values.append(one)
    return networks(values)


def texts(props: Any, single: str, multiple: str) -> list[str]:
    values = [v for v in items(props, multiple) if isinstance(v, str)]
    one = get(props, single)
    if isinstance(one, str):
        values.append(one)
    return values


def addresses(network: ipaddress.IPv4Network | ipaddress.IPv6Network) -> int:
    return int(network.num_addresses)


def walk_strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif is_map(value):
        for key in value:
            yield from walk_strings(value[key])
    elif is_list(value):
        for item in value:
            yield from walk_strings(item)
