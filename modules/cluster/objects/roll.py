"""The pool roll: a CronJob that brings GPU nodes to their scale set's latest model, drained first, a few at a
time (the controller and why it is not Azure's rolling upgrade policy: scripts/roll_pool.py).

It acts through the remediation identity (the same scale sets, the same custom role: modules/cluster/scripts/
azure.py ARM_CALLS holds both jobs' calls), from the host network for IMDS as remediation does. Its state is a
ConfigMap it writes itself (``gpu-roll-state``), so no ``pulumi up`` overwrites a roll in progress; it pauses
by suspending its own CronJob, which the manifest leaves unset for the same reason (server-side apply leaves
a field it does not set to the manager that set it).
"""

from __future__ import annotations

import json
from typing import Any

from modules import labels
from modules.cluster.objects.common import (
    HEALTH_NS,
    Obj,
    cluster_role,
    cluster_role_binding,
    gpu_node_selector,
    meta,
    role,
    role_binding,
    service_account,
)
from modules.cluster.objects.common import (
    scripts_configmap as _scripts_configmap,
)
from modules.cluster.objects.gang import POD_GROUP_LABEL
from modules.cluster.objects.remediation import ARM_ENDPOINT, IMDS_ENDPOINT, imds_cronjob
from modules.cluster.spec import AddonsSpec

APP = labels.ROLL
RULE = labels.ROLL
STATE = f"{labels.ROLL}-state"
SCRIPTS = ("kube.py", "azure.py", "roll_pool.py")
KUEUE_POD_SET_LABEL = "kueue.x-k8s.io/podset"
"""Kueue labels every pod of an admitted workload with its pod set (sigs.k8s.io/kueue v0.19.2
pkg/controller/jobframework/reconciler.go, constants.PodSetLabel)."""
WORK_LABELS = (POD_GROUP_LABEL, KUEUE_POD_SET_LABEL)
"""A running pod with one of these is admitted training work: its island keeps most of its nodes."""
MAX_STARTS_PER_RUN = 25
"""Nodes one run takes into the roll: a pool's share of prod-7500 is ~90 nodes, started over a few runs so a
run stays well inside its deadline (each start is a save, a cordon, a pod LIST and evictions)."""
REIMAGE_AFTER_MINUTES = 20
"""An update Azure reports applied with no new Node this long after: the VM was not restarted (its kubelet,
whose Node the roll deleted, never registers again), so it is reimaged. A reimaged ND VM is back in ~10."""
RUN_DEADLINE_S = 240
"""A run evicts without waiting (scripts/roll_pool.py DRAIN_WAIT_S): a few LISTs and writes per node it moves."""


def schedule(every_minutes: int) -> str:
    # every_minutes divides the hour (spec._roll), so the runs are evenly spaced.
    if every_minutes == 60:
        return "0 * * * *"
    return "* * * * *" if every_minutes == 1 else f"*/{every_minutes} * * * *"


def roll_rule(spec: AddonsSpec) -> dict[str, Any]:
    r = spec.roll
    return {
        "namespace": HEALTH_NS,
        "app": APP,
        "cronjob": APP,
        "state_configmap": STATE,
        "node_selector": gpu_node_selector(spec),
        "pool_key": spec.pool_key,
        "island_key": spec.ib_island_key,
        "preflight_key": spec.preflight_key,
        "preflight_failed": "failed",
        "fence_key": spec.fatal_xid_key,
        "annotation": f"{spec.label_domain}/roll-started",
        "work_labels": list(WORK_LABELS),
        "max_unavailable_percent": r.max_unavailable_percent,
        "island_max_unavailable_percent": r.island_max_unavailable_percent,
        "pause_after_failed": r.pause_after_failed,
        "every_minutes": r.every_minutes,
        "reimage_after_minutes": REIMAGE_AFTER_MINUTES,
        "max_starts_per_run": MAX_STARTS_PER_RUN,
        "drain_timeout_minutes": r.drain_timeout_minutes,
        "node_timeout_minutes": r.node_timeout_minutes,
        "azure": {
            "client_id": spec.cloud.remediation_client_id,
            "arm_endpoint": ARM_ENDPOINT,
            "imds_endpoint": IMDS_ENDPOINT,
        },
    }


def rule_configmap(spec: AddonsSpec) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta(RULE, HEALTH_NS, app=APP),
        "data": {"roll.json": json.dumps(roll_rule(spec), indent=2)},
    }


def cronjob(spec: AddonsSpec) -> Obj:
    return imds_cronjob(
        spec,
        APP,
        container="roll",
        script="roll_pool.py",
        schedule=schedule(spec.roll.every_minutes),
        starting_deadline_s=60,
        active_deadline_s=RUN_DEADLINE_S,
    )


def roll(spec: AddonsSpec) -> list[Obj]:
    if not spec.roll.enabled:
        return []
    cluster_rules = [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "patch", "delete"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
        {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
    ]
    ns_rules = [
        {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [RULE], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [STATE], "verbs": ["get", "update"]},
        # create cannot be limited by name (the object does not exist yet); it makes no change to another.
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]},
        {"apiGroups": ["batch"], "resources": ["cronjobs"], "resourceNames": [APP], "verbs": ["patch"]},
    ]
    return [
        rule_configmap(spec),
        _scripts_configmap(f"{APP}-scripts", HEALTH_NS, SCRIPTS, app=APP),
        service_account(APP, HEALTH_NS, app=APP),
        cluster_role(APP, cluster_rules, app=APP),
        cluster_role_binding(APP, APP, APP, HEALTH_NS, app=APP),
        role(APP, HEALTH_NS, ns_rules, app=APP),
        role_binding(APP, HEALTH_NS, APP, APP, app=APP),
        cronjob(spec),
    ]
