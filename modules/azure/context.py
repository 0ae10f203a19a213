"""The small frozen context every Azure component receives instead of module globals."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pulumi
from pulumi_azure_native import compute

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
    """Pinned marketplace images by kind (``general``, ``gpu``): the hub's jump hosts boot them."""
    node_images: Mapping[str, pulumi.Input[str]] = field(default_factory=dict)
    """Cluster role (``etcd``, ``gpu-node``...) -> the ARM id of the gallery image version its hosts and scale
    sets boot (modules/stackplan/node_images.py). A role listed here never boots a marketplace image."""

    def image_reference(self, role: str, kind: str) -> compute.ImageReferenceArgs:
        """The image a VM or scale set of ``role`` boots: its gallery image version, else the marketplace
        image of ``kind`` (hosts outside a cluster: the hub's jump hosts)."""
        if role in self.node_images:
            return compute.ImageReferenceArgs(id=self.node_images[role])
        publisher, offer, sku, version = self.images[kind]
        return compute.ImageReferenceArgs(publisher=publisher, offer=offer, sku=sku, version=version)

    def tags_for(self, role: str, **extra: str) -> dict[str, str]:
        out = dict(self.tags)
        out[tagging.ROLE] = role
        out.update(extra)
        return out
