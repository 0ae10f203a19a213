"""Azure Workload Identity's mutating webhook (upstream deploy/azure-wi-webhook.yaml at the pinned release,
github.com/Azure/azure-workload-identity): a pod labelled ``azure.workload.identity/use: "true"`` whose service
account names a client id gets a projected token for ``api://AzureADTokenExchange`` and the ``AZURE_*``
variables the Azure SDKs read, so it exchanges its token for its team identity's. Deployed only with
``cluster.identity``.

The webhook issues its own serving certificate and writes the CA into the webhook configuration
(open-policy-agent/cert-controller, upstream's default): Pulumi creates both and the webhook fills them in.
The API servers reach it at its pods' VNet addresses (--enable-aggregator-routing: no kube-proxy there).
"""

from __future__ import annotations

from modules.cluster import images
from modules.cluster.objects.common import (
    Obj,
    meta,
    namespace,
    pod_security,
    restricted,
    service_account,
    system_nodes,
)
from modules.cluster.objects.network_policies import api_server
from modules.cluster.objects.researchers import USE_LABEL
from modules.cluster.spec import AddonsSpec

NS = "azure-workload-identity-system"
APP = "azure-wi-webhook"
SA = "azure-wi-webhook-admin"
SECRET = "azure-wi-webhook-server-cert"
"""The name the webhook's cert rotation writes (cmd/webhook/main.go secretName)."""
CONFIG = "azure-wi-webhook-mutating-webhook-configuration"
"""The name its rotation patches with the CA (cmd/webhook/main.go webhooks)."""
SERVICE = "azure-wi-webhook-webhook-service"
WEBHOOK = "mutation.azure-workload-identity.io"
PATH = "/mutate-v1-pod"
PORT = 9443
SELECTOR = {"azure-workload-identity.io/system": "true"}


def webhook_configuration(client_config: Obj) -> Obj:
    """The MutatingWebhookConfiguration (upstream's, with ``client_config``: the Service here; the tests give a
    URL to the binary they run)."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": meta(CONFIG, app=APP, extra_labels=SELECTOR),
        "webhooks": [
            {
                "name": WEBHOOK,
                "admissionReviewVersions": ["v1", "v1beta1"],
                "clientConfig": client_config,
                # Fail: a pod that asked for an identity and started without one would fail later, less clearly.
                "failurePolicy": "Fail",
                "matchPolicy": "Equivalent",
                "objectSelector": {"matchLabels": {USE_LABEL: "true"}},
                "reinvocationPolicy": "IfNeeded",
                "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}],
                "sideEffects": "None",
            }
        ],
    }


def workload_identity(spec: AddonsSpec) -> list[Obj]:
    access = spec.access
    if access is None:
        return []
    return [
        namespace(NS, app=APP, pod_security_level="restricted", extra_labels=SELECTOR),
        service_account(SA, NS, app=APP),
        *_rbac(),
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": meta("azure-wi-webhook-config", NS, app=APP),
            "data": {"AZURE_ENVIRONMENT": "AzurePublicCloud", "AZURE_TENANT_ID": access.tenant_id},
        },
        # Empty: the webhook's certificate rotation writes the pair into it (upstream ships it empty too).
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": meta(SECRET, NS, app=APP),
            "type": "Opaque",
            "stringData": {},
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": meta(SERVICE, NS, app=APP),
            "spec": {"ports": [{"port": 443, "targetPort": PORT}], "selector": SELECTOR},
        },
        _deployment(spec),
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": meta("azure-wi-webhook-controller-manager", NS, app=APP),
            "spec": {"minAvailable": 1, "selector": {"matchLabels": SELECTOR}},
        },
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": meta(APP, NS, app=APP),
            "spec": {
                "podSelector": {"matchLabels": SELECTOR},
                "policyTypes": ["Ingress", "Egress"],
                # The API servers call it; it reads service accounts and writes its certificate through them.
                "ingress": [
                    {
                        "from": [{"ipBlock": {"cidr": c}} for c in spec.network.apiserver_cidrs],
                        "ports": [{"protocol": "TCP", "port": PORT}],
                    }
                ],
                "egress": [api_server(spec)],
            },
        },
        webhook_configuration({"service": {"name": SERVICE, "namespace": NS, "path": PATH}}),
    ]


def _rbac() -> list[Obj]:
    """The webhook's own certificate Secret (its namespace) and the service accounts and its webhook
    configuration it reads and updates (cluster-wide), as upstream's chart grants them."""
    rbac = "rbac.authorization.k8s.io/v1"
    subject = [{"kind": "ServiceAccount", "name": SA, "namespace": NS}]
    return [
        {
            "apiVersion": rbac,
            "kind": "Role",
            "metadata": meta(APP, NS, app=APP),
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["secrets"],
                    "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
                }
            ],
        },
        {
            "apiVersion": rbac,
            "kind": "RoleBinding",
            "metadata": meta(APP, NS, app=APP),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": APP},
            "subjects": subject,
        },
        {
            "apiVersion": rbac,
            "kind": "ClusterRole",
            "metadata": meta(APP, app=APP),
            "rules": [
                {"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["get", "list", "watch"]},
                {
                    "apiGroups": ["admissionregistration.k8s.io"],
                    "resources": ["mutatingwebhookconfigurations"],
                    "verbs": ["get", "list", "update", "watch"],
                },
            ],
        },
        {
            "apiVersion": rbac,
            "kind": "ClusterRoleBinding",
            "metadata": meta(APP, app=APP),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": APP},
            "subjects": subject,
        },
    ]


def _deployment(spec: AddonsSpec) -> Obj:
    """The webhook's two replicas on the system nodes."""
    container: Obj = {
        "name": "manager",
        "image": images.WORKLOAD_IDENTITY_WEBHOOK,
        "command": ["/manager"],
        "args": ["--log-level=info"],
        "env": [{"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}],
        "envFrom": [{"configMapRef": {"name": "azure-wi-webhook-config"}}],
        "ports": [
            {"containerPort": PORT, "name": "webhook-server", "protocol": "TCP"},
            {"containerPort": 8095, "name": "metrics", "protocol": "TCP"},
            {"containerPort": 9440, "name": "healthz", "protocol": "TCP"},
        ],
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": "healthz"}, "initialDelaySeconds": 15},
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": "healthz"}, "initialDelaySeconds": 5},
        # Upstream's figures.
        "resources": {"requests": {"cpu": "100m", "memory": "20Mi"}, "limits": {"cpu": "100m", "memory": "30Mi"}},
        "securityContext": restricted(),
        "volumeMounts": [{"name": "cert", "mountPath": "/certs", "readOnly": True}],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta("azure-wi-webhook-controller-manager", NS, app=APP),
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": SELECTOR},
            "template": {
                "metadata": {"labels": {**SELECTOR, "app.kubernetes.io/name": APP}},
                "spec": {
                    "serviceAccountName": SA,
                    "priorityClassName": "system-cluster-critical",
                    "affinity": system_nodes(spec),
                    "securityContext": pod_security(),
                    "containers": [container],
                    "volumes": [{"name": "cert", "secret": {"secretName": SECRET, "defaultMode": 0o444}}],
                },
            },
        },
    }
