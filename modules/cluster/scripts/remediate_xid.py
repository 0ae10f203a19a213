"""CronJob (every minute): fence GPU nodes that node-problem-detector marked with a fatal XID, and
replace their VMs once the grace period is over.

Settings come from the ConfigMap ``gpu-health/gpu-remediation`` (``remediation.json``), the one
place the rule lives. A node whose condition (``GPUFatalXid``) is True is cordoned
(``spec.unschedulable``) and gets the NoExecute taint from the rule, so its pods are evicted
and nothing new lands there.

``replace_after_minutes`` after it was fenced, a node whose condition is still True is replaced:
its scale-set instance (named by ``spec.providerID``) is deleted through Azure Resource Manager,
the scale set's capacity is put back to what it was (Delete Instances lowers it: cluster-autoscaler's
Azure provider decrements the set's size after the same call), and the Node object is deleted. The
scale set then creates a fresh VM, which registers with the preflight taint and is tested before it
takes work. Each step is idempotent and the capacity to restore is written on the node first, so a
run that dies half way is finished by the next one.

Two caps bound the damage of a wrong rule: ``max_fenced_percent`` of the GPU nodes fenced at once
(past it the job fences nobody more and fails, so a person looks) and ``max_replaced_per_run``
VMs deleted per run.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

if __package__:  # imported as part of the toolkit (tests, type checking)
    from modules.cluster.scripts.azure import Arm, AzureError, instance_of
    from modules.cluster.scripts.kube import Api, Conflict, NotFound
else:  # run from the ConfigMap mount, next to kube.py and azure.py
    from azure import Arm, AzureError, instance_of  # type: ignore[import-not-found,no-redef]
    from kube import Api, Conflict, NotFound  # type: ignore[import-not-found,no-redef]

RULE_KEY = "remediation.json"


def load_rule(api: Api, namespace: str, name: str) -> dict[str, Any]:
    config = api.get(f"/api/v1/namespaces/{namespace}/configmaps/{name}")
    rule: dict[str, Any] = json.loads(config["data"][RULE_KEY])
    return rule


def failing(node: dict[str, Any], condition: str) -> str | None:
    """The condition's message when it is True on ``node``, else None."""
    for c in node.get("status", {}).get("conditions") or []:
        if c.get("type") == condition and c.get("status") == "True":
            return str(c.get("message") or c.get("reason") or condition)
    return None


def tainted(node: dict[str, Any], key: str) -> bool:
    return any(t.get("key") == key for t in node.get("spec", {}).get("taints") or [])


def fenced(node: dict[str, Any], key: str) -> bool:
    return tainted(node, key) and bool(node.get("spec", {}).get("unschedulable"))


def fence_patch(node: dict[str, Any], rule: dict[str, Any], now: str, message: str) -> dict[str, Any]:
    """JSON merge patch: cordon, NoExecute taint, and why; resourceVersion makes a race a 409."""
    taint = rule["taint"]
    taints = [t for t in (node.get("spec", {}).get("taints") or []) if t.get("key") != taint["key"]]
    taints.append({"key": taint["key"], "value": taint["value"], "effect": taint["effect"], "timeAdded": now})
    return {
        "metadata": {
            "resourceVersion": node["metadata"].get("resourceVersion"),
            "annotations": {f"{taint['key']}-since": now, f"{taint['key']}-message": message[:512]},
        },
        "spec": {"unschedulable": True, "taints": taints},
    }


def budget(nodes: Iterable[dict[str, Any]], rule: dict[str, Any]) -> int:
    """How many more nodes may be fenced: the cap minus the nodes already tainted."""
    listed = list(nodes)
    return cap_of(len(listed), rule) - sum(1 for n in listed if tainted(n, rule["taint"]["key"]))


def cap_of(gpu_nodes: int, rule: dict[str, Any]) -> int:
    return max(1, gpu_nodes * int(rule["max_fenced_percent"]) // 100)


@dataclass
class Scan:
    """One paginated pass over the GPU nodes: the counts the caps need, and the few nodes that matter in
    full (failing ones). At prod-7500's size the whole list is ~150 MB, far over the job's memory limit."""

    nodes: int = 0
    tainted: int = 0
    failing: list[dict[str, Any]] = field(default_factory=list)


def scan(api: Api, rule: dict[str, Any]) -> Scan:
    key = rule["taint"]["key"]
    out = Scan()
    for page in api.pages("/api/v1/nodes", labelSelector=rule["node_selector"]):
        for node in page:
            out.nodes += 1
            out.tainted += tainted(node, key)
            if failing(node, rule["condition"]) is not None:
                out.failing.append(slim(node, rule))
    return out


def slim(node: dict[str, Any], rule: dict[str, Any]) -> dict[str, Any]:
    """The fields fencing and replacing read: a fleet-wide XID (a driver bug) fails every node at once, and
    whole Nodes (~12 KiB of JSON each, several times that parsed) would not fit the job's limit."""
    key = rule["taint"]["key"]
    meta, spec = node.get("metadata") or {}, node.get("spec") or {}
    return {
        "metadata": {
            "name": meta.get("name"),
            "resourceVersion": meta.get("resourceVersion"),
            "labels": dict(meta.get("labels") or {}),
            "annotations": {k: v for k, v in (meta.get("annotations") or {}).items() if k.startswith(key)},
        },
        "spec": {k: spec[k] for k in ("taints", "unschedulable", "providerID") if k in spec},
        "status": {
            "conditions": [
                c for c in node.get("status", {}).get("conditions") or [] if c.get("type") == rule["condition"]
            ]
        },
    }


def run(api: Api, rule: dict[str, Any], *, attempts: int = 5, found: Scan | None = None) -> tuple[list[str], list[str]]:
    """Fence every failing node within the cap; returns (fenced now, held back by the cap). ``found``: this
    run's scan, when the caller has one (one pass over the fleet per run, not one per step)."""
    key = rule["taint"]["key"]
    found = found or scan(api, rule)
    todo = [n for n in found.failing if not fenced(n, key)]
    # Finishing a half-fenced node (tainted, uncordoned) spends nothing: it is already counted.
    room = cap_of(found.nodes, rule) - found.tainted
    done, held = [], []
    for node in sorted(todo, key=lambda n: (not tainted(n, key), n["metadata"]["name"])):
        name = node["metadata"]["name"]
        if not tainted(node, key):
            if room <= 0:
                held.append(name)
                continue
            room -= 1
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        for _ in range(attempts):
            message = failing(node, rule["condition"])
            if message is None:
                break  # cleared meanwhile (node rebooted clean): nothing to do
            try:
                api.patch(f"/api/v1/nodes/{name}", fence_patch(node, rule, now, message))
                done.append(name)
                break
            except Conflict:
                node = api.get(f"/api/v1/nodes/{name}")
    return done, held


def _stamp(when: datetime.datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def _since(node: dict[str, Any], key: str) -> datetime.datetime | None:
    raw = (node["metadata"].get("annotations") or {}).get(f"{key}-since")
    try:
        return datetime.datetime.strptime(raw or "", "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)
    except ValueError:
        return None


def due(node: dict[str, Any], rule: dict[str, Any], now: datetime.datetime) -> bool:
    """Fenced for ``replace_after_minutes`` and the fatal XID still reported."""
    key = rule["taint"]["key"]
    since = _since(node, key)
    if not fenced(node, key) or failing(node, rule["condition"]) is None or since is None:
        return False
    return now - since >= datetime.timedelta(minutes=int(rule["replace_after_minutes"]))


@dataclass
class Replaced:
    replaced: list[str] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)
    """Azure is still deleting the VM or restoring capacity: the next run finishes them."""
    held: list[str] = field(default_factory=list)
    """Due, but over this run's ``max_replaced_per_run``: the next run takes them."""
    failed: list[str] = field(default_factory=list)
    """``<node>: <why>`` for nodes that could not be replaced (no Azure providerID, an ARM error)."""


def replace_vm(api: Api, arm: Arm, node: dict[str, Any], key: str) -> bool:
    """Delete the node's scale-set instance, restore the set's capacity, delete the Node object.

    True when all three are done; False when Azure is still deleting the VM (the next run goes on).
    """
    name = node["metadata"]["name"]
    vm = instance_of(node.get("spec", {}).get("providerID", ""))
    if vm is None:
        raise AzureError(
            f"providerID {node.get('spec', {}).get('providerID')!r} names no scale-set VM "
            "(cloud-node-manager sets it): replace the VM by hand"
        )
    scale_set = arm.scale_set(vm)
    annotations = node["metadata"].get("annotations") or {}
    target = annotations.get(f"{key}-capacity")
    if target is None:  # first attempt: remember the capacity to restore before anything changes
        target = str(scale_set["sku"]["capacity"])
        api.patch(
            f"/api/v1/nodes/{name}",
            {
                "metadata": {
                    "resourceVersion": node["metadata"].get("resourceVersion"),
                    "annotations": {f"{key}-capacity": target, f"{key}-replacing": _stamp(_now())},
                }
            },
        )
    state = arm.instance_state(vm)
    if state == "Deleting":
        return False
    if state is not None and not arm.delete_instance(vm):
        return False
    scale_set = arm.scale_set(vm)
    if int(scale_set["sku"]["capacity"]) < int(target) and not arm.set_capacity(vm, scale_set["sku"], int(target)):
        return False
    # NotFound: cloud-controller-manager's node lifecycle controller got there first.
    with contextlib.suppress(NotFound):
        api.delete(f"/api/v1/nodes/{name}")
    return True


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def replace(
    api: Api,
    arm: Arm,
    rule: dict[str, Any],
    now: datetime.datetime | None = None,
    nodes: list[dict[str, Any]] | None = None,
) -> Replaced:
    """Replace the VMs of nodes fenced longer than the grace period, at most ``max_replaced_per_run``.
    ``nodes``: the failing nodes of this run's scan (a node fenced by this run is not due yet either way)."""
    now = now or _now()
    key = rule["taint"]["key"]
    # Only failing nodes can be due (due() needs the condition): the scan keeps exactly those.
    nodes = scan(api, rule).failing if nodes is None else nodes
    # A replacement a previous run started (capacity written) is finished first.
    todo = sorted(
        (n for n in nodes if due(n, rule, now)),
        key=lambda n: (f"{key}-capacity" not in (n["metadata"].get("annotations") or {}), n["metadata"]["name"]),
    )
    out = Replaced()
    room = int(rule["max_replaced_per_run"])
    for node in todo:
        name = node["metadata"]["name"]
        if room <= 0:
            out.held.append(name)
            continue
        room -= 1
        try:
            (out.replaced if replace_vm(api, arm, node, key) else out.pending).append(name)
        except Conflict:
            out.failed.append(f"{name}: changed while being replaced (next run retries)")
        except AzureError as err:
            out.failed.append(f"{name}: {err}")
    return out


def main() -> None:
    api = Api.in_cluster()
    rule = load_rule(api, os.environ["RULE_NAMESPACE"], os.environ["RULE_NAME"])
    found = scan(api, rule)
    done, held = run(api, rule, found=found)
    stamp = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    print(f"{stamp} fenced (cordon + {rule['taint']['key']}:NoExecute): {', '.join(done) or 'none'}", flush=True)
    azure = rule["azure"]
    arm = Arm(client_id=azure["client_id"], arm_endpoint=azure["arm_endpoint"], imds_endpoint=azure["imds_endpoint"])
    result = replace(api, arm, rule, nodes=found.failing)
    print(f"{stamp} replaced (scale-set instance deleted): {', '.join(result.replaced) or 'none'}", flush=True)
    problems = []
    if held:
        problems.append(
            f"not fenced, over the cap of {rule['max_fenced_percent']}% of GPU nodes: {', '.join(held)}: "
            "check the rule and the nodes, then fence by hand or raise max_fenced_percent"
        )
    for what, names in (("still in progress", result.pending), ("over max_replaced_per_run", result.held)):
        if names:
            print(f"next run continues ({what}): {', '.join(names)}", flush=True)
    if result.failed:
        problems.append(f"not replaced: {'; '.join(result.failed)}")
    if problems:
        raise SystemExit(" | ".join(problems))


if __name__ == "__main__":
    main()
