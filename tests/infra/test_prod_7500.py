"""The 7,500-node stack, planned by the real program: what the issue promises, asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable

import pytest
import yaml

from modules.bootstrap.delivery import PARTS
from modules.bootstrap.roles.prometheus import prometheus_secrets
from tests.bootstrap.conftest import context
from tests.infra.conftest import REPO, State

VM = "azure-native:compute:VirtualMachine"
VMSS = "azure-native:compute:VirtualMachineScaleSet"
NIC = "azure-native:network:NetworkInterface"


@pytest.fixture(scope="module")
def prod(state: Callable[[str], State]) -> State:
    return state("prod-7500")


def test_control_plane_counts(prod: State) -> None:
    assert len(prod.role(VM, "apiserver")) == 5
    assert len(prod.role(VM, "etcd")) == 5
    assert len(prod.role(VM, "events-etcd")) == 5
    assert len(prod.role(VM, "prometheus")) >= 2


def test_one_internal_load_balancer_with_readyz_probe(prod: State) -> None:
    (lb,) = prod.of_type("azure-native:network:LoadBalancer")
    (frontend,) = lb["inputs"]["frontendIPConfigurations"]
    assert "publicIPAddress" not in frontend
    assert frontend["privateIPAllocationMethod"] == "Static"
    subnet = prod.by_id[frontend["subnet"]["id"]]
    assert subnet["inputs"]["subnetName"] == "control-plane"
    (probe,) = lb["inputs"]["probes"]
    assert (probe["protocol"], probe["port"], probe["requestPath"]) == ("Https", 6443, "/readyz")
    assert lb["inputs"]["sku"]["name"] == "Standard"


def test_scale_sets_sum_to_7500_within_their_cap(prod: State) -> None:
    gpu = prod.role(VMSS, "gpu-node")
    assert sum(s["inputs"]["sku"]["capacity"] for s in gpu) == 7500
    for s in gpu:
        cap = 100 if s["inputs"]["singlePlacementGroup"] else 1000
        assert 1 <= s["inputs"]["sku"]["capacity"] <= cap, s["urn"]
        assert s["inputs"]["singlePlacementGroup"] is True  # InfiniBand: one placement group
        assert s["inputs"]["overprovision"] is False
        assert s["inputs"]["upgradePolicy"]["mode"] == "Manual"
    assert len(gpu) == 76  # 4 pools x (18 x 100 + 75): stable names <pool>-00 .. <pool>-18
    assert {s["inputs"]["vmScaleSetName"] for s in gpu} == {f"h100-{p}-{i:02d}" for p in "abcd" for i in range(19)}


def test_every_gpu_nic_carries_one_plus_its_pod_ips_in_its_pool_subnet(prod: State) -> None:
    declared = yaml.safe_load((REPO / "stacks" / "Pulumi.prod-7500.yaml").read_text())["config"]
    pools = declared["azure-gpu-k8s:cluster"]["gpu_pools"]
    for s in prod.role(VMSS, "gpu-node"):
        pool = s["inputs"]["tags"]["agk-pool"]
        pod_ips = int(s["inputs"]["tags"]["agk-pod-ips"])
        assert pod_ips == pools[pool]["pod_ips"]
        (nic,) = s["inputs"]["virtualMachineProfile"]["networkProfile"]["networkInterfaceConfigurations"]
        assert nic["enableAcceleratedNetworking"] is True
        configs = nic["ipConfigurations"]
        assert len(configs) == 1 + pod_ips
        assert [c["name"] for c in configs if c.get("primary")] == ["ipconfig1"]
        for c in configs:
            assert "publicIPAddressConfiguration" not in c
            assert prod.by_id[c["subnet"]["id"]]["inputs"]["subnetName"] == f"gpu-{pool}"


def test_exactly_the_two_hub_peerings(prod: State) -> None:
    peerings = prod.of_type("azure-native:network:VirtualNetworkPeering")
    assert sorted(p["inputs"]["virtualNetworkPeeringName"] for p in peerings) == [
        "hub-to-prod-7500",
        "prod-7500-to-hub",
    ]
    remote = {p["inputs"]["virtualNetworkName"]: p["inputs"]["remoteVirtualNetwork"]["id"] for p in peerings}
    assert remote["prod-7500-vnet"].endswith("/virtualNetworks/hub-vnet")
    assert remote["hub-vnet"].endswith("/virtualNetworks/prod-7500-vnet")
    forwarded = {p["inputs"]["virtualNetworkName"]: p["inputs"]["allowForwardedTraffic"] for p in peerings}
    # The hub accepts the NAT host's forwarded replies; the spoke accepts nothing the hub forwards.
    assert forwarded == {"hub-vnet": True, "prod-7500-vnet": False}


def test_no_public_ip_on_any_vm_or_scale_set(prod: State) -> None:
    for nic in prod.of_type(NIC):
        for config in nic["inputs"]["ipConfigurations"]:
            assert "publicIPAddress" not in config, nic["urn"]
    # The only public addresses are the NAT gateways' egress prefixes.
    assert prod.of_type("azure-native:network:PublicIPAddress") == []
    prefixes = prod.of_type("azure-native:network:PublicIPPrefix")
    gateways = prod.of_type("azure-native:network:NatGateway")
    assert {p["id"] for p in prefixes} == {g["inputs"]["publicIpPrefixes"][0]["id"] for g in gateways}


def test_subnets_equal_subnet_calc_plan(prod: State) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "agk.subnet_calc", "plan", "--stack", "prod-7500", "--format", "json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    expected = {s["name"]: s["cidr"] for s in json.loads(out.stdout)["vnets"][0]["subnets"]}
    actual = {
        s["inputs"]["subnetName"]: s["inputs"]["addressPrefix"]
        for s in prod.of_type("azure-native:network:Subnet")
        if s["inputs"]["virtualNetworkName"] == "prod-7500-vnet"
    }
    assert actual == expected


def test_resource_count_grows_with_scale_sets_not_nodes(prod: State) -> None:
    """7,500 nodes are 77 scale sets; what grows with them is the scale set and, on a GPU one, the
    remediation identity's right to replace its VMs. Nothing is created per node."""
    scale_sets = prod.of_type("azure-native:compute:VirtualMachineScaleSet")
    ids = {v["id"] for v in scale_sets}
    per_scale_set = [
        r for r in prod.of_type("azure-native:authorization:RoleAssignment") if r["inputs"]["scope"] in ids
    ]
    gpu = [v for v in scale_sets if v["inputs"]["tags"]["agk-pool"] != "system"]
    assert len(per_scale_set) == len(gpu) and {r["inputs"]["scope"] for r in per_scale_set} == {v["id"] for v in gpu}
    assert sum(v["inputs"]["sku"]["capacity"] for v in scale_sets) >= 7500
    # Each fixed host and each pool reads its bundle from delivery.PARTS Key Vault secrets, one read grant
    # each: per machine or scale set model, never per node.
    secrets = prod.of_type("azure-native:keyvault:Secret")
    secret_ids = {r["id"] for r in secrets}
    grants = [
        r for r in prod.of_type("azure-native:authorization:RoleAssignment") if r["inputs"]["scope"] in secret_ids
    ]
    machines = prod.of_type("azure-native:compute:VirtualMachine")
    pools = {v["inputs"]["tags"]["agk-pool"] for v in scale_sets}
    apiservers = [m for m in machines if m["inputs"]["tags"].get("agk-role") == "apiserver"]
    # Plus each pool's bootstrap token secret: its nodes read it, every API server writes it; and each
    # Prometheus host's copy of every receiver secret (and Grafana's password), which it alone reads.
    prometheus = [m for m in machines if m["inputs"]["tags"].get("agk-role") == "prometheus"]
    alerting = len(prometheus) * len(prometheus_secrets(context("prod-7500")))
    assert alerting == 4 * 3
    assert len(secrets) == PARTS * (len(machines) + len(pools)) + len(pools) + alerting
    assert len(grants) == PARTS * (len(machines) + len(pools)) + len(pools) * (1 + len(apiservers)) + alerting
    # The rest is the control plane, its certificates and the network: a few hundred, fixed.
    assert len(prod.resources) - len(scale_sets) - len(per_scale_set) - len(secrets) - len(grants) < 400
