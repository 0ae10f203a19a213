"""cloud-provider-azure: cloud-controller-manager (Deployment) and cloud-node-manager (DaemonSet).

With ``--cloud-provider=external`` on every kubelet (the node bootstrap's flag), a node registers
with the taint ``node.cloudprovider.kubernetes.io/uninitialized`` until cloud-node-manager, on the
node itself, sets its ``spec.providerID``, addresses and zone/instance-type labels from IMDS.
cloud-controller-manager (``--controllers=*,-cloud-node``: Azure's node controller is the node
manager) runs the node lifecycle controller, which deletes the Node of a VM that no longer exists,
and the service controller (load balancers). Flags and shape: kubernetes-sigs/cloud-provider-azure
``content/en/install/azure-ccm.md`` and ``helm/cloud-provider-azure``; ``--configure-cloud-routes=false``
and ``--allocate-node-cidrs=false`` because Azure CNI gives pods VNet addresses (no routes, no pod CIDRs).

The cloud config (``azure.json``) is the Secret ``kube-system/azure-cloud-provider``, mounted as a
file with ``"cloudConfigType": "file"`` so the controller reads only that file and needs no right
to read Secrets (pkg/azclient/configloader/load.go: ``merge``, the default, also reads the Secret
through the API; the dynamic-reload path watches every Secret in the cluster).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from modules.cluster.objects.common import (
    Obj,
    cluster_role,
    cluster_role_binding,
    exception_key,
    meta,
    pod_security,
    resources,
    restricted,
    service_account,
    sized,
    system_nodes,
    tolerate_everything,
)
from modules.cluster.objects.health import HOST_NETWORK_WHY, IMDS_WHY, host_network
from modules.cluster.spec import AddonsSpec
from modules.vm_sizing.formulas import Resources

NS = "kube-system"
CCM = "cloud-controller-manager"
CNM = "cloud-node-manager"
SECRET = "azure-cloud-provider"
CONFIG_DIR = "/etc/kubernetes/cloud-config"
CONFIG_FILE = f"{CONFIG_DIR}/azure.json"
CCM_PORT, CNM_PORT = 10268, 10267
UNINITIALIZED = "node.cloudprovider.kubernetes.io/uninitialized"
CONFIG_HASH = "azure-gpu-k8s/cloud-config-sha256"
CNM_WHY = (
    "host network: cloud-node-manager reads the node's own identity (IMDS, hostname) and must run before the "
    "node has a pod network"
)


def azure_json(spec: AddonsSpec) -> dict[str, Any]:
    """cloud-provider-azure's cloud config (content/en/install/configs.md), every default we rely on spelled out."""
    c = spec.cloud
    return {
        "cloud": "AzurePublicCloud",
        "tenantId": c.tenant_id,
        "subscriptionId": c.subscription_id,
        "resourceGroup": c.resource_group,
        "location": c.location,
        "vnetName": c.vnet_name,
        "vnetResourceGroup": c.vnet_resource_group,
        "subnetName": c.subnet_name,
        "securityGroupName": c.security_group_name,
        # User-assigned managed identity: "set useManagedIdentityExtension to true and also set
        # userAssignedIdentityID" (the identity's client id).
        "useManagedIdentityExtension": True,
        "userAssignedIdentityID": c.controller_client_id,
        "useInstanceMetadata": True,
        # Uniform scale sets (the default from v1.28, written anyway).
        "vmType": "vmss",
        # The docs say the default is basic, the code defaults to standard: say it.
        "loadBalancerSku": "standard",
        "cloudConfigType": "file",
    }


def secret(spec: AddonsSpec) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": meta(SECRET, NS, app=CCM),
        "type": "Opaque",
        "stringData": {"azure.json": json.dumps(azure_json(spec), indent=2, sort_keys=True)},
    }


def _config_hash(spec: AddonsSpec) -> str:
    return hashlib.sha256(json.dumps(azure_json(spec), sort_keys=True).encode()).hexdigest()


def _auth_reader(name: str) -> Obj:
    """Delegated authentication of the secure port (/healthz) reads kube-system's client-CA ConfigMap."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": meta(f"{name}-authentication-reader", NS, app=name),
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": "extension-apiserver-authentication-reader",
        },
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": NS}],
    }


def _ccm_rules() -> list[Obj]:
    def rule(groups: list[str], res: list[str], verbs: list[str]) -> Obj:
        return {"apiGroups": groups, "resources": res, "verbs": verbs}

    # The helm chart's system:cloud-controller-manager, less Secrets (the config is a mounted file) and
    # ServiceAccounts (only for --use-service-account-credentials, not set).
    return [
        rule([""], ["events"], ["create", "patch", "update"]),
        rule([""], ["nodes"], ["*"]),
        rule([""], ["nodes/status"], ["patch"]),
        rule([""], ["services"], ["list", "patch", "update", "watch"]),
        rule([""], ["services/status"], ["list", "patch", "update", "watch"]),
        rule([""], ["persistentvolumes"], ["get", "list", "update", "watch"]),
        rule([""], ["endpoints"], ["create", "get", "list", "watch", "update"]),
        rule(["coordination.k8s.io"], ["leases"], ["get", "create", "update"]),
        rule(["discovery.k8s.io"], ["endpointslices"], ["get", "list", "watch"]),
    ]


def controller_manager(spec: AddonsSpec) -> Obj:
    probe = {"httpGet": {"path": "/healthz", "port": CCM_PORT, "scheme": "HTTPS"}, "timeoutSeconds": 5}
    labels = {"app.kubernetes.io/name": CCM}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta(CCM, NS, app=CCM, component="cloud-provider", annotations={exception_key(spec): IMDS_WHY}),
        "spec": {
            # Two on distinct system nodes; one leads (leader election), the other takes over.
            "replicas": 2,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {
                    "labels": labels,
                    "annotations": {CONFIG_HASH: _config_hash(spec), exception_key(spec): IMDS_WHY},
                },
                "spec": host_network(
                    {
                        "serviceAccountName": CCM,
                        "priorityClassName": "system-cluster-critical",
                        "affinity": {
                            **system_nodes(spec),
                            "podAntiAffinity": {
                                "preferredDuringSchedulingIgnoredDuringExecution": [
                                    {
                                        "weight": 100,
                                        "podAffinityTerm": {
                                            "labelSelector": {"matchLabels": labels},
                                            "topologyKey": "kubernetes.io/hostname",
                                        },
                                    }
                                ]
                            },
                        },
                        # Nodes stay uninitialized until cloud-node-manager runs; the controller must not wait.
                        "tolerations": [
                            {"key": UNINITIALIZED, "operator": "Exists", "effect": "NoSchedule"},
                            {"key": "CriticalAddonsOnly", "operator": "Exists"},
                        ],
                        "securityContext": pod_security(),
                        "containers": [
                            {
                                "name": CCM,
                                "image": spec.cloud_provider.controller_image,
                                "command": ["cloud-controller-manager"],
                                "args": [
                                    "--cloud-provider=azure",
                                    f"--cloud-config={CONFIG_FILE}",
                                    "--controllers=*,-cloud-node",
                                    "--configure-cloud-routes=false",
                                    "--allocate-node-cidrs=false",
                                    f"--cluster-name={spec.cluster_name}",
                                    "--leader-elect=true",
                                    f"--secure-port={CCM_PORT}",
                                    "--v=2",
                                ],
                                "ports": [{"name": "https", "containerPort": CCM_PORT}],
                                "livenessProbe": {**probe, "initialDelaySeconds": 20},
                                "readinessProbe": probe,
                                # It caches every Node: sized for the cluster (formulas.cloud_controller_manager).
                                "resources": sized(
                                    Resources(
                                        spec.cloud_provider.controller_cpu_millis,
                                        spec.cloud_provider.controller_cpu_limit_millis,
                                        spec.cloud_provider.controller_memory_mib,
                                    )
                                ),
                                "securityContext": restricted(),
                                "volumeMounts": [
                                    {"name": "cloud-config", "mountPath": CONFIG_DIR, "readOnly": True},
                                    {"name": "tmp", "mountPath": "/tmp"},
                                ],
                            }
                        ],
                        "volumes": [
                            {"name": "cloud-config", "secret": {"secretName": SECRET}},
                            {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}},
                        ],
                    }
                ),
            },
        },
    }


def node_manager(spec: AddonsSpec) -> Obj:
    # /healthz on the secure port, bound to loopback only; the kubelet probes from the host.
    probe = {
        "httpGet": {"host": "127.0.0.1", "path": "/healthz", "port": CNM_PORT, "scheme": "HTTPS"},
        "timeoutSeconds": 5,
    }
    labels = {"app.kubernetes.io/name": CNM}
    why = {exception_key(spec): f"{CNM_WHY}; {HOST_NETWORK_WHY}"}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": meta(CNM, NS, app=CNM, component="cloud-provider", annotations=why),
        "spec": {
            "selector": {"matchLabels": labels},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "10%"}},
            "template": {
                "metadata": {"labels": labels, "annotations": why},
                "spec": host_network(
                    {
                        "serviceAccountName": CNM,
                        "priorityClassName": "system-node-critical",
                        "tolerations": tolerate_everything(),
                        "securityContext": pod_security(),
                        "containers": [
                            {
                                "name": CNM,
                                "image": spec.cloud_provider.node_manager_image,
                                "command": ["cloud-node-manager"],
                                "args": [
                                    "--node-name=$(NODE_NAME)",
                                    "--use-instance-metadata=true",
                                    "--wait-routes=false",
                                    "--bind-address=127.0.0.1",
                                    f"--secure-port={CNM_PORT}",
                                    "--v=2",
                                ],
                                "env": [
                                    {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
                                ],
                                "livenessProbe": {**probe, "initialDelaySeconds": 20},
                                "readinessProbe": probe,
                                "resources": resources("50m", "128Mi", cpu_limit="500m"),
                                "securityContext": restricted(),
                                "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
                            }
                        ],
                        "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "16Mi"}}],
                    }
                ),
            },
        },
    }


def cloud_provider(spec: AddonsSpec) -> list[Obj]:
    cnm_rules = [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["watch", "list", "get", "update", "patch"]},
        {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]},
    ]
    return [
        secret(spec),
        service_account(CCM, NS, app=CCM),
        cluster_role(f"system:{CCM}", _ccm_rules(), app=CCM),
        cluster_role_binding(f"system:{CCM}", f"system:{CCM}", CCM, NS, app=CCM),
        _auth_reader(CCM),
        controller_manager(spec),
        service_account(CNM, NS, app=CNM),
        cluster_role(CNM, cnm_rules, app=CNM),
        cluster_role_binding(CNM, CNM, CNM, NS, app=CNM),
        _auth_reader(CNM),
        node_manager(spec),
    ]
