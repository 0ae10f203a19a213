"""Kubernetes patch releases this toolkit boots by default (images and packages need a full release)."""

from __future__ import annotations

from modules.errors import ConfigError

# Newest patch of each minor at the time of writing; a stack pins another with bootstrap.kubernetes_patch.
LATEST_PATCH = {"1.28": 15, "1.29": 12, "1.30": 8, "1.31": 4, "1.32": 0}


def kubernetes_release(minor: str, patch: int | None) -> str:
    """``1.31`` + patch (or the known newest) -> ``1.31.4``."""
    if patch is None:
        if minor not in LATEST_PATCH:
            raise ConfigError(
                f"azure-gpu-k8s:bootstrap.kubernetes_patch: no default patch release for Kubernetes {minor}: "
                "set bootstrap.kubernetes_patch"
            )
        patch = LATEST_PATCH[minor]
    return f"{minor}.{patch}"
