"""Shared pieces of every object: metadata, labels and the container security baseline."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from modules import labels as labels_
from modules.cluster.spec import AddonsSpec
from modules.tags import JUSTIFICATION
from modules.vm_sizing.formulas import Resources

Obj = dict[str, Any]

HEALTH_NS = labels_.HEALTH_NAMESPACE
BALLOON_NS = "balloons"
GANG_NS = "scheduler-plugins"
SCRIPT_DIR = Path(__file__).resolve().parent.parent / "scripts"
"""The stdlib-only programs the in-cluster controllers run from a ConfigMap on the python3 image."""


def exception_key(spec: AddonsSpec) -> str:
    """Annotation carrying why an object's pods need more than the restricted baseline.

    One fixed key for every cluster (not the label domain), so the policy pack finds it.
    """
    return JUSTIFICATION


def labels(app: str, component: str | None = None) -> dict[str, str]:
    out = {
        "app.kubernetes.io/name": app,
        "app.kubernetes.io/part-of": "azure-gpu-k8s",
        "app.kubernetes.io/managed-by": "pulumi",
    }
    if component:
        out["app.kubernetes.io/component"] = component
    return out


def selector(app: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": app}


def meta(
    name: str,
    namespace: str | None = None,
    *,
    app: str,
    component: str | None = None,
    annotations: dict[str, str] | None = None,
    extra_labels: dict[str, str] | None = None,
) -> Obj:
    out: Obj = {"name": name, "labels": {**labels(app, component), **(extra_labels or {})}}
    if namespace is not None:
        out["namespace"] = namespace
    if annotations:
        out["annotations"] = dict(annotations)
    return out


def restricted() -> Obj:
    """The Pod Security 'restricted' container baseline."""
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def pod_security(uid: int = 65532) -> Obj:
    return {
        "runAsNonRoot": True,
        "runAsUser": uid,
        "runAsGroup": uid,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def resources(cpu: str, memory: str, *, cpu_limit: str | None = None, extra: dict[str, str] | None = None) -> Obj:
    """Requests and limits; memory limit = request (no overcommit), CPU limit defaults to 2x."""
    limit_cpu = cpu_limit or _double(cpu)
    return {
        "requests": {"cpu": cpu, "memory": memory, **(extra or {})},
        "limits": {"cpu": limit_cpu, "memory": memory, **(extra or {})},
    }


def sized(size: Resources) -> Obj:
    """Requests and limits from a formula's figures (modules.vm_sizing.formulas). Whole cores are written
    as cores ("2", not "2000m"): the same quantity as the literal the manifests carried before, so an
    unchanged size is an unchanged manifest and rolls nothing."""
    return resources(_cpu(size.cpu_millis), f"{size.memory_mib}Mi", cpu_limit=_cpu(size.cpu_limit_millis))


def _cpu(millis: int) -> str:
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def _double(cpu: str) -> str:
    if cpu.endswith("m"):
        return f"{int(cpu[:-1]) * 2}m"
    return str(int(cpu) * 2)


HONOR_LABELS = "prometheus.io/honor-labels"
"""Set on exporters whose series describe other objects (kube-state-metrics' `node`, dcgm-exporter's
`pod`): Prometheus scrapes them in a job with honor_labels, so the target's own pod and node
labels do not overwrite the subject's."""


def scrape_annotations(port: int, path: str = "/metrics", *, honor_labels: bool = False) -> dict[str, str]:
    """What the Prometheus hosts' kubernetes_sd pod jobs keep (prometheus.io/* convention)."""
    out = {"prometheus.io/scrape": "true", "prometheus.io/port": str(port), "prometheus.io/path": path}
    if honor_labels:
        out[HONOR_LABELS] = "true"
    return out


def pod_security_labels(levels: dict[str, str], minor: int) -> dict[str, str]:
    """Pod Security admission labels: a level per mode (enforce, audit, warn), each pinned to the cluster's
    minor (``<mode>-version``), so a control-plane upgrade does not change what a namespace admits until the
    labels move with it (kubernetes.io/docs/concepts/security/pod-security-admission, "Pod Security Admission
    labels for namespaces")."""
    out: dict[str, str] = {}
    for mode, level in levels.items():
        out[f"pod-security.kubernetes.io/{mode}"] = level
        out[f"pod-security.kubernetes.io/{mode}-version"] = f"v1.{minor}"
    return out


def namespace(
    name: str, *, app: str, pod_security_level: str | None, extra_labels: dict[str, str] | None = None
) -> Obj:
    modes = ("enforce", "audit", "warn") if pod_security_level else ()
    level = {f"pod-security.kubernetes.io/{m}": str(pod_security_level) for m in modes}
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": meta(name, app=app, extra_labels={**level, **(extra_labels or {})}),
    }


def service_account(name: str, ns: str, *, app: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": meta(name, ns, app=app),
        "automountServiceAccountToken": True,
    }


def cluster_role(name: str, rules: list[Obj], *, app: str) -> Obj:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": meta(name, app=app),
        "rules": rules,
    }


def cluster_role_binding(name: str, role: str, sa: str, ns: str, *, app: str) -> Obj:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": meta(name, app=app),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": ns}],
    }


def tolerate_everything() -> list[Obj]:
    """Node agents run on every node, whatever its taints (team, preflight, failed, cordoned)."""
    return [{"operator": "Exists"}]


def role(name: str, ns: str, rules: list[Obj], *, app: str) -> Obj:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": meta(name, ns, app=app),
        "rules": rules,
    }


def role_binding(name: str, ns: str, role_name: str, sa: str, *, app: str) -> Obj:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": meta(name, ns, app=app),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role_name},
        "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": ns}],
    }


def gpu_nodes(spec: AddonsSpec) -> dict[str, str]:
    """nodeSelector of GPU nodes: the bootstrap labels them ``<domain>/accelerator=nvidia``."""
    return {spec.accelerator_key: labels_.ACCELERATOR_NVIDIA}


def gpu_node_selector(spec: AddonsSpec) -> str:
    """The same as a label selector (what the scripts list nodes with)."""
    return f"{spec.accelerator_key}={labels_.ACCELERATOR_NVIDIA}"


def system_nodes(spec: AddonsSpec) -> Obj:
    """Node affinity of cluster services: nodes without the accelerator label (the system pool).

    GPU nodes carry only jobs (and node agents): a service there would take a slice of a node
    bought for its GPUs and go away whenever the node is sent to preflight or replaced.
    """
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": spec.accelerator_key, "operator": "DoesNotExist"}]}]
            }
        }
    }


def scripts_configmap(name: str, ns: str, scripts: tuple[str, ...] | list[str], *, app: str) -> Obj:
    """A ConfigMap of ``scripts`` from ``SCRIPT_DIR``, mounted by the controller that runs them."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta(name, ns, app=app),
        "data": {script: (SCRIPT_DIR / script).read_text() for script in scripts},
    }
