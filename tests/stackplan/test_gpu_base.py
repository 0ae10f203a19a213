"""Pure tier: the GPU base image the node image is built on is one the table knows, and its DCGM host engine is
the major version the cluster's DCGM clients speak (exact error text)."""

from __future__ import annotations

import pytest

from modules.cluster import images as cluster_images
from modules.errors import ConfigError
from modules.images import config
from modules.images.config import GpuBase, ImageConfig, ImagesConfig
from modules.stackplan.node_images import check_gpu_base


def _gpu(version: str) -> ImagesConfig:
    return ImagesConfig(gpu=ImageConfig(publisher="microsoft-dsvm", offer="ubuntu-hpc", sku="2404", version=version))


def test_the_default_gpu_base_passes() -> None:
    check_gpu_base(ImagesConfig())


def test_a_gpu_base_the_table_does_not_know_is_refused() -> None:
    with pytest.raises(ConfigError) as err:
        check_gpu_base(_gpu("22.04.2024102301"))
    assert str(err.value) == (
        "azure-gpu-k8s:images.gpu.version: 22.04.2024102301 is not a known GPU base image: add its NVIDIA driver "
        "and DCGM versions (Azure/azhpc-images versions.json at the image's tag) to GPU_BASES in "
        "modules/images/config.py, or use 24.04.2026072901"
    )


def test_a_gpu_base_of_another_dcgm_major_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    # The October 2024 image's facts (Azure/azhpc-images tag ubuntu-hpc-20241023: driver 560, DCGM 3.3.7).
    monkeypatch.setitem(config.GPU_BASES, "22.04.2024102301", GpuBase("560.35.03", "3.3.7", "test row"))
    with pytest.raises(ConfigError) as err:
        check_gpu_base(_gpu("22.04.2024102301"), "images stack 'images': ")
    assert str(err.value) == (
        "images stack 'images': azure-gpu-k8s:images.gpu.version: 22.04.2024102301 brings DCGM 3.3.7, but the "
        f"cluster's DCGM clients (dcgm-exporter, dcgmi) are DCGM {cluster_images.DCGM}, another major version: pin "
        "a GPU base with DCGM 4.x, or move the clients in modules/cluster/images.py to its release"
    )
