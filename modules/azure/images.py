"""The node images: an Azure Compute Gallery with one image definition per role, each built by Azure VM Image
Builder from the role's recipe (modules/images).

Why Image Builder rather than Packer: an image template is an ARM resource (Microsoft.VirtualMachineImages/
imageTemplates), so the images stack plans offline like every other stack, the build runs inside the
subscription under a managed identity (no build host of ours, no credentials outside Azure), and it
distributes straight to a gallery image version (learn.microsoft.com/azure/virtual-machines/linux/
image-builder-json, "Distribute: sharedImage"). Packer would need a runner holding Azure credentials, outside
what ``pulumi preview`` can show.

Each template builds one image version, named from the release and the build number (``Recipe.gallery_version``):
the template's ``galleryImageId`` ends in ``/versions/<x.y.z>`` (explicit versioning, same page), and the
template's name carries that version, so a new release or build is a new template, not an update of one.
``autoRun`` builds it when the template is created. The build VM runs the rendered script with ``sudo`` (the
Shell customizer runs as a normal user: "Prefix the commands with sudo", same page), then Image Builder
generalizes the image (``waagent -deprovision``, same page).

The builder's identity may do exactly what distributing to the gallery needs (learn.microsoft.com/azure/
virtual-machines/linux/image-builder-permissions-cli, "Permission to distribute images": read the gallery and
its images, read and write image versions), on this gallery only.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

import pulumi
from pulumi_azure_native import authorization, compute, managedidentity, virtualmachineimages

from modules.azure.rbac import grant
from modules.images import gallery_name
from modules.images.build import script
from modules.images.recipe import Recipe

BUILDER_ACTIONS = (
    "Microsoft.Compute/galleries/read",
    "Microsoft.Compute/galleries/images/read",
    "Microsoft.Compute/galleries/images/versions/read",
    "Microsoft.Compute/galleries/images/versions/write",
)
"""What Image Builder's identity needs to distribute to a gallery (image-builder-permissions-cli)."""
BUILD_SCRIPT = "/tmp/agk-build-image.sh"
BUILD_TIMEOUT_MINUTES = 60
IMAGE_PUBLISHER = "agk"
IMAGE_OFFER = "agk-node"


def builder_role_guid(resource_group_id: str) -> str:
    """The builder role's GUID for a resource group (unique per tenant, like the cluster's custom role)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"agk{resource_group_id.lower()}/image-builder"))


def _version_id(image_id: pulumi.Output[str], version: str) -> pulumi.Output[str]:
    """The ARM id of image version ``version`` of a gallery image."""
    return image_id.apply(lambda i: f"{i}/versions/{version}")


def customize_commands(recipe: Recipe) -> list[str]:
    """The Shell customizer's commands: write the rendered script (base64, so no quoting can change it) and run
    it as root."""
    encoded = base64.b64encode(script(recipe).encode()).decode()
    return [f"echo {encoded} | base64 -d > {BUILD_SCRIPT}", f"sudo bash {BUILD_SCRIPT}"]


@dataclass(frozen=True)
class NodeImagesArgs:
    stack: str
    """The images stack's name: names the gallery."""
    resource_group_name: pulumi.Input[str]
    """Resource group of the gallery, its images, the templates and the builder's identity."""
    resource_group_id: pulumi.Input[str]
    """Its ARM id: the scope of the builder's custom role."""
    location: str
    """Azure region of every resource, and where image versions are replicated."""
    tags: Mapping[str, str]
    """Tags for every resource (owner, cost-center, ...)."""
    recipes: tuple[Recipe, ...]
    """One per role to build, all of one Kubernetes release (modules/images/recipe.py)."""
    build: int
    """The build number: the last part of every image version."""
    build_vm_size: str
    """VM size of the build VM."""
    replicas: int
    """Replicas of each image version in ``location``."""


class NodeImages(pulumi.ComponentResource):
    gallery_id: pulumi.Output[str]
    image_versions: dict[str, pulumi.Output[str]]
    """Role -> the image version's ARM id (what a cluster's VMs and scale sets boot)."""

    def __init__(self, name: str, args: NodeImagesArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("agk:images:NodeImages", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        tags = dict(args.tags)
        gallery = compute.Gallery(
            f"{name}-gallery",
            gallery_name=gallery_name(args.stack),
            resource_group_name=args.resource_group_name,
            location=args.location,
            description="agk node images, one definition per role (modules/images)",
            tags=tags,
            opts=child,
        )
        identity = managedidentity.UserAssignedIdentity(
            f"{name}-builder",
            resource_name_=f"{name}-builder",
            resource_group_name=args.resource_group_name,
            location=args.location,
            tags=tags,
            opts=child,
        )
        role_guid = pulumi.Output.from_input(args.resource_group_id).apply(builder_role_guid)
        role = authorization.RoleDefinition(
            f"{name}-builder-role",
            role_definition_id=role_guid,
            role_name=pulumi.Output.from_input(args.resource_group_id).apply(
                lambda rg: f"agk image builder ({rg.split('/')[2]}/{rg.rsplit('/', 1)[-1]})"
            ),
            description="Azure VM Image Builder: write node image versions into the agk gallery.",
            scope=args.resource_group_id,
            assignable_scopes=[args.resource_group_id],
            permissions=[authorization.PermissionArgs(actions=list(BUILDER_ACTIONS))],
            opts=child,
        )
        allowed = grant(
            f"{name}-builder-gallery",
            scope=gallery.id,
            principal_id=identity.principal_id,
            principal_type="ServicePrincipal",
            role=("agk image builder", role_guid),
            resource_group_id=args.resource_group_id,
            parent=self,
            depends_on=[role],
        )
        self.image_versions = {}
        for recipe in args.recipes:
            version = recipe.gallery_version(args.build)
            image = compute.GalleryImage(
                f"{name}-{recipe.role}",
                gallery_image_name=recipe.role,
                gallery_name=gallery.name,
                resource_group_name=args.resource_group_name,
                location=args.location,
                identifier=compute.GalleryImageIdentifierArgs(
                    publisher=IMAGE_PUBLISHER, offer=IMAGE_OFFER, sku=recipe.role
                ),
                os_type=compute.OperatingSystemTypes.LINUX,
                os_state=compute.OperatingSystemStateTypes.GENERALIZED,
                # Must be the base image's generation: V2 is assumed for both pinned bases (*unverified*: check
                # `az vm image show --urn <publisher>:<offer>:<sku>:<version> --query hyperVGeneration`).
                hyper_v_generation=compute.HyperVGeneration.V2,
                description=f"agk {recipe.role} node image (modules/images/recipe.py)",
                tags=tags,
                opts=child,
            )
            template = self._template(name, args, recipe, version, image, identity.id, allowed)
            # Known once the template (which builds it) exists.
            self.image_versions[recipe.role] = pulumi.Output.all(template.id, _version_id(image.id, version)).apply(
                lambda ids: str(ids[1])
            )
        self.gallery_id = gallery.id
        self.register_outputs({"gallery_id": self.gallery_id, "image_versions": self.image_versions})

    def _template(
        self,
        name: str,
        args: NodeImagesArgs,
        recipe: Recipe,
        version: str,
        image: compute.GalleryImage,
        identity_id: pulumi.Input[str],
        allowed: pulumi.Resource,
    ) -> virtualmachineimages.VirtualMachineImageTemplate:
        """The Image Builder template that bakes ``recipe`` from its base into ``image``'s ``version``; it runs on
        creation (a new version is a new template)."""
        tags = dict(args.tags)
        base = recipe.base
        return virtualmachineimages.VirtualMachineImageTemplate(
            f"{name}-{recipe.role}-template",
            image_template_name=f"agk-{recipe.role}-{version}",
            resource_group_name=args.resource_group_name,
            location=args.location,
            identity=virtualmachineimages.ImageTemplateIdentityArgs(
                type=virtualmachineimages.ResourceIdentityType.USER_ASSIGNED,
                user_assigned_identities=[identity_id],
            ),
            source=virtualmachineimages.ImageTemplatePlatformImageSourceArgs(
                type="PlatformImage",
                publisher=base.publisher,
                offer=base.offer,
                sku=base.sku,
                version=base.version,
            ),
            customize=[
                virtualmachineimages.ImageTemplateShellCustomizerArgs(
                    type="Shell", name=f"agk-{recipe.role}", inline=customize_commands(recipe)
                )
            ],
            distribute=[
                virtualmachineimages.ImageTemplateSharedImageDistributorArgs(
                    type="SharedImage",
                    gallery_image_id=_version_id(image.id, version),
                    run_output_name=f"agk-{recipe.role}-{version}",
                    artifact_tags={**tags, "agk-kubernetes": recipe.release, "agk-image-role": recipe.role},
                    target_regions=[
                        virtualmachineimages.TargetRegionArgs(name=args.location, replica_count=args.replicas)
                    ],
                )
            ],
            vm_profile=virtualmachineimages.ImageTemplateVmProfileArgs(vm_size=args.build_vm_size),
            build_timeout_in_minutes=BUILD_TIMEOUT_MINUTES,
            auto_run=virtualmachineimages.ImageTemplateAutoRunArgs(
                state=virtualmachineimages.AutoRunState.AUTO_RUN_ENABLED
            ),
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[allowed]),
        )
