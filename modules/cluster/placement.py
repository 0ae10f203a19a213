"""Which DaemonSets land on a node, worked out from the objects themselves (pure).

A node's kubelet must admit every pod the cluster puts there: static pods, and the pods of each
DaemonSet whose node selector, required node affinity and tolerations match the node's labels and
taints. Counting them from the rendered objects (not from a list typed beside them) keeps the
kubelet's maxPods and the NIC's pod IPs in step with what the add-ons really deploy.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from modules.cluster.scripts.preflight_report import node_patch

# Labels every kubelet adds itself (well-known labels).
WELL_KNOWN = {"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
# Taint effects that keep a pod off a node (PreferNoSchedule only steers).
_REPELLING = frozenset({"NoSchedule", "NoExecute"})


@dataclass(frozen=True)
class NodeTaint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True)
class Landing:
    """A DaemonSet whose pods run on the node."""

    namespace: str
    name: str
    host_network: bool

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"


def _expression(expr: Mapping[str, Any], node: Mapping[str, str]) -> bool:
    key, op, values = expr["key"], expr["operator"], [str(v) for v in expr.get("values", [])]
    if op == "In":
        return key in node and node[key] in values
    if op == "NotIn":
        return key not in node or node[key] not in values
    if op == "Exists":
        return key in node
    if op == "DoesNotExist":
        return key not in node
    if op in ("Gt", "Lt"):
        if key not in node or not node[key].lstrip("-").isdigit():
            return False
        return int(node[key]) > int(values[0]) if op == "Gt" else int(node[key]) < int(values[0])
    raise ValueError(f"node selector operator {op!r} is unknown")


def _affinity_matches(pod: Mapping[str, Any], node: Mapping[str, str]) -> bool:
    required = pod.get("affinity", {}).get("nodeAffinity", {}).get("requiredDuringSchedulingIgnoredDuringExecution")
    if not required:
        return True
    # Terms are ORed; the expressions of one term are ANDed.
    return any(
        all(_expression(e, node) for e in term.get("matchExpressions", [])) for term in required["nodeSelectorTerms"]
    )


def _tolerates(tolerations: Sequence[Mapping[str, Any]], taint: NodeTaint) -> bool:
    for tol in tolerations:
        if tol.get("effect") and tol["effect"] != taint.effect:
            continue
        if tol.get("operator", "Equal") == "Exists":
            if not tol.get("key") or tol["key"] == taint.key:
                return True
        elif tol.get("key") == taint.key and str(tol.get("value", "")) == taint.value:
            return True
    return False


def lands_on(pod: Mapping[str, Any], node_labels: Mapping[str, str], taints: Iterable[NodeTaint]) -> bool:
    """Whether a pod spec with this node selector, affinity and tolerations may run on the node."""
    node = {**WELL_KNOWN, **node_labels}
    if any(node.get(k) != str(v) for k, v in pod.get("nodeSelector", {}).items()):
        return False
    if not _affinity_matches(pod, node):
        return False
    tolerations = pod.get("tolerations", [])
    return all(_tolerates(tolerations, t) for t in taints if t.effect in _REPELLING)


def daemonsets_on(
    objs: Iterable[Mapping[str, Any]], node_labels: Mapping[str, str], taints: Iterable[NodeTaint]
) -> tuple[Landing, ...]:
    """Every DaemonSet among ``objs`` whose pods land on a node with these labels and taints."""
    taint_list = list(taints)
    out = []
    for obj in objs:
        if obj.get("kind") != "DaemonSet":
            continue
        pod = obj["spec"]["template"]["spec"]
        if lands_on(pod, node_labels, taint_list):
            meta = obj["metadata"]
            out.append(Landing(meta.get("namespace", "default"), meta["name"], bool(pod.get("hostNetwork"))))
    return tuple(sorted(out, key=lambda d: d.ref))


def released(
    node_labels: Mapping[str, str], taints: Iterable[NodeTaint], preflight_key: str
) -> tuple[dict[str, str], tuple[NodeTaint, ...]]:
    """The labels and taints a node keeps once preflight passes, as the reporter's own patch leaves them.

    A DaemonSet that selects ``preflight=pending`` lands on a joining node but leaves when the label
    goes, so the kubelet of a released node never holds it next to the workloads; counting it in maxPods
    would give the workloads one pod slot more than pod IPs. Applying :func:`node_patch` (a JSON merge
    patch: a null label is removed, ``spec.taints`` is replaced) keeps this in step with what the
    reporter really does.
    """
    before = [{"key": t.key, "value": t.value, "effect": t.effect} for t in taints]
    node = {"metadata": {"labels": dict(node_labels)}, "spec": {"taints": before}}
    patch = node_patch(node, True, preflight_key, "")
    kept = {**node_labels, **patch["metadata"].get("labels", {})}
    labels = {k: v for k, v in kept.items() if v is not None}
    after = patch.get("spec", {}).get("taints", before)
    return labels, tuple(NodeTaint(t["key"], t["value"], t["effect"]) for t in after)
