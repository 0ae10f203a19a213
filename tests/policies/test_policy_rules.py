"""Each rule: the compliant cluster passes it, one change breaks it with the exact message."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from policy_fixtures import (
    RG,
    Stack,
    add_spoke_peering,
    arm_id,
    good_cluster,
    messages,
    nsg_rule,
    review,
    tags,
    vmss,
)

from policies.pack import POLICIES

POD_IPS, SURGE = 10, 1
"""The fixture pool's (policy_fixtures.vmss tags): what the policies count per scale set."""


def _pool_ips(scale_sets: int, capacity: int) -> int:
    """IP configurations of one pool: (instances + surge) x (1 + pod IPs), the rule the README states."""
    return (scale_sets * capacity + SURGE) * (1 + POD_IPS)


def _host_ips() -> int:
    """The fixture's other IP configurations: one per host NIC and per load-balancer frontend."""
    resources = good_cluster().export()["deployment"]["resources"]
    nics = [r for r in resources if r["type"] == "azure-native:network:NetworkInterface"]
    lbs = [r for r in resources if r["type"] == "azure-native:network:LoadBalancer"]
    return len(nics) + sum(len(lb["inputs"]["frontendIPConfigurations"]) for lb in lbs)


BIG = _pool_ips(60, 100) + _host_ips()
FULL = _pool_ips(2, 100)


def _big_pool(st: Stack) -> None:
    for i in range(2):
        st.inputs(f"gpu-h100-{i}")["sku"]["capacity"] = 100.0
    st.inputs("vnet-dev-gpu-h100")["addressPrefix"] = "10.16.0.0/17"
    st.inputs("vnet-dev")["addressSpace"]["addressPrefixes"] = ["10.16.0.0/14"]
    for i in range(2, 60):
        st.add(
            "azure-native:compute:VirtualMachineScaleSet",
            f"gpu-h100-{i}",
            vmss(f"gpu-h100-{i}", "h100", "gpu-h100", 100, 10),
        )


def _full_pool(st: Stack) -> None:
    for i in range(2):
        st.inputs(f"gpu-h100-{i}")["sku"]["capacity"] = 100.0


def _raised(st: Stack) -> None:
    st.inputs("vnet-dev")["tags"]["agk-limits"] = "vnet-private-ips=70000,vcpus-regional=5000"


def _raised_and_big(st: Stack) -> None:
    _raised(st)
    _big_pool(st)


def _set(name: str, path: str, value: object) -> Callable[[Stack], None]:
    def change(st: Stack) -> None:
        node = st.inputs(name)
        *parents, last = path.split(".")
        for key in parents:
            node = node[key]
        if value is None:
            del node[last]
        else:
            node[last] = value

    return change


def _public_ip_on_apiserver(st: Stack) -> None:
    st.add(
        "azure-native:network:PublicIPAddress",
        "apiserver-0-pip",
        {"resourceGroupName": RG, "tags": tags("nat"), "sku": {"name": "Standard"}},
    )
    ipc = st.inputs("apiserver-0-nic")["ipConfigurations"][0]
    ipc["publicIPAddress"] = {"id": arm_id("azure-native:network:PublicIPAddress", "apiserver-0-pip")}


def _public_ip_on_untagged_host(st: Stack) -> None:
    _public_ip_on_apiserver(st)
    # Dropping the role tag must not take a host out of the rule.
    st.inputs("apiserver-0-nic")["tags"].pop("agk-role", None)
    for name in ("apiserver-0", "apiserver-0-nic"):
        st.inputs(name).get("tags", {}).pop("agk-role", None)


def _ports_from_internet(st: Stack) -> None:
    st.inputs("nsg-dev")["securityRules"].append(nsg_rule("oops", 300, "0.0.0.0/0", ["2000-2379", "10250,3389"]))


def _probes_after_the_deny(st: Stack) -> None:
    rules = st.inputs("nsg-dev")["securityRules"]
    next(r for r in rules if r["name"] == "allow-probes")["priority"] = 4001.0


def _deny_everything(st: Stack) -> None:
    st.inputs("nsg-dev")["securityRules"].insert(0, nsg_rule("deny-all", 3000, "*", ["*"], access="Deny"))


def _second_vmss_nic(st: Stack) -> None:
    nic = st.inputs("gpu-h100-0")["virtualMachineProfile"]["networkProfile"]["networkInterfaceConfigurations"][0]
    nic["ipConfigurations"] = nic["ipConfigurations"][:5]


def _etcd_on_p30(st: Stack) -> None:
    st.inputs("etcd-1-data")["sku"]["name"] = "Premium_LRS"


def _four_apiservers(st: Stack) -> None:
    from policy_fixtures import host

    host(st, "apiserver-3", "apiserver", "control-plane", "Standard_D8ds_v5", nodes=100)


def _one_etcd(st: Stack) -> None:
    for i in (1, 2):
        st.remove(f"etcd-{i}")


def _balloon_at(value: float) -> Callable[[Stack], None]:
    return _set("balloon", "value", value)


def _no_limits(st: Stack) -> None:
    spec = st.inputs("balloons")["spec"]["template"]["spec"]
    del spec["containers"][0]["resources"]


CASES: list[tuple[str, Callable[[Stack], None], list[str]]] = [
    (
        "no-spoke-to-spoke-peering",
        add_spoke_peering,
        [
            "peering dev-to-other joins spoke VNet vnet-dev to spoke VNet vnet-other: peer each spoke only with the hub",
            "spoke VNet vnet-dev is peered with 2 VNets (vnet-hub, vnet-other): peer each spoke only with the hub",
        ],
    ),
    (
        "peered-vnets-no-overlap",
        add_spoke_peering,
        [
            "peering dev-to-other: VNet vnet-dev (10.16.0.0/16) overlaps VNet vnet-other (10.16.128.0/17): "
            "give peered VNets disjoint address spaces"
        ],
    ),
    (
        "subnet-holds-its-pools",
        _full_pool,
        [
            f"subnet gpu-h100 (10.16.8.0/21) has 2048 addresses but needs {FULL + 5} (pool h100 {FULL}, + 5 reserved; "
            "pools count (instances + surge) x (1 + pod IPs)): widen it to /20 or shorter"
        ],
    ),
    (
        "ip-configurations-within-limits",
        _big_pool,
        [
            f"VNet vnet-dev has {BIG} IP configurations, over the vnet-private-ips limit of 65536, a hard Azure limit "
            "no support request raises: lower the pools' pod_ips (subnet-calc fit prints the most that fit) or split "
            "the workload across clusters"
        ],
    ),
    (
        # A declared raise of a hard limit changes nothing: the VNet is still over it.
        "ip-configurations-within-limits",
        _raised_and_big,
        [
            f"VNet vnet-dev has {BIG} IP configurations, over the vnet-private-ips limit of 65536, a hard Azure limit "
            "no support request raises: lower the pools' pod_ips (subnet-calc fit prints the most that fit) or split "
            "the workload across clusters"
        ],
    ),
    (
        "no-hard-limit-override",
        _raised,
        [
            "VNet vnet-dev declares vnet-private-ips=70000, but private IP addresses per VNet (hard Azure limit) "
            "cannot be raised: remove the override and lower the pools' pod_ips (subnet-calc fit prints the most "
            "that fit) or split the workload across clusters"
        ],
    ),
    (
        "nsg-lets-load-balancer-probes-in",
        _probes_after_the_deny,
        [
            "NSG nsg-dev rule deny-internet (priority 4000) denies inbound from Internet ahead of Azure's "
            "load-balancer probes (168.63.129.16, allowed by default only at 65001): add an inbound allow from "
            "AzureLoadBalancer with a priority below 4000"
        ],
    ),
    (
        "nsg-lets-load-balancer-probes-in",
        _deny_everything,
        [
            "NSG nsg-dev rule deny-all (priority 3000) denies inbound from * ahead of Azure's load-balancer probes "
            "(168.63.129.16, allowed by default only at 65001): add an inbound allow from AzureLoadBalancer with a "
            "priority below 3000"
        ],
    ),
    (
        "nsg-no-admin-ports-from-internet",
        _ports_from_internet,
        [
            "NSG nsg-dev rule oops allows inbound from 0.0.0.0/0 to port(s) 10250, 2379-2380, 3389: "
            "allow only the hub or VNet ranges"
        ],
    ),
    (
        "nsg-no-admin-ports-from-internet",
        _set("allow-https", "destinationPortRange", "*"),
        [
            "security rule allow-https allows inbound from Internet to port(s) 10250, 22, 2379-2380, 3389, 6443: "
            "allow only the hub or VNet ranges"
        ],
    ),
    (
        "subnet-has-nsg",
        _set("vnet-dev-etcd", "networkSecurityGroup", None),
        ["subnet etcd has no network security group: set networkSecurityGroup.id"],
    ),
    (
        "no-public-ip-on-cluster-hosts",
        _public_ip_on_apiserver,
        [
            "NIC apiserver-0-nic gives a public IP address to a host with role apiserver: reach it through the hub "
            "(Bastion, jump host) or the NAT host instead"
        ],
    ),
    (
        "no-public-ip-on-cluster-hosts",
        _public_ip_on_untagged_host,
        [
            "NIC apiserver-0-nic gives a public IP address to a host with role (untagged): reach it through the "
            "hub (Bastion, jump host) or the NAT host instead"
        ],
    ),
    (
        "nic-ip-configurations",
        _second_vmss_nic,
        [
            "scale set gpu-h100-0 NIC nic has 5 IP configurations but its pool declares 10 pod IPs: "
            "give it 1 + pod IPs = 11 (the node, then one per pod)"
        ],
    ),
    (
        "scale-set-capacity-within-cap",
        _set("gpu-h100-0", "sku.capacity", 101.0),
        [
            "scale set gpu-h100-0 has capacity 101, over the 100 VMs a scale set holds with singlePlacementGroup=true: "
            "split the pool into more scale sets"
        ],
    ),
    (
        "infiniband-single-placement-group",
        _set("gpu-h100-0", "singlePlacementGroup", False),
        [
            "scale set gpu-h100-0 uses InfiniBand size Standard_ND96isr_H100_v5 with singlePlacementGroup=false: "
            "InfiniBand only connects VMs inside one placement group; set singlePlacementGroup to true"
        ],
    ),
    (
        "accelerated-networking",
        _set("etcd-0-nic", "enableAcceleratedNetworking", False),
        ["NIC etcd-0-nic has accelerated networking off: set enableAcceleratedNetworking true"],
    ),
    (
        "ssh-keys-only",
        _set("etcd-0", "osProfile.linuxConfiguration.disablePasswordAuthentication", False),
        [
            "VM etcd-0 allows password login: set osProfile.linuxConfiguration.disablePasswordAuthentication true "
            "and log in with SSH keys"
        ],
    ),
    (
        "encryption-at-host",
        _set("gpu-h100-1", "virtualMachineProfile.securityProfile", None),
        [
            "scale set gpu-h100-1 has encryption at host off: set "
            "virtualMachineProfile.securityProfile.encryptionAtHost true"
        ],
    ),
    (
        "no-placeholder-checksum",
        _set("gpu-h100-1", "tags.cni-sha256", "0" * 64),
        [
            "compute:VirtualMachineScaleSet gpu-h100-1 carries an all-zero sha256 at tags.cni-sha256: a placeholder, not"
            " a checksum (a node checking it refuses the download; one not checking trusts anything): put the sha256"
            " its publisher pairs with the version, with the source, in modules/bootstrap/versions.py and plan again"
        ],
    ),
    (
        "control-plane-member-count",
        _four_apiservers,
        ["4 apiserver hosts: use 1, 3 or 5 (an odd member count keeps a quorum)"],
    ),
    (
        "control-plane-redundancy",
        _one_etcd,
        ["1 etcd host: a single member has no redundancy; use 3 or 5 in production"],
    ),
    (
        "etcd-low-latency-storage",
        _etcd_on_p30,
        [
            "etcd VM etcd-1 (Standard_D8ds_v5, Premium_LRS) has neither local NVMe nor a Premium SSD v2 / Ultra "
            "data disk: etcd is latency-bound; use an Lsv3 size or a PremiumV2_LRS disk"
        ],
    ),
    (
        "apiserver-memory-sizing",
        _set("apiserver-2", "tags.agk-cluster-nodes", "7500"),
        [
            "API server VM apiserver-2 is Standard_D8ds_v5 (8 vCPU, 32 GiB) but 7500 nodes need at least 64 vCPU "
            "and 66 GiB: pick a larger size"
        ],
    ),
    (
        "storage-https-only",
        _set("stdev", "enableHttpsTrafficOnly", False),
        ["storage account stdev accepts plain HTTP: set enableHttpsTrafficOnly true"],
    ),
    (
        "storage-min-tls-1-2",
        _set("stdev", "minimumTlsVersion", "TLS1_0"),
        ["storage account stdev has minimumTlsVersion TLS1_0: set it to TLS1_2"],
    ),
    (
        "storage-no-public-blob-access",
        _set("datasets", "publicAccess", "Blob"),
        ["blob container datasets has publicAccess Blob: set it to None"],
    ),
    (
        "storage-no-public-blob-access",
        _set("stdev", "allowBlobPublicAccess", None),
        ["storage account stdev does not forbid public blob access: set allowBlobPublicAccess false"],
    ),
    (
        "balloon-priority-range",
        _balloon_at(-1000.0),
        [
            "balloon PriorityClass balloon has value -1000: use -10 to -1 (below -10 the autoscaler ignores the "
            "balloon; at 0 or above real pods cannot preempt it)"
        ],
    ),
    (
        "balloon-priority-range",
        _balloon_at(0.0),
        [
            "balloon PriorityClass balloon has value 0: use -10 to -1 (below -10 the autoscaler ignores the "
            "balloon; at 0 or above real pods cannot preempt it)"
        ],
    ),
    (
        "container-limits",
        _no_limits,
        ["Deployment balloons container pause has no resource limits: set resources.limits (cpu, memory)"],
    ),
    (
        "privileged-needs-justification",
        _set("iptables-exporter", "metadata.annotations", None),
        [
            "DaemonSet iptables-exporter uses hostNetwork, privileged container exporter without a "
            "azure-gpu-k8s/justification annotation: add one that says why it needs host access"
        ],
    ),
    (
        "required-tags",
        _set("stdev", "tags.cost-center", None),
        [
            "storage:StorageAccount stdev lacks tag(s) cost-center: tag every Azure resource with owner, "
            "cost-center and cluster (modules.tags.base_tags)"
        ],
    ),
]


def test_compliant_cluster_passes_every_policy() -> None:
    report = review(good_cluster())
    assert report.violations == []
    assert report.policies_run == len(POLICIES) == 27


def test_every_policy_has_a_violating_case() -> None:
    assert {p.name for p in POLICIES} == {case[0] for case in CASES}


@pytest.mark.parametrize(("policy", "change", "expected"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_violation_text(policy: str, change: Callable[[Stack], None], expected: list[str]) -> None:
    st = good_cluster()
    assert messages(st, policy) == []
    change(st)
    assert messages(st, policy) == expected
