"""The Azure VM sizes this toolkit knows, with the facts its planners need.

Figures from the Azure VM size pages (learn.microsoft.com/azure/virtual-machines/sizes/...);
``max_nics`` is the documented NIC limit, ``local_nvme_gib`` the temporary NVMe capacity. Quota
families from the Resource SKUs ``family`` field (as published in the OpenShift "tested instance
types" table and microsoft/aspire's AksNodeVmSizes.cs).
"""

from __future__ import annotations

from typing import NamedTuple

from modules.errors import ConfigError

# NamedTuple, not dataclass: the limits table (imported by `subnet-calc size`, which must start
# instantly) derives its vCPU quota rows from the families below.


class Sku(NamedTuple):
    name: str
    family: str
    """The regional vCPU quota family as the Resource SKUs API names it (``az vm list-skus``: ``family``);
    `az vm list-usage` may spell it with other casing or spaces, so compare case- and space-insensitively."""
    vcpus: int
    memory_gib: int
    gpus: int = 0
    gpu_model: str = ""
    ib_links: int = 0
    """InfiniBand ports (one per GPU on the ND sizes); 0: none."""
    local_nvme_gib: int = 0
    max_nics: int = 8
    ib_gbps: int = 0
    """Each InfiniBand port's rate: 400 (NDR) on ND H100/H200 v5, 200 (HDR) on ND A100 v4 (the size pages:
    "8 x 400 Gb/s NVIDIA Quantum-2 CX7 InfiniBand", "8 x 200 Gb/s Mellanox HDR InfiniBand")."""

    @property
    def infiniband(self) -> bool:
        return self.ib_links > 0


SKUS: dict[str, Sku] = {
    s.name: s
    for s in (
        Sku("Standard_ND96isr_H100_v5", "standardNDSH100v5Family", 96, 1900, 8, "H100", 8, 28000, 8, 400),
        Sku("Standard_ND96isr_H200_v5", "standardNDISRH200V5Family", 96, 1850, 8, "H200", 8, 28000, 8, 400),
        Sku("Standard_ND96amsr_A100_v4", "standardNDAMSv4_A100Family", 96, 1900, 8, "A100-80GB", 8, 6400, 8, 200),
        Sku("Standard_ND96asr_v4", "Standard NDASv4_A100 Family", 96, 900, 8, "A100-40GB", 8, 6000, 8, 200),
        Sku("Standard_NC24ads_A100_v4", "StandardNCADSA100v4Family", 24, 220, 1, "A100-80GB", 0, 958, 2),
        Sku("Standard_D2ds_v5", "standardDDSv5Family", 2, 8, max_nics=2),
        Sku("Standard_D4ds_v5", "standardDDSv5Family", 4, 16, max_nics=2),
        Sku("Standard_D8ds_v5", "standardDDSv5Family", 8, 32, max_nics=4),
        Sku("Standard_D16ds_v5", "standardDDSv5Family", 16, 64, max_nics=8),
        Sku("Standard_D32ds_v5", "standardDDSv5Family", 32, 128, max_nics=8),
        Sku("Standard_E8ds_v5", "standardEDSv5Family", 8, 64, max_nics=4),
        Sku("Standard_E16ds_v5", "standardEDSv5Family", 16, 128, max_nics=8),
        Sku("Standard_E20ds_v5", "standardEDSv5Family", 20, 160, max_nics=8),
        Sku("Standard_E32ds_v5", "standardEDSv5Family", 32, 256, max_nics=8),
        Sku("Standard_E64ds_v5", "standardEDSv5Family", 64, 512, max_nics=8),
        Sku("Standard_E96ds_v5", "standardEDSv5Family", 96, 672, max_nics=8),
        Sku("Standard_L8s_v3", "standardLSv3Family", 8, 64, local_nvme_gib=1788, max_nics=4),
        Sku("Standard_L16s_v3", "standardLSv3Family", 16, 128, local_nvme_gib=3576, max_nics=8),
        Sku("Standard_L32s_v3", "standardLSv3Family", 32, 256, local_nvme_gib=7152, max_nics=8),
    )
}


def sku(name: str) -> Sku:
    """The SKU called ``name``; unknown sizes are an error naming the known ones."""
    try:
        return SKUS[name]
    except KeyError:
        raise ConfigError(
            f"VM size {name!r} is unknown: use one of {', '.join(sorted(SKUS))} (or add it to modules/vm_sizing/skus.py)"
        ) from None


def gpus_per_vm(name: str) -> int:
    return sku(name).gpus
