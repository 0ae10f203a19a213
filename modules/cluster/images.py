"""Every container image the add-ons run, pinned by tag, and by digest where one is known.

A digest is written only where it was checked against several independent pinnings (pause 3.10,
a multi-arch index digest); the others are pinned by an immutable release tag. Bumping one is a
one-line change reviewed like code.
"""

from __future__ import annotations

from modules.errors import ConfigError

PAUSE = "registry.k8s.io/pause:3.10@sha256:ee6521f290b2168b6e0935a181d4cff9be1ac3f505666ef0e3c98fae8199917a"
DCGM = "nvcr.io/nvidia/cloud-native/dcgm:3.3.9-1-ubuntu22.04"
DCGM_EXPORTER = "nvcr.io/nvidia/k8s/dcgm-exporter:3.3.9-3.6.1-ubuntu22.04"
DEVICE_PLUGIN = "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"
IPTABLES_EXPORTER = "docker.io/madron/iptables-exporter:0.3.2"
NODE_PROBLEM_DETECTOR = "registry.k8s.io/node-problem-detector/node-problem-detector:v0.8.20"
# The preflight reporter and the re-test job are stdlib-only Python scripts (ConfigMaps).
PYTHON = "docker.io/library/python:3.12.8-slim-bookworm"

# CoreDNS as kubeadm ships it for each Kubernetes minor (coredns/deployment's CoreDNS-k8s_version
# table); a newer minor than listed keeps the newest known release (CoreDNS reads only stable
# APIs: EndpointSlices, Services, Namespaces).
COREDNS: dict[int, str] = {30: "v1.11.3", 31: "v1.11.3", 32: "v1.11.3", 33: "v1.12.0"}
COREDNS_REPO = "registry.k8s.io/coredns/coredns"
# kube-state-metrics releases and the client-go minor each is built with (its compatibility
# matrix); newer minors keep the newest known release, as the project advises.
KUBE_STATE_METRICS: dict[int, str] = {30: "v2.13.0", 31: "v2.14.0", 32: "v2.15.0", 33: "v2.16.0"}
KUBE_STATE_METRICS_REPO = "registry.k8s.io/kube-state-metrics/kube-state-metrics"


def _by_minor(table: dict[int, str], kubernetes_version: str) -> str:
    minor = int(kubernetes_version.split(".")[1])
    return table[min(max(minor, min(table)), max(table))]


def coredns(kubernetes_version: str) -> str:
    return f"{COREDNS_REPO}:{_by_minor(COREDNS, kubernetes_version)}"


def kube_state_metrics(kubernetes_version: str) -> str:
    return f"{KUBE_STATE_METRICS_REPO}:{_by_minor(KUBE_STATE_METRICS, kubernetes_version)}"


# scheduler-plugins releases, each built against the Kubernetes minor its own minor names
# (the project's compatibility matrix). A kube-scheduler may be one minor older than the API
# server, so a missing minor falls back to the previous one.
SCHEDULER_PLUGINS: dict[str, str] = {
    "1.28": "v0.28.9",
    "1.29": "v0.29.7",
    "1.30": "v0.30.12",
    "1.31": "v0.31.8",
    "1.32": "v0.32.7",
    "1.34": "v0.34.7",
}
SCHEDULER_REPO = "registry.k8s.io/scheduler-plugins/kube-scheduler"
CONTROLLER_REPO = "registry.k8s.io/scheduler-plugins/controller"


def scheduler_plugins_tag(kubernetes_version: str) -> str:
    """The scheduler-plugins release for ``kubernetes_version`` (its own minor, else one older)."""
    major, minor = kubernetes_version.split(".")
    for candidate in (kubernetes_version, f"{major}.{int(minor) - 1}"):
        if candidate in SCHEDULER_PLUGINS:
            return SCHEDULER_PLUGINS[candidate]
    raise ConfigError(
        f"azure-gpu-k8s:addons.gang.image_tag: no scheduler-plugins release is known for Kubernetes "
        f"{kubernetes_version}: set addons.gang.image_tag (e.g. v0.{minor}.0) or disable addons.gang"
    )
