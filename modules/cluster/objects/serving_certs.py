"""The kubelet serving certificate approver (``scripts/approve_serving.py``) as a Deployment.

Pool kubelets run with ``serverTLSBootstrap: true`` (templates/kubelet-config.yaml.j2): each asks for a
serving certificate through a ``kubernetes.io/kubelet-serving`` CSR, which kube-controller-manager signs
with the kubelet serving CA (its csrsigning controller, ``--cluster-signing-kubelet-serving-cert-file``;
modules/bootstrap/pki.py ``KUBELET_SERVING_CA``) but never approves. Prometheus then scrapes every kubelet
directly and verifies it against that CA, instead of going through the API servers' node proxy; the API
servers verify kubelets against it too (``--kubelet-certificate-authority``); nothing else trusts it. The approver approves a node's request for its own name and InternalIP addresses only (the
script's docstring lists the checks, and what they cannot stop).

RBAC is the documented minimum for an approver (kubernetes.io, Certificate Signing Requests,
"Authorization"): read CSRs, update their ``approval`` subresource, ``approve`` on the signer
``kubernetes.io/kubelet-serving`` (and no other signer), and read Nodes (their addresses).
"""

from __future__ import annotations

from modules.cluster import images
from modules.cluster.objects.common import (
    Obj,
    cluster_role,
    cluster_role_binding,
    meta,
    pod_security,
    resources,
    restricted,
    service_account,
    system_nodes,
)
from modules.cluster.objects.common import (
    scripts_configmap as _scripts_configmap,
)
from modules.cluster.spec import AddonsSpec

NS = "kube-system"
APP = "kubelet-serving-approver"
SIGNER = "kubernetes.io/kubelet-serving"
SCRIPTS = ("kube.py", "approve_serving.py")
MEMORY = "64Mi"
"""One CSR and one Node in memory at a time (paged list, then a watch): the interpreter is most of it."""

RULES: list[Obj] = [
    {
        "apiGroups": ["certificates.k8s.io"],
        "resources": ["certificatesigningrequests"],
        "verbs": ["get", "list", "watch"],
    },
    {"apiGroups": ["certificates.k8s.io"], "resources": ["certificatesigningrequests/approval"], "verbs": ["update"]},
    {"apiGroups": ["certificates.k8s.io"], "resources": ["signers"], "resourceNames": [SIGNER], "verbs": ["approve"]},
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
]


def scripts_configmap() -> Obj:
    return _scripts_configmap(f"{APP}-scripts", NS, SCRIPTS, app=APP)


def deployment(spec: AddonsSpec) -> Obj:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta(APP, NS, app=APP),
        "spec": {
            # One replica: two would race to approve the same CSR (the loser gets a 409 and moves on, but
            # gains nothing); a restart re-lists every undecided CSR.
            "replicas": 1,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": {"app.kubernetes.io/name": APP}},
            "template": {
                "metadata": {"labels": {"app.kubernetes.io/name": APP}},
                "spec": {
                    "serviceAccountName": APP,
                    "priorityClassName": "system-cluster-critical",
                    "affinity": system_nodes(spec),
                    "securityContext": pod_security(),
                    "containers": [
                        {
                            "name": "approve",
                            "image": images.PYTHON,
                            "command": ["python3", "/scripts/approve_serving.py"],
                            "env": [{"name": "PYTHONDONTWRITEBYTECODE", "value": "1"}],
                            "resources": resources("10m", MEMORY, cpu_limit="200m"),
                            "securityContext": restricted(),
                            "volumeMounts": [{"name": "scripts", "mountPath": "/scripts", "readOnly": True}],
                        }
                    ],
                    "volumes": [{"name": "scripts", "configMap": {"name": f"{APP}-scripts"}}],
                },
            },
        },
    }


def serving_certs(spec: AddonsSpec) -> list[Obj]:
    return [
        scripts_configmap(),
        service_account(APP, NS, app=APP),
        cluster_role(APP, RULES, app=APP),
        cluster_role_binding(APP, APP, APP, NS, app=APP),
        deployment(spec),
    ]
