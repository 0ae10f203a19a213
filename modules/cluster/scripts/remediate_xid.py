"""CronJob (every minute): fence GPU nodes that node-problem-detector marked with a fatal XID.

Settings come from the ConfigMap ``gpu-health/gpu-remediation`` (``remediation.json``), the one
place the rule lives. A node whose condition (``GPUFatalXid``) is True is cordoned
(``spec.unschedulable``) and gets the NoExecute taint from the rule, so its pods are evicted
and nothing new lands there. Replacing the VM stays manual: an operator reimages or deletes
the scale set instance, and the new node registers clean.

A cap (``max_fenced_percent`` of the GPU nodes, counting nodes fenced earlier) bounds the damage
of a wrong rule: past it the job fences nobody more and fails, so a person looks.
"""

from __future__ import annotations

import datetime
import json
import os
from collections.abc import Iterable
from typing import Any

if __package__:  # imported as part of the toolkit (tests, type checking)
    from modules.cluster.scripts.kube import Api, Conflict
else:  # run from the ConfigMap mount, next to kube.py
    from kube import Api, Conflict  # type: ignore[import-not-found,no-redef]

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
    cap = max(1, len(listed) * int(rule["max_fenced_percent"]) // 100)
    return cap - sum(1 for n in listed if tainted(n, rule["taint"]["key"]))


def run(api: Api, rule: dict[str, Any], *, attempts: int = 5) -> tuple[list[str], list[str]]:
    """Fence every failing node within the cap; returns (fenced now, held back by the cap)."""
    key = rule["taint"]["key"]
    nodes = api.get("/api/v1/nodes", labelSelector=rule["node_selector"])["items"]
    todo = [n for n in nodes if failing(n, rule["condition"]) and not fenced(n, key)]
    # Finishing a half-fenced node (tainted, uncordoned) spends nothing: it is already counted.
    room = budget(nodes, rule)
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


def main() -> None:
    api = Api.in_cluster()
    rule = load_rule(api, os.environ["RULE_NAMESPACE"], os.environ["RULE_NAME"])
    done, held = run(api, rule)
    stamp = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    print(f"{stamp} fenced (cordon + {rule['taint']['key']}:NoExecute): {', '.join(done) or 'none'}", flush=True)
    if done:
        print(f"replace these VMs by hand: {rule['replace']}", flush=True)
    if held:
        raise SystemExit(
            f"not fenced, over the cap of {rule['max_fenced_percent']}% of GPU nodes: {', '.join(held)}: "
            "check the rule and the nodes, then fence by hand or raise max_fenced_percent"
        )


if __name__ == "__main__":
    main()
