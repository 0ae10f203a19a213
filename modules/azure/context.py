"""The small frozen context every Azure component receives instead of module globals."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pulumi
from pulumi_azure_native import compute, resources

from modules import tags as tagging
from modules.stackplan.config import ClusterStack, NetworkedStack, resource_group_name

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


def stack_context(stack: str, config: NetworkedStack) -> tuple[resources.ResourceGroup, DeployContext]:
    """A hub's or cluster's resource group, and the context its components are built with."""
    cluster = config.cluster.name if isinstance(config, ClusterStack) else stack
    tags = tagging.base_tags(config.tags.owner, config.tags.cost_center, cluster, config.tags.extra)
    rg = resources.ResourceGroup(
        f"{stack}-rg", resource_group_name=resource_group_name(stack), location=config.location, tags=tags
    )
    ctx = DeployContext(
        resource_group_name=rg.name,
        resource_group_id=rg.id,
        location=config.location,
        tags=tags,
        admin_username=config.admin.username,
        ssh_public_keys=tuple(config.admin.ssh_public_keys),
        images={kind: (i.publisher, i.offer, i.sku, i.version) for kind, i in config.images},
    )
    return rg, ctx
