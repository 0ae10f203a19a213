"""Every container image the add-ons run, pinned by tag, and by digest where one is known.

A digest is written only where it was checked against several independent pinnings (pause 3.10,
a multi-arch index digest); the others are pinned by an immutable release tag. Bumping one is a
one-line change reviewed like code.
"""

from __future__ import annotations

PAUSE = "registry.k8s.io/pause:3.10@sha256:ee6521f290b2168b6e0935a181d4cff9be1ac3f505666ef0e3c98fae8199917a"
DCGM = "nvcr.io/nvidia/cloud-native/dcgm:3.3.9-1-ubuntu22.04"
DCGM_EXPORTER = "nvcr.io/nvidia/k8s/dcgm-exporter:3.3.9-3.6.1-ubuntu22.04"
DEVICE_PLUGIN = "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"
IPTABLES_EXPORTER = "docker.io/madron/iptables-exporter:0.3.2"
NODE_PROBLEM_DETECTOR = "registry.k8s.io/node-problem-detector/node-problem-detector:v0.8.20"
# The preflight reporter and the re-test job are stdlib-only Python scripts (ConfigMaps).
PYTHON = "docker.io/library/python:3.12.8-slim-bookworm"
# CoreDNS, kube-state-metrics and scheduler-plugins follow the Kubernetes minor: their tags live in
# the one versions table, modules/bootstrap/versions.py.
