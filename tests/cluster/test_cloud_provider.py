"""Pure tier: cloud-provider-azure's objects (node lifecycle) and the InfiniBand device plugin."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from modules import labels
from modules.cluster.manifests import render_manifests
from modules.cluster.objects import gang, rdma
from modules.cluster.objects.cloud_provider import azure_json
from modules.cluster.spec import PLACEHOLDER_ID, AddonsSpec, CloudSpec

WIRED = CloudSpec(
    tenant_id="11111111-1111-1111-1111-111111111111",
    subscription_id="22222222-2222-2222-2222-222222222222",
    resource_group="agk-dev",
    location="eastus2",
    vnet_name="dev-vnet",
    vnet_resource_group="agk-dev",
    subnet_name="system",
    security_group_name="dev-system-nsg",
    controller_client_id="33333333-3333-3333-3333-333333333333",
    remediation_client_id="44444444-4444-4444-4444-444444444444",
)


def by_name(spec: AddonsSpec, kind: str, name: str) -> dict[str, Any]:
    return next(o for o in render_manifests(spec) if o["kind"] == kind and o["metadata"]["name"] == name)


def test_cloud_config_secret_holds_azure_json(dev_spec: AddonsSpec) -> None:
    spec = replace(dev_spec, cloud=WIRED)
    # The address plan fills the network fields before any cluster output exists; the cloud fields
    # were the last placeholders.
    assert spec.placeholders == ()
    secret = by_name(spec, "Secret", "azure-cloud-provider")
    assert secret["metadata"]["namespace"] == "kube-system"
    assert json.loads(secret["stringData"]["azure.json"]) == {
        "cloud": "AzurePublicCloud",
        "tenantId": WIRED.tenant_id,
        "subscriptionId": WIRED.subscription_id,
        "resourceGroup": "agk-dev",
        "location": "eastus2",
        "vnetName": "dev-vnet",
        "vnetResourceGroup": "agk-dev",
        "subnetName": "system",
        "securityGroupName": "dev-system-nsg",
        "useManagedIdentityExtension": True,
        "userAssignedIdentityID": WIRED.controller_client_id,
        "useInstanceMetadata": True,
        "vmType": "vmss",
        "loadBalancerSku": "standard",
        # Only the mounted file: no right to read Secrets is needed (configloader's merge would read one).
        "cloudConfigType": "file",
    }
    # A config change rolls the controller (it reads the file once).
    ccm = by_name(spec, "Deployment", "cloud-controller-manager")["spec"]["template"]["metadata"]["annotations"]
    other = by_name(dev_spec, "Deployment", "cloud-controller-manager")["spec"]["template"]["metadata"]["annotations"]
    assert ccm != other


def test_controller_manager_runs_leader_elected_on_system_nodes(dev_spec: AddonsSpec) -> None:
    deploy = by_name(dev_spec, "Deployment", "cloud-controller-manager")
    pod = deploy["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert deploy["metadata"]["namespace"] == "kube-system" and deploy["spec"]["replicas"] == 2
    assert {
        "--cloud-provider=azure",
        "--cloud-config=/etc/kubernetes/cloud-config/azure.json",
        "--controllers=*,-cloud-node",  # Azure's node controller is cloud-node-manager
        "--configure-cloud-routes=false",  # Azure CNI: pods have VNet addresses, no routes
        "--allocate-node-cidrs=false",
        "--leader-elect=true",
    } <= set(c["args"])
    assert c["image"] == dev_spec.cloud_provider.controller_image
    assert c["image"] == "mcr.microsoft.com/oss/v2/kubernetes/azure-cloud-controller-manager:v1.36.5"
    term = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term == [{"matchExpressions": [{"key": "gpu.example.com/accelerator", "operator": "DoesNotExist"}]}]
    assert {"key": "node.cloudprovider.kubernetes.io/uninitialized", "operator": "Exists", "effect": "NoSchedule"} in (
        pod["tolerations"]
    )
    assert pod["volumes"][0] == {"name": "cloud-config", "secret": {"secretName": "azure-cloud-provider"}}
    rules = by_name(dev_spec, "ClusterRole", "system:cloud-controller-manager")["rules"]
    assert not any("secrets" in r["resources"] for r in rules)
    assert {
        "apiGroups": ["coordination.k8s.io"],
        "resources": ["leases"],
        "verbs": ["get", "create", "update"],
    } in rules


def test_node_manager_runs_on_every_node(dev_spec: AddonsSpec) -> None:
    ds = by_name(dev_spec, "DaemonSet", "cloud-node-manager")
    pod = ds["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True and pod["tolerations"] == [{"operator": "Exists"}]
    assert "nodeSelector" not in pod and "affinity" not in pod
    args = pod["containers"][0]["args"]
    assert "--node-name=$(NODE_NAME)" in args and "--wait-routes=false" in args
    rules = by_name(dev_spec, "ClusterRole", "cloud-node-manager")["rules"]
    assert rules[0]["resources"] == ["nodes"] and "patch" in rules[0]["verbs"]


def test_azure_json_of_placeholders_is_flagged(dev_spec: AddonsSpec) -> None:
    assert "cloud.tenant_id" in dev_spec.placeholders
    assert azure_json(dev_spec)["tenantId"] == PLACEHOLDER_ID


def test_rdma_plugin_advertises_infiniband_on_gpu_nodes(dev_spec: AddonsSpec) -> None:
    ds = by_name(dev_spec, "DaemonSet", "rdma-shared-device-plugin")
    pod = ds["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"gpu.example.com/accelerator": "nvidia"}
    assert pod["hostNetwork"] is True
    config = json.loads(by_name(dev_spec, "ConfigMap", "rdma-shared-device-plugin-config")["data"]["config.json"])
    (resource,) = config["configList"]
    assert f"{resource['resourcePrefix']}/{resource['resourceName']}" == rdma.RESOURCE == "rdma/ib"
    # Mellanox HCAs on the InfiniBand link type: not the accelerated-networking Ethernet VF.
    assert resource["selectors"] == {"vendors": ["15b3"], "linkTypes": ["infiniband"]}
    mounts = {m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert {"/var/lib/kubelet/device-plugins", "/k8s-rdma-shared-dev-plugin", "/dev"} <= mounts


def test_gang_example_is_an_nccl_job_over_infiniband_in_one_island(dev_spec: AddonsSpec) -> None:
    group, statefulset = gang.example(dev_spec, dev_spec.teams[0])
    pod = statefulset["spec"]["template"]
    c = pod["spec"]["containers"][0]
    assert c["resources"]["requests"]["rdma/ib"] == c["resources"]["limits"]["rdma/ib"] == "1"
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert c["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env["NCCL_IB_HCA"] == "mlx5_ib"  # the HPC image's InfiniBand HCA names, not mlx5_an0 (Ethernet)
    assert env["NCCL_TOPO_FILE"] == "/opt/microsoft/ndv4/topo.xml"  # the a100 pool: Standard_ND96asr_v4
    (term,) = pod["spec"]["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == labels.key(dev_spec.label_domain, labels.IB_ISLAND)
    assert group["spec"]["minMember"] == statefulset["spec"]["replicas"]
    shm = next(v for v in pod["spec"]["volumes"] if v["name"] == "dshm")
    assert shm["emptyDir"]["medium"] == "Memory"
    assert gang.nccl_env("Standard_ND96isr_H100_v5")[-1] == {
        "name": "NCCL_TOPO_FILE",
        "value": "/opt/microsoft/ndv5/topo.xml",
    }
