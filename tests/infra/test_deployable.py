"""What Azure does with each stack on `pulumi up`, read from the real program's plan (mock runtime).

Each test states an Azure behaviour (cited in the code it checks) and asserts the plan respects it:
the NAT host's return path, blob access without shared keys, egress sized from the nodes, nothing
created in a VNet while its subnets are still being written, pinned images, scale-set headroom.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from modules.azure.storage import BLOB_ROLES
from modules.stackplan.config import load_stack
from modules.stackplan.prepare import prepare_cluster
from modules.vm_sizing.skus import sku
from tests.infra.conftest import REPO, STACKS, State

CLUSTERS = ["dev", "prod-7500"]
AZURE_STACKS = ["hub", *CLUSTERS]
SUBNET = "azure-native:network:Subnet"
VM = "azure-native:compute:VirtualMachine"
VMSS = "azure-native:compute:VirtualMachineScaleSet"
# Resources Azure refuses to create (AnotherOperationInProgress, ReferencedResourceNotProvisioned)
# while subnets of the VNet they live in or reference are still being written.
IN_VNET = {
    "azure-native:network:NetworkInterface",
    "azure-native:compute:VirtualMachineScaleSet",
    "azure-native:network:LoadBalancer",
    "azure-native:network:PrivateEndpoint",
    "azure-native:network:VirtualNetworkPeering",
    "azure-native:privatedns:VirtualNetworkLink",
    "azure-native:network:BastionHost",
}


def config(stack: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((REPO / "stacks" / f"Pulumi.{stack}.yaml").read_text())["config"]
    return doc


def _closure(st: State) -> dict[str, set[str]]:
    by_urn = {r["urn"]: r for r in st.resources}
    memo: dict[str, set[str]] = {}

    def deps(urn: str) -> set[str]:
        if urn not in memo:
            memo[urn] = set()
            direct = set(by_urn[urn].get("dependencies", []))
            for urns in by_urn[urn].get("propertyDependencies", {}).values():
                direct.update(urns)
            found = set(direct)
            for d in direct:
                if d in by_urn:
                    found |= deps(d)
            memo[urn] = found
        return memo[urn]

    return {urn: deps(urn) for urn in by_urn}


def _vnets_named(res: dict[str, Any], st: State) -> set[str]:
    """The VNets of this stack a resource lives in or points at (by ARM id anywhere in its inputs)."""
    text = yaml.safe_dump(res.get("inputs", {}))
    return {
        v["inputs"]["virtualNetworkName"]
        for v in st.of_type("azure-native:network:VirtualNetwork")
        if v["id"] in text or f"virtualNetworks/{v['inputs']['virtualNetworkName']}/" in text
    } | ({res["inputs"]["virtualNetworkName"]} if "virtualNetworkName" in res.get("inputs", {}) else set())


@pytest.mark.parametrize("stack", AZURE_STACKS)
def test_nothing_is_created_in_a_vnet_before_all_its_subnets(state: Callable[[str], State], stack: str) -> None:
    st = state(stack)
    closure = _closure(st)
    subnets: dict[str, set[str]] = {}
    for s in st.of_type(SUBNET):
        subnets.setdefault(s["inputs"]["virtualNetworkName"], set()).add(s["urn"])
    checked = 0
    for res in st.resources:
        if res["type"] not in IN_VNET:
            continue
        for vnet in _vnets_named(res, st) & set(subnets):
            missing = subnets[vnet] - closure[res["urn"]]
            assert not missing, f"{res['urn']} may start while {sorted(missing)[0]} is still being written"
            checked += 1
    assert checked >= 3


@pytest.mark.parametrize("stack", CLUSTERS)
def test_nat_host_replies_reach_the_hub_without_opening_transit(state: Callable[[str], State], stack: str) -> None:
    st = state(stack)
    peerings = {
        p["inputs"]["virtualNetworkName"]: p["inputs"] for p in st.of_type("azure-native:network:VirtualNetworkPeering")
    }
    # On a peering in VNet X, allowForwardedTraffic decides whether X accepts traffic an appliance in the
    # remote VNet forwarded: the hub takes the NAT host's replies (sourced from service IPs); the spoke
    # takes nothing the hub forwards, so no spoke can reach another through the hub.
    assert peerings["hub-vnet"]["allowForwardedTraffic"] is True
    assert peerings[f"{stack}-vnet"]["allowForwardedTraffic"] is False
    service = config(stack)["azure-gpu-k8s:cluster"]["service_cidr"]
    hub_space = config("hub")["azure-gpu-k8s:network"]["address_space"]
    nsgs = {
        n["inputs"]["networkSecurityGroupName"]: n["inputs"]
        for n in st.of_type("azure-native:network:NetworkSecurityGroup")
    }
    allows = [
        r
        for name, nsg in nsgs.items()
        for r in nsg["securityRules"]
        if r["access"] == "Allow" and r["direction"] == "Inbound" and r.get("destinationAddressPrefix") == service
    ]
    assert {r["sourceAddressPrefix"] for r in allows} == set(hub_space)
    nat_rules = nsgs[f"{stack}-nat-nsg"]["securityRules"]
    deny = next(r for r in nat_rules if r["access"] == "Deny")
    assert all(r["priority"] < deny["priority"] for r in allows)
    assert len(allows) == sum(1 for r in nat_rules if r in allows)  # only the nat subnet admits it


@pytest.mark.parametrize("stack", CLUSTERS)
def test_blob_access_is_granted_per_container_to_the_gpu_pools(state: Callable[[str], State], stack: str) -> None:
    st = state(stack)
    prep = prepare_cluster(stack, load_stack(STACKS, stack), STACKS)
    cluster = prep.config.cluster
    assert cluster is not None
    (account,) = st.role("azure-native:storage:StorageAccount", "storage")
    assert account["inputs"]["allowSharedKeyAccess"] is False  # so roles are the only way in
    pool_identities = [
        i for i in st.of_type("azure-native:managedidentity:UserAssignedIdentity") if "agk-pool" in i["inputs"]["tags"]
    ]
    identities = {i["inputs"]["tags"]["agk-pool"]: i["outputs"]["principalId"] for i in pool_identities}
    containers = {c["inputs"]["containerName"]: c["id"] for c in st.of_type("azure-native:storage:BlobContainer")}
    got = {
        (a["inputs"]["scope"], a["inputs"]["principalId"], a["inputs"]["roleDefinitionId"].rsplit("/", 1)[1])
        for a in st.of_type("azure-native:authorization:RoleAssignment")
        if "/blobServices/" in a["inputs"]["scope"]
        and not a["inputs"]["scope"].endswith("/etcd-backups")
        # The pools' grants (the teams' identities hold theirs on their own containers: tests/identity)
        and a["inputs"]["principalId"] in identities.values()
    }
    expected = {
        (containers[name], identities[pool.name], BLOB_ROLES[access.gpu_nodes][1])
        for name, access in cluster.storage.containers.items()
        for pool in prep.pools.gpu
        if access.gpu_nodes != "none"
    }
    assert got == expected
    assert identities.keys() == {p.name for p in prep.pools.pools.values()}
    assert all(
        a["inputs"]["principalType"] == "ServicePrincipal"
        for a in st.of_type("azure-native:authorization:RoleAssignment")
    )
    # Every scale set runs as its pool's identity, so the grant holds for every VM of the pool; the
    # system pool also carries the controllers' identities (cloud-provider-azure, remediation), and
    # no GPU pool does (a GPU workload must not reach them through IMDS).
    ids = {i["inputs"]["tags"]["agk-pool"]: i["id"] for i in pool_identities}
    controllers = sorted(
        i["id"] for i in st.of_type("azure-native:managedidentity:UserAssignedIdentity") if "-controllers-" in i["urn"]
    )
    assert len(controllers) == 2
    for vmss in st.of_type("azure-native:compute:VirtualMachineScaleSet"):
        pool = vmss["inputs"]["tags"]["agk-pool"]
        extra = controllers if pool == "system" else []
        assert vmss["inputs"]["identity"]["userAssignedIdentities"] == [ids[pool], *extra]


@pytest.mark.parametrize("stack", CLUSTERS)
def test_egress_is_sized_from_the_nodes_behind_each_nat_gateway(state: Callable[[str], State], stack: str) -> None:
    st = state(stack)
    prep = prepare_cluster(stack, load_stack(STACKS, stack), STACKS)
    per_node = prep.config.network.egress.connections_per_node if prep.config.network else 0
    gateways = {g["id"]: g["inputs"] for g in st.of_type("azure-native:network:NatGateway")}
    prefixes = {p["id"]: p["inputs"] for p in st.of_type("azure-native:network:PublicIPPrefix")}
    subnets = {s["inputs"]["subnetName"]: s["inputs"] for s in st.of_type(SUBNET)}
    # A subnet takes one NAT gateway; every GPU pool gets its own, in its zone, sized for its peak nodes.
    for pool in prep.pools.gpu:
        gateway = gateways[subnets[pool.subnet]["natGateway"]["id"]]
        prefix = prefixes[gateway["publicIpPrefixes"][0]["id"]]
        wanted = max(2, math.ceil(pool.peak_nodes * per_node / 50_000))
        assert 2 ** (32 - prefix["prefixLength"]) >= wanted
        assert 2 ** (32 - prefix["prefixLength"]) <= 16
        assert gateway.get("zones") == ([pool.zone] if pool.zone else None)
    users = [s for s in subnets.values() if "natGateway" in s]
    assert {s["subnetName"] for s in subnets.values()} - {s["subnetName"] for s in users} == {"endpoints"}
    assert all(s["defaultOutboundAccess"] is False for s in subnets.values())


def test_hub_jump_hosts_egress_through_a_nat_gateway(state: Callable[[str], State]) -> None:
    st = state("hub")
    subnets = {s["inputs"]["subnetName"]: s["inputs"] for s in st.of_type(SUBNET)}
    (gateway,) = st.of_type("azure-native:network:NatGateway")
    assert subnets["jump"]["natGateway"]["id"] == gateway["id"]
    assert all(s["defaultOutboundAccess"] is False for s in subnets.values())


@pytest.mark.parametrize("stack", AZURE_STACKS)
def test_every_image_is_pinned_to_the_configured_version(state: Callable[[str], State], stack: str) -> None:
    """Issue 21: every host and scale set boots its role's gallery image version, pinned by the cluster's
    node_images build and release (never 'latest', never a marketplace image)."""
    st = state(stack)
    if "node_images" not in st.outputs:  # the hub's jump hosts boot no bundle: the pinned marketplace image
        pinned = {(i.publisher, i.offer, i.sku, i.version) for _, i in load_stack(STACKS, stack).images}
        for vm in st.of_type("azure-native:compute:VirtualMachine"):
            ref = vm["inputs"]["storageProfile"]["imageReference"]
            assert (ref["publisher"], ref["offer"], ref["sku"], ref["version"]) in pinned
        return
    booted = st.outputs["node_images"]
    refs = [
        (v["inputs"]["tags"]["agk-role"], v["inputs"]["storageProfile"]["imageReference"])
        for v in st.of_type("azure-native:compute:VirtualMachine")
    ]
    refs += [
        (s["inputs"]["tags"]["agk-role"], s["inputs"]["virtualMachineProfile"]["storageProfile"]["imageReference"])
        for s in st.of_type("azure-native:compute:VirtualMachineScaleSet")
    ]
    assert refs
    for role, ref in refs:
        image = "etcd" if role == "events-etcd" else role
        assert set(ref) == {"id"}, ref
        assert ref["id"].endswith(f"/galleries/agk_images/images/{image}/versions/{booted[role]}"), ref


@pytest.mark.parametrize("stack", CLUSTERS)
def test_every_scale_set_has_room_to_replace_a_vm(state: Callable[[str], State], stack: str) -> None:
    st = state(stack)
    pools = prepare_cluster(stack, load_stack(STACKS, stack), STACKS).pools
    for vmss in st.of_type("azure-native:compute:VirtualMachineScaleSet"):
        pool = pools.pools[vmss["inputs"]["tags"]["agk-pool"]]
        headroom = config(stack)["azure-gpu-k8s:cluster"]["gpu_pools"].get(pool.name, {}).get("scale_set_headroom", 1)
        cap = 100 if vmss["inputs"]["singlePlacementGroup"] else 1000
        assert vmss["inputs"]["sku"]["capacity"] + headroom <= cap, vmss["urn"]


def test_prod_7500_lists_its_prerequisites(state: Callable[[str], State]) -> None:
    prereq = state("prod-7500").outputs["prerequisites"]
    assert [(f["namespace"], f["name"]) for f in prereq["features"]] == [("Microsoft.Compute", "EncryptionAtHost")]
    quotas = {q["family"]: q["vcpus"] for q in prereq["quotas"]}
    cluster = config("prod-7500")["azure-gpu-k8s:cluster"]
    h100 = sku("Standard_ND96isr_H100_v5")
    peak = sum(p["nodes"] + math.ceil(p["nodes"] / 100) for p in cluster["gpu_pools"].values())  # 1% surge
    assert quotas[h100.family] == peak * h100.vcpus
    assert quotas[h100.family] >= 720_000  # 7,500 nodes x 96 vCPUs = 720,000 ND H100 v5 vCPUs
    assert prereq["regional_vcpus"] == sum(quotas.values())
    assert all(q["declared"] is None for q in prereq["quotas"])


def _ip_configurations(st: State) -> int:
    """IP configurations a stack's VMs and scale sets take at their deployed capacity."""
    count = 0
    for s in st.of_type("azure-native:compute:VirtualMachineScaleSet"):
        (nic,) = s["inputs"]["virtualMachineProfile"]["networkProfile"]["networkInterfaceConfigurations"]
        count += len(nic["ipConfigurations"]) * s["inputs"]["sku"]["capacity"]
    return count + sum(
        len(n["inputs"]["ipConfigurations"]) for n in st.of_type("azure-native:network:NetworkInterface")
    )


def test_pod_ips_fit_the_vnet_and_the_hubs_peered_group(state: Callable[[str], State]) -> None:
    """Hard limits (no support request raises them): 65,536 per VNet, 128,000 for the hub and its spokes,
    counted from what the plan creates, independently of the planner's own sums."""
    configs = {name: _ip_configurations(state(name)) for name in AZURE_STACKS}
    assert configs["prod-7500"] > 7_500 * 2  # every GPU node carries pod IPs
    assert all(count <= 65_536 for count in configs.values())
    assert sum(configs.values()) <= 128_000
    # The planner's figures (which add surge) bound what is created.
    for name in CLUSTERS:
        plan = state(name).outputs["address_plan"]
        assert configs[name] <= plan["ips_needed"] <= 65_536
    assert state("prod-7500").outputs["address_plan"]["utilization"] >= 0.90


@pytest.mark.parametrize("stack", CLUSTERS)
def test_etcd_members_alone_write_their_snapshots_which_expire(state: Callable[[str], State], stack: str) -> None:
    st = state(stack)
    backup = load_stack(STACKS, stack).cluster.etcd.backup  # type: ignore[union-attr]
    containers = {c["inputs"]["containerName"]: c["id"] for c in st.of_type("azure-native:storage:BlobContainer")}
    etcd = {
        v["inputs"]["vmName"]: v["inputs"]["identity"]["userAssignedIdentities"][0]
        for v in st.of_type("azure-native:compute:VirtualMachine")
        if v["inputs"]["tags"]["agk-role"] == "etcd"
    }
    principals = {
        i["id"]: i["outputs"]["principalId"] for i in st.of_type("azure-native:managedidentity:UserAssignedIdentity")
    }
    writers = {
        a["inputs"]["principalId"]
        for a in st.of_type("azure-native:authorization:RoleAssignment")
        if a["inputs"]["scope"] == containers["etcd-backups"]
    }
    assert writers == {principals[i] for i in etcd.values()}
    (policy,) = st.of_type("azure-native:storage:ManagementPolicy")
    (rule,) = policy["inputs"]["policy"]["rules"]
    assert rule["definition"]["filters"]["prefixMatch"] == ["etcd-backups/"]
    days = rule["definition"]["actions"]["baseBlob"]["delete"]["daysAfterModificationGreaterThan"]
    assert days == backup.retention_days


@pytest.mark.parametrize("stack", CLUSTERS)
def test_a_node_that_failed_to_join_shows_unhealthy(state: Callable[[str], State], stack: str) -> None:
    """Each scale set probes the node's own boot health endpoint (the one the bootstrap renders)."""
    from modules.bootstrap.context import BOOT_HEALTH_PATH, BOOT_HEALTH_PORT

    for vmss in state(stack).of_type("azure-native:compute:VirtualMachineScaleSet"):
        (ext,) = vmss["inputs"]["virtualMachineProfile"]["extensionProfile"]["extensions"]
        assert (ext["publisher"], ext["type"], ext["typeHandlerVersion"]) == (
            "Microsoft.ManagedServices",
            "ApplicationHealthLinux",
            "2.0",  # rich health states: the body says Healthy or Unhealthy
        )
        assert (ext["settings"]["port"], ext["settings"]["requestPath"]) == (BOOT_HEALTH_PORT, BOOT_HEALTH_PATH)


def test_no_checksum_is_left_to_take_before_pulumi_up(state: Callable[[str], State]) -> None:
    """Issue 21: Azure CNI is built into the node images from its Go module, so no stack carries a checksum to
    take by hand (the zeros the stacks shipped failed every pool node's CNI step)."""
    steps = state("dev").outputs["prerequisites"]["steps"]
    assert [s["what"] for s in steps if "checksum" in s["what"]] == []


def test_every_vm_size_is_checked_for_encryption_at_host(state: Callable[[str], State]) -> None:
    """Issue 20, item 5: the prerequisites checked the subscription's EncryptionAtHost feature but not whether
    each VM size supports it (the Resource SKUs API's EncryptionAtHostSupported capability, per region)."""
    steps = {s["what"]: s for s in state("prod-7500").outputs["prerequisites"]["steps"]}
    sizes = {r["inputs"]["hardwareProfile"]["vmSize"] for r in state("prod-7500").of_type(VM)}
    sizes |= {r["inputs"]["sku"]["name"] for r in state("prod-7500").of_type(VMSS)}
    assert {w.removeprefix("encryption at host on ") for w in steps if w.startswith("encryption at host")} == sizes
    h100 = steps["encryption at host on Standard_ND96isr_H100_v5"]["command"]
    assert h100.startswith("az vm list-skus --location eastus2 --size Standard_ND96isr_H100_v5")
    assert "EncryptionAtHostSupported" in h100


@pytest.mark.parametrize("stack", ["hub", *CLUSTERS])
def test_load_balancer_probes_come_in_before_any_internet_deny(state: Callable[[str], State], stack: str) -> None:
    """Probes come from 168.63.129.16 (AzureLoadBalancer); Azure's own allow sits at 65001, after ours."""
    for nsg in state(stack).of_type("azure-native:network:NetworkSecurityGroup"):
        rules = {r["name"]: r for r in nsg["inputs"]["securityRules"]}
        probes = [
            r for r in rules.values() if r["sourceAddressPrefix"] == "AzureLoadBalancer" and r["access"] == "Allow"
        ]
        denies = [r for r in rules.values() if r["sourceAddressPrefix"] == "Internet" and r["access"] == "Deny"]
        assert probes, nsg["inputs"]["networkSecurityGroupName"]
        assert all(min(p["priority"] for p in probes) < d["priority"] for d in denies)


def test_only_bastion_reaches_the_jump_hosts(state: Callable[[str], State]) -> None:
    st = state("hub")
    subnets = {s["inputs"]["subnetName"]: s["inputs"]["addressPrefix"] for s in st.of_type(SUBNET)}
    nsg = next(n for n in st.of_type("azure-native:network:NetworkSecurityGroup") if "jump" in n["urn"])
    inbound = sorted(
        (r["priority"], r["access"], r["sourceAddressPrefix"], r["destinationPortRange"])
        for r in nsg["inputs"]["securityRules"]
        if r["direction"] == "Inbound"
    )
    assert inbound == [
        (100, "Allow", subnets["AzureBastionSubnet"], "22"),
        (3000, "Deny", "VirtualNetwork", "*"),
        (3900, "Allow", "AzureLoadBalancer", "*"),
        (4000, "Deny", "Internet", "*"),
    ]
