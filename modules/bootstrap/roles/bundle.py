"""What a role's bundle is: the roles, the ``NodeBundle`` value with its restart map and gates, and
which hosts (or pools) boot as each role.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from modules.bootstrap.context import (
    BootstrapContext,
    PoolRole,
)
from modules.bootstrap.node_files import FactFile, NodeFile, SecretFile
from modules.bootstrap.steps import Step

Role = Literal["etcd", "events-etcd", "apiserver", "gpu-node", "system-node", "prometheus", "nat"]
ROLES: tuple[Role, ...] = ("etcd", "events-etcd", "apiserver", "gpu-node", "system-node", "prometheus", "nat")
POOL_ROLES: frozenset[Role] = frozenset(get_args(PoolRole))
"""The roles that boot as scale-set pools (one bundle per pool, not per host)."""


@dataclass(frozen=True)
class DataDisk:
    device: str
    label: str
    mount: str


Action = Literal["restart", "reload", "command", "static-pod"]
GateKind = Literal["etcd", "apiserver"]


@dataclass(frozen=True)
class Restart:
    """What a running host does when one of ``paths`` changed in its bundle (``sync.py run``)."""

    unit: str
    """systemd unit (static pods: the pod's name)."""
    action: Action
    """``restart``/``reload`` the unit, run ``command``, or ``static-pod``: nothing, the manifest's
    files hash changed with its files and the kubelet recreates the pod."""
    paths: tuple[str, ...]
    gate: Literal["", "etcd", "apiserver"] = ""
    """Only while the rest of the group can spare this host (modules/bootstrap/host/gates.py)."""
    command: str = ""


@dataclass(frozen=True)
class Gate:
    """The group a gated restart asks first: this host and every member's health URL."""

    kind: GateKind
    self_name: str
    members: tuple[tuple[str, str], ...]
    """(host, URL): etcd's metrics listener (/health), the API server's secure port (/readyz)."""
    ca: str = ""
    """The CA file that verifies the API servers' certificates."""


@dataclass(frozen=True)
class NodeBundle:
    role: Role
    name: str
    """Host name (fixed hosts) or pool name (scale sets)."""
    hostname: str | None
    packages: tuple[str, ...]
    """Installed by the first boot step (the list is also the step's command)."""
    files: tuple[NodeFile, ...]
    secrets: tuple[SecretFile, ...]
    disk: DataDisk | None
    steps: tuple[Step, ...]
    """The boot steps, in order (runcmd)."""
    before_steps: tuple[str, ...] = ()
    """Plain runcmd lines ahead of the steps (starting the boot health endpoint that reports them)."""
    restarts: tuple[Restart, ...] = ()
    """The restart map: what a running host restarts when a file changes (``restart_map``)."""
    gates: tuple[Gate, ...] = ()
    facts: tuple[FactFile, ...] = ()
    """Files of deploy-time values (FactFile)."""

    @property
    def runcmd(self) -> tuple[str, ...]:
        return (*self.before_steps, *(s.runcmd for s in self.steps))

    def file(self, rel: str) -> NodeFile:
        for f in self.files:
            if f.rel == rel:
                return f
        raise KeyError(rel)


def names(ctx: BootstrapContext, role: Role) -> tuple[str, ...]:
    """Hosts (or pools) that boot as ``role``; empty when the cluster has none."""
    if role == "etcd":
        return tuple(m.name for m in ctx.etcd.members)
    if role == "events-etcd":
        return tuple(m.name for m in ctx.events_etcd.members) if ctx.events_etcd else ()
    if role == "apiserver":
        return tuple(h.name for h in ctx.control_plane.apiservers)
    if role == "prometheus":
        return tuple(h.name for h in ctx.prometheus.hosts)
    if role == "nat":
        return (ctx.nat.name,)
    return tuple(p.name for p in ctx.pools if p.role == role)
