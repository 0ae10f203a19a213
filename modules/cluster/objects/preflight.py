"""Preflight: a new node checks its InfiniBand ports and runs NVIDIA DCGM diagnostics before it takes any work.

GPU nodes register (node bootstrap) with the labels ``<domain>/accelerator=nvidia`` and
``<domain>/preflight=pending`` and the taint ``<domain>/preflight=pending:NoSchedule``. The
DaemonSet selects both labels and tolerates that taint, so it lands on exactly the untested GPU
nodes (never a CPU system node, where DCGM has nothing to test) and nothing else does. Its first init
container checks the node's InfiniBand ports against its size (scripts/ib_check.py); the second runs
``dcgmi diag --host localhost:5555 -r <level>``: the host's DCGM engine (nvidia-dcgm.service) runs the
tests, so the pod needs no GPU, no privilege and no engine of its own (dcgmi diag's ``--host``:
"Connect to the specified host engine", DCGM docs, dcgmi diag). The reporter then removes taint and
label (pass) or sets the label to ``failed`` (fail, taint kept). Either way the label no longer
matches and the pod goes away.
The CronJob re-labels a few idle nodes so that nodes are re-tested between jobs.
"""

from __future__ import annotations

import json

from modules.cluster import images
from modules.cluster.objects.common import (
    HEALTH_NS,
    Obj,
    cluster_role,
    cluster_role_binding,
    exception_key,
    gpu_node_selector,
    gpu_nodes,
    meta,
    pod_security,
    resources,
    restricted,
    service_account,
    sized,
    system_nodes,
)
from modules.cluster.objects.common import (
    scripts_configmap as _scripts_configmap,
)
from modules.cluster.objects.health import HOST_ENGINE, HOST_NETWORK_WHY, host_network
from modules.cluster.spec import AddonsSpec
from modules.vm_sizing.formulas import PAGED_CONTROLLER
from modules.vm_sizing.skus import sku

APP = "gpu-preflight"
RETEST = "gpu-preflight-retest"
SCRIPTS = ("kube.py", "preflight_report.py", "retest_idle.py", "ib_check.py")
DIAG_RESULT, IB_RESULT = "/results/status", "/results/infiniband"
DIAG_WHY = (
    "both containers are restricted (non-root, no capabilities); the pod is on the host network because the "
    "diagnostics run in the host's DCGM engine, which listens on localhost:5555 only"
)


def diag_script(spec: AddonsSpec) -> str:
    # Always exit 0 and record the verdict: a failing init container would be restarted forever. The diagnostic
    # runs in the host engine, so its own timeout (-t, seconds) stops it there; killing dcgmi alone would not.
    # The outer timeout only ends a client that stopped answering.
    timeout = spec.preflight.timeout_minutes * 60
    return (
        f"if timeout {timeout + 60} dcgmi diag --host {HOST_ENGINE} -r {spec.preflight.level} -t {timeout} "
        "> /results/diag.log 2>&1; "
        f"then echo pass > {DIAG_RESULT}; else echo fail > {DIAG_RESULT}; fi\n"
        "cat /results/diag.log\n"
    )


def ib_expectations(spec: AddonsSpec) -> dict[str, list[int]]:
    """Pool -> [InfiniBand ports, Gb/s each], for the pools whose VM size has InfiniBand (the SKU table)."""
    out = {}
    for pool in spec.pools:
        size = sku(pool.vm_size)
        if size.infiniband:
            out[pool.name] = [size.ib_links, size.ib_gbps]
    return out


def scripts_configmap() -> Obj:
    return _scripts_configmap("gpu-preflight-scripts", HEALTH_NS, SCRIPTS, app=APP)


def tolerations(spec: AddonsSpec) -> list[Obj]:
    return [
        {"key": spec.preflight_key, "operator": "Exists", "effect": "NoSchedule"},
        {"key": spec.team_key, "operator": "Exists", "effect": "NoSchedule"},
    ]


def daemonset(spec: AddonsSpec) -> Obj:
    why = f"{DIAG_WHY}; {HOST_NETWORK_WHY}"
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": meta(APP, HEALTH_NS, app=APP, annotations={exception_key(spec): why}),
        "spec": {
            "selector": {"matchLabels": {"app.kubernetes.io/name": APP}},
            "template": {
                "metadata": {
                    "labels": {"app.kubernetes.io/name": APP},
                    "annotations": {exception_key(spec): why},
                },
                "spec": host_network(
                    {
                        "serviceAccountName": APP,
                        "priorityClassName": "system-node-critical",
                        "nodeSelector": {spec.preflight_key: "pending", **gpu_nodes(spec)},
                        "tolerations": tolerations(spec),
                        "initContainers": [
                            {
                                # First: seconds, where the diagnostics take minutes; its verdict waits for the
                                # reporter, so a bad port does not hide a bad GPU from the log.
                                "name": "ib-check",
                                "image": images.PYTHON,
                                "command": ["python3", "/scripts/ib_check.py"],
                                "env": [
                                    {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                                    {"name": "POOL_KEY", "value": spec.pool_key},
                                    {"name": "EXPECT", "value": json.dumps(ib_expectations(spec), sort_keys=True)},
                                    {"name": "RESULT_FILE", "value": IB_RESULT},
                                    {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"},
                                ],
                                "resources": resources("10m", "64Mi", cpu_limit="100m"),
                                "securityContext": {**restricted(), "runAsUser": 65532, "runAsGroup": 65532},
                                "volumeMounts": [
                                    {"name": "results", "mountPath": "/results"},
                                    {"name": "scripts", "mountPath": "/scripts", "readOnly": True},
                                ],
                            },
                            {
                                "name": "dcgm-diag",
                                "image": images.DCGM_CLIENT,
                                "command": ["/bin/bash", "-c", diag_script(spec)],
                                # dcgmi is only the client: the GPUs are tested by the host's engine.
                                "env": [{"name": "HOME", "value": "/tmp"}],
                                "resources": resources("100m", "256Mi", cpu_limit="1"),
                                "securityContext": {**restricted(), "runAsUser": 65532, "runAsGroup": 65532},
                                "volumeMounts": [
                                    {"name": "results", "mountPath": "/results"},
                                    {"name": "tmp", "mountPath": "/tmp"},
                                ],
                            },
                        ],
                        "containers": [
                            {
                                "name": "report",
                                "image": images.PYTHON,
                                "command": ["python3", "/scripts/preflight_report.py"],
                                "env": [
                                    {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                                    {"name": "PREFLIGHT_KEY", "value": spec.preflight_key},
                                    {"name": "RESULT_FILES", "value": f"{IB_RESULT},{DIAG_RESULT}"},
                                    {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"},
                                ],
                                "resources": resources("10m", "64Mi", cpu_limit="100m"),
                                "securityContext": {**restricted(), "runAsUser": 65532, "runAsGroup": 65532},
                                "volumeMounts": [
                                    {"name": "results", "mountPath": "/results", "readOnly": True},
                                    {"name": "scripts", "mountPath": "/scripts", "readOnly": True},
                                ],
                            }
                        ],
                        "volumes": [
                            {"name": "results", "emptyDir": {"sizeLimit": "16Mi"}},
                            {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}},
                            {"name": "scripts", "configMap": {"name": "gpu-preflight-scripts"}},
                        ],
                    }
                ),
            },
        },
    }


def cronjob(spec: AddonsSpec) -> Obj:
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": meta(RETEST, HEALTH_NS, app=RETEST),
        "spec": {
            "schedule": spec.preflight.retest_schedule,
            "concurrencyPolicy": "Forbid",
            "successfulJobsHistoryLimit": 3,
            "failedJobsHistoryLimit": 3,
            "jobTemplate": {
                "spec": {
                    "backoffLimit": 1,
                    "activeDeadlineSeconds": 600,
                    "template": {
                        "metadata": {"labels": {"app.kubernetes.io/name": RETEST}},
                        "spec": {
                            "serviceAccountName": RETEST,
                            "restartPolicy": "Never",
                            "affinity": system_nodes(spec),
                            "securityContext": pod_security(),
                            "containers": [
                                {
                                    "name": "retest",
                                    "image": images.PYTHON,
                                    "command": ["python3", "/scripts/retest_idle.py"],
                                    "env": [
                                        {"name": "NODE_SELECTOR", "value": gpu_node_selector(spec)},
                                        {"name": "PREFLIGHT_KEY", "value": spec.preflight_key},
                                        {"name": "MAX_NODES", "value": str(spec.preflight.retest_max_nodes)},
                                        {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"},
                                    ],
                                    # Paged LISTs: memory does not follow the node count (formulas).
                                    "resources": sized(PAGED_CONTROLLER),
                                    "securityContext": restricted(),
                                    "volumeMounts": [{"name": "scripts", "mountPath": "/scripts", "readOnly": True}],
                                }
                            ],
                            "volumes": [{"name": "scripts", "configMap": {"name": "gpu-preflight-scripts"}}],
                        },
                    },
                }
            },
        },
    }


def preflight(spec: AddonsSpec) -> list[Obj]:
    if not spec.preflight.enabled:
        return []
    node_rw = [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}]
    retest_rules = [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "patch"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
    ]
    return [
        scripts_configmap(),
        service_account(APP, HEALTH_NS, app=APP),
        cluster_role(APP, node_rw, app=APP),
        cluster_role_binding(APP, APP, APP, HEALTH_NS, app=APP),
        daemonset(spec),
        service_account(RETEST, HEALTH_NS, app=RETEST),
        cluster_role(RETEST, retest_rules, app=RETEST),
        cluster_role_binding(RETEST, RETEST, RETEST, HEALTH_NS, app=RETEST),
        cronjob(spec),
    ]
