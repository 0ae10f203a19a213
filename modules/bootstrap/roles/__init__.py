"""What each node role boots with: files, data disk, boot steps, restart map (pure; no secrets inside).

A ``NodeBundle`` names the secrets it needs (``SecretFile``); ``delivery.document`` fills them in
and the result is the host's Key Vault secret (``agk render`` writes the same files for
inspection). Every path comes from ``layout.PATHS`` and every port from ``context.PORTS``, passed to
the templates.

Boot order on every host: cloud-init writes the small stable bootstrap from customData (userdata.py)
and runs it; it fetches the bundle, writes every file, formats and mounts the data disk (cloud-init,
before that), then runs the boot steps through ``agk-step``. Package postinst scripts start no
service while ``policy-rc.d`` denies it: the steps install every package first, then lift the
denial and start the units in dependency order. Units carry their own ordering
(``Before=``/``After=``), so later boots keep the same order without cloud-init. The last step
starts ``agk-sync.timer``: from then on the host re-reads its bundle every hour and restarts what
reads a changed file (``restart_map``).

One file per role (etcd.py, apiserver.py, pool.py, prometheus.py, nat.py), over what several roles share
(parts.py) and the bundle's own types (bundle.py); upkeep.py adds what keeps a bundle reaching its host.
"""

from __future__ import annotations

from modules.bootstrap.context import BootstrapContext
from modules.bootstrap.roles.apiserver import apiserver_bundle
from modules.bootstrap.roles.bundle import POOL_ROLES, ROLES, NodeBundle, Role, names
from modules.bootstrap.roles.etcd import etcd_bundle
from modules.bootstrap.roles.nat import nat_bundle
from modules.bootstrap.roles.pool import pool_bundle
from modules.bootstrap.roles.prometheus import prometheus_bundle
from modules.bootstrap.roles.upkeep import delivered

__all__ = ["POOL_ROLES", "ROLES", "NodeBundle", "Role", "bundle", "names"]


def bundle(ctx: BootstrapContext, role: Role, name: str) -> NodeBundle:
    """Everything host (or pool) ``name`` of ``role`` boots with."""
    if name not in names(ctx, role):
        raise KeyError(f"{role} {name!r} is not in cluster {ctx.cluster}: use one of {', '.join(names(ctx, role))}")
    return delivered(ctx, _role_bundle(ctx, role, name))


def _role_bundle(ctx: BootstrapContext, role: Role, name: str) -> NodeBundle:
    if role == "etcd":
        return etcd_bundle(ctx, ctx.etcd, name)
    if role == "events-etcd":
        assert ctx.events_etcd is not None
        return etcd_bundle(ctx, ctx.events_etcd, name)
    if role == "apiserver":
        return apiserver_bundle(ctx, name)
    if role == "prometheus":
        return prometheus_bundle(ctx, name)
    if role == "nat":
        return nat_bundle(ctx)
    return pool_bundle(ctx, ctx.pool(name))
