"""XID remediation: the rule as config, and the controller that acts on it.

node-problem-detector sets the node condition ``GPUFatalXid`` when the kernel log shows an XID
from the fatal list. Every minute a CronJob (``scripts/remediate_xid.py``) reads the rule from
the ConfigMap ``gpu-remediation``, cordons each GPU node whose condition is True and taints it
``<domain>/gpu-fatal-xid=true:NoExecute`` so its pods are evicted. ``replace_after_minutes``
later it deletes the node's scale-set instance through Azure Resource Manager (a managed identity's
token from IMDS), restores the set's capacity and deletes the Node: a fresh VM boots and goes through
preflight. Two caps keep a wrong rule from recycling the fleet: at most ``MAX_FENCED_PERCENT`` of
the GPU nodes fenced, at most ``MAX_REPLACED_PER_RUN`` VMs deleted per run (one run a minute).
"""

from __future__ import annotations

import json
from typing import Any

from modules.address_plan.addressing import IMDS
from modules.cluster import images
from modules.cluster.objects.common import (
    HEALTH_NS,
    Obj,
    cluster_role,
    cluster_role_binding,
    exception_key,
    gpu_node_selector,
    meta,
    pod_security,
    restricted,
    role,
    role_binding,
    service_account,
    sized,
    system_nodes,
)
from modules.cluster.objects.common import (
    scripts_configmap as _scripts_configmap,
)
from modules.cluster.objects.health import IMDS_WHY, host_network
from modules.cluster.spec import AddonsSpec
from modules.labels import XID_CONDITION
from modules.vm_sizing.formulas import PAGED_CONTROLLER

APP = "gpu-remediation"
RULE = "gpu-remediation"
# At most this share of the GPU nodes is ever fenced automatically (a wrong rule's blast radius).
MAX_FENCED_PERCENT = 10
# At most this many VMs deleted per run (a run a minute): a wrong rule replaces one VM a minute at
# worst, and only among the fenced ones (themselves capped above).
MAX_REPLACED_PER_RUN = 1
SCRIPTS = ("kube.py", "azure.py", "remediate_xid.py")
REPLACE = (
    "automatic after replace_after_minutes: the scale-set instance named by the node's providerID is deleted "
    "(Delete Instances), the scale set's capacity restored and the Node deleted; the new VM registers with the "
    "preflight taint and is tested before it takes work"
)
ARM_ENDPOINT = "https://management.azure.com"
IMDS_ENDPOINT = f"http://{IMDS}"
IMDS_ADDRESS = f"{IMDS}/32"


def remediation_rule(spec: AddonsSpec) -> dict[str, Any]:
    """What fails a GPU node and what happens then; read by the controller (and alerts, people)."""
    return {
        "condition": XID_CONDITION,
        "metric": "DCGM_FI_DEV_XID_ERRORS",
        "fatal_xids": list(spec.health.fatal_xids),
        "node_selector": gpu_node_selector(spec),
        "actions": ["cordon", "evict", "replace"],
        "taint": {"key": spec.fatal_xid_key, "value": "true", "effect": "NoExecute"},
        "max_fenced_percent": MAX_FENCED_PERCENT,
        "replace": REPLACE,
        "replace_after_minutes": spec.health.replace_after_minutes,
        "max_replaced_per_run": MAX_REPLACED_PER_RUN,
        # The identity (attached to the system pool's scale sets) whose token IMDS hands out; its role
        # on the GPU scale sets: .../virtualMachineScaleSets/read, .../virtualMachines/read, .../delete/action,
        # .../write (capacity back after the delete).
        "azure": {
            "client_id": spec.cloud.remediation_client_id,
            "arm_endpoint": ARM_ENDPOINT,
            "imds_endpoint": IMDS_ENDPOINT,
        },
        "source": "Azure azurehpc-health-checks XID list",
    }


def rule_configmap(spec: AddonsSpec) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta(RULE, HEALTH_NS, app=APP),
        # JSON (valid YAML too): the controller is stdlib-only Python.
        "data": {"remediation.json": json.dumps(remediation_rule(spec), indent=2)},
    }


def scripts_configmap() -> Obj:
    return _scripts_configmap(f"{APP}-scripts", HEALTH_NS, SCRIPTS, app=APP)


def imds_cronjob(
    spec: AddonsSpec,
    app: str,
    *,
    container: str,
    script: str,
    schedule: str,
    starting_deadline_s: int,
    active_deadline_s: int,
) -> Obj:
    """A fleet job that acts in Azure with the remediation identity (remediation, the pool roll): on a system
    node's host network for IMDS, restricted otherwise, its rule read from the ConfigMap named ``app``."""
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": meta(app, HEALTH_NS, app=app, annotations={exception_key(spec): IMDS_WHY}),
        "spec": {
            "schedule": schedule,
            "concurrencyPolicy": "Forbid",
            "startingDeadlineSeconds": starting_deadline_s,
            "successfulJobsHistoryLimit": 1,
            "failedJobsHistoryLimit": 3,
            "jobTemplate": {
                "spec": {
                    "backoffLimit": 0,
                    "activeDeadlineSeconds": active_deadline_s,
                    "ttlSecondsAfterFinished": 3600,
                    "template": {
                        "metadata": {
                            "labels": {"app.kubernetes.io/name": app},
                            "annotations": {exception_key(spec): IMDS_WHY},
                        },
                        "spec": host_network(
                            {
                                "serviceAccountName": app,
                                "restartPolicy": "Never",
                                "priorityClassName": "system-cluster-critical",
                                "affinity": system_nodes(spec),
                                "securityContext": pod_security(),
                                "containers": [
                                    {
                                        "name": container,
                                        "image": images.PYTHON,
                                        "command": ["python3", f"/scripts/{script}"],
                                        "env": [
                                            {"name": "RULE_NAMESPACE", "value": HEALTH_NS},
                                            {"name": "RULE_NAME", "value": app},
                                            {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"},
                                        ],
                                        # Paged LISTs: memory does not follow the node count (formulas).
                                        "resources": sized(PAGED_CONTROLLER),
                                        "securityContext": restricted(),
                                        "volumeMounts": [
                                            {"name": "scripts", "mountPath": "/scripts", "readOnly": True}
                                        ],
                                    }
                                ],
                                "volumes": [{"name": "scripts", "configMap": {"name": f"{app}-scripts"}}],
                            }
                        ),
                    },
                }
            },
        },
    }


def cronjob(spec: AddonsSpec) -> Obj:
    # A run that could not start within the minute is superseded by the next one.
    return imds_cronjob(
        spec,
        APP,
        container="remediate",
        script="remediate_xid.py",
        schedule="* * * * *",
        starting_deadline_s=50,
        active_deadline_s=120,
    )


def remediation(spec: AddonsSpec) -> list[Obj]:
    objs = [rule_configmap(spec)]
    if not spec.health.node_problem_detector:
        return objs  # nothing raises the condition the controller acts on
    nodes = [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "patch", "delete"]}]
    read_rule = [{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [RULE], "verbs": ["get"]}]
    return [
        *objs,
        scripts_configmap(),
        service_account(APP, HEALTH_NS, app=APP),
        cluster_role(APP, nodes, app=APP),
        cluster_role_binding(APP, APP, APP, HEALTH_NS, app=APP),
        role(APP, HEALTH_NS, read_rule, app=APP),
        role_binding(APP, HEALTH_NS, APP, APP, app=APP),
        cronjob(spec),
    ]
