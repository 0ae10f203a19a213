"""CronJob: send a few idle GPU nodes back to preflight (label + taint), oldest test first.

GPU nodes are those matching NODE_SELECTOR (``<domain>/accelerator=nvidia``); system nodes have
no GPUs to test.

A node is idle when it runs nothing but its node agents (DaemonSet pods, static pods' mirrors) and balloons. A pod that asks for
no GPU counts too: the diagnostic would run beside it, and on a node whose pod slots it fills the
preflight pod (which maxPods leaves out: it goes once the node passes) would find no slot, leaving the
node tainted until NodeStuckInPreflight. After tainting, the node's pods are listed again: if a pod was
bound in between, the node is released at once, so a diagnostic never runs under a job.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Iterable
from typing import Any

if __package__:  # imported as part of the toolkit (tests, type checking)
    from modules.cluster.scripts.kube import Api, Conflict
else:  # run from the ConfigMap mount, next to kube.py
    from kube import Api, Conflict  # type: ignore[import-not-found,no-redef]


MIRROR = "kubernetes.io/config.mirror"
"""The annotation of a static pod's API copy (kube-proxy on every pool node): a node agent too."""


def busy_nodes(pods: Iterable[dict[str, Any]], balloon_class: str = "balloon") -> set[str]:
    """Nodes a pod other than a node agent (a DaemonSet's, or a static pod's mirror) or a balloon is bound to
    and not finished on."""
    busy = set()
    for pod in pods:
        spec = pod.get("spec", {})
        if pod.get("status", {}).get("phase") in ("Succeeded", "Failed") or not spec.get("nodeName"):
            continue
        meta = pod.get("metadata", {})
        owners = meta.get("ownerReferences") or []
        if MIRROR in (meta.get("annotations") or {}):
            continue
        if any(o.get("kind") == "DaemonSet" and o.get("controller") for o in owners):
            continue
        if spec.get("priorityClassName") != balloon_class:
            busy.add(spec["nodeName"])
    return busy


def selected(labels: dict[str, str], selector: str) -> bool:
    """``labels`` match an equality label selector (``k=v,k2`` forms; what NODE_SELECTOR holds)."""
    for term in filter(None, selector.split(",")):
        name, eq, value = term.partition("=")
        if name not in labels or (eq and labels[name] != value):
            return False
    return True


def idle_nodes(
    nodes: Iterable[dict[str, Any]],
    pods: Iterable[dict[str, Any]],
    *,
    selector: str,
    key: str,
    limit: int,
    busy: set[str] | None = None,
) -> list[str]:
    busy = busy_nodes(pods) | (busy or set())
    candidates = []
    for node in nodes:
        meta = node.get("metadata", {})
        labels = meta.get("labels") or {}
        # Only GPU nodes (the selector), not in preflight, not cordoned (by people or remediation).
        if not selected(labels, selector) or key in labels or node.get("spec", {}).get("unschedulable"):
            continue
        if meta["name"] in busy:
            continue
        last = (meta.get("annotations") or {}).get(f"{key}-last-run", "")
        candidates.append((last, meta["name"]))
    return [name for _, name in sorted(candidates)[:limit]]


def retest_patch(node: dict[str, Any], key: str) -> dict[str, Any]:
    taints = [t for t in (node.get("spec", {}).get("taints") or []) if t.get("key") != key]
    taints.append({"key": key, "value": "pending", "effect": "NoSchedule"})
    return {
        "metadata": {"resourceVersion": node["metadata"].get("resourceVersion"), "labels": {key: "pending"}},
        "spec": {"taints": taints},
    }


def release_patch(node: dict[str, Any], key: str) -> dict[str, Any]:
    taints = [t for t in (node.get("spec", {}).get("taints") or []) if t.get("key") != key]
    return {"metadata": {"labels": {key: None}}, "spec": {"taints": taints}}


def _slim(node: dict[str, Any]) -> dict[str, Any]:
    """What the choice and the patch read of a node: a few hundred bytes instead of ~20 KB."""
    meta = node.get("metadata", {})
    return {
        "metadata": {
            "name": meta.get("name"),
            "resourceVersion": meta.get("resourceVersion"),
            "labels": meta.get("labels") or {},
            "annotations": {k: v for k, v in (meta.get("annotations") or {}).items() if k.endswith("-last-run")},
        },
        "spec": {
            "unschedulable": node.get("spec", {}).get("unschedulable"),
            "taints": node.get("spec", {}).get("taints"),
        },
    }


def run(api: Api, *, selector: str, key: str, limit: int) -> list[str]:
    # Page by page, keeping only what is needed: at prod-7500's size the whole lists are ~150 MB of nodes
    # and ~300 MB of pods, far over the job's memory limit.
    nodes = [_slim(n) for page in api.pages("/api/v1/nodes", labelSelector=selector) for n in page]
    busy: set[str] = set()
    for page in api.pages("/api/v1/pods", fieldSelector="status.phase!=Succeeded,status.phase!=Failed"):
        busy |= busy_nodes(page)
    sent = []
    for name in idle_nodes(nodes, [], selector=selector, key=key, limit=limit, busy=busy):
        path = f"/api/v1/nodes/{name}"
        node = next(n for n in nodes if n["metadata"]["name"] == name)
        try:
            tainted = api.patch(path, retest_patch(node, key))
        except Conflict:
            continue  # changed since listed: next run
        on_node = api.get("/api/v1/pods", fieldSelector=f"spec.nodeName={name}")["items"]
        if name in busy_nodes(on_node):
            api.patch(path, release_patch(tainted, key))
            continue
        sent.append(name)
    return sent


def main() -> None:
    limit = int(os.environ["MAX_NODES"])
    sent = run(Api.in_cluster(), selector=os.environ["NODE_SELECTOR"], key=os.environ["PREFLIGHT_KEY"], limit=limit)
    stamp = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    print(f"{stamp} sent to preflight: {', '.join(sent) or 'none (no idle node)'}", flush=True)


if __name__ == "__main__":
    main()
