"""RBAC the node bootstrap relies on: kubelets join with bootstrap certificates, Prometheus reads.

Kubelets authenticate as ``system:bootstrappers`` only to file a client CSR, which the
controller-manager's auto-approver signs when these bindings exist; renewals come from
``system:nodes``. Prometheus's client certificate carries the group ``<label_domain>:monitoring``.
"""

from __future__ import annotations

from modules.cluster.objects.common import Obj, meta
from modules.cluster.spec import AddonsSpec

APP = "node-access"
CSR = "system:certificates.k8s.io:certificatesigningrequests"


def _binding(name: str, role: str, group: str) -> Obj:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": meta(name, app=APP),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}],
    }


def access(spec: AddonsSpec) -> list[Obj]:
    monitoring = f"{spec.label_domain}:monitoring"
    reader: Obj = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": meta("agk-prometheus", app=APP),
        "rules": [
            {
                "apiGroups": [""],
                # nodes/proxy: kubelet metrics are scraped through the API server's node proxy.
                "resources": ["nodes", "nodes/metrics", "nodes/proxy", "pods", "endpoints", "services"],
                "verbs": ["get", "list", "watch"],
            },
            {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["get", "list", "watch"]},
            {"nonResourceURLs": ["/metrics"], "verbs": ["get"]},
        ],
    }
    return [
        _binding("agk-bootstrappers-node-bootstrapper", "system:node-bootstrapper", "system:bootstrappers"),
        _binding("agk-bootstrappers-auto-approve", f"{CSR}:nodeclient", "system:bootstrappers"),
        _binding("agk-nodes-auto-renew", f"{CSR}:selfnodeclient", "system:nodes"),
        reader,
        _binding("agk-prometheus", "agk-prometheus", monitoring),
    ]
