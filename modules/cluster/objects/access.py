"""RBAC the node bootstrap relies on: kubelets join with bootstrap tokens, Prometheus reads.

Kubelets authenticate as bootstrappers only to file a client CSR, which the controller-manager's
auto-approver signs when these bindings exist; renewals come from ``system:nodes``. The pools'
bootstrap tokens carry the extra group ``NODES_GROUP`` (modules/bootstrap/host/bootstrap_tokens.py),
which is what may file node CSRs. The API server hosts' token issuer may create Secrets in
``kube-system`` and nothing else: a Role cannot narrow ``create`` by name (RBAC ``resourceNames``
do not apply to create), so it could create any Secret there, but it can read none (no get, list or
watch), and its certificate lives on the API server hosts, which hold the cluster CA key anyway.
Prometheus's client certificate carries the group ``<label_domain>:monitoring``; the kubelets authorize
it (webhook mode) with the same RBAC, so ``nodes/metrics`` is what lets it scrape them.
"""

from __future__ import annotations

from modules.bootstrap.host.bootstrap_tokens import ISSUER_USER, MANAGED_BY, NAMESPACE, NODES_GROUP
from modules.cluster.objects.common import Obj, meta
from modules.cluster.spec import AddonsSpec

APP = "node-access"
CSR = "system:certificates.k8s.io:certificatesigningrequests"


def _binding(name: str, role: str, *groups: str) -> Obj:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": meta(name, app=APP),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": g} for g in groups],
    }


def token_issuer() -> list[Obj]:
    """The Role and RoleBinding of the API server hosts' bootstrap token issuer (``ISSUER_USER``)."""
    role: Obj = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": meta(MANAGED_BY, NAMESPACE, app=APP),
        "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]}],
    }
    binding: Obj = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": meta(MANAGED_BY, NAMESPACE, app=APP),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": MANAGED_BY},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": ISSUER_USER}],
    }
    return [role, binding]


def access(spec: AddonsSpec) -> list[Obj]:
    monitoring = f"{spec.label_domain}:monitoring"
    reader: Obj = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": meta("agk-prometheus", app=APP),
        "rules": [
            {
                "apiGroups": [""],
                # nodes/metrics: Prometheus scrapes each kubelet directly (not through the API server's node
                # proxy); the kubelet asks the API server (SubjectAccessReview) for get on nodes/metrics for
                # /metrics, /metrics/cadvisor and /metrics/resource (kubernetes.io, Kubelet
                # authentication/authorization). No nodes/proxy: that one reaches exec, attach and logs.
                "resources": ["nodes", "nodes/metrics", "pods", "endpoints", "services"],
                "verbs": ["get", "list", "watch"],
            },
            {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["get", "list", "watch"]},
            {"nonResourceURLs": ["/metrics"], "verbs": ["get"]},
        ],
    }
    # Only the pools' tokens (NODES_GROUP) may file node CSRs and have them approved: not the bare
    # system:bootstrappers, which every bootstrap token is in (`kubeadm token create` too) and which the
    # retired year-long pool certificates (O=system:bootstrappers) still name until they expire.
    return [
        _binding("agk-bootstrappers-node-bootstrapper", "system:node-bootstrapper", NODES_GROUP),
        _binding("agk-bootstrappers-auto-approve", f"{CSR}:nodeclient", NODES_GROUP),
        _binding("agk-nodes-auto-renew", f"{CSR}:selfnodeclient", "system:nodes"),
        reader,
        _binding("agk-prometheus", "agk-prometheus", monitoring),
        *token_issuer(),
    ]
