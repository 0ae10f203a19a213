"""The program of an ``images`` stack: the node images every cluster's hosts boot (modules/images).

Every recipe is made (and refused, naming the row, when the versions table has no verified sha256 for one)
before the first resource is constructed, so bad input never leaves a half-built graph.
"""

from __future__ import annotations

from typing import Any

from pulumi_azure_native import resources

from modules import tags as tagging
from modules.azure.images import NodeImages, NodeImagesArgs
from modules.images.recipe import recipe
from modules.stackplan.config import ImagesStack, resource_group_name


def build(stack: str, config: ImagesStack) -> dict[str, Any]:
    spec = config.image_build
    recipes = tuple(recipe(role, spec.kubernetes_version, images=config.images) for role in spec.roles)
    tags = tagging.base_tags(config.tags.owner, config.tags.cost_center, stack, config.tags.extra)
    rg = resources.ResourceGroup(
        f"{stack}-rg", resource_group_name=resource_group_name(stack), location=config.location, tags=tags
    )
    images = NodeImages(
        stack,
        NodeImagesArgs(
            stack=stack,
            resource_group_name=rg.name,
            resource_group_id=rg.id,
            location=config.location,
            tags=tags,
            recipes=recipes,
            build=spec.build,
            build_vm_size=spec.build_vm_size,
            replicas=spec.replicas,
        ),
    )
    return {
        "gallery_id": images.gallery_id,
        "kubernetes_release": recipes[0].release,
        "image_versions": images.image_versions,
        "manifests": {r.role: r.manifest() for r in recipes},
    }
