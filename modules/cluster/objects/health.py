"""Passive health: GPU exposure and telemetry on GPU nodes, iptables counters and XID detection on every node.

Node agents here need more than the restricted baseline; each exception is stated next to the
security context and on the object (``azure-gpu-k8s/justification``) so reviewers see why.
"""

from __future__ import annotations

import json
from typing import Any

from modules.cluster import images
from modules.cluster.objects.common import (
    HEALTH_NS,
    Obj,
    cluster_role,
    cluster_role_binding,
    exception_key,
    gpu_nodes,
    meta,
    namespace,
    resources,
    scrape_annotations,
    service_account,
    tolerate_everything,
)
from modules.cluster.spec import AddonsSpec

XID_CONDITION = "GPUFatalXid"
DCGM_PORT, IPTABLES_PORT, NPD_PORT = 9400, 9119, 20257

DEVICE_PLUGIN_WHY = (
    "root (no privilege escalation, no capabilities): the plugin creates its socket in the "
    "root-owned kubelet directory /var/lib/kubelet/device-plugins"
)
DCGM_WHY = (
    "root with SYS_ADMIN only: DCGM profiling metrics (DCP: tensor/SM activity) need SYS_ADMIN, and "
    "the kubelet pod-resources socket that maps GPUs to pods is root-only"
)
IPTABLES_WHY = (
    "root with NET_ADMIN only and host networking: counters of the host's mangle table can only be read "
    "in the host network namespace with NET_ADMIN"
)
NPD_WHY = (
    "privileged: reading the host kernel log (/dev/kmsg) needs the host's character device, which the "
    "device cgroup only lets a privileged container open"
)
HOST_NETWORK_WHY = (
    "host network: a node agent needs no address of its own, and with Azure CNI every other pod takes one of "
    "the node's few NIC IP configurations (pod_ips), which belong to workloads"
)


def _root(*, add: list[str] | None = None) -> Obj:
    return {
        "runAsUser": 0,
        "runAsNonRoot": False,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"], **({"add": add} if add else {})},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def host_network(pod: Obj) -> Obj:
    """A node agent's pod on the host network, resolving cluster names still (ClusterFirstWithHostNet)."""
    return {"hostNetwork": True, "dnsPolicy": "ClusterFirstWithHostNet", **pod}


def _daemonset(spec: AddonsSpec, name: str, why: str, pod: Obj, annotations: dict[str, str] | None = None) -> Obj:
    if pod.get("hostNetwork"):
        why = f"{why}; {HOST_NETWORK_WHY}"
    notes = {exception_key(spec): why}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": meta(name, HEALTH_NS, app=name, annotations=notes),
        "spec": {
            "selector": {"matchLabels": {"app.kubernetes.io/name": name}},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "10%"}},
            "template": {
                "metadata": {
                    "labels": {"app.kubernetes.io/name": name},
                    "annotations": {**notes, **(annotations or {})},
                },
                "spec": {"priorityClassName": "system-node-critical", "tolerations": tolerate_everything(), **pod},
            },
        },
    }


def device_plugin(spec: AddonsSpec) -> Obj:
    return _daemonset(
        spec,
        "nvidia-device-plugin",
        DEVICE_PLUGIN_WHY,
        host_network(
            {
                "nodeSelector": gpu_nodes(spec),
                "containers": [
                    {
                        "name": "nvidia-device-plugin",
                        "image": images.DEVICE_PLUGIN,
                        "env": [{"name": "FAIL_ON_INIT_ERROR", "value": "false"}],
                        "resources": resources("50m", "128Mi", cpu_limit="200m"),
                        "securityContext": _root(),  # exception: DEVICE_PLUGIN_WHY
                        "volumeMounts": [{"name": "device-plugins", "mountPath": "/var/lib/kubelet/device-plugins"}],
                    }
                ],
                "volumes": [
                    {
                        "name": "device-plugins",
                        "hostPath": {"path": "/var/lib/kubelet/device-plugins", "type": "Directory"},
                    }
                ],
            }
        ),
    )


def dcgm_exporter(spec: AddonsSpec) -> Obj:
    probe = {"httpGet": {"path": "/health", "port": DCGM_PORT}}
    return _daemonset(
        spec,
        "dcgm-exporter",
        DCGM_WHY,
        host_network(
            {
                "nodeSelector": gpu_nodes(spec),
                "containers": [
                    {
                        "name": "dcgm-exporter",
                        "image": images.DCGM_EXPORTER,
                        "env": [
                            {"name": "DCGM_EXPORTER_LISTEN", "value": f":{DCGM_PORT}"},
                            {"name": "DCGM_EXPORTER_KUBERNETES", "value": "true"},
                            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
                        ],
                        "ports": [{"name": "metrics", "containerPort": DCGM_PORT}],
                        "livenessProbe": {**probe, "initialDelaySeconds": 45},
                        "readinessProbe": probe,
                        "resources": resources("100m", "512Mi", cpu_limit="500m"),
                        "securityContext": _root(add=["SYS_ADMIN"]),  # exception: DCGM_WHY
                        "volumeMounts": [
                            {"name": "pod-resources", "mountPath": "/var/lib/kubelet/pod-resources", "readOnly": True},
                            {"name": "tmp", "mountPath": "/tmp"},
                        ],
                    }
                ],
                "volumes": [
                    {
                        "name": "pod-resources",
                        "hostPath": {"path": "/var/lib/kubelet/pod-resources", "type": "Directory"},
                    },
                    {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}},
                ],
            }
        ),
        scrape_annotations(DCGM_PORT, honor_labels=True),
    )


def iptables_exporter(spec: AddonsSpec) -> Obj:
    return _daemonset(
        spec,
        "iptables-exporter",
        IPTABLES_WHY,
        host_network(
            {
                "automountServiceAccountToken": False,
                "containers": [
                    {
                        "name": "iptables-exporter",
                        "image": images.IPTABLES_EXPORTER,
                        # Without --tables it reads only the filter table; the egress accounting rules
                        # ("iptables-exporter <name>" comments) live in mangle.
                        "command": ["iptables-exporter", "--port", str(IPTABLES_PORT), "--tables", "mangle"],
                        "env": [{"name": "PYTHONDONTWRITEBYTECODE", "value": "1"}],
                        "ports": [{"name": "metrics", "containerPort": IPTABLES_PORT, "hostPort": IPTABLES_PORT}],
                        "resources": resources("20m", "64Mi", cpu_limit="200m"),
                        "securityContext": _root(add=["NET_ADMIN"]),  # exception: IPTABLES_WHY
                        "volumeMounts": [{"name": "run", "mountPath": "/run"}],
                    }
                ],
                "volumes": [{"name": "run", "emptyDir": {"sizeLimit": "1Mi"}}],
            }
        ),
        scrape_annotations(IPTABLES_PORT),
    )


def xid_pattern(xids: tuple[int, ...]) -> str:
    """Kernel log line of a fatal XID, e.g. ``NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off``."""
    return r"NVRM: Xid \(PCI:[0-9a-fA-F:.]+\): (" + "|".join(str(x) for x in xids) + r"),.*"


def xid_monitor(spec: AddonsSpec) -> dict[str, Any]:
    """node-problem-detector system-log-monitor config: a permanent node condition on a fatal XID."""
    return {
        "plugin": "kmsg",
        "logPath": "/dev/kmsg",
        "lookback": "5m",
        "bufferSize": 10,
        "source": "gpu-xid-monitor",
        "metricsReporting": True,
        "conditions": [{"type": XID_CONDITION, "reason": "NoFatalXid", "message": "no fatal NVIDIA XID"}],
        "rules": [
            {
                "type": "permanent",
                "condition": XID_CONDITION,
                "reason": "FatalXid",
                "pattern": xid_pattern(spec.health.fatal_xids),
            },
            {"type": "temporary", "reason": "GPUXid", "pattern": r"NVRM: Xid \(PCI:[0-9a-fA-F:.]+\): \d+,.*"},
        ],
    }


def node_problem_detector(spec: AddonsSpec) -> list[Obj]:
    name = "node-problem-detector"
    config = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta(f"{name}-gpu", HEALTH_NS, app=name),
        "data": {"gpu-xid-monitor.json": json.dumps(xid_monitor(spec), indent=2)},
    }
    rules = [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]},
        {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch", "update"]},
    ]
    ds = _daemonset(
        spec,
        name,
        NPD_WHY,
        host_network(
            {
                "serviceAccountName": name,
                "containers": [
                    {
                        "name": name,
                        "image": images.NODE_PROBLEM_DETECTOR,
                        "command": [
                            "/node-problem-detector",
                            "--logtostderr",
                            "--config.system-log-monitor=/config/kernel-monitor.json,/agk/gpu-xid-monitor.json",
                            "--prometheus-address=0.0.0.0",
                            f"--prometheus-port={NPD_PORT}",
                        ],
                        "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
                        "ports": [{"name": "metrics", "containerPort": NPD_PORT}],
                        "resources": resources("20m", "128Mi", cpu_limit="200m"),
                        # Exception: NPD_WHY.
                        "securityContext": {"privileged": True, "readOnlyRootFilesystem": True},
                        "volumeMounts": [
                            {"name": "kmsg", "mountPath": "/dev/kmsg", "readOnly": True},
                            {"name": "gpu-config", "mountPath": "/agk", "readOnly": True},
                        ],
                    }
                ],
                "volumes": [
                    {"name": "kmsg", "hostPath": {"path": "/dev/kmsg", "type": "CharDevice"}},
                    {"name": "gpu-config", "configMap": {"name": f"{name}-gpu"}},
                ],
            }
        ),
        scrape_annotations(NPD_PORT),
    )
    return [
        config,
        service_account(name, HEALTH_NS, app=name),
        cluster_role(name, rules, app=name),
        cluster_role_binding(name, name, name, HEALTH_NS, app=name),
        ds,
    ]


def health(spec: AddonsSpec) -> list[Obj]:
    objs: list[Obj] = [
        # privileged: the DCGM diagnostics and node-problem-detector (see their exceptions).
        namespace(HEALTH_NS, app="gpu-health", pod_security_level="privileged"),
        device_plugin(spec),
    ]
    if spec.health.dcgm_exporter:
        objs.append(dcgm_exporter(spec))
    if spec.health.iptables_exporter:
        objs.append(iptables_exporter(spec))
    if spec.health.node_problem_detector:
        objs += node_problem_detector(spec)
    return objs
