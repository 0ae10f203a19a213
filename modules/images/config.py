"""The images config of a stack file: the pinned marketplace images hosts boot (``images``) and what an images
stack builds (``image_build``). Here, with the recipes that read them, so the images layer needs nothing above it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pydantic import Field, field_validator

from modules.config_model import PROJECT, StrictModel
from modules.errors import ConfigError
from modules.images import IMAGE_ROLES, ImageRole


class ImageConfig(StrictModel):
    """A marketplace image, pinned: scale-outs and replacements boot the same driver and IB stack."""

    publisher: str = Field(min_length=1, description="Image publisher.")
    offer: str = Field(min_length=1, description="Image offer.")
    sku: str = Field(min_length=1, description="Image SKU.")
    version: str = Field(
        description="Exact image version (`az vm image list --publisher P --offer O --sku S --all`); never 'latest'."
    )

    @field_validator("version")
    @classmethod
    def _pinned(cls, v: str) -> str:
        if not re.match(r"^[0-9]+\.[0-9]+\.[0-9]+$", v):
            raise ValueError(
                f"version {v!r} is not a pinned image version: use one like 24.04.2026072901 "
                "('latest' would give new scale-set instances whatever is newest)"
            )
        return v


# Defaults (verify with `az vm image list ... --all` and raise them deliberately): Ubuntu 24.04 for
# the control plane (its etcd members run the versions table's upstream etcd, which the image build
# installs, never Ubuntu's etcd-server package: the 3.4 line, out of support), and Azure's
# HPC image for GPU nodes (NVIDIA driver, DOCA OFED/InfiniBand, DCGM, container toolkit preinstalled).
# Azure/azhpc-images tag ubuntu-hpc-<YYYYMMDDNN> is marketplace version 24.04.<YYYYMMDDNN> of sku 2404.
UBUNTU_2404 = {"publisher": "Canonical", "offer": "ubuntu-24_04-lts", "sku": "server", "version": "24.04.202609040"}
UBUNTU_HPC_2404 = {"publisher": "microsoft-dsvm", "offer": "ubuntu-hpc", "sku": "2404", "version": "24.04.2026072901"}


@dataclass(frozen=True)
class GpuBase:
    """What a pinned GPU base image brings that the cluster depends on, read from the image's own build."""

    driver: str
    """The NVIDIA driver (``modinfo -F version nvidia``): its branch must be in NVIDIA's support."""
    dcgm: str
    """DCGM (``dcgmi --version``): the host engine the cluster's DCGM clients share a major version with."""
    source: str
    """Where both were read (the image's build at its tag), so a reviewer can check them."""


GPU_BASES: dict[str, GpuBase] = {
    UBUNTU_HPC_2404["version"]: GpuBase(
        "580.173.02",
        "4.6.0",
        "Azure/azhpc-images tag ubuntu-hpc-2026072901 versions.json: nvidia.ubuntu24.04.x86_64.driver 580.173.02, "
        "dcgm.ubuntu24.04.x86_64 1:4.6.0-1 (components/install_dcgm.sh installs it and enables nvidia-dcgm); "
        "R580 is a Long Term Support Branch, end of life June 2028 (docs.nvidia.com/datacenter/tesla/drivers, "
        "Supported Drivers and CUDA Toolkit Versions)",
    ),
}
"""GPU base images by marketplace version (``images.gpu.version``). A GPU image is built only on a base listed
here, and its build stops when the base's driver or DCGM differs from the row
(modules/images/templates/build-image.sh.j2)."""


def gpu_base(image: ImageConfig, key: str = "images.gpu") -> GpuBase:
    """The row of ``image``; ConfigError naming the version when the table has none."""
    row = GPU_BASES.get(image.version)
    if row is None:
        raise ConfigError(
            f"{PROJECT}:{key}.version: {image.version} is not a known GPU base image: add its NVIDIA driver and "
            "DCGM versions (Azure/azhpc-images versions.json at the image's tag) to GPU_BASES in "
            f"modules/images/config.py, or use {UBUNTU_HPC_2404['version']}"
        )
    return row


class ImagesConfig(StrictModel):
    """The images every VM and scale set boots, by kind."""

    general: ImageConfig = Field(
        default_factory=lambda: ImageConfig(**UBUNTU_2404), description="Control plane, hosts, system nodes."
    )
    gpu: ImageConfig = Field(default_factory=lambda: ImageConfig(**UBUNTU_HPC_2404), description="GPU nodes.")


class ImageBuildConfig(StrictModel):
    """An ``images`` stack: one Azure Compute Gallery image per role, built by Azure VM Image Builder from the
    role's recipe (modules/images) for one Kubernetes release."""

    kubernetes_version: str = Field(
        description="The Kubernetes release the images' kubelet is: a supported minor (1.36) or its patch in the "
        "versions table (1.36.4)."
    )
    build: int = Field(
        ge=1,
        le=2_147_483_647,
        description="Build number of this release's images: each image version is <minor>.<patch>.<build> "
        "(1.36.4, build 3: 36.4.3). Raise it to rebuild the same release (new base image, security patches).",
    )
    roles: list[ImageRole] = Field(
        default_factory=lambda: list(IMAGE_ROLES), description="The image roles to build (default: every one)."
    )
    build_vm_size: str = Field(default="Standard_D4ds_v5", description="VM size of Image Builder's build VM.")
    replicas: int = Field(
        default=1,
        ge=1,
        le=100,
        description="Replicas of each image version in the stack's region (more serve "
        "more concurrent VM creations from one version).",
    )

    @field_validator("roles")
    @classmethod
    def _roles(cls, roles: list[ImageRole]) -> list[ImageRole]:
        if not roles:
            raise ValueError("roles is empty: list the image roles to build, or leave it out to build every one")
        if len(set(roles)) != len(roles):
            raise ValueError(f"roles {roles} name a role twice: list each once")
        return roles
