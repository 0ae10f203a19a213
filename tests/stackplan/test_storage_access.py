"""Who may use which blob container (modules/stackplan/storage_access.py): a pure table, then the real program
under the mock runtime for a cluster that keeps storage but takes no etcd snapshots."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agk.plan.diff import resources_of
from modules.stackplan.config import BACKUP_CONTAINER, ClusterConfig
from modules.stackplan.storage_access import Access, storage_access
from tests.plan.changed_stacks import cluster, export, stack_folder

GROUP = "0b7c6a55-1f0e-4a51-9d6b-2c1f3e4d5a6b"


def _cluster(**changes: Any) -> ClusterConfig:
    base: dict[str, Any] = {
        "name": "cl",
        "service_cidr": "10.96.0.0/16",
        "system_pool": {"vm_size": "Standard_D8ds_v5", "nodes": 3},
        "gpu_pools": {"h100": {"vm_size": "Standard_ND96isr_H100_v5", "nodes": 2}},
    }
    return ClusterConfig.model_validate({**base, **changes})


def test_pools_groups_teams_and_etcd_members_each_get_their_own_rows() -> None:
    storage = {
        "containers": {
            "datasets": {"gpu_nodes": "read", "reader_groups": [GROUP]},
            "scratch": {"gpu_nodes": "none"},
        }
    }
    plan = storage_access(_cluster(storage=storage), ["h100", "a100"], ["vision"], ["cl-etcd-0", "cl-etcd-1"])
    assert plan is not None
    assert plan.containers == ("datasets", "scratch", "vision-datasets", "vision-checkpoints", BACKUP_CONTAINER)
    assert plan.grants == {
        "datasets": (
            Access("h100", "pool", "h100", "read"),
            Access("a100", "pool", "a100", "read"),
            Access(f"group-{GROUP}", "group", GROUP, "read"),
        ),
        "scratch": (),
        "vision-datasets": (Access("team-vision", "team", "vision", "read-write"),),
        "vision-checkpoints": (Access("team-vision", "team", "vision", "read-write"),),
        BACKUP_CONTAINER: (
            Access("cl-etcd-0", "etcd", "cl-etcd-0", "read-write"),
            Access("cl-etcd-1", "etcd", "cl-etcd-1", "read-write"),
        ),
    }
    assert plan.retention_days == {BACKUP_CONTAINER: 14}


def test_no_storage_account_plans_nothing() -> None:
    config = _cluster(storage={"enabled": False}, etcd={"backup": {"enabled": False}})
    assert storage_access(config, ["h100"], [], ["cl-etcd-0"]) is None


def test_without_snapshots_the_backup_container_has_no_rows() -> None:
    plan = storage_access(_cluster(etcd={"backup": {"enabled": False}}), ["h100"], [], ["cl-etcd-0"])
    assert plan is not None
    assert BACKUP_CONTAINER not in plan.containers
    assert BACKUP_CONTAINER not in plan.grants
    assert plan.retention_days == {}


def test_a_cluster_without_etcd_snapshots_plans(tmp_path: Path) -> None:
    # Before the grants were planned, the program granted the etcd members the backup container whether or not
    # it created it, and this plan failed with a KeyError ('etcd-backups') inside the storage component.
    def no_snapshots(config: dict[str, Any]) -> None:
        cluster(config).setdefault("etcd", {})["backup"] = {"enabled": False}

    resources = resources_of(export(stack_folder(tmp_path / "stacks", "dev", no_snapshots)))
    containers = [r["inputs"]["containerName"] for r in resources if r["type"].endswith(":BlobContainer")]
    assert "datasets" in containers and BACKUP_CONTAINER not in containers
    grants = [r["urn"] for r in resources if r["type"].endswith(":RoleAssignment")]
    assert grants and not [u for u in grants if BACKUP_CONTAINER in u]
