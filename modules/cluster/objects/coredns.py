"""Cluster DNS: CoreDNS behind ``kube-system/kube-dns`` at the kubelets' clusterDNS address.

Every kubelet writes ``nameserver <dns_service_ip>`` into its pods' resolv.conf (the address
plan fixes that address); without a Service holding it, no pod resolves anything. The objects
follow upstream CoreDNS (RBAC, Corefile, ``k8s-app: kube-dns`` labels) with two changes: the
replicas run only on system nodes, apart from each other, and as a non-root user.
"""

from __future__ import annotations

from modules.cluster.objects.common import (
    Obj,
    cluster_role,
    exception_key,
    meta,
    pod_security,
    resources,
    restricted,
    scrape_annotations,
    service_account,
    system_nodes,
)
from modules.cluster.spec import AddonsSpec

NS = "kube-system"
APP = "coredns"
NAME = "coredns"
SERVICE = "kube-dns"
# The label DNS tooling (kubectl, dnsutils guides, NetworkPolicies) selects CoreDNS by.
K8S_APP = {"k8s-app": "kube-dns"}
METRICS_PORT, HEALTH_PORT, READY_PORT = 9153, 8080, 8181
BIND_WHY = (
    "NET_BIND_SERVICE only (non-root, read-only root, no privilege escalation): CoreDNS serves port 53, "
    "a privileged port, because the kube-dns Service and every pod's resolv.conf use port 53"
)


def corefile(spec: AddonsSpec) -> str:
    # `forward . /etc/resolv.conf`: the pod uses dnsPolicy Default, i.e. the node's resolvers (Azure DNS).
    return f""".:53 {{
    errors
    health {{
        lameduck 5s
    }}
    ready
    kubernetes {spec.dns.cluster_domain} in-addr.arpa ip6.arpa {{
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }}
    prometheus :{METRICS_PORT}
    forward . /etc/resolv.conf {{
        max_concurrent 1000
    }}
    cache 30
    loop
    reload
    loadbalance
}}
"""


def _spread(spec: AddonsSpec) -> Obj:
    term = {"labelSelector": {"matchLabels": K8S_APP}, "topologyKey": "kubernetes.io/hostname"}
    if spec.dns.spread_required:
        return {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
    # Fewer system nodes than replicas: keep them apart where possible rather than leave one pending.
    return {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": term}]}


def deployment(spec: AddonsSpec) -> Obj:
    why = {exception_key(spec): BIND_WHY}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta(NAME, NS, app=APP, component="dns", annotations=why, extra_labels=K8S_APP),
        "spec": {
            "replicas": spec.dns.replicas,
            "selector": {"matchLabels": K8S_APP},
            # One replica down at a time, no surge: with hard anti-affinity a surge pod may have no node.
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}},
            "template": {
                "metadata": {
                    "labels": {**K8S_APP, "app.kubernetes.io/name": APP},
                    "annotations": {**why, **scrape_annotations(METRICS_PORT)},
                },
                "spec": {
                    "serviceAccountName": NAME,
                    "priorityClassName": "system-cluster-critical",
                    "dnsPolicy": "Default",
                    "affinity": {**system_nodes(spec), "podAntiAffinity": _spread(spec)},
                    "tolerations": [{"key": "CriticalAddonsOnly", "operator": "Exists"}],
                    "securityContext": pod_security(),
                    "containers": [
                        {
                            "name": "coredns",
                            "image": spec.dns.image,
                            "args": ["-conf", "/etc/coredns/Corefile"],
                            "ports": [
                                {"name": "dns", "containerPort": 53, "protocol": "UDP"},
                                {"name": "dns-tcp", "containerPort": 53, "protocol": "TCP"},
                                {"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"},
                            ],
                            "livenessProbe": {
                                "httpGet": {"path": "/health", "port": HEALTH_PORT},
                                "initialDelaySeconds": 60,
                                "timeoutSeconds": 5,
                                "failureThreshold": 5,
                            },
                            "readinessProbe": {"httpGet": {"path": "/ready", "port": READY_PORT}},
                            "resources": resources("100m", "170Mi", cpu_limit="1"),
                            # Exception: BIND_WHY (the image's /coredns carries the file capability).
                            "securityContext": {
                                **restricted(),
                                "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]},
                            },
                            "volumeMounts": [{"name": "config", "mountPath": "/etc/coredns", "readOnly": True}],
                        }
                    ],
                    "volumes": [
                        {
                            "name": "config",
                            "configMap": {"name": NAME, "items": [{"key": "Corefile", "path": "Corefile"}]},
                        }
                    ],
                },
            },
        },
    }


def service(spec: AddonsSpec) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta(
            SERVICE, NS, app=APP, component="dns", extra_labels={**K8S_APP, "kubernetes.io/name": "CoreDNS"}
        ),
        "spec": {
            "selector": K8S_APP,
            "clusterIP": spec.dns.service_ip,
            "ports": [
                {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53},
                {"name": "metrics", "port": METRICS_PORT, "protocol": "TCP", "targetPort": METRICS_PORT},
            ],
        },
    }


def dns(spec: AddonsSpec) -> list[Obj]:
    rules = [
        {"apiGroups": [""], "resources": ["endpoints", "services", "pods", "namespaces"], "verbs": ["list", "watch"]},
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
    ]
    binding: Obj = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": meta("system:coredns", app=APP),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:coredns"},
        "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": NS}],
    }
    return [
        service_account(NAME, NS, app=APP),
        cluster_role("system:coredns", rules, app=APP),
        binding,
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": meta(NAME, NS, app=APP),
            "data": {"Corefile": corefile(spec)},
        },
        deployment(spec),
        service(spec),
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": meta(NAME, NS, app=APP),
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": K8S_APP}},
        },
    ]
