"""kube-state-metrics: series about Kubernetes objects (``kube_node_spec_taint``,
``kube_node_status_condition``, ...) that no kubelet or API server metric carries.

The Prometheus hosts' pod job scrapes it through the ``prometheus.io/*`` annotations. It reads
every object of the kinds it reports on, so its role lists exactly those kinds; Secrets and
ConfigMaps are left out (a list of Secrets returns their data, and no alert reads them).
"""

from __future__ import annotations

from modules.cluster.objects.common import (
    Obj,
    cluster_role,
    cluster_role_binding,
    meta,
    pod_security,
    restricted,
    scrape_annotations,
    service_account,
    sized,
    system_nodes,
)
from modules.cluster.spec import AddonsSpec
from modules.vm_sizing.formulas import Resources

NS = "kube-system"
APP = "kube-state-metrics"
METRICS_PORT, TELEMETRY_PORT = 8080, 8081
# API group -> the resources (kube-state-metrics collector names) it lists and watches.
COLLECTED: dict[str, tuple[str, ...]] = {
    "": (
        "endpoints",
        "limitranges",
        "namespaces",
        "nodes",
        "persistentvolumeclaims",
        "persistentvolumes",
        "pods",
        "replicationcontrollers",
        "resourcequotas",
        "services",
    ),
    "admissionregistration.k8s.io": ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"),
    "apps": ("daemonsets", "deployments", "replicasets", "statefulsets"),
    "autoscaling": ("horizontalpodautoscalers",),
    "batch": ("cronjobs", "jobs"),
    "certificates.k8s.io": ("certificatesigningrequests",),
    "coordination.k8s.io": ("leases",),
    "networking.k8s.io": ("ingresses", "networkpolicies"),
    "policy": ("poddisruptionbudgets",),
    "storage.k8s.io": ("storageclasses", "volumeattachments"),
}


def collectors() -> list[str]:
    return sorted(r for group in COLLECTED.values() for r in group)


def node_labels(spec: AddonsSpec) -> list[str]:
    """Node labels exported on kube_node_labels (rules/islands.yml, rules/nodes.yml, the dashboards)."""
    return [spec.ib_island_key, spec.pool_key, spec.team_key, spec.preflight_key]


def deployment(spec: AddonsSpec) -> Obj:
    sm = spec.state_metrics
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta(APP, NS, app=APP, component="exporter"),
        "spec": {
            # One replica: two would double every series; a restart loses no state (it re-lists).
            "replicas": 1,
            "selector": {"matchLabels": {"app.kubernetes.io/name": APP}},
            "template": {
                "metadata": {
                    "labels": {"app.kubernetes.io/name": APP},
                    "annotations": scrape_annotations(METRICS_PORT, honor_labels=True),
                },
                "spec": {
                    "serviceAccountName": APP,
                    "priorityClassName": "system-cluster-critical",
                    "affinity": system_nodes(spec),
                    "securityContext": pod_security(65534),
                    "containers": [
                        {
                            "name": APP,
                            "image": sm.image,
                            "args": [
                                f"--port={METRICS_PORT}",
                                f"--telemetry-port={TELEMETRY_PORT}",
                                f"--resources={','.join(collectors())}",
                                # Lists from the API server's watch cache, not etcd: at thousands of
                                # nodes a restart must not hit etcd with a full read.
                                "--use-apiserver-cache",
                                # kube_node_labels carries only allowlisted labels: the island, pool,
                                # team and preflight state the alerts and dashboards group nodes by.
                                f"--metric-labels-allowlist=nodes=[{','.join(node_labels(spec))}]",
                            ],
                            "ports": [
                                {"name": "http-metrics", "containerPort": METRICS_PORT},
                                {"name": "telemetry", "containerPort": TELEMETRY_PORT},
                            ],
                            "livenessProbe": {
                                "httpGet": {"path": "/healthz", "port": METRICS_PORT},
                                "initialDelaySeconds": 5,
                                "timeoutSeconds": 5,
                            },
                            "readinessProbe": {
                                "httpGet": {"path": "/readyz", "port": TELEMETRY_PORT},
                                "initialDelaySeconds": 5,
                                "timeoutSeconds": 5,
                            },
                            # Scales with the cluster (spec.state_metrics: formulas.kube_state_metrics).
                            "resources": sized(
                                Resources(sm.cpu_millis, sm.cpu_limit_millis or 2 * sm.cpu_millis, sm.memory_mib)
                            ),
                            "securityContext": restricted(),
                        }
                    ],
                },
            },
        },
    }


def state_metrics(spec: AddonsSpec) -> list[Obj]:
    rules = [
        {"apiGroups": [group], "resources": list(res), "verbs": ["list", "watch"]} for group, res in COLLECTED.items()
    ]
    return [
        service_account(APP, NS, app=APP),
        cluster_role(APP, rules, app=APP),
        cluster_role_binding(APP, APP, APP, NS, app=APP),
        deployment(spec),
    ]
