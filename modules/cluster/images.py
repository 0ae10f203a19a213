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
