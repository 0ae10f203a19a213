"""Who may use which blob container of a cluster's storage account: the plan behind the account's role
assignments (modules/azure/storage.py turns each row into one, scoped to its container).

Keys are shared off: every reader and writer is a principal with a blob data role on one container
(learn.microsoft.com storage/blobs/assign-azure-role-data-access: "scope ... to the container"). Who the
principals are is decided here; their object ids exist only once Azure has made them, so each row names
its principal by what the program builds it as.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from modules.identity.plan import team_containers
from modules.stackplan.config import BACKUP_CONTAINER, ClusterConfig

PrincipalKind = Literal["pool", "group", "team", "etcd"]
"""A GPU pool's managed identity, an Entra group (by object id), a team's workload identity, an etcd member's
identity."""


@dataclass(frozen=True)
class Access:
    """One principal's blob data role on one container."""

    key: str
    """Stable name of the principal in this stack: names the role assignment."""
    kind: PrincipalKind
    principal: str
    """The pool, the group's object id, the team or the etcd member."""
    access: Literal["read", "read-write"]


@dataclass(frozen=True)
class StorageAccess:
    """The account's containers, who may use each, and how long each keeps its blobs."""

    containers: tuple[str, ...]
    grants: Mapping[str, tuple[Access, ...]]
    retention_days: Mapping[str, int]


def storage_access(
    cluster: ClusterConfig, gpu_pools: Sequence[str], teams: Sequence[str], etcd_members: Sequence[str]
) -> StorageAccess | None:
    """``None`` when the cluster has no storage account. ``teams``: the teams with a workload identity (none
    without ``cluster.identity``); each gets its own containers, read-write, and nothing else. Each etcd member
    writes its own snapshots into the backup container; nothing else can."""
    if not cluster.storage.enabled:
        return None
    grants: dict[str, tuple[Access, ...]] = {}
    for container, rule in cluster.storage.containers.items():
        nodes = rule.gpu_nodes
        pools = [Access(p, "pool", p, nodes) for p in gpu_pools] if nodes != "none" else []
        groups = [Access(f"group-{g}", "group", g, "read") for g in rule.reader_groups]
        grants[container] = (*pools, *groups)
    own = {c: (Access(f"team-{t}", "team", t, "read-write"),) for t in teams for c in team_containers(t)}
    backup = cluster.etcd.backup
    snapshots = {BACKUP_CONTAINER: tuple(Access(m, "etcd", m, "read-write") for m in etcd_members)}
    return StorageAccess(
        containers=(*cluster.storage.containers, *own, *([BACKUP_CONTAINER] if backup.enabled else [])),
        grants={**grants, **own, **(snapshots if backup.enabled else {})},
        retention_days={BACKUP_CONTAINER: backup.retention_days} if backup.enabled else {},
    )
