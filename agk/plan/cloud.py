"""What Azure would answer: resource ids, names and private addresses for a planned resource.

Outputs follow the provider's shape closely enough for reports and policies to reason about
them: ARM resource ids (children under their parent's id), the resource's physical ``name``
(azure-native's auto-naming: logical name plus 8 hex characters when no name is given), and
private IPs that agree with the address plan (static addresses echoed; dynamic ones taken from
the top of their subnet so that they never collide with the planner's static hosts, which are
counted from the bottom).
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

from agk.plan import wire

SUBSCRIPTION = "00000000-0000-0000-0000-000000000000"
TENANT = "00000000-0000-0000-0000-00000000aaaa"
_RG = f"/subscriptions/{SUBSCRIPTION}/resourceGroups/"


@dataclass(frozen=True)
class ArmPath:
    """ARM id segments after ``providers/<namespace>``: (collection, input key of the name)."""

    namespace: str
    segments: tuple[tuple[str, str], ...]


def _net(*segments: tuple[str, str]) -> ArmPath:
    return ArmPath("Microsoft.Network", segments)


_VNET = ("virtualNetworks", "virtualNetworkName")
_NSG = ("networkSecurityGroups", "networkSecurityGroupName")
_ZONE = ("privateDnsZones", "privateZoneName")
_ROUTES = ("routeTables", "routeTableName")
_ACCOUNT = ("storageAccounts", "accountName")
_GALLERY = ("galleries", "galleryName")

ARM_PATHS: dict[str, ArmPath] = {
    "azure-native:network:VirtualNetwork": _net(_VNET),
    "azure-native:network:Subnet": _net(_VNET, ("subnets", "subnetName")),
    "azure-native:network:VirtualNetworkPeering": _net(_VNET, ("virtualNetworkPeerings", "virtualNetworkPeeringName")),
    "azure-native:network:NetworkSecurityGroup": _net(_NSG),
    "azure-native:network:SecurityRule": _net(_NSG, ("securityRules", "securityRuleName")),
    "azure-native:network:NetworkInterface": _net(("networkInterfaces", "networkInterfaceName")),
    "azure-native:network:PublicIPAddress": _net(("publicIPAddresses", "publicIpAddressName")),
    "azure-native:network:LoadBalancer": _net(("loadBalancers", "loadBalancerName")),
    "azure-native:network:BastionHost": _net(("bastionHosts", "bastionHostName")),
    "azure-native:network:RouteTable": _net(_ROUTES),
    "azure-native:network:Route": _net(_ROUTES, ("routes", "routeName")),
    "azure-native:network:NatGateway": _net(("natGateways", "natGatewayName")),
    "azure-native:network:PublicIPPrefix": _net(("publicIPPrefixes", "publicIpPrefixName")),
    "azure-native:network:PrivateEndpoint": _net(("privateEndpoints", "privateEndpointName")),
    "azure-native:network:ApplicationSecurityGroup": _net(
        ("applicationSecurityGroups", "applicationSecurityGroupName")
    ),
    "azure-native:network:NetworkWatcher": _net(("networkWatchers", "networkWatcherName")),
    "azure-native:privatedns:PrivateZone": _net(_ZONE),
    "azure-native:privatedns:VirtualNetworkLink": _net(_ZONE, ("virtualNetworkLinks", "virtualNetworkLinkName")),
    "azure-native:privatedns:PrivateRecordSet": _net(_ZONE, ("{recordType}", "relativeRecordSetName")),
    "azure-native:compute:VirtualMachineScaleSet": ArmPath(
        "Microsoft.Compute", (("virtualMachineScaleSets", "vmScaleSetName"),)
    ),
    "azure-native:compute:VirtualMachine": ArmPath("Microsoft.Compute", (("virtualMachines", "vmName"),)),
    "azure-native:compute:Disk": ArmPath("Microsoft.Compute", (("disks", "diskName"),)),
    "azure-native:compute:AvailabilitySet": ArmPath(
        "Microsoft.Compute", (("availabilitySets", "availabilitySetName"),)
    ),
    "azure-native:compute:ProximityPlacementGroup": ArmPath(
        "Microsoft.Compute", (("proximityPlacementGroups", "proximityPlacementGroupName"),)
    ),
    "azure-native:compute:Gallery": ArmPath("Microsoft.Compute", (_GALLERY,)),
    "azure-native:compute:GalleryImage": ArmPath("Microsoft.Compute", (_GALLERY, ("images", "galleryImageName"))),
    "azure-native:virtualmachineimages:VirtualMachineImageTemplate": ArmPath(
        "Microsoft.VirtualMachineImages", (("imageTemplates", "imageTemplateName"),)
    ),
    "azure-native:storage:StorageAccount": ArmPath("Microsoft.Storage", (_ACCOUNT,)),
    "azure-native:storage:BlobContainer": ArmPath(
        "Microsoft.Storage", (_ACCOUNT, ("blobServices", "=default"), ("containers", "containerName"))
    ),
    "azure-native:managedidentity:UserAssignedIdentity": ArmPath(
        "Microsoft.ManagedIdentity", (("userAssignedIdentities", "resourceName"),)
    ),
}


def _lower_camel(text: str) -> str:
    return text[:1].lower() + text[1:]


def arm_path(type_: str, inputs: dict[str, Any]) -> ArmPath:
    """The ARM path of a type; for types not in the table, the provider's naming convention."""
    known = ARM_PATHS.get(type_)
    if known is not None:
        return known
    _, module, name = type_.split(":", 2)
    key = f"{_lower_camel(name)}Name"
    if key not in inputs:
        key = next((k for k in sorted(inputs) if k.endswith("Name") and k != "resourceGroupName"), key)
    return ArmPath(f"Microsoft.{module[:1].upper()}{module[1:]}", ((f"{_lower_camel(name)}s", key),))


def digest(*parts: str, length: int = 8) -> str:
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:length]


def stable_uuid(*parts: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "\x00".join(parts)))


def autoname(type_: str, logical: str, urn: str) -> str:
    """azure-native auto-naming: the logical name and 8 hex characters (storage: no dashes, <= 24)."""
    if type_ == "azure-native:storage:StorageAccount":
        base = "".join(c for c in logical.lower() if c.isalnum())[:16]
        return base + digest(urn)
    if type_ == "azure-native:authorization:RoleAssignment":
        return stable_uuid(urn)
    return logical + digest(urn)


@dataclass
class _Subnet:
    network: ipaddress.IPv4Network
    used: set[ipaddress.IPv4Address] = field(default_factory=set)


class AddressBook:
    """Subnets seen so far and the private addresses handed out in them."""

    def __init__(self) -> None:
        self._subnets: dict[str, _Subnet] = {}
        self._lock = threading.Lock()

    def add_subnet(self, subnet_id: str, prefix: Any) -> None:
        if not isinstance(prefix, str):
            return
        try:
            network = ipaddress.IPv4Network(prefix, strict=False)
        except ValueError:
            return
        with self._lock:
            self._subnets.setdefault(subnet_id.lower(), _Subnet(network))

    def assign(self, subnet_id: Any, static: Any) -> str | None:
        """The address of one IP configuration: ``static`` when given, else the highest free one."""
        with self._lock:
            subnet = self._subnets.get(subnet_id.lower()) if isinstance(subnet_id, str) else None
            if isinstance(static, str) and static:
                if subnet is not None:
                    subnet.used.add(ipaddress.IPv4Address(static))
                return static
            if subnet is None:
                return None
            candidate = subnet.network.broadcast_address - 1
            while candidate in subnet.used and candidate > subnet.network.network_address + 4:
                candidate -= 1
            subnet.used.add(candidate)
            return str(candidate)


def _sub_id(value: Any) -> Any:
    return value.get("id") if isinstance(value, dict) else None


class Cloud:
    """Answers ``RegisterResource`` for azure-native and the other providers a program uses."""

    def __init__(self) -> None:
        self.addresses = AddressBook()

    def create(self, type_: str, logical: str, urn: str, inputs: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """``(id, outputs)`` in wire form; ``inputs`` are in wire form too (secrets stay tagged)."""
        if type_.startswith("azure-native:"):
            return self._azure(type_, logical, urn, inputs)
        if type_.startswith("pulumi:providers:"):
            return stable_uuid(urn), dict(inputs)
        if type_.startswith("tls:"):
            return self._tls(type_, urn, inputs)
        if type_.startswith("random:"):
            return stable_uuid(urn), {**inputs, "result": wire.secret(digest(urn, length=16))}
        return f"{logical}-{digest(urn)}", dict(inputs)

    def _azure(self, type_: str, logical: str, urn: str, inputs: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        values = wire.plain(inputs)
        if type_ == "azure-native:resources:ResourceGroup":
            name = values.get("resourceGroupName") or autoname(type_, logical, urn)
            rid = f"{_RG}{name}"
            outputs = {k: v for k, v in inputs.items() if k != "resourceGroupName"}
            return rid, {**outputs, "id": rid, "name": name, "type": "Microsoft.Resources/resourceGroups"}
        if type_ == "azure-native:authorization:RoleAssignment":
            name = values.get("roleAssignmentName") or autoname(type_, logical, urn)
            rid = f"{values.get('scope', '')}/providers/Microsoft.Authorization/roleAssignments/{name}"
            return rid, {**inputs, "id": rid, "name": name, "principalType": values.get("principalType", "")}
        path = arm_path(type_, values)
        rid = f"{_RG}{values.get('resourceGroupName', 'rg')}/providers/{path.namespace}"
        arm_type = path.namespace
        name = ""
        for index, (collection, key) in enumerate(path.segments):
            last = index == len(path.segments) - 1
            if key.startswith("="):
                segment = key[1:]
            elif last:
                segment = str(values.get(key) or autoname(type_, logical, urn))
            else:
                segment = str(values.get(key, ""))
            if collection == "{recordType}":
                collection = str(values.get("recordType", "A"))
            rid += f"/{collection}/{segment}"
            arm_type += f"/{collection}"
            name = segment
        outputs = {k: v for k, v in inputs.items() if k not in {key for _, key in path.segments}}
        outputs.pop("resourceGroupName", None)
        # A resource whose own schema has a top-level ``type`` input (storage.Blob: Block, Append, Page) keeps it; the
        # provider's output is that property, not the ARM type.
        outputs.update(
            {"id": rid, "name": name, "type": inputs.get("type", arm_type), "provisioningState": "Succeeded"}
        )
        self._extras(type_, rid, name, urn, values, outputs)
        return rid, outputs

    def _extras(
        self, type_: str, rid: str, name: str, urn: str, values: dict[str, Any], outputs: dict[str, Any]
    ) -> None:
        kind = type_.rsplit(":", 1)[1]
        if kind == "Subnet":
            self.addresses.add_subnet(rid, values.get("addressPrefix") or (values.get("addressPrefixes") or [None])[0])
        elif kind == "VirtualNetwork":
            subnets = []
            for subnet in values.get("subnets") or []:
                sid = f"{rid}/subnets/{subnet.get('name')}"
                self.addresses.add_subnet(sid, subnet.get("addressPrefix"))
                subnets.append({**subnet, "id": sid, "provisioningState": "Succeeded"})
            if subnets:
                outputs["subnets"] = subnets
            outputs["resourceGuid"] = stable_uuid(urn)
        elif kind == "NetworkInterface":
            outputs["ipConfigurations"] = self._ip_configs(rid, "ipConfigurations", values.get("ipConfigurations"))
            outputs["macAddress"] = "-".join(digest(urn, length=12)[i : i + 2] for i in range(0, 12, 2)).upper()
        elif kind == "LoadBalancer":
            outputs["frontendIPConfigurations"] = self._ip_configs(
                rid, "frontendIPConfigurations", values.get("frontendIPConfigurations")
            )
            for collection in ("backendAddressPools", "probes", "loadBalancingRules", "inboundNatRules"):
                if values.get(collection):
                    outputs[collection] = [
                        {**item, "id": f"{rid}/{collection}/{item.get('name')}"} for item in values[collection]
                    ]
        elif kind == "PublicIPAddress":
            number = int(digest(urn, length=6), 16)
            outputs["ipAddress"] = f"20.{(number >> 16) & 255}.{(number >> 8) & 255}.{max(number & 255, 4)}"
        elif kind == "PrivateEndpoint":
            address = self.addresses.assign(_sub_id(values.get("subnet")), None)
            outputs["customDnsConfigs"] = [{"fqdn": f"{name}.privatelink", "ipAddresses": [address]}]
        elif kind in {"VirtualMachine", "VirtualMachineScaleSet", "VirtualMachineImageTemplate"}:
            if kind != "VirtualMachineImageTemplate":
                outputs["vmId" if kind == "VirtualMachine" else "uniqueId"] = stable_uuid(urn)
            identity = values.get("identity")
            if isinstance(identity, dict) and isinstance(identity.get("userAssignedIdentities"), list):
                # The API takes a list of identity ids and answers a map of id -> principal and client ids.
                outputs["identity"] = {
                    **identity,
                    "userAssignedIdentities": {
                        uid: {"principalId": stable_uuid(uid, "p"), "clientId": stable_uuid(uid, "c")}
                        for uid in identity["userAssignedIdentities"]
                    },
                }
        elif kind == "UserAssignedIdentity":
            outputs.update(
                {"principalId": stable_uuid(urn, "p"), "clientId": stable_uuid(urn, "c"), "tenantId": TENANT}
            )
        elif kind == "StorageAccount":
            outputs["primaryEndpoints"] = {
                svc: f"https://{name}.{svc}.core.windows.net/" for svc in ("blob", "dfs", "file", "queue", "table")
            }
        elif kind == "BastionHost":
            outputs["dnsName"] = f"bst-{stable_uuid(urn)}.bastion.azure.com"

    def _ip_configs(self, rid: str, collection: str, configs: Any) -> list[dict[str, Any]]:
        result = []
        for config in configs or []:
            address = self.addresses.assign(_sub_id(config.get("subnet")), config.get("privateIPAddress"))
            item = {**config, "id": f"{rid}/{collection}/{config.get('name')}", "provisioningState": "Succeeded"}
            if address is not None:
                item["privateIPAddress"] = address
            result.append(item)
        return result

    def _tls(self, type_: str, urn: str, inputs: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        outputs = self._tls_outputs(type_, urn, inputs)
        if type_.endswith("PrivateKey") and inputs.get("algorithm") == "RSA":
            # What is derived from an RSA public key (the workload identity JWKS) parses it: a well-formed public
            # key whose modulus comes from the URN; no private key exists for it.
            outputs["publicKeyPem"] = planned_rsa_public_pem(urn, int(inputs.get("rsaBits") or 2048))
        return digest(urn, length=32), outputs

    def _tls_outputs(self, type_: str, urn: str, inputs: dict[str, Any]) -> dict[str, Any]:
        # Key material is never real here: a plan must not mint keys; the values are marked secret.
        outputs = dict(inputs)
        tag = digest(urn, length=16)
        if type_.endswith("PrivateKey"):
            outputs.update(
                {
                    "privateKeyPem": wire.secret(
                        f"-----BEGIN PRIVATE KEY-----\nplanned-{tag}\n-----END PRIVATE KEY-----\n"
                    ),
                    "privateKeyOpenssh": wire.secret(f"planned-{tag}"),
                    "publicKeyPem": f"-----BEGIN PUBLIC KEY-----\nplanned-{tag}\n-----END PUBLIC KEY-----\n",
                    "publicKeyOpenssh": f"ssh-ed25519 planned{tag}\n",
                    "publicKeyFingerprintSha256": f"SHA256:{tag}",
                }
            )
        elif type_.endswith("Cert") or type_.endswith("CertRequest"):
            field_name = "certRequestPem" if type_.endswith("CertRequest") else "certPem"
            outputs[field_name] = f"-----BEGIN CERTIFICATE-----\nplanned-{tag}\n-----END CERTIFICATE-----\n"
        return outputs


def _der(tag: int, body: bytes) -> bytes:
    n = len(body)
    size = (
        bytes([n])
        if n < 0x80
        else bytes([0x80 | ((n.bit_length() + 7) // 8)]) + n.to_bytes((n.bit_length() + 7) // 8, "big")
    )
    return bytes([tag]) + size + body


def planned_rsa_public_pem(urn: str, bits: int) -> str:
    """A PKIX PEM RSA public key for a planned ``tls.PrivateKey`` (deterministic, odd modulus of ``bits``)."""
    seed, raw = urn.encode(), b""
    while len(raw) < bits // 8:
        raw += hashlib.sha256(seed + len(raw).to_bytes(4, "big")).digest()
    modulus = bytearray(raw[: bits // 8])
    modulus[0] |= 0x80
    modulus[-1] |= 1
    key = _der(0x30, _der(0x02, b"\0" + bytes(modulus)) + _der(0x02, (65537).to_bytes(3, "big")))
    algorithm = _der(0x30, _der(0x06, bytes.fromhex("2a864886f70d010101")) + b"\x05\x00")
    der = _der(0x30, algorithm + _der(0x03, b"\0" + key))
    body = base64.b64encode(der).decode()
    lines = "\n".join(body[i : i + 64] for i in range(0, len(body), 64))
    return f"-----BEGIN PUBLIC KEY-----\n{lines}\n-----END PUBLIC KEY-----\n"
