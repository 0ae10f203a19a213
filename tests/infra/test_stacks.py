"""Every shipped stack, planned by the real program: invariants that hold for all of them."""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Callable

import pytest

from tests.infra.conftest import State

AZURE_STACKS = ["hub", "dev", "prod-7500"]


@functools.cache
def taggable(type_: str) -> bool:
    """Whether the installed SDK's resource takes ``tags`` (sub-resources of a tagged parent do not)."""
    _, module, name = type_.split(":")
    cls = getattr(importlib.import_module(f"pulumi_azure_native.{module}"), name)
    return "tags" in inspect.signature(cls._internal_init).parameters


@pytest.mark.parametrize("stack", AZURE_STACKS)
def test_tags_on_every_taggable_azure_resource(state: Callable[[str], State], stack: str) -> None:
    st = state(stack)
    azure = [r for r in st.resources if r["type"].startswith("azure-native:") and r.get("custom")]
    assert azure
    for res in azure:
        if not taggable(res["type"]):
            continue
        tags = res["inputs"].get("tags") or {}
        assert {"owner", "cost-center", "cluster"} <= set(tags), res["urn"]


@pytest.mark.parametrize("stack", AZURE_STACKS)
def test_every_subnet_has_an_nsg_denying_internet_inbound(state: Callable[[str], State], stack: str) -> None:
    st = state(stack)
    for subnet in st.of_type("azure-native:network:Subnet"):
        nsg = st.by_id[subnet["inputs"]["networkSecurityGroup"]["id"]]
        rules = nsg["inputs"]["securityRules"]
        if subnet["inputs"]["subnetName"] == "AzureBastionSubnet":
            continue  # Bastion's required rules; 443 from the Internet is the Bastion portal itself
        deny = [r for r in rules if r["direction"] == "Inbound" and r["sourceAddressPrefix"] == "Internet"]
        assert [r["access"] for r in deny] == ["Deny"], subnet["urn"]


@pytest.mark.parametrize("stack", AZURE_STACKS)
def test_vms_are_ssh_only_encrypted_at_host_without_public_ips(state: Callable[[str], State], stack: str) -> None:
    st = state(stack)
    vms = st.of_type("azure-native:compute:VirtualMachine")
    assert vms
    for vm in vms:
        inputs = vm["inputs"]
        linux = inputs["osProfile"]["linuxConfiguration"]
        assert linux["disablePasswordAuthentication"] is True
        assert linux["ssh"]["publicKeys"]
        assert inputs["securityProfile"]["encryptionAtHost"] is True
        # One identity per host, its own (so IMDS needs no client id and grants name exactly this host).
        assert inputs["identity"]["type"] == "UserAssigned"
        (identity,) = inputs["identity"]["userAssignedIdentities"]
        assert identity.endswith(f"/{inputs['vmName']}-identity")
        assert inputs["osProfile"]["customData"], "never an empty boot"
        for ref in inputs["networkProfile"]["networkInterfaces"]:
            nic = st.by_id[ref["id"]]
            assert nic["inputs"]["enableAcceleratedNetworking"] is True
            assert all("publicIPAddress" not in c for c in nic["inputs"]["ipConfigurations"])


@pytest.mark.parametrize("stack", ["dev", "prod-7500"])
def test_fixed_hosts_use_the_planned_addresses(state: Callable[[str], State], stack: str) -> None:
    st = state(stack)
    plan = st.outputs["address_plan"]
    subnets = {s["name"]: s["cidr"] for s in plan["subnets"]}
    from ipaddress import ip_address, ip_network

    for nic in st.of_type("azure-native:network:NetworkInterface"):
        (config,) = nic["inputs"]["ipConfigurations"]
        subnet = st.by_id[config["subnet"]["id"]]["inputs"]["subnetName"]
        assert ip_address(config["privateIPAddress"]) in ip_network(subnets[subnet]), nic["urn"]


def test_dev_is_cheap(state: Callable[[str], State]) -> None:
    st = state("dev")
    roles = [(r["inputs"]["tags"]["agk-role"]) for r in st.of_type("azure-native:compute:VirtualMachine")]
    assert sorted(roles) == sorted(["apiserver"] * 3 + ["etcd"] * 3 + ["prometheus", "nat"])
    gpu = st.role("azure-native:compute:VirtualMachineScaleSet", "gpu-node")
    assert sorted(s["inputs"]["sku"]["capacity"] for s in gpu) == [4, 4]


def test_hub_has_no_transit(state: Callable[[str], State]) -> None:
    st = state("hub")
    assert not st.of_type("azure-native:network:VirtualNetworkPeering")  # spokes create both halves
    assert not st.of_type("azure-native:network:Route")  # only spokes add their service routes
    (table,) = st.of_type("azure-native:network:RouteTable")
    assert table["inputs"]["disableBgpRoutePropagation"] is True
    assert not any(
        nic["inputs"].get("enableIPForwarding") for nic in st.of_type("azure-native:network:NetworkInterface")
    )


@pytest.mark.parametrize("stack", ["dev", "prod-7500"])
def test_sizing_shows_recommended_and_chosen(state: Callable[[str], State], stack: str) -> None:
    sizing = state(stack).outputs["sizing"]
    assert set(sizing) >= {"apiserver", "etcd", "prometheus"}
    for row in sizing.values():
        assert row["recommended"] and row["chosen"] and row["source"].startswith("https://")
