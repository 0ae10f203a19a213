"""Passive health: GPU exposure and telemetry on GPU nodes, iptables counters and XID detection on every node.

Node agents here need more than the restricted baseline; each exception is stated next to the
security context and on the object (``azure-gpu-k8s/justification``) so reviewers see why.

One DCGM host engine per node: the GPU image runs nv-hostengine as the ``nvidia-dcgm`` service on
127.0.0.1:5555 (Azure/azhpc-images install_dcgm.sh). dcgm-exporter connects to it
(``DCGM_REMOTE_HOSTENGINE_INFO``; NVIDIA/dcgm-exporter pkg/cmd/app.go: a set ``-r``/env turns on the
remote host engine) instead of embedding a second engine, and the preflight diagnostics do the same
(``dcgmi diag --host``). NVIDIA: "Operate one site-managed DCGM endpoint per host ... Starting another
engine creates a separate inventory and cache" (DCGM docs, Getting Started for System Administrators).

Only allocated GPUs are visible in a pod: the device plugin hands the runtime its devices as volume
mounts (``DEVICE_LIST_STRATEGY=volume-mounts``), and the node's nvidia-container-runtime ignores
``NVIDIA_VISIBLE_DEVICES`` from unprivileged containers (``accept-nvidia-visible-devices-envvar-when-
unprivileged = false``, written by the node bootstrap); admission refuses the ways around it
(objects/admission.py, ``gpu-isolation`` and ``tenant-pod-security``).
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
    scripts_configmap,
    service_account,
    tolerate_everything,
)
from modules.cluster.spec import AddonsSpec
from modules.labels import XID_CONDITION

DCGM_PORT, IPTABLES_PORT, NPD_PORT, NPD_HEALTH_PORT = 9400, 9119, 20257, 20256
# The host's DCGM host engine (nvidia-dcgm.service: nv-hostengine's default TCP listener).
HOST_ENGINE = "localhost:5555"
IPTABLES_APP = "iptables-exporter"
IPTABLES_SCRIPTS = ("iptables_exporter.py",)

DEVICE_PLUGIN_WHY = (
    "root with SYS_ADMIN only (no privilege escalation): the plugin creates its socket in the root-owned "
    "kubelet directory /var/lib/kubelet/device-plugins, and nvidia-container-runtime honours the plugin's own "
    "NVIDIA_VISIBLE_DEVICES=all (so NVML sees every GPU to advertise) only for containers with CAP_SYS_ADMIN "
    "once the node refuses that variable from unprivileged ones; NVIDIA's chart adds SYS_ADMIN for "
    "deviceListStrategy volume-mounts the same way"
)
DCGM_WHY = (
    "root (no capabilities): the kubelet pod-resources socket that maps GPUs to pods is root-only; metrics "
    "come from the host's DCGM engine, reached on localhost:5555 over the host network"
)
IPTABLES_WHY = (
    "root with NET_RAW and NET_ADMIN only and host networking: the host's mangle-table counters are read "
    "through a raw socket's iptables options, in the host network namespace"
)
NPD_WHY = (
    "privileged: reading the host kernel log (/dev/kmsg) needs the host's character device, which the "
    "device cgroup only lets a privileged container open"
)
IMDS_WHY = (
    "host network: takes its managed-identity token from IMDS, which no pod can reach on any pool (the nodes "
    "drop pod -> 169.254.169.254: a pod that reached it could take the node's identities and read its bundle)"
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


def node_agent(spec: AddonsSpec, name: str, why: str, pod: Obj, annotations: dict[str, str] | None = None) -> Obj:
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
    # No probe: the plugin serves gRPC on a unix socket only; kubelet re-registration is its health.
    return node_agent(
        spec,
        "nvidia-device-plugin",
        DEVICE_PLUGIN_WHY,
        host_network(
            {
                # It talks to the kubelet only (the device-plugin socket): no API token to leak.
                "automountServiceAccountToken": False,
                "nodeSelector": gpu_nodes(spec),
                "containers": [
                    {
                        "name": "nvidia-device-plugin",
                        "image": images.DEVICE_PLUGIN,
                        "env": [
                            {"name": "FAIL_ON_INIT_ERROR", "value": "false"},
                            # Allocated GPUs reach the runtime as mounts under /var/run/nvidia-container-devices
                            # (from /dev/null), not as an environment variable any pod could set itself.
                            {"name": "DEVICE_LIST_STRATEGY", "value": "volume-mounts"},
                            {"name": "DEVICE_ID_STRATEGY", "value": "uuid"},
                            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
                            {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "compute,utility"},
                        ],
                        "resources": resources("50m", "128Mi", cpu_limit="200m"),
                        "securityContext": _root(add=["SYS_ADMIN"]),  # exception: DEVICE_PLUGIN_WHY
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
    return node_agent(
        spec,
        "dcgm-exporter",
        DCGM_WHY,
        host_network(
            {
                # GPUs map to pods through the kubelet's pod-resources socket (DCGM_EXPORTER_KUBERNETES), not the
                # API server: no API token to leak.
                "automountServiceAccountToken": False,
                "nodeSelector": gpu_nodes(spec),
                "containers": [
                    {
                        "name": "dcgm-exporter",
                        "image": images.DCGM_EXPORTER,
                        "env": [
                            {"name": "DCGM_EXPORTER_LISTEN", "value": f":{DCGM_PORT}"},
                            {"name": "DCGM_EXPORTER_KUBERNETES", "value": "true"},
                            # The host's engine, not an embedded second one.
                            {"name": "DCGM_REMOTE_HOSTENGINE_INFO", "value": HOST_ENGINE},
                            # From 4.4.1-4.6.0 the Kubernetes mode loads NVML at start and exits without it
                            # (pkg/cmd/app.go); NVML only maps MIG devices, which these nodes do not use, and an
                            # unprivileged pod without GPUs gets no driver libraries (the toolkit ignores its
                            # NVIDIA_VISIBLE_DEVICES: modules/bootstrap/roles/pool.py).
                            {"name": "DISABLE_STARTUP_VALIDATE", "value": "true"},
                        ],
                        "ports": [{"name": "metrics", "containerPort": DCGM_PORT}],
                        "livenessProbe": {**probe, "initialDelaySeconds": 45},
                        "readinessProbe": probe,
                        "resources": resources("100m", "512Mi", cpu_limit="500m"),
                        "securityContext": _root(),  # exception: DCGM_WHY
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


def iptables_scripts() -> Obj:
    return scripts_configmap(f"{IPTABLES_APP}-scripts", HEALTH_NS, IPTABLES_SCRIPTS, app=IPTABLES_APP)


def iptables_exporter(spec: AddonsSpec) -> list[Obj]:
    """Counters of the mangle rules commented ``iptables-exporter <labels>`` (scripts/iptables_exporter.py)."""
    probe = {"httpGet": {"path": "/healthz", "port": IPTABLES_PORT}, "timeoutSeconds": 5}
    ds = node_agent(
        spec,
        IPTABLES_APP,
        IPTABLES_WHY,
        host_network(
            {
                "automountServiceAccountToken": False,
                "containers": [
                    {
                        "name": IPTABLES_APP,
                        "image": images.PYTHON,
                        # The egress accounting rules live in mangle (the node bootstrap's mangle.rules).
                        "command": [
                            "python3",
                            "/scripts/iptables_exporter.py",
                            "--port",
                            str(IPTABLES_PORT),
                            "--table",
                            "mangle",
                        ],
                        "env": [{"name": "PYTHONDONTWRITEBYTECODE", "value": "1"}],
                        "ports": [{"name": "metrics", "containerPort": IPTABLES_PORT}],
                        "livenessProbe": {**probe, "initialDelaySeconds": 10},
                        "readinessProbe": probe,
                        "resources": resources("20m", "64Mi", cpu_limit="200m"),
                        "securityContext": _root(add=["NET_ADMIN", "NET_RAW"]),  # exception: IPTABLES_WHY
                        "volumeMounts": [{"name": "scripts", "mountPath": "/scripts", "readOnly": True}],
                    }
                ],
                "volumes": [{"name": "scripts", "configMap": {"name": f"{IPTABLES_APP}-scripts"}}],
            }
        ),
        scrape_annotations(IPTABLES_PORT),
    )
    return [iptables_scripts(), ds]


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
    npd_probe = {"httpGet": {"host": "127.0.0.1", "path": "/healthz", "port": NPD_HEALTH_PORT}, "timeoutSeconds": 5}
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
    ds = node_agent(
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
                        # /healthz on --address 127.0.0.1:--port 20256, its defaults (cmd/options/options.go,
                        # pkg/exporters/k8sexporter/k8s_exporter.go @ v0.8.20); the kubelet probes from the host.
                        "livenessProbe": {**npd_probe, "initialDelaySeconds": 30},
                        "readinessProbe": npd_probe,
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
        objs += iptables_exporter(spec)
    if spec.health.node_problem_detector:
        objs += node_problem_detector(spec)
    return objs
