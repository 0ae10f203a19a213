"""Which gallery image version each of a cluster's hosts and scale sets boots (pure; no Pulumi).

A cluster boots the images an ``images`` stack built (modules/images, infra/images_stack.py): one Azure
Compute Gallery image per role, version ``<minor>.<patch>.<build>`` of one Kubernetes release. The cluster
chooses only the build (``cluster.node_images``); the release is its own, so the image's kubelet is always
the release the control plane runs. The version is therefore in the plan, and a new one is a planned change:
a scale set gets a new model (new and reimaged instances boot it), a fixed host is replaced (modules/azure/vm.py
says why, and the review refuses it unless allowed).

Ordering: the images stack must be deployed, and its builds finished, before a cluster's first ``pulumi up``:
Azure refuses a VM whose image version does not exist. The plan checks what it can offline (the images stack
builds that release, that role and that build, when its stack file is here) and lists the rest as a step
before ``pulumi up`` (``prerequisites``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from modules.bootstrap.roles import Role
from modules.cluster.images import DCGM
from modules.config_model import PROJECT
from modules.errors import ConfigError
from modules.images import ImageRole, gallery_name
from modules.images.config import ImagesConfig, gpu_base
from modules.images.recipe import gallery_version, image_role, release_of
from modules.stackplan.config import ClusterConfig, ImagesStack, load_stack, resource_group_name, stack_file

KEY = f"{PROJECT}:cluster.node_images"


@dataclass(frozen=True)
class NodeImage:
    role: ImageRole
    version: str
    """The gallery image version, ``<minor>.<patch>.<build>`` (36.4.1)."""
    images_stack: str
    """The images stack's name (the last part of its reference)."""

    @property
    def gallery(self) -> str:
        return gallery_name(self.images_stack)

    @property
    def resource_group(self) -> str:
        return resource_group_name(self.images_stack)

    def id_in(self, gallery_id: str) -> str:
        """The image version's ARM id in the gallery ``gallery_id`` (what ``storageProfile.imageReference.id``
        takes): ``<gallery>/images/<role>/versions/<version>``."""
        return f"{gallery_id}/images/{self.role}/versions/{self.version}"


def images_stack_name(cluster: ClusterConfig) -> str:
    return cluster.node_images.images_stack.rsplit("/", 1)[-1]


def node_images(cluster: ClusterConfig, release: str, roles: tuple[Role, ...]) -> dict[Role, NodeImage]:
    """Cluster role -> the image version it boots (events etcd boots the etcd image)."""
    spec = cluster.node_images
    stack = images_stack_name(cluster)
    out: dict[Role, NodeImage] = {}
    for role in roles:
        image = image_role(role)
        out[role] = NodeImage(image, gallery_version(release, spec.roles.get(image, spec.build)), stack)
    return out


def check_images_stack(stacks_dir: Path, cluster: ClusterConfig, release: str, images: dict[Role, NodeImage]) -> None:
    """ConfigError when the images stack in ``stacks_dir`` cannot have built an image the cluster boots.

    Only a stack file that is here can be read (a reference to another project's stack cannot be checked
    offline: the prerequisites step says what to check). Older builds of a release stay in the gallery after
    the images stack moves on (Image Builder writes the versions; the stack manages templates, not versions),
    so a build below the stack's current one is taken; one above it has not been built yet.
    """
    name = images_stack_name(cluster)
    if "/" in cluster.node_images.images_stack and not stack_file(stacks_dir, name).is_file():
        return
    try:
        other = load_stack(stacks_dir, name)
    except ConfigError as err:
        raise ConfigError(
            f"{KEY}.images_stack: cannot read images stack {name!r} ({err}): add its stack file "
            "(kind: images) or name the images stack this cluster boots from"
        ) from None
    if not isinstance(other, ImagesStack):
        raise ConfigError(f"{KEY}.images_stack: {name!r} is a {other.kind} stack: name the images stack (kind: images)")
    spec = other.image_build
    if "gpu-node" in spec.roles:
        check_gpu_base(other.images, f"images stack {name!r}: ")
    built = release_of(spec.kubernetes_version)
    for role, image in images.items():
        if image.role not in spec.roles:
            raise ConfigError(
                f"{KEY}: images stack {name!r} builds no {image.role} image, which {role} hosts boot: add "
                f"{image.role} to image_build.roles in {stack_file(stacks_dir, name).name}"
            )
        build = int(image.version.rsplit(".", 1)[1])
        if built == release and build > spec.build:
            raise ConfigError(
                f"{KEY}: {image.role} image {image.version} is not built yet (images stack {name!r} builds "
                f"{gallery_version(built, spec.build)}): raise image_build.build there to {build} and deploy it "
                f"first, or boot build {spec.build}"
            )
        # A release the images stack has moved past keeps its builds in the gallery; a newer one is not built.
        if built != release and _newer(release, built):
            raise ConfigError(
                f"{KEY}: the cluster runs Kubernetes {release}, but images stack {name!r} builds {built}: no "
                f"{image.role} image {image.version} exists yet; set image_build.kubernetes_version: {release} "
                "there and deploy it first"
            )


def check_gpu_base(images: ImagesConfig, where: str = "") -> None:
    """ConfigError when the GPU base is not in the table, or its DCGM host engine is another major version than
    the cluster's DCGM clients: dcgm-exporter and the preflight's dcgmi would fail on every GPU node."""
    base = gpu_base(images.gpu)
    if base.dcgm.split(".")[0] != DCGM.split(".")[0]:
        raise ConfigError(
            f"{where}{PROJECT}:images.gpu.version: {images.gpu.version} brings DCGM {base.dcgm}, but the cluster's "
            f"DCGM clients (dcgm-exporter, dcgmi) are DCGM {DCGM}, another major version: pin a GPU base with DCGM "
            f"{DCGM.split('.')[0]}.x, or move the clients in modules/cluster/images.py to its release"
        )


def _newer(a: str, b: str) -> bool:
    return tuple(int(x) for x in a.split(".")) > tuple(int(x) for x in b.split("."))
