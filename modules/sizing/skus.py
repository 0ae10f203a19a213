"""The Azure VM sizes this toolkit knows, with the facts its planners need.

Figures from the Azure VM size pages (learn.microsoft.com/azure/virtual-machines/sizes/...);
``max_nics`` is the documented NIC limit, ``local_nvme_gib`` the temporary NVMe capacity.
"""

from __future__ import annotations

from dataclasses import dataclass

from modules.errors import ConfigError


@dataclass(frozen=True)
class Sku:
    name: str
    vcpus: int
    memory_gib: int
    gpus: int = 0
    gpu_model: str = ""
    infiniband: bool = False
    local_nvme_gib: int = 0
    max_nics: int = 8
    premium_storage: bool = True


SKUS: dict[str, Sku] = {
    s.name: s
    for s in (
        Sku("Standard_ND96isr_H100_v5", 96, 1900, 8, "H100", True, 28000, 8),
        Sku("Standard_ND96isr_H200_v5", 96, 1850, 8, "H200", True, 28000, 8),
        Sku("Standard_ND96amsr_A100_v4", 96, 1900, 8, "A100-80GB", True, 6400, 8),
        Sku("Standard_ND96asr_v4", 96, 900, 8, "A100-40GB", True, 6000, 8),
        Sku("Standard_NC24ads_A100_v4", 24, 220, 1, "A100-80GB", False, 958, 2),
        Sku("Standard_D2ds_v5", 2, 8, max_nics=2),
        Sku("Standard_D4ds_v5", 4, 16, max_nics=2),
        Sku("Standard_D8ds_v5", 8, 32, max_nics=4),
        Sku("Standard_D16ds_v5", 16, 64, max_nics=8),
        Sku("Standard_D32ds_v5", 32, 128, max_nics=8),
        Sku("Standard_E8ds_v5", 8, 64, max_nics=4),
        Sku("Standard_E16ds_v5", 16, 128, max_nics=8),
        Sku("Standard_E32ds_v5", 32, 256, max_nics=8),
        Sku("Standard_E64ds_v5", 64, 512, max_nics=8),
        Sku("Standard_E96ds_v5", 96, 672, max_nics=8),
        Sku("Standard_L8s_v3", 8, 64, local_nvme_gib=1788, max_nics=4),
        Sku("Standard_L16s_v3", 16, 128, local_nvme_gib=3576, max_nics=8),
        Sku("Standard_L32s_v3", 32, 256, local_nvme_gib=7152, max_nics=8),
    )
}


def sku(name: str) -> Sku:
    """The SKU called ``name``; unknown sizes are an error naming the known ones."""
    try:
        return SKUS[name]
    except KeyError:
        raise ConfigError(
            f"VM size {name!r} is unknown: use one of {', '.join(sorted(SKUS))} (or add it to modules/sizing/skus.py)"
        ) from None


def gpus_per_vm(name: str) -> int:
    return sku(name).gpus
