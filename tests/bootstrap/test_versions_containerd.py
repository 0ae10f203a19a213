"""The versions table's containerd column: the oldest containerd each Kubernetes minor supports, and
the refusal of a minor whose containerd the pinned images cannot meet (exact text)."""

from __future__ import annotations

import pytest

from modules.bootstrap import versions
from modules.errors import ConfigError
from modules.images.config import UBUNTU_2404, UBUNTU_HPC_2204

PINNED = {"general": UBUNTU_2404["version"], "gpu": UBUNTU_HPC_2204["version"]}


def test_every_minor_names_its_oldest_containerd() -> None:
    # "The last Kubernetes release to offer this support [containerd 1.x] will be v1.35" (KEP-4033).
    assert {m: r.containerd_min for m, r in versions.TABLE.items()} == {"1.35": "1.7", "1.36": "2.0", "1.37": "2.0"}


def test_the_pinned_images_containerd_is_known() -> None:
    # A bump of infra's default images must say which containerd the new image ships.
    assert set(PINNED.values()) <= set(versions.IMAGE_CONTAINERD)


def test_the_default_minor_boots_on_the_pinned_images() -> None:
    versions.check_containerd(versions.DEFAULT_MINOR, PINNED)


@pytest.mark.parametrize(
    ("minor", "images", "message"),
    [
        (
            "1.36",
            PINNED,
            "azure-gpu-k8s:cluster.kubernetes_version: Kubernetes 1.36 needs containerd 2.0 or newer, but "
            "images.general 24.04.202609040 ships containerd 1.7: use kubernetes_version 1.35, or pin images.general "
            "to an image with containerd 2.0 or newer (and add it to modules/bootstrap/versions.py IMAGE_CONTAINERD)",
        ),
        (
            "1.37",
            {"gpu": UBUNTU_HPC_2204["version"]},
            "azure-gpu-k8s:cluster.kubernetes_version: Kubernetes 1.37 needs containerd 2.0 or newer, but "
            "images.gpu 22.04.2024102301 ships containerd 1.7: use kubernetes_version 1.35, or pin images.gpu "
            "to an image with containerd 2.0 or newer (and add it to modules/bootstrap/versions.py IMAGE_CONTAINERD)",
        ),
    ],
)
def test_a_minor_the_images_containerd_cannot_run_is_refused(minor: str, images: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        versions.check_containerd(minor, images)
    assert str(err.value) == message


def test_an_image_the_table_does_not_know_is_left_to_the_boot() -> None:
    # Its nodes' pin-containerd.sh checks the containerd they really have.
    versions.check_containerd("1.36", {"gpu": "22.04.2099010101"})
