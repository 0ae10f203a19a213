"""Each Azure component on its own under Pulumi's mock runtime (Azure itself cannot exist here)."""

from __future__ import annotations

from collections.abc import Iterator
from ipaddress import IPv4Network
from typing import Any

import pulumi
import pytest

from modules.azure.context import DeployContext
from modules.azure.control_plane import ControlPlane, ControlPlaneArgs, EtcdGroup
from modules.azure.hosts import NatHost, NatHostArgs, PrometheusHosts, PrometheusHostsArgs
from modules.azure.hub import HubNetwork, HubNetworkArgs
from modules.azure.node_pool import NodePool, NodePoolArgs
from modules.azure.spoke import HubRef, SpokeNetwork, SpokeNetworkArgs
from modules.azure.storage import ClusterStorage, ClusterStorageArgs, account_name
from modules.netplan.limits import Limits
from modules.netplan.plan import SubnetRequest, VNetSpec, plan_vnet
from modules.sizing.scale_sets import split_pool
from tests.mock_runtime import settled


class Recorder(pulumi.runtime.Mocks):
    def __init__(self) -> None:
        self.created: list[pulumi.runtime.MockResourceArgs] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        self.created.append(args)
        name = args.inputs.get("name") or args.name
        return f"/mock/{args.typ}/{args.name}", {**args.inputs, "name": name}

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]] | None]:
        return {}, None

    def of_type(self, type_: str) -> list[pulumi.runtime.MockResourceArgs]:
        return [r for r in self.created if r.typ == type_]


@pytest.fixture
def mocks() -> Iterator[Recorder]:
    recorder = Recorder()
    pulumi.runtime.set_mocks(recorder, project="t", stack="t", preview=False)
    yield recorder


CTX = DeployContext(
    resource_group_name="rg",
    resource_group_id="/subscriptions/0/resourceGroups/rg",
    location="eastus2",
    tags={"owner": "o", "cost-center": "c", "cluster": "t"},
    admin_username="azureuser",
    ssh_public_keys=("ssh-ed25519 AAAA t",),
)


def _vnet(kind: str, *subnets: SubnetRequest) -> Any:
    spec = VNetSpec("t", kind, ("10.1.0.0/16",), subnets, Limits.default())
    return plan_vnet(spec)[0]


def _outputs(component: pulumi.ComponentResource, *names: str) -> pulumi.Output[list[Any]]:
    return pulumi.Output.all(*[getattr(component, n) for n in names])


def test_hub_network(mocks: Recorder) -> None:
    def build() -> Any:
        plan = _vnet("hub", SubnetRequest("jump", "jump", 4), SubnetRequest("AzureBastionSubnet", "bastion", 59, 26))
        hub = HubNetwork(
            "hub",
            HubNetworkArgs(CTX, plan, "", True, 1, "Standard_D2ds_v5", {"hub-jump-0": "Y2xvdWQ="}, "z.internal"),
        )
        return _outputs(hub, "id", "subnet_ids")

    def check(values: list[Any]) -> None:
        _vnet_id, subnet_ids = values
        assert set(subnet_ids) == {"jump", "AzureBastionSubnet"}
        assert len(mocks.of_type("azure-native:network:BastionHost")) == 1
        assert len(mocks.of_type("azure-native:compute:VirtualMachine")) == 1
        for res in mocks.created:
            if res.typ.startswith("azure-native:"):
                assert res.name.startswith("hub-"), res.name
        zones = {z.inputs["privateZoneName"] for z in mocks.of_type("azure-native:privatedns:PrivateZone")}
        assert zones == {"z.internal", "privatelink.blob.core.windows.net"}

    check(settled(build()))


def test_spoke_network_peers_only_with_the_hub(mocks: Recorder) -> None:
    plan = _vnet("spoke", SubnetRequest("etcd", "etcd", 6), SubnetRequest("gpu-a", "gpu-pool", 300))

    def build() -> Any:
        hub = HubRef("/hub/vnet", "hub-vnet", "hub-rg", "hub-routes", "z.internal", "/hub/blob-zone")
        spoke = SpokeNetwork("c1", SpokeNetworkArgs(CTX, plan, "vnet-private-ips=100000", hub, False))
        return _outputs(spoke, "subnet_ids", "peering_ids")

    def check(values: list[Any]) -> None:
        subnet_ids, peering_ids = values
        assert set(subnet_ids) == {"etcd", "gpu-a"}
        assert set(peering_ids) == {"to-hub", "from-hub"}
        peerings = mocks.of_type("azure-native:network:VirtualNetworkPeering")
        assert {p.inputs["remoteVirtualNetwork"]["id"] for p in peerings} == {
            "/hub/vnet",
            "/mock/azure-native:network:VirtualNetwork/c1-vnet",
        }
        assert all(p.inputs["allowForwardedTraffic"] is False for p in peerings)
        (vnet,) = mocks.of_type("azure-native:network:VirtualNetwork")
        assert vnet.inputs["tags"]["agk-limits"] == "vnet-private-ips=100000"
        subnets = mocks.of_type("azure-native:network:Subnet")
        assert {s.inputs["addressPrefix"] for s in subnets} == {str(s.cidr) for s in plan.subnets.values()}
        assert all("natGateway" in s.inputs and "networkSecurityGroup" in s.inputs for s in subnets)

    check(settled(build()))


def test_control_plane(mocks: Recorder) -> None:
    api = {f"c-apiserver-{i}": f"10.1.0.{5 + i}" for i in range(3)}
    etcd = EtcdGroup(
        "etcd",
        {f"c-etcd-{i}": f"10.1.1.{4 + i}" for i in range(3)},
        "/sub/etcd",
        "Standard_D8ds_v5",
        "premium-ssd-v2",
        64,
        15000,
    )
    data = {h: "Y2xvdWQ=" for h in [*api, *etcd.members]}

    def build() -> Any:
        cp = ControlPlane(
            "c",
            ControlPlaneArgs(CTX, 11, api, "10.1.0.4", "Standard_D4ds_v5", "/sub/cp", [etcd], ["1", "2", "3"], data),
        )
        return _outputs(cp, "apiserver_endpoint", "etcd_members")

    def check(values: list[Any]) -> None:
        endpoint, members = values
        assert endpoint == "https://10.1.0.4:6443"
        assert set(members) == set(etcd.members)
        vms = mocks.of_type("azure-native:compute:VirtualMachine")
        assert sorted(v.inputs["zones"][0] for v in vms) == ["1", "1", "2", "2", "3", "3"]
        disks = mocks.of_type("azure-native:compute:Disk")
        assert [d.inputs["sku"]["name"] for d in disks] == ["PremiumV2_LRS"] * 3
        assert all(d.inputs["diskIOPSReadWrite"] == 15000 for d in disks)
        nics = {n.name: n for n in mocks.of_type("azure-native:network:NetworkInterface")}
        pool = nics["c-apiserver-0-nic"].inputs["ipConfigurations"][0]["loadBalancerBackendAddressPools"][0]["id"]
        assert pool.endswith("/loadBalancers/c-apiserver-lb/backendAddressPools/apiservers")
        assert "loadBalancerBackendAddressPools" not in nics["c-etcd-0-nic"].inputs["ipConfigurations"][0]

    check(settled(build()))


def test_node_pool_scale_sets_and_pod_ip_configs(mocks: Recorder) -> None:
    def build() -> Any:
        sets = split_pool("gpu", 250, infiniband=True, cap_spg=100, cap_large=1000)
        pool = NodePool(
            "gpu",
            NodePoolArgs(CTX, "gpu", "gpu-node", "Standard_ND96isr_H100_v5", sets, "/sub/gpu", 26, 3, 1024, "Y2xvdWQ="),
        )
        return _outputs(pool, "scale_sets", "capacity")

    def check(values: list[Any]) -> None:
        scale_sets, capacity = values
        assert list(scale_sets) == ["gpu-00", "gpu-01", "gpu-02"]
        assert capacity == 250
        vmss = mocks.of_type("azure-native:compute:VirtualMachineScaleSet")
        assert sorted(v.inputs["sku"]["capacity"] for v in vmss) == [50, 100, 100]
        for v in vmss:
            (nic,) = v.inputs["virtualMachineProfile"]["networkProfile"]["networkInterfaceConfigurations"]
            assert len(nic["ipConfigurations"]) == 27
            assert {c["subnet"]["id"] for c in nic["ipConfigurations"]} == {"/sub/gpu"}

    check(settled(build()))


def test_split_pool_names_are_stable_when_a_pool_grows() -> None:
    small = split_pool("p", 150, infiniband=True, cap_spg=100, cap_large=1000)
    large = split_pool("p", 420, infiniband=True, cap_spg=100, cap_large=1000)
    assert [s.name for s in small] == [s.name for s in large][:2]
    assert [s.capacity for s in large] == [100, 100, 100, 100, 20]
    wide = split_pool("p", 2500, infiniband=False, cap_spg=100, cap_large=1000)
    assert [(s.capacity, s.single_placement_group) for s in wide] == [(1000, False), (1000, False), (500, False)]


def test_prometheus_and_nat_hosts(mocks: Recorder) -> None:
    def build() -> Any:
        prom = PrometheusHosts(
            "c-prom",
            PrometheusHostsArgs(
                CTX,
                {"c-prometheus-0": "10.1.2.4", "c-prometheus-1": "10.1.2.5"},
                "/sub/mon",
                "Standard_E32ds_v5",
                2048,
                ["1", "2"],
                {"c-prometheus-0": "eA==", "c-prometheus-1": "eA=="},
            ),
        )
        nat = NatHost(
            "c-nat",
            NatHostArgs(
                CTX,
                "c-nat-0",
                "10.1.3.4",
                "/sub/nat",
                "Standard_D4ds_v5",
                "eA==",
                "172.20.0.0/16",
                "hub-routes",
                "hub-rg",
            ),
        )
        return pulumi.Output.all(prom.hosts, nat.address)

    def check(values: list[Any]) -> None:
        hosts, address = values
        assert hosts == {"c-prometheus-0": "10.1.2.4", "c-prometheus-1": "10.1.2.5"}
        vms = {v.name: v for v in mocks.of_type("azure-native:compute:VirtualMachine")}
        assert vms["c-prometheus-0"].inputs["storageProfile"]["dataDisks"][0]["diskSizeGB"] == 2048
        (route,) = mocks.of_type("azure-native:network:Route")
        assert (route.inputs["addressPrefix"], route.inputs["nextHopIpAddress"]) == ("172.20.0.0/16", address)
        nics = {n.name: n for n in mocks.of_type("azure-native:network:NetworkInterface")}
        assert nics["c-nat-0-nic"].inputs["enableIPForwarding"] is True

    check(settled(build()))


def test_storage_is_private(mocks: Recorder) -> None:
    def build() -> Any:
        store = ClusterStorage(
            "c-storage",
            ClusterStorageArgs(
                CTX, account_name("c", "x"), ["datasets", "checkpoints"], "/sub/ep", "/vnet", "/hub/blob-zone", "hub-rg"
            ),
        )
        return store.containers

    def check(containers: dict[str, str]) -> None:
        assert set(containers) == {"datasets", "checkpoints"}
        (account,) = mocks.of_type("azure-native:storage:StorageAccount")
        i = account.inputs
        assert (i["enableHttpsTrafficOnly"], i["minimumTlsVersion"], i["allowBlobPublicAccess"]) == (
            True,
            "TLS1_2",
            False,
        )
        assert i["publicNetworkAccess"] == "Disabled"
        (endpoint,) = mocks.of_type("azure-native:network:PrivateEndpoint")
        assert endpoint.inputs["privateLinkServiceConnections"][0]["groupIds"] == ["blob"]
        (group,) = mocks.of_type("azure-native:network:PrivateDnsZoneGroup")
        assert group.inputs["privateDnsZoneConfigs"][0]["privateDnsZoneId"] == "/hub/blob-zone"
        (link,) = mocks.of_type("azure-native:privatedns:VirtualNetworkLink")
        assert (link.inputs["resourceGroupName"], link.inputs["virtualNetwork"]["id"]) == ("hub-rg", "/vnet")
        assert not mocks.of_type("azure-native:privatedns:PrivateZone")  # the zone is the hub's

    check(settled(build()))


def test_account_names_are_valid() -> None:
    for cluster in ("dev", "prod-7500", "a-very-long-cluster-name-indeed"):
        name = account_name(cluster, "eastus2/x")
        assert 3 <= len(name) <= 24 and name.isalnum() and name.islower()


def test_plan_layout_is_inside_the_space() -> None:
    plan = _vnet("spoke", SubnetRequest("a", "gpu-pool", 5000), SubnetRequest("b", "etcd", 3))
    assert all(s.cidr.subnet_of(IPv4Network("10.1.0.0/16")) for s in plan.subnets.values())
