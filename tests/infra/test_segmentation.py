"""The segmented spoke (issue 20, item 10): which addresses reach etcd, the kubelets and Prometheus.

Before issue 20 every subnet's NSG allowed the whole VirtualNetwork tag (Azure's default AllowVnetInBound),
so any pod reached etcd, every kubelet and Prometheus with its lifecycle API on. The NSGs of the planned dev
stack (the real program) are evaluated here the way Azure evaluates inbound rules: lowest priority first, the
first match decides, then the default rules (learn.microsoft.com virtual-network/network-security-groups-overview:
AllowVnetInBound 65000, AllowAzureLoadBalancerInBound 65001, DenyAllInBound 65500). The evaluator is a stand-in
for Azure's, which cannot run here.
"""

from __future__ import annotations

from collections.abc import Callable
from ipaddress import IPv4Address, ip_network
from typing import Any

import pytest

from modules.bootstrap.context import ETCD_CLIENT_PORT, ETCD_METRICS_PORT, ETCD_PEER_PORT, KUBELET_PORT, PROMETHEUS_PORT
from tests.infra.conftest import State

NSG = "azure-native:network:NetworkSecurityGroup"
SUBNET = "azure-native:network:Subnet"
DEFAULTS = [
    {"priority": 65000, "access": "Allow", "sourceAddressPrefix": "VirtualNetwork", "destinationPortRange": "*"},
    {"priority": 65500, "access": "Deny", "sourceAddressPrefix": "*", "destinationPortRange": "*"},
]


class Spoke:
    def __init__(self, dev: State, hub: State) -> None:
        self.subnets = {
            r["inputs"]["subnetName"]: ip_network(r["inputs"]["addressPrefix"]) for r in dev.of_type(SUBNET)
        }
        self.nsgs = {
            r["inputs"]["networkSecurityGroupName"]: r["inputs"].get("securityRules", []) for r in dev.of_type(NSG)
        }

        def space(state: State) -> list[Any]:
            vnets = state.of_type("azure-native:network:VirtualNetwork")
            return [ip_network(p) for v in vnets for p in v["inputs"]["addressSpace"]["addressPrefixes"]]

        self.hub = space(hub)
        # The VirtualNetwork tag: the VNet's own space and its peered VNets' (the hub).
        self.virtual_network = [*space(dev), *self.hub]

    def host(self, subnet: str, index: int = 4) -> IPv4Address:
        address = self.subnets[subnet].network_address + index
        assert address in self.subnets[subnet], (subnet, index)
        return address

    def _matches(self, prefix: str, address: IPv4Address) -> bool:
        if prefix == "*":
            return True
        if prefix == "VirtualNetwork":
            return any(address in n for n in self.virtual_network)
        if prefix in ("Internet", "AzureLoadBalancer"):
            return False
        return address in ip_network(prefix)

    @staticmethod
    def _port(rule: dict[str, Any], port: int) -> bool:
        ranges = rule.get("destinationPortRanges") or [rule.get("destinationPortRange", "*")]
        for r in ranges:
            low, _, high = str(r).partition("-")
            if r == "*" or int(low) <= port <= int(high or low):
                return True
        return False

    def allows(self, source: IPv4Address, subnet: str, port: int) -> bool:
        destination = self.host(subnet)
        rules = sorted(
            [r for r in self.nsgs[f"dev-{subnet}-nsg"] if r["direction"] == "Inbound"] + DEFAULTS,
            key=lambda r: r["priority"],
        )
        for rule in rules:
            if rule.get("protocol", "*") not in ("*", "Tcp"):
                continue
            dst = rule.get("destinationAddressPrefix", "*")
            if not self._matches(rule["sourceAddressPrefix"], source) or not self._port(rule, port):
                continue
            if dst != "*" and not self._matches(dst, destination):
                continue
            return bool(rule["access"] == "Allow")
        return False


@pytest.fixture(scope="module")
def spoke(state: Callable[[str], State]) -> Spoke:
    return Spoke(state("dev"), state("hub"))


def test_etcd_is_reached_only_by_the_api_servers_and_its_members(spoke: Spoke) -> None:
    pod, apiserver, member, prometheus = (
        spoke.host("gpu-h100", 40),
        spoke.host("control-plane", 5),
        spoke.host("etcd", 5),
        spoke.host("monitoring", 4),
    )
    assert not spoke.allows(pod, "etcd", ETCD_CLIENT_PORT)
    assert not spoke.allows(pod, "etcd", ETCD_METRICS_PORT)
    assert not spoke.allows(spoke.host("system", 9), "etcd", ETCD_PEER_PORT)
    assert spoke.allows(apiserver, "etcd", ETCD_CLIENT_PORT)
    assert not spoke.allows(apiserver, "etcd", ETCD_PEER_PORT)
    assert spoke.allows(member, "etcd", ETCD_PEER_PORT) and spoke.allows(member, "etcd", ETCD_METRICS_PORT)
    assert spoke.allows(prometheus, "etcd", ETCD_METRICS_PORT)
    assert not spoke.allows(prometheus, "etcd", ETCD_CLIENT_PORT)


@pytest.mark.parametrize("subnet", ["gpu-h100", "gpu-a100", "system", "control-plane", "etcd", "monitoring", "nat"])
def test_kubelets_are_reached_only_by_the_api_servers_and_prometheus(spoke: Spoke, subnet: str) -> None:
    assert not spoke.allows(spoke.host("gpu-a100", 77), subnet, KUBELET_PORT)
    assert not spoke.allows(spoke.host("system", 33), subnet, KUBELET_PORT)
    assert spoke.allows(spoke.host("control-plane", 5), subnet, KUBELET_PORT)
    assert spoke.allows(spoke.host("monitoring", 4), subnet, KUBELET_PORT)


def test_prometheus_is_reached_from_the_hub_not_from_the_cluster(spoke: Spoke) -> None:
    hub_host = spoke.hub[0].network_address + 4  # a researcher's jump host
    assert spoke.allows(hub_host, "monitoring", PROMETHEUS_PORT)
    for subnet in ("gpu-h100", "system", "control-plane", "etcd", "nat"):
        assert not spoke.allows(spoke.host(subnet, 5), "monitoring", PROMETHEUS_PORT), subnet


def test_the_api_still_reaches_everyone_who_needs_it(spoke: Spoke) -> None:
    # What the segmentation must not break: pods and nodes reach the API servers; node-exporter scrapes.
    assert spoke.allows(spoke.host("gpu-h100", 40), "control-plane", 6443)
    assert spoke.allows(spoke.host("monitoring", 4), "gpu-h100", 9100)
