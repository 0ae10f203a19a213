"""Hand-written stack exports in the azure-native v3 wire form, and a runner for single policies.

``good_cluster()`` is a small cluster spoke that every policy accepts; tests break one thing in it
and assert the exact violation. Props are written as the SDK sends them (camelCase, ARM properties
flattened); ``test_policy_wire_form.py`` checks that against the installed SDK under mocks.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any

from agk.review.config import settings
from agk.review.evaluate import Report, Violation, evaluate
from agk.stack_export import Deployment, parse
from policies.pack import ENFORCEMENT, NAME, POLICIES, VERSION

PROJECT = "azure-gpu-k8s"
SUB = "/subscriptions/00000000-0000-0000-0000-000000000000"
RG = "rg-dev"
NET = "Microsoft.Network"
COMPUTE = "Microsoft.Compute"

_ARM = {
    "azure-native:resources:ResourceGroup": None,
    "azure-native:network:VirtualNetwork": f"{NET}/virtualNetworks",
    "azure-native:network:NetworkSecurityGroup": f"{NET}/networkSecurityGroups",
    "azure-native:network:NetworkInterface": f"{NET}/networkInterfaces",
    "azure-native:network:PublicIPAddress": f"{NET}/publicIPAddresses",
    "azure-native:network:LoadBalancer": f"{NET}/loadBalancers",
    "azure-native:network:NatGateway": f"{NET}/natGateways",
    "azure-native:network:PrivateEndpoint": f"{NET}/privateEndpoints",
    "azure-native:compute:VirtualMachine": f"{COMPUTE}/virtualMachines",
    "azure-native:compute:VirtualMachineScaleSet": f"{COMPUTE}/virtualMachineScaleSets",
    "azure-native:compute:Disk": f"{COMPUTE}/disks",
    "azure-native:storage:StorageAccount": "Microsoft.Storage/storageAccounts",
}


def vnet_id(name: str, rg: str = RG) -> str:
    return f"{SUB}/resourceGroups/{rg}/providers/{NET}/virtualNetworks/{name}"


def subnet_id(vnet: str, name: str, rg: str = RG) -> str:
    return f"{vnet_id(vnet, rg)}/subnets/{name}"


def arm_id(resource_type: str, name: str, rg: str = RG) -> str:
    return f"{SUB}/resourceGroups/{rg}/providers/{_ARM[resource_type]}/{name}"


def tags(role: str | None = None, **extra: str) -> dict[str, str]:
    out = {"owner": "platform-team", "cost-center": "cc-1234", "cluster": "dev"}
    if role:
        out["agk-role"] = role
    out.update(extra)
    return out


@dataclass
class Stack:
    stack: str = "dev"
    resources: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.root = f"urn:pulumi:{self.stack}::{PROJECT}::pulumi:pulumi:Stack::{PROJECT}-{self.stack}"
        self.resources.append({"urn": self.root, "type": "pulumi:pulumi:Stack", "custom": False})
        self.provider = f"urn:pulumi:{self.stack}::{PROJECT}::pulumi:providers:azure-native::default"
        self.resources.append(
            {
                "urn": self.provider,
                "type": "pulumi:providers:azure-native",
                "custom": True,
                "id": "p1",
                "inputs": {"location": "eastus2"},
                "outputs": {"location": "eastus2"},
            }
        )

    def add(self, resource_type: str, name: str, inputs: dict[str, Any], arm: str | None = None) -> str:
        urn = f"urn:pulumi:{self.stack}::{PROJECT}::{resource_type}::{name}"
        outputs = dict(inputs)
        if arm is None and resource_type in _ARM and _ARM[resource_type]:
            arm = arm_id(resource_type, name, str(inputs.get("resourceGroupName", RG)))
        if arm:
            outputs.update(id=arm, name=arm.rsplit("/", 1)[1])
        self.resources.append(
            {
                "urn": urn,
                "type": resource_type,
                "custom": True,
                "id": arm or name,
                "inputs": inputs,
                "outputs": outputs,
                "parent": self.root,
                "provider": f"{self.provider}::p1",
                "dependencies": [],
            }
        )
        return urn

    def find(self, name: str) -> dict[str, Any]:
        return next(r for r in self.resources if r["urn"].endswith(f"::{name}"))

    def inputs(self, name: str) -> dict[str, Any]:
        """The resource's inputs and outputs together, for a test to change (they stay the same)."""
        res = self.find(name)
        res["outputs"] = res["inputs"]
        ident = res.get("id")
        if isinstance(ident, str) and ident.startswith("/subscriptions/"):
            res["inputs"].setdefault("id", ident)
        return res["inputs"]  # type: ignore[no-any-return]

    def remove(self, name: str) -> None:
        self.resources.remove(self.find(name))

    def export(self) -> dict[str, Any]:
        return {
            "version": 3,
            "deployment": {
                "manifest": {"time": "2025-01-01T00:00:00Z", "version": "v3.272.0"},
                "resources": copy.deepcopy(self.resources),
            },
        }

    def deployment(self) -> Deployment:
        return parse(json.loads(json.dumps(self.export())), "fixture", f"stacks/Pulumi.{self.stack}.yaml")


def nsg_rule(name: str, priority: int, source: str, ports: list[str], access: str = "Allow") -> dict[str, Any]:
    return {
        "name": name,
        "priority": float(priority),
        "direction": "Inbound",
        "access": access,
        "protocol": "Tcp",
        "sourceAddressPrefix": source,
        "sourcePortRange": "*",
        "destinationAddressPrefix": "*",
        "destinationPortRanges": ports,
    }


def vmss(
    name: str,
    pool: str,
    subnet: str,
    capacity: int,
    pod_ips: int,
    size: str = "Standard_ND96isr_H100_v5",
    role: str = "gpu-node",
    surge: int = 1,
) -> dict[str, Any]:
    sid = subnet_id("vnet-dev", subnet)
    ipcs = [{"name": "ipconfig1", "primary": True, "subnet": {"id": sid}}]
    ipcs += [{"name": f"ipconfig{i + 2}", "subnet": {"id": sid}} for i in range(pod_ips)]
    return {
        "resourceGroupName": RG,
        "sku": {"name": size, "capacity": float(capacity), "tier": "Standard"},
        "singlePlacementGroup": True,
        "orchestrationMode": "Uniform",
        "upgradePolicy": {"mode": "Manual"},
        "tags": tags(role, **{"agk-pool": pool, "agk-pod-ips": str(pod_ips), "agk-surge": str(surge)}),
        "virtualMachineProfile": {
            "securityProfile": {"encryptionAtHost": True},
            "osProfile": {
                "computerNamePrefix": name,
                "adminUsername": "azureuser",
                "linuxConfiguration": {"disablePasswordAuthentication": True},
            },
            "networkProfile": {
                "networkInterfaceConfigurations": [
                    {"name": "nic", "primary": True, "enableAcceleratedNetworking": True, "ipConfigurations": ipcs}
                ]
            },
        },
    }


def host(
    st: Stack, name: str, role: str, subnet: str, size: str, nodes: int | None = None, disk_sku: str | None = None
) -> None:
    st.add(
        "azure-native:network:NetworkInterface",
        f"{name}-nic",
        {
            "resourceGroupName": RG,
            "enableAcceleratedNetworking": True,
            "tags": tags(role),
            "ipConfigurations": [
                {
                    "name": "ipconfig1",
                    "primary": True,
                    "privateIPAllocationMethod": "Static",
                    "subnet": {"id": subnet_id("vnet-dev", subnet)},
                }
            ],
        },
    )
    vm_tags = tags(role, **({"agk-cluster-nodes": str(nodes)} if nodes is not None else {}))
    data_disks = []
    if disk_sku:
        st.add(
            "azure-native:compute:Disk",
            f"{name}-data",
            {
                "resourceGroupName": RG,
                "sku": {"name": disk_sku},
                "diskSizeGB": 64.0,
                "diskIOPSReadWrite": 15000.0,
                "creationData": {"createOption": "Empty"},
                "tags": tags(role),
            },
        )
        data_disks = [
            {
                "lun": 0.0,
                "createOption": "Attach",
                "managedDisk": {"id": arm_id("azure-native:compute:Disk", f"{name}-data")},
            }
        ]
    st.add(
        "azure-native:compute:VirtualMachine",
        name,
        {
            "resourceGroupName": RG,
            "hardwareProfile": {"vmSize": size},
            "tags": vm_tags,
            "securityProfile": {"encryptionAtHost": True},
            "osProfile": {
                "computerName": name,
                "adminUsername": "azureuser",
                "linuxConfiguration": {"disablePasswordAuthentication": True},
            },
            "storageProfile": {
                "osDisk": {"createOption": "FromImage", "managedDisk": {"storageAccountType": "Premium_LRS"}},
                "dataDisks": data_disks,
            },
            "networkProfile": {
                "networkInterfaces": [
                    {"id": arm_id("azure-native:network:NetworkInterface", f"{name}-nic"), "primary": True}
                ]
            },
        },
    )


def good_cluster() -> Stack:
    """A small spoke that passes every policy: 3 API servers, 3 etcd, 2 IB scale sets of 50."""
    st = Stack()
    st.add(
        "azure-native:resources:ResourceGroup",
        RG,
        {"location": "eastus2", "tags": tags()},
        arm=f"{SUB}/resourceGroups/{RG}",
    )
    nsg = arm_id("azure-native:network:NetworkSecurityGroup", "nsg-dev")
    st.add(
        "azure-native:network:NetworkSecurityGroup",
        "nsg-dev",
        {
            "resourceGroupName": RG,
            "tags": tags("network"),
            "securityRules": [
                nsg_rule("hub-to-apiserver", 100, "10.0.0.0/20", ["6443", "22"]),
                nsg_rule("allow-probes", 3900, "AzureLoadBalancer", ["*"]),
                nsg_rule("deny-internet", 4000, "Internet", ["*"], access="Deny"),
            ],
        },
    )
    st.add(
        "azure-native:network:SecurityRule",
        "allow-https",
        {
            "resourceGroupName": RG,
            "networkSecurityGroupName": "nsg-dev",
            "priority": 200.0,
            "direction": "Inbound",
            "access": "Allow",
            "protocol": "Tcp",
            "sourceAddressPrefix": "Internet",
            "sourcePortRange": "*",
            "destinationAddressPrefix": "*",
            "destinationPortRange": "443",
        },
    )
    st.add(
        "azure-native:network:VirtualNetwork",
        "vnet-dev",
        {
            "resourceGroupName": RG,
            "virtualNetworkName": "vnet-dev",
            "addressSpace": {"addressPrefixes": ["10.16.0.0/16"]},
            "tags": tags("network", **{"agk-network": "spoke", "agk-limits": ""}),
        },
    )
    for sub, cidr in (("control-plane", "10.16.0.0/24"), ("etcd", "10.16.1.0/24"), ("gpu-h100", "10.16.8.0/21")):
        st.add(
            "azure-native:network:Subnet",
            f"vnet-dev-{sub}",
            {
                "resourceGroupName": RG,
                "virtualNetworkName": "vnet-dev",
                "subnetName": sub,
                "addressPrefix": cidr,
                "networkSecurityGroup": {"id": nsg},
            },
            arm=subnet_id("vnet-dev", sub),
        )
    st.add(
        "azure-native:network:VirtualNetworkPeering",
        "dev-to-hub",
        {
            "resourceGroupName": RG,
            "virtualNetworkName": "vnet-dev",
            "allowForwardedTraffic": False,
            "allowVirtualNetworkAccess": True,
            "remoteVirtualNetwork": {"id": vnet_id("vnet-hub", "rg-hub")},
        },
        arm=f"{vnet_id('vnet-dev')}/virtualNetworkPeerings/dev-to-hub",
    )
    for i in range(3):
        host(st, f"apiserver-{i}", "apiserver", "control-plane", "Standard_D8ds_v5", nodes=100)
        host(st, f"etcd-{i}", "etcd", "etcd", "Standard_D8ds_v5", disk_sku="PremiumV2_LRS")
    st.add(
        "azure-native:network:LoadBalancer",
        "apiserver-lb",
        {
            "resourceGroupName": RG,
            "sku": {"name": "Standard"},
            "tags": tags("apiserver"),
            "frontendIPConfigurations": [
                {
                    "name": "fe",
                    "privateIPAddress": "10.16.0.250",
                    "subnet": {"id": subnet_id("vnet-dev", "control-plane")},
                }
            ],
        },
    )
    for i in range(2):
        st.add(
            "azure-native:compute:VirtualMachineScaleSet",
            f"gpu-h100-{i}",
            vmss(f"gpu-h100-{i}", "h100", "gpu-h100", 50, 10),
        )
    st.add(
        "azure-native:storage:StorageAccount",
        "stdev",
        {
            "resourceGroupName": RG,
            "kind": "StorageV2",
            "sku": {"name": "Standard_LRS"},
            "tags": tags("storage"),
            "enableHttpsTrafficOnly": True,
            "minimumTlsVersion": "TLS1_2",
            "allowBlobPublicAccess": False,
            "publicNetworkAccess": "Disabled",
        },
    )
    st.add(
        "azure-native:storage:BlobContainer",
        "datasets",
        {"resourceGroupName": RG, "accountName": "stdev", "publicAccess": "None"},
    )
    st.add(
        "kubernetes:scheduling.k8s.io/v1:PriorityClass",
        "balloon",
        {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "balloon"}, "value": -1.0},
    )
    st.add(
        "kubernetes:apps/v1:Deployment",
        "balloons",
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "balloons", "labels": {"app": "balloon"}},
            "spec": {
                "selector": {"matchLabels": {"app": "balloon"}},
                "template": {
                    "metadata": {"labels": {"app": "balloon"}},
                    "spec": {
                        "priorityClassName": "balloon",
                        "containers": [
                            {
                                "name": "pause",
                                "image": "registry.k8s.io/pause:3.10",
                                "resources": {"limits": {"cpu": "1", "memory": "64Mi"}},
                            }
                        ],
                    },
                },
            },
        },
    )
    st.add(
        "kubernetes:apps/v1:DaemonSet",
        "iptables-exporter",
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {
                "name": "iptables-exporter",
                "annotations": {"azure-gpu-k8s/justification": "reads the host's iptables counters"},
            },
            "spec": {
                "selector": {"matchLabels": {"app": "ipt"}},
                "template": {
                    "metadata": {"labels": {"app": "ipt"}},
                    "spec": {
                        "hostNetwork": True,
                        "containers": [
                            {
                                "name": "exporter",
                                "image": "madron/iptables-exporter",
                                "securityContext": {"privileged": True},
                                "resources": {"limits": {"cpu": "100m", "memory": "64Mi"}},
                            }
                        ],
                    },
                },
            },
        },
    )
    return st


def add_spoke_peering(st: Stack) -> None:
    """A second spoke VNet (overlapping the first) peered directly with it: no hub in between."""
    st.add(
        "azure-native:network:VirtualNetwork",
        "vnet-other",
        {
            "resourceGroupName": RG,
            "virtualNetworkName": "vnet-other",
            "addressSpace": {"addressPrefixes": ["10.16.128.0/17"]},
            "tags": tags("network", **{"agk-network": "spoke"}),
        },
    )
    st.add(
        "azure-native:network:VirtualNetworkPeering",
        "dev-to-other",
        {
            "resourceGroupName": RG,
            "virtualNetworkName": "vnet-dev",
            "remoteVirtualNetwork": {"id": vnet_id("vnet-other")},
        },
    )


def review(st: Stack | Deployment, config: dict[str, Any] | None = None) -> Report:
    dep = st.deployment() if isinstance(st, Stack) else st
    return evaluate(POLICIES, settings(POLICIES, ENFORCEMENT, config or {}), dep, NAME, VERSION)


def violations(st: Stack, policy: str) -> list[Violation]:
    return [v for v in review(st).violations if v.policy == policy]


def messages(st: Stack, policy: str) -> list[str]:
    return [v.message for v in violations(st, policy)]
