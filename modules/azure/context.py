"""The small frozen context every Azure component receives instead of module globals."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pulumi

from modules import tags as tagging

# Ubuntu 24.04: its etcd-server package is the etcd 3.4 line the bootstrap tests run.
UBUNTU_2404 = ("Canonical", "ubuntu-24_04-lts", "server", "latest")
# Azure's HPC image: NVIDIA driver, InfiniBand (MOFED) and DCGM preinstalled for ND-series VMs.
UBUNTU_HPC_2204 = ("microsoft-dsvm", "ubuntu-hpc", "2204", "latest")


@dataclass(frozen=True)
class DeployContext:
    """Where and as whom resources are created; passed explicitly to every component."""

    resource_group_name: pulumi.Input[str]
    """Resource group all of this stack's resources go into."""
    resource_group_id: pulumi.Input[str]
    """Its ARM id, for sub-resource ids that must be known before a resource exists."""
    location: str
    """Azure region."""
    tags: Mapping[str, str]
    """Tags for every taggable resource (owner, cost-center, cluster, extras)."""
    admin_username: str
    """Admin user on every VM (SSH keys only)."""
    ssh_public_keys: tuple[str, ...]
    """Public keys allowed to log in."""
    images: Mapping[str, tuple[str, str, str, str]] = field(
        default_factory=lambda: {"general": UBUNTU_2404, "gpu": UBUNTU_HPC_2204}
    )
    """Marketplace images (publisher, offer, sku, version) by kind."""

    def tags_for(self, role: str, **extra: str) -> dict[str, str]:
        out = dict(self.tags)
        out[tagging.ROLE] = role
        out.update(extra)
        return out
