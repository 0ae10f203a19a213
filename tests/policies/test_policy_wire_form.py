"""The fixtures' wire form is what azure-native v3 sends: the same resources built with the real
SDK under Pulumi's mock runtime give the same keys, and required-tags reads each type's real
schema (taggable or not) from the installed SDK."""

from __future__ import annotations

import inspect
from typing import Any

import pulumi
import pulumi_azure_native as az
import pytest
from policy_fixtures import good_cluster

from policies.rules.stack import taggable


class Capture(pulumi.runtime.Mocks):
    def __init__(self) -> None:
        self.inputs: dict[str, dict[str, Any]] = {}

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        self.inputs[args.name] = dict(args.inputs)
        return f"{args.name}-id", dict(args.inputs)

    def call(self, args: pulumi.runtime.MockCallArgs) -> dict[str, Any]:
        return {}


def _keys(value: Any, prefix: str = "") -> set[str]:
    out = set()
    if isinstance(value, dict):
        for k, v in value.items():
            out.add(f"{prefix}{k}")
            out |= _keys(v, f"{prefix}{k}.")
    elif isinstance(value, list) and value:
        out |= _keys(value[0], f"{prefix}[].")
    return out


def test_fixture_props_match_the_sdk_wire_form() -> None:
    capture = Capture()
    pulumi.runtime.set_mocks(capture, preview=False)
    st = good_cluster()
    vmss = st.inputs("gpu-h100-0")
    nic = st.inputs("etcd-0-nic")
    vm = st.inputs("etcd-0")
    account = st.inputs("stdev")

    @pulumi.runtime.test
    def program() -> pulumi.Output[int]:
        az.compute.VirtualMachineScaleSet("gpu-h100-0", **pulumi_args(az.compute.VirtualMachineScaleSet, vmss))
        az.network.NetworkInterface("etcd-0-nic", **pulumi_args(az.network.NetworkInterface, nic))
        az.compute.VirtualMachine("etcd-0", **pulumi_args(az.compute.VirtualMachine, vm))
        az.storage.StorageAccount("stdev", **pulumi_args(az.storage.StorageAccount, account))
        return pulumi.Output.from_input(1)

    program()
    for name, props in (("gpu-h100-0", vmss), ("etcd-0-nic", nic), ("etcd-0", vm), ("stdev", account)):
        expected = _keys({k: v for k, v in props.items() if k != "id"})
        assert _keys(capture.inputs[name]) == expected, name


def pulumi_args(cls: type, props: dict[str, Any]) -> dict[str, Any]:
    """Wire props back to the SDK's keyword arguments (the SDK maps them to camelCase again)."""
    names = {p.replace("_", "").lower(): p for p in inspect.signature(cls._internal_init).parameters}  # type: ignore[attr-defined]
    return {names[k.lower()]: _to_args(v) for k, v in props.items() if k != "id"}


def _to_args(value: Any) -> Any:
    if isinstance(value, dict):
        return {_dict_key(k): _to_args(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_to_args(v) for v in value]
    return value


def _dict_key(key: str) -> str:
    if key in ("owner", "cost-center", "cluster") or key.startswith("agk-"):
        return key
    out = ""
    for i, c in enumerate(key):
        prev, nxt = key[i - 1] if i else "", key[i + 1 : i + 2]
        boundary = c.isupper() and prev and (not prev.isupper() or nxt.islower())
        out += f"_{c.lower()}" if boundary else c.lower()
    return out


@pytest.mark.parametrize(
    ("token", "expected"),
    [
        # ARM child resources without tags: a policy demanding them would report what no one can fix.
        ("azure-native:storage:Blob", False),
        ("azure-native:storage:BlobContainer", False),
        ("azure-native:storage:BlobServiceProperties", False),
        ("azure-native:network:Subnet", False),
        ("azure-native:network:VirtualNetworkPeering", False),
        ("azure-native:network:SecurityRule", False),
        ("azure-native:network:Route", False),
        ("azure-native:network:PrivateDnsZoneGroup", False),
        ("azure-native:privatedns:PrivateRecordSet", False),
        ("azure-native:authorization:RoleAssignment", False),
        ("azure-native:compute:VirtualMachineScaleSetExtension", False),
        # Tracked resources, and child resources that do take tags.
        ("azure-native:storage:StorageAccount", True),
        ("azure-native:resources:ResourceGroup", True),
        ("azure-native:compute:VirtualMachine", True),
        ("azure-native:keyvault:Secret", True),
        # Types the installed SDK does not ship: nothing is demanded of them.
        ("azure-native:network/v20150501preview:VirtualNetwork", None),
        ("azure-native:nosuchmodule:Thing", None),
        ("azure-native:storage:NoSuchType", None),
        ("kubernetes:core/v1:Pod", None),
    ],
)
def test_taggable_comes_from_the_sdk(token: str, expected: bool | None) -> None:
    assert taggable(token) is expected


@pytest.mark.parametrize(
    "cls",
    [
        az.network.VirtualNetwork,
        az.network.NetworkSecurityGroup,
        az.network.NetworkInterface,
        az.compute.VirtualMachine,
        az.compute.VirtualMachineScaleSet,
        az.compute.Disk,
        az.storage.StorageAccount,
        az.network.PrivateEndpoint,
        az.network.LoadBalancer,
        az.network.NatGateway,
        az.network.PublicIPAddress,
    ],
)
def test_taggable_types_have_tags(cls: type) -> None:
    assert "tags" in inspect.signature(cls._internal_init).parameters  # type: ignore[attr-defined]
    token = f"azure-native:{cls.__module__.split('.')[1]}:{cls.__name__}"
    assert taggable(token) is True
