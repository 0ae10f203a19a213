"""The small frozen context every Azure component receives instead of module globals."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pulumi

from modules import tags as tagging

ImageRef = tuple[str, str, str, str]
"""(publisher, offer, sku, version): a pinned marketplace image (the stack's ``images`` config)."""


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
    images: Mapping[str, ImageRef]
    """Pinned marketplace images by kind (``general``, ``gpu``): scale-outs boot the same image."""

    def tags_for(self, role: str, **extra: str) -> dict[str, str]:
        out = dict(self.tags)
        out[tagging.ROLE] = role
        out.update(extra)
        return out
