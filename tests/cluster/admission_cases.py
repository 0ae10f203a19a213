"""The admission table (every pod a valid Pod: the real API server validates before it admits): pods the team-toleration and GPU-isolation policies admit and refuse, with the
reason. Evaluated by the real API server (tests/controlplane/test_admission.py) and, as a quick check,
by cel-python (tests/cluster/test_admission_cel.py): both must agree with it."""

from __future__ import annotations

from typing import Any

TEAM = "gpu.example.com/team"
PREFLIGHT = "gpu.example.com/preflight"
TEAM_MESSAGE = (
    "pod in team namespace research tolerates another team's taint: tolerate only team=research "
    "or set priorityClassName: borrow"
)
OUTSIDER_MESSAGE = (
    "pod in namespace scratch, which belongs to no team, tolerates a team's taint: run it in its team's namespace"
)
PREFLIGHT_MESSAGE = (
    "pod in team namespace research tolerates the preflight taint (or every taint): name the taint keys it tolerates"
)


def pod(tolerations: list[dict[str, str]] | None = None, priority: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "i"}]}
    if tolerations is not None:
        spec["tolerations"] = tolerations
    if priority:
        spec["priorityClassName"] = priority
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}


OWN = {"key": TEAM, "operator": "Equal", "value": "research", "effect": "NoSchedule"}
OTHER = {"key": TEAM, "operator": "Equal", "value": "vision", "effect": "NoSchedule"}
ALL_TEAMS = {"key": TEAM, "operator": "Exists"}

ADMITTED = {
    "no tolerations": pod(),
    "empty tolerations": pod([]),
    "own team": pod([OWN], "training"),
    "own team, value only (operator defaults to Equal)": pod([{"key": TEAM, "value": "research"}]),
    "unrelated taint": pod([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]),
    "borrow tolerates every team": pod([ALL_TEAMS], "borrow"),
    "borrow tolerates another team": pod([OTHER, OWN], "borrow"),
}
REFUSED_TEAM = {
    "another team": pod([OTHER]),
    "another team beside its own": pod([OWN, OTHER], "training"),
    "every team without borrow": pod([ALL_TEAMS], "training"),
    "team key without value": pod([{"key": TEAM, "operator": "Equal"}]),
}
NODE_NAME_MESSAGE = (
    "pod in team namespace research names its node (spec.nodeName), which skips the scheduler and every NoSchedule "
    "taint: "
    "choose nodes with nodeSelector or affinity"
)


def on_node(p: dict[str, Any], node: str = "dev-h100-0000s0") -> dict[str, Any]:
    """``p`` as created with ``spec.nodeName`` (what a bound pod carries, and what skips the scheduler on create)."""
    return p | {"spec": p["spec"] | {"nodeName": node}}


REFUSED_NODE_NAME = {
    "a node named, tolerating nothing": on_node(pod()),
    "a node named beside its own team's toleration": on_node(pod([OWN], "training")),
}
REFUSED_PREFLIGHT = {
    "preflight taint": pod([{"key": PREFLIGHT, "operator": "Exists"}], "borrow"),
    "wildcard toleration, even borrowing": pod([{"operator": "Exists"}], "borrow"),
}


def gpu_pod(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"containers": [{"name": "c", "image": "i"}]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {**base, **spec}}


def container(**fields: Any) -> dict[str, Any]:
    return {"name": "c", "image": "i"} | fields


ALL_GPUS = {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}
GPU_ADMITTED = {
    "plain pod": gpu_pod(),
    "GPUs through the device plugin": gpu_pod(
        containers=[container(resources={"limits": {"nvidia.com/gpu": "8", "rdma/ib": "1"}})]
    ),
    "CUDA_VISIBLE_DEVICES selects among allocated GPUs": gpu_pod(
        containers=[container(env=[{"name": "CUDA_VISIBLE_DEVICES", "value": "0,1"}])]
    ),
    "IPC_LOCK for InfiniBand": gpu_pod(containers=[container(securityContext={"capabilities": {"add": ["IPC_LOCK"]}})]),
    "an unrelated mount": gpu_pod(
        containers=[container(volumeMounts=[{"name": "v", "mountPath": "/var/run/x"}])],
        volumes=[{"name": "v", "emptyDir": {}}],
    ),
    "privileged: false": gpu_pod(containers=[container(securityContext={"privileged": False})]),
}
GPU_REFUSED = {
    "NVIDIA_VISIBLE_DEVICES=all without a GPU request": (gpu_pod(containers=[container(env=[ALL_GPUS])]), 0),
    "NVIDIA_VISIBLE_DEVICES in an init container": (
        gpu_pod(initContainers=[container(name="init", env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "0"}])]),
        0,
    ),
    "NVIDIA_VISIBLE_DEVICES in an ephemeral container": (
        gpu_pod(ephemeralContainers=[container(name="debug", env=[ALL_GPUS])]),
        0,
    ),
    # The runtime reads a /dev/null mount there as a device request; /dev/null would be a hostPath (refused
    # by tenant-pod-security too), so the mount-path rule is shown on its own with another volume.
    "a device-list mount": (
        gpu_pod(
            containers=[
                container(volumeMounts=[{"name": "null", "mountPath": "/var/run/nvidia-container-devices/all"}])
            ],
            volumes=[{"name": "null", "emptyDir": {}}],
        ),
        1,
    ),
}

# --- tenant-pod-security: Pod Security baseline plus IPC_LOCK ----------------------------------------------


def caps(*add: str) -> dict[str, Any]:
    return container(securityContext={"capabilities": {"add": list(add)}})


# What the documented InfiniBand job needs, each on its own, and the baseline it keeps.
POD_SECURITY_ADMITTED = {
    "plain pod": gpu_pod(),
    "IPC_LOCK (InfiniBand pins memory)": gpu_pod(containers=[caps("IPC_LOCK")]),
    "a baseline capability beside IPC_LOCK": gpu_pod(containers=[caps("IPC_LOCK", "NET_BIND_SERVICE")]),
    "a large /dev/shm (in-memory emptyDir)": gpu_pod(
        containers=[container(volumeMounts=[{"name": "dshm", "mountPath": "/dev/shm"}])],
        volumes=[{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}}],
    ),
    "the RDMA device through the device plugin": gpu_pod(
        containers=[container(resources={"limits": {"nvidia.com/gpu": "8", "rdma/ib": "1"}})]
    ),
    "the topology file from a ConfigMap": gpu_pod(
        containers=[container(volumeMounts=[{"name": "t", "mountPath": "/opt/microsoft", "readOnly": True}])],
        volumes=[{"name": "t", "configMap": {"name": "nccl-topology"}}],
    ),
    "RuntimeDefault seccomp and a safe sysctl": gpu_pod(
        securityContext={
            "seccompProfile": {"type": "RuntimeDefault"},
            "sysctls": [{"name": "net.ipv4.tcp_keepalive_time", "value": "60"}],
        }
    ),
    "a probe on the pod's own address": gpu_pod(
        containers=[container(livenessProbe={"httpGet": {"path": "/", "port": 8080}})]
    ),
}
# Each refused for one control (the index of tenant-pod-security's validation that names it).
POD_SECURITY_REFUSED = {
    "hostPID": (gpu_pod(hostPID=True), 0),
    "hostIPC": (gpu_pod(hostIPC=True), 0),
    "host network (reaches the node's DCGM engine)": (gpu_pod(hostNetwork=True), 0),
    "privileged": (gpu_pod(containers=[container(securityContext={"privileged": True})]), 1),
    "SYS_ADMIN (the NVIDIA runtime then shows every GPU)": (gpu_pod(containers=[caps("SYS_ADMIN")]), 2),
    "CAP_SYS_ADMIN beside IPC_LOCK": (gpu_pod(containers=[caps("IPC_LOCK", "CAP_SYS_ADMIN")]), 2),
    "ALL capabilities": (gpu_pod(containers=[caps("ALL")]), 2),
    "SYS_PTRACE beside IPC_LOCK": (gpu_pod(containers=[caps("IPC_LOCK", "SYS_PTRACE")]), 2),
    "NET_ADMIN in an init container": (gpu_pod(initContainers=[caps("NET_ADMIN") | {"name": "init"}]), 2),
    "SYS_ADMIN in an ephemeral container": (gpu_pod(ephemeralContainers=[caps("SYS_ADMIN") | {"name": "debug"}]), 2),
    "a hostPath volume": (gpu_pod(volumes=[{"name": "h", "hostPath": {"path": "/var/lib/kubelet"}}]), 3),
    "the node's / through hostPath": (
        gpu_pod(
            containers=[container(volumeMounts=[{"name": "root", "mountPath": "/host"}])],
            volumes=[{"name": "root", "hostPath": {"path": "/"}}],
        ),
        3,
    ),
    "a host port": (gpu_pod(containers=[container(ports=[{"containerPort": 80, "hostPort": 80}])]), 4),
    "a probe aimed at another host": (
        gpu_pod(containers=[container(livenessProbe={"tcpSocket": {"host": "169.254.169.254", "port": 80}})]),
        6,
    ),
    "AppArmor unconfined": (gpu_pod(securityContext={"appArmorProfile": {"type": "Unconfined"}}), 7),
    "an SELinux type beyond containers'": (
        gpu_pod(containers=[container(securityContext={"seLinuxOptions": {"type": "spc_t"}})]),
        8,
    ),
    # No "unmasked /proc" case: the API server itself refuses procMount Unmasked unless hostUsers is false
    # (pkg/apis/core/validation), and with hostUsers false baseline allows it; validation 9 mirrors baseline.
    "seccomp unconfined": (
        gpu_pod(containers=[container(securityContext={"seccompProfile": {"type": "Unconfined"}})]),
        10,
    ),
    "an unsafe sysctl": (gpu_pod(securityContext={"sysctls": [{"name": "kernel.msgmax", "value": "65536"}]}), 11),
}
