"""Each Azure component on its own under Pulumi's mock runtime (Azure itself cannot exist here)."""

from __future__ import annotations

from collections.abc import Iterator
from ipaddress import IPv4Network
from typing import Any

import pulumi
import pytest

from modules.address_plan.limits import Limits
from modules.address_plan.plan import SubnetRequest, VNetSpec, plan_vnet
from modules.azure.context import DeployContext
from modules.azure.control_plane import ControlPlane, ControlPlaneArgs, EtcdGroup
from modules.azure.hosts import NatHost, NatHostArgs, PrometheusHosts, PrometheusHostsArgs
from modules.azure.hub import HubNetwork, HubNetworkArgs
from modules.azure.node_pool import NodePool, NodePoolArgs
from modules.azure.spoke import Egress, HubRef, SpokeNetwork, SpokeNetworkArgs
from modules.azure.storage import BLOB_ROLES, ClusterStorage, ClusterStorageArgs, Grant, account_name
from modules.stackplan.config import RepairsConfig
from modules.vm_sizing.scale_sets import split_pool
from tests.mock_runtime import settled


class Recorder(pulumi.runtime.Mocks):
    def __init__(self) -> None:
        self.created: list[pulumi.runtime.MockResourceArgs] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        self.created.append(args)
        name = args.inputs.get("name") or args.name
        outputs = dict(args.inputs)
        identity = outputs.get("identity")
        if isinstance(identity, dict) and "userAssignedIdentities" in identity:
            # Azure takes a list of identity ids and answers a map of id -> principal and client ids.
            outputs["identity"] = {
                **identity,
                "userAssignedIdentities": {i: {} for i in identity["userAssignedIdentities"]},
            }
        return f"/mock/{args.typ}/{args.name}", {**outputs, "name": name}

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
    images={"general": ("Canonical", "ubuntu-24_04-lts", "server", "24.04.1"), "gpu": ("p", "o", "s", "22.04.1")},
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
            HubNetworkArgs(
                ctx=CTX,
                plan=plan,
                limits_tag="",
                bastion=True,
                jump_hosts=1,
                jump_vm_size="Standard_D2ds_v5",
                jump_custom_data={"hub-jump-0": "Y2xvdWQ="},
                private_dns_zone="z.internal",
                egress_public_ips=2,
            ),
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
        assert zones == {"z.internal", "privatelink.blob.core.windows.net", "privatelink.vaultcore.azure.net"}
        # The jump hosts reach the internet through a NAT gateway, not default outbound access.
        (nat,) = mocks.of_type("azure-native:network:NatGateway")
        subnets = {s.inputs["subnetName"]: s.inputs for s in mocks.of_type("azure-native:network:Subnet")}
        assert subnets["jump"]["natGateway"]["id"].endswith("/hub-egress-jump")
        assert "natGateway" not in subnets["AzureBastionSubnet"]
        assert all(s["defaultOutboundAccess"] is False for s in subnets.values())
        (prefix,) = mocks.of_type("azure-native:network:PublicIPPrefix")
        assert prefix.inputs["prefixLength"] == 31
        assert nat.inputs["publicIpPrefixes"] == [{"id": f"/mock/{prefix.typ}/{prefix.name}"}]

    check(settled(build()))


def test_spoke_network_peers_only_with_the_hub(mocks: Recorder) -> None:
    plan = _vnet("spoke", SubnetRequest("etcd", "etcd", 6), SubnetRequest("gpu-a", "gpu-pool", 300))

    def build() -> Any:
        hub = HubRef(
            vnet_id="/hub/vnet",
            vnet_name="hub-vnet",
            resource_group_name="hub-rg",
            route_table_name="hub-routes",
            private_dns_zone_name="z.internal",
            blob_dns_zone_id="/hub/blob-zone",
            vault_dns_zone_id="/hub/vault-zone",
        )
        spoke = SpokeNetwork(
            "c1",
            SpokeNetworkArgs(
                ctx=CTX,
                plan=plan,
                limits_tag="vcpus-regional=1000",
                hub=hub,
                allow_forwarded_traffic=False,
                egress=[Egress("shared", ["etcd"], 2, None), Egress("a", ["gpu-a"], 4, "2")],
            ),
        )
        return _outputs(spoke, "subnet_ids", "peering_ids")

    def check(values: list[Any]) -> None:
        subnet_ids, peering_ids = values
        assert set(subnet_ids) == {"etcd", "gpu-a"}
        assert set(peering_ids) == {"to-hub", "from-hub"}
        peerings = {p.name: p.inputs for p in mocks.of_type("azure-native:network:VirtualNetworkPeering")}
        assert {p["remoteVirtualNetwork"]["id"] for p in peerings.values()} == {
            "/hub/vnet",
            "/mock/azure-native:network:VirtualNetwork/c1-vnet",
        }
        # The hub accepts what the spoke's NAT host forwards; the spoke accepts nothing the hub forwards.
        assert peerings["c1-from-hub"]["allowForwardedTraffic"] is True
        assert peerings["c1-to-hub"]["allowForwardedTraffic"] is False
        (vnet,) = mocks.of_type("azure-native:network:VirtualNetwork")
        assert vnet.inputs["tags"]["agk-limits"] == "vcpus-regional=1000"
        subnets = {s.inputs["subnetName"]: s.inputs for s in mocks.of_type("azure-native:network:Subnet")}
        assert {s["addressPrefix"] for s in subnets.values()} == {str(s.cidr) for s in plan.subnets.values()}
        assert all("networkSecurityGroup" in s for s in subnets.values())
        assert subnets["etcd"]["natGateway"]["id"].endswith("/c1-egress-shared")
        assert subnets["gpu-a"]["natGateway"]["id"].endswith("/c1-egress-a")
        gateways = {g.name: g.inputs for g in mocks.of_type("azure-native:network:NatGateway")}
        assert gateways["c1-egress-a"]["zones"] == ["2"] and "zones" not in gateways["c1-egress-shared"]
        prefixes = {p.name: p.inputs["prefixLength"] for p in mocks.of_type("azure-native:network:PublicIPPrefix")}
        assert prefixes == {"c1-egress-shared-ips": 31, "c1-egress-a-ips": 30}

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
            ControlPlaneArgs(
                ctx=CTX,
                sizing_nodes=11,
                apiservers=api,
                apiserver_vip="10.1.0.4",
                apiserver_vm_size="Standard_D4ds_v5",
                control_plane_subnet_id="/sub/cp",
                etcd=[etcd],
                zones=["1", "2", "3"],
                custom_data=data,
            ),
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
        sets = split_pool("gpu", 250, infiniband=True, cap_spg=100, cap_large=1000, headroom=1)
        pool = NodePool(
            "gpu",
            NodePoolArgs(
                ctx=CTX,
                pool="gpu",
                role="gpu-node",
                vm_size="Standard_ND96isr_H100_v5",
                scale_sets=sets,
                subnet_id="/sub/gpu",
                pod_ips=7,
                surge=3,
                os_disk_gib=1024,
                custom_data="Y2xvdWQ=",
            ),
        )
        return _outputs(pool, "scale_sets", "capacity", "principal_id")

    def check(values: list[Any]) -> None:
        scale_sets, capacity, _principal = values
        assert list(scale_sets) == ["gpu-00", "gpu-01", "gpu-02"]
        assert capacity == 250
        # Registration order is the event loop's, not the pool's: read the sets by name.
        vmss = sorted(mocks.of_type("azure-native:compute:VirtualMachineScaleSet"), key=lambda v: v.name)
        # Filled in order, each to its room (100 less 1 of headroom): the newest set holds the rest.
        assert [v.inputs["sku"]["capacity"] for v in vmss] == [99, 99, 52]
        # A lowered capacity removes the newest instances of a set, so a plan can say which VMs go.
        assert {tuple(v.inputs["scaleInPolicy"]["rules"]) for v in vmss} == {("NewestVM",)}
        (identity,) = mocks.of_type("azure-native:managedidentity:UserAssignedIdentity")
        for v in vmss:
            (nic,) = v.inputs["virtualMachineProfile"]["networkProfile"]["networkInterfaceConfigurations"]
            assert len(nic["ipConfigurations"]) == 1 + 7
            assert {c["subnet"]["id"] for c in nic["ipConfigurations"]} == {"/sub/gpu"}
            assert v.inputs["identity"] == {
                "type": "UserAssigned",
                "userAssignedIdentities": [f"/mock/{identity.typ}/{identity.name}"],
            }
            assert v.inputs["tags"]["agk-pod-ips"] == "7"
            ref = v.inputs["virtualMachineProfile"]["storageProfile"]["imageReference"]
            assert (ref["offer"], ref["version"]) == ("o", "22.04.1")

    check(settled(build()))


def test_node_pool_scale_sets_repair_themselves_and_warn_before_a_delete(mocks: Recorder) -> None:
    """Every scale set of a pool: automatic instance repairs on the boot-health signal (the Application Health
    extension the policy needs) and a terminate notification, both from the cluster's ``repairs`` config."""

    def build(repairs: RepairsConfig | None) -> Any:
        sets = split_pool("sys", 30, infiniband=False, cap_spg=100, cap_large=1000, headroom=1)
        extra = {} if repairs is None else {"repairs": repairs}
        pool = NodePool(
            "sys" if repairs is None else "sys2",
            NodePoolArgs(
                ctx=CTX,
                pool="system",
                role="system-node",
                vm_size="Standard_D16ds_v5",
                scale_sets=sets,
                subnet_id="/sub/sys",
                pod_ips=30,
                surge=1,
                os_disk_gib=128,
                custom_data="Y2xvdWQ=",
                **extra,
            ),
        )
        return _outputs(pool, "capacity")

    settled(build(None))
    (vmss,) = mocks.of_type("azure-native:compute:VirtualMachineScaleSet")
    assert vmss.inputs["automaticRepairsPolicy"] == {"enabled": True, "gracePeriod": "PT60M", "repairAction": "Replace"}
    profile = vmss.inputs["virtualMachineProfile"]
    assert profile["scheduledEventsProfile"] == {
        "terminateNotificationProfile": {"enable": True, "notBeforeTimeout": "PT10M"}
    }
    # Repairs act on the health extension's verdict (the policy's requirement): it is there.
    (ext,) = profile["extensionProfile"]["extensions"]
    assert ext["type"] == "ApplicationHealthLinux"

    mocks.created.clear()
    settled(build(RepairsConfig(action="Reimage", grace_minutes=90, terminate_notice_minutes=15)))
    (vmss,) = mocks.of_type("azure-native:compute:VirtualMachineScaleSet")
    assert vmss.inputs["automaticRepairsPolicy"] == {"enabled": True, "gracePeriod": "PT90M", "repairAction": "Reimage"}
    notice = vmss.inputs["virtualMachineProfile"]["scheduledEventsProfile"]["terminateNotificationProfile"]
    assert notice["notBeforeTimeout"] == "PT15M"


def _caps(nodes: int, **kw: Any) -> list[int]:
    return [s.capacity for s in split_pool("p", nodes, infiniband=True, cap_spg=100, cap_large=1000, headroom=1, **kw)]


def test_split_pool_names_are_stable_when_a_pool_grows() -> None:
    small = split_pool("p", 150, infiniband=True, cap_spg=100, cap_large=1000, headroom=1)
    large = split_pool("p", 420, infiniband=True, cap_spg=100, cap_large=1000, headroom=1)
    assert [s.name for s in small] == [s.name for s in large][:2]
    assert [s.capacity for s in large] == [99, 99, 99, 99, 24]
    wide = split_pool("p", 2500, infiniband=False, cap_spg=100, cap_large=1000, headroom=1)
    assert [(s.capacity, s.single_placement_group) for s in wide] == [(999, False), (999, False), (502, False)]
    # Past a hundred sets the names keep their two digits: p-99 is followed by p-100, nothing is renamed.
    many = split_pool("p", 101 * 99, infiniband=True, cap_spg=100, cap_large=1000, headroom=1)
    assert [s.name for s in many[98:]] == ["p-98", "p-99", "p-100"]


@pytest.mark.parametrize(("before", "after"), [(1875, 1900), (1875, 1876), (1875, 2500), (150, 151), (99, 100)])
def test_growth_keeps_every_set_and_fills_the_newest_first(before: int, after: int) -> None:
    """Issue 20: adding 25 nodes to a pool of 1,875 re-split it into 20 sets of 95, so Azure's scale-in
    removed 76 running VMs of its own choosing. Growth now never lowers a set's capacity."""
    old, new = _caps(before), _caps(after)
    assert sum(new) == after
    assert all(n >= o for o, n in zip(old, new, strict=False))
    assert len(new) >= len(old)
    # Only the newest set that held VMs and sets after it change.
    first_changed = next(i for i, (o, n) in enumerate(zip([*old, 0], new, strict=False)) if o != n)
    assert first_changed >= len(old) - 1


@pytest.mark.parametrize(("before", "after"), [(1875, 1775), (1875, 1782), (1875, 1), (420, 100)])
def test_shrink_takes_vms_from_the_newest_sets_only(before: int, after: int) -> None:
    old, new = _caps(before), _caps(after)
    assert sum(new) == after
    dropped = [i for i, (o, n) in enumerate(zip(old, [*new, *[0] * len(old)], strict=False)) if n < o]
    # The sets that lose VMs are the newest ones, contiguous up to the last: older sets keep all of theirs.
    assert dropped == list(range(dropped[0], len(old)))
    assert all(n == o for o, n in zip(old[: dropped[0]], new, strict=False))


def test_a_pool_deployed_balanced_keeps_its_capacities() -> None:
    """A pool an earlier release split evenly (13 sets of 99, 6 of 98) grows and shrinks from its newest sets."""
    balanced = {f"p-{i:02d}": c for i, c in enumerate([99] * 13 + [98] * 6)}
    assert _caps(1875, deployed=balanced) == [99] * 13 + [98] * 6
    assert _caps(1900, deployed=balanced) == [99] * 13 + [98] * 5 + [99, 24]
    assert _caps(1775, deployed=balanced) == [99] * 13 + [98] * 4 + [96]
    # A set already deleted by hand (a gap) is an empty set: names never shift.
    gap = {"p-00": 99, "p-02": 50}
    assert [s.name for s in split_pool("p", 149, infiniband=True, cap_spg=100, cap_large=1000, deployed=gap)] == [
        "p-00",
        "p-01",
        "p-02",
    ]


@pytest.mark.parametrize(("nodes", "headroom"), [(1, 0), (99, 1), (100, 1), (1875, 1), (1875, 5), (7500, 2), (250, 0)])
def test_every_scale_set_keeps_its_headroom(nodes: int, headroom: int) -> None:
    sets = split_pool("p", nodes, infiniband=True, cap_spg=100, cap_large=1000, headroom=headroom)
    capacities = [s.capacity for s in sets]
    assert sum(capacities) == nodes
    assert max(capacities) + headroom <= 100
    # Every set but the newest is full to its room.
    assert set(capacities[:-1]) <= {100 - headroom}
    # No fewer sets would do: one set less could not keep the headroom.
    assert len(sets) == -(-nodes // (100 - headroom))


def test_autoscaled_pool_gets_room_for_its_maximum() -> None:
    sets = split_pool("p", 10, infiniband=False, cap_spg=100, cap_large=1000, headroom=1, max_nodes=300)
    assert [(s.capacity, s.single_placement_group) for s in sets] == [(10, False)]
    ib = split_pool("p", 10, infiniband=True, cap_spg=100, cap_large=1000, headroom=1, max_nodes=300)
    # Four sets of at most 99 hold the maximum of 300; today's 10 nodes are in the first, the others wait empty.
    assert [s.capacity for s in ib] == [10, 0, 0, 0]


def test_prometheus_and_nat_hosts(mocks: Recorder) -> None:
    def build() -> Any:
        prom = PrometheusHosts(
            "c-prom",
            PrometheusHostsArgs(
                ctx=CTX,
                hosts={"c-prometheus-0": "10.1.2.4", "c-prometheus-1": "10.1.2.5"},
                subnet_id="/sub/mon",
                vm_size="Standard_E32ds_v5",
                data_disk_gib=2048,
                zones=["1", "2"],
                custom_data={"c-prometheus-0": "eA==", "c-prometheus-1": "eA=="},
            ),
        )
        nat = NatHost(
            "c-nat",
            NatHostArgs(
                ctx=CTX,
                host="c-nat-0",
                address="10.1.3.4",
                subnet_id="/sub/nat",
                vm_size="Standard_D4ds_v5",
                custom_data="eA==",
                service_cidr="172.20.0.0/16",
                hub_route_table_name="hub-routes",
                hub_resource_group_name="hub-rg",
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
                ctx=CTX,
                account_name=account_name("c", "00000000-0000-0000-0000-000000000001", "eastus2", "c"),
                containers=["datasets", "checkpoints"],
                endpoint_subnet_id="/sub/ep",
                vnet_id="/vnet",
                dns_zone_id="/hub/blob-zone",
                dns_resource_group_name="hub-rg",
                grants={
                    "datasets": [
                        Grant("h100", "principal-h100", "ServicePrincipal", "read"),
                        Grant("group-x", "00000000-0000-0000-0000-000000000001", "Group", "read"),
                    ],
                    "checkpoints": [Grant("h100", "principal-h100", "ServicePrincipal", "read-write")],
                },
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
        # Shared keys are off: data roles scoped to each container are the only access.
        assignments = {
            (a.inputs["scope"].rsplit("-", 1)[-1], a.inputs["principalId"], a.inputs["roleDefinitionId"][-36:])
            for a in mocks.of_type("azure-native:authorization:RoleAssignment")
        }
        reader, contributor = BLOB_ROLES["read"][1], BLOB_ROLES["read-write"][1]
        assert assignments == {
            ("datasets", "principal-h100", reader),
            ("datasets", "00000000-0000-0000-0000-000000000001", reader),
            ("checkpoints", "principal-h100", contributor),
        }
        types = {a.inputs["principalType"] for a in mocks.of_type("azure-native:authorization:RoleAssignment")}
        assert types == {"ServicePrincipal", "Group"}
        for a in mocks.of_type("azure-native:authorization:RoleAssignment"):
            assert a.inputs["roleDefinitionId"].startswith("/subscriptions/0/providers/Microsoft.Authorization/")

    check(settled(build()))


def test_account_names_are_valid_and_differ_per_subscription() -> None:
    for cluster in ("dev", "prod-7500", "a-very-long-cluster-name-indeed"):
        name = account_name(cluster, "00000000-0000-0000-0000-000000000001", "eastus2", "x")
        assert 3 <= len(name) <= 24 and name.isalnum() and name.islower()
    # Globally unique names: two organisations deploying the same stack file get different accounts.
    one = account_name("dev", "11111111-1111-1111-1111-111111111111", "eastus2", "dev")
    two = account_name("dev", "22222222-2222-2222-2222-222222222222", "eastus2", "dev")
    assert one != two


def test_plan_layout_is_inside_the_space() -> None:
    plan = _vnet("spoke", SubnetRequest("a", "gpu-pool", 5000), SubnetRequest("b", "etcd", 3))
    assert all(s.cidr.subnet_of(IPv4Network("10.1.0.0/16")) for s in plan.subnets.values())
