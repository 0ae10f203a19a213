"""Small stack files for `subnet-calc plan` tests: a hub and one or two cluster spokes."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

P = "azure-gpu-k8s"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHk8H1r0WwzGqP2nVqk6dZ1iF3y0b3sYwJ4cN8m2Xq7v test@example"
_COMMON: dict[str, Any] = {
    f"{P}:location": "eastus2",
    f"{P}:tags": {"owner": "t", "cost_center": "c"},
    f"{P}:admin": {"username": "azureuser", "ssh_public_keys": [KEY]},
}


def hub(space: str = "10.0.0.0/22") -> dict[str, Any]:
    return {
        f"{P}:kind": "hub",
        **copy.deepcopy(_COMMON),
        f"{P}:network": {"address_space": [space]},
        f"{P}:hub": {"bastion": True, "jump_hosts": 1},
    }


def cluster(name: str, space: str, service: str = "172.20.0.0/16", nodes: int = 4, max_pods: int = 30) -> dict[str, Any]:
    return {
        f"{P}:kind": "cluster",
        **copy.deepcopy(_COMMON),
        f"{P}:network": {"address_space": [space]},
        f"{P}:cluster": {
            "name": name,
            "hub_stack": "hub",
            "service_cidr": service,
            "system_pool": {"vm_size": "Standard_D8ds_v5", "nodes": 2, "max_pods": 30},
            "gpu_pools": {"h100": {"vm_size": "Standard_ND96isr_H100_v5", "nodes": nodes, "max_pods": max_pods}},
        },
    }


Edit = Callable[[dict[str, dict[str, Any]]], None]


def write(root: Path, edit: Edit | None = None) -> Path:
    """Write hub + `dev` (10.16.0.0/20) after ``edit`` changed the configs; returns the stacks dir."""
    stacks: dict[str, dict[str, Any]] = {"hub": hub(), "dev": cluster("dev", "10.16.0.0/20")}
    if edit is not None:
        edit(stacks)
    root.mkdir(parents=True, exist_ok=True)
    for name, config in stacks.items():
        (root / f"Pulumi.{name}.yaml").write_text(yaml.safe_dump({"config": config}, sort_keys=False))
    return root
