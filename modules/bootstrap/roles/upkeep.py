"""What every host also gets so its bundle keeps reaching it after the first boot: the image check, the
hourly sync with its gates and restart map, and on fixed hosts the certificate expiry report.
"""

from __future__ import annotations

import json
from dataclasses import replace

from modules.bootstrap import alerting, node_tokens
from modules.bootstrap.context import (
    ETCD_METRICS_PORT,
    PORTS,
    BootstrapContext,
)
from modules.bootstrap.host import boot as host_boot
from modules.bootstrap.layout import PATHS
from modules.bootstrap.node_files import NodeFile, host_program
from modules.bootstrap.roles.bundle import POOL_ROLES, Gate, NodeBundle, Restart, Role, names
from modules.bootstrap.roles.etcd import ETCD_UNIT
from modules.bootstrap.roles.parts import SYSCTL_STEP, unit_file
from modules.bootstrap.roles.pool import BOOT_HEALTH_UNIT, POOL_PROGRAMS, SCHEDULED_EVENTS_UNIT
from modules.bootstrap.steps import Step, start
from modules.bootstrap.templating import render

HOST_PROGRAMS = (
    "boot.py",
    "bundle.py",
    "files.py",
    "gates.py",
    "image.py",
    "imds.py",
    "node_token.py",
    "sync.py",
    "vault.py",
)
"""modules/bootstrap/host, shipped verbatim to /opt/agk/lib (the first five also in customData:
``host_boot.STAGE0``); the bundle always brings the current copies."""
SYNC_SERVICE = "agk-sync.service"
SYNC_TIMER = "agk-sync.timer"
SYNC_TIMEOUT_S = 30 * 60
SYNC_TIMER_STEP = Step("sync-timer", start(SYNC_TIMER))
SYNC_MINUTE = {"etcd": 0, "events-etcd": 4, "apiserver": 8, "prometheus": 12, "nat": 16}
"""Minute of the hour a role's first host syncs; the others follow at 60/count minutes apart, so two
hosts of one role never act together, and the roles are 4 minutes apart from each other."""


def sync_minute(ctx: BootstrapContext, role: Role, name: str) -> int | None:
    """The minute of the hour a fixed host's sync runs; None for pools (spread at random)."""
    if role not in SYNC_MINUTE:
        return None
    hosts = names(ctx, role)
    return (SYNC_MINUTE[role] + hosts.index(name) * (60 // len(hosts))) % 60


def _sync(ctx: BootstrapContext, role: Role, name: str) -> tuple[NodeFile, ...]:
    minute = sync_minute(ctx, role, name)
    spacing = 60 // len(names(ctx, role))
    service = render(
        "agk-sync.service.j2", role=role, name=name, sync=f"{host_boot.LIB}/sync.py", timeout_s=SYNC_TIMEOUT_S
    )
    timer = render("agk-sync.timer.j2", name=name, minute=minute, spacing=spacing)
    return (unit_file(SYNC_SERVICE, service), unit_file(SYNC_TIMER, timer), *(host_program(p) for p in HOST_PROGRAMS))


def _gates(ctx: BootstrapContext, role: Role, name: str) -> tuple[Gate, ...]:
    if role in ("etcd", "events-etcd"):
        etcd = ctx.etcd if role == "etcd" else ctx.events_etcd
        assert etcd is not None
        members = tuple((m.name, f"http://{m.ip}:{ETCD_METRICS_PORT}") for m in etcd.members)
        return (Gate("etcd", name, members),)
    if role == "apiserver":
        members = tuple((h.name, f"https://{h.ip}:{PORTS.apiserver}") for h in ctx.control_plane.apiservers)
        return (Gate("apiserver", name, members, ca=f"{PATHS.pki}/ca.crt"),)
    return ()


POOL_RUNTIME_FILES = frozenset(
    {PATHS.kubelet_config, PATHS.kubelet_dropin, PATHS.containerd_config, PATHS.containerd_dropin}
)
"""A pool's kubelet and containerd settings: its nodes take them when booted or reimaged, a few at a time
after a drain (README "Rolling a scale set"), never from the hourly sync (boot-only). Written or restarted
from the sync, they would roll the whole pool within the hour under running jobs, or load at the next
unplanned restart of an undrained node; and some changes (the CPU manager policy, the reserved CPUs) keep a
kubelet with CPU manager state from starting at all (kubernetes.io, "Control CPU Management Policies on
the Node": drain, remove cpu_manager_state, restart)."""


def _restart_for(path: str) -> Restart | None:
    """What reads ``path`` on a running host (None: only a boot step or the next boot reads it)."""
    if path.startswith(PATHS.manifests + "/"):
        pod = path.rsplit("/", 1)[1].removesuffix(".yaml")
        return Restart(pod, "static-pod", (path,), "apiserver" if pod == "kube-apiserver" else "")
    if path in (PATHS.etcd_config, ETCD_UNIT) or path.startswith(PATHS.etcd_pki + "/"):
        return Restart("etcd.service", "restart", (path,), "etcd")
    if path in (PATHS.kubelet_config, PATHS.kubelet_dropin):
        return Restart("kubelet.service", "restart", (path,))
    if path in (PATHS.containerd_config, PATHS.containerd_dropin):
        return Restart("containerd.service", "restart", (path,))
    if path == PATHS.unit("prometheus.service"):
        return Restart("prometheus.service", "restart", (path,))
    if path == PATHS.unit("alertmanager.service"):
        return Restart("alertmanager.service", "restart", (path,))
    # Grafana reads its settings and data sources at start; the dashboards' provider re-reads its folder.
    if path.startswith(("/etc/grafana/",)):
        return Restart("grafana-server.service", "restart", (path,))
    # SIGHUP re-reads alertmanager.yml; the receivers' secret files are read at each notification.
    if path == alerting.CONFIG_FILE:
        return Restart("alertmanager.service", "reload", (path,))
    # SIGHUP re-reads the configuration and rules; the scrape clients read their certificate and key
    # on every handshake (prometheus/common config.TLSConfig.getClientCertificate).
    if path == PATHS.prom_config or path.startswith((PATHS.prom_rules + "/", PATHS.prom_pki + "/")):
        return Restart("prometheus.service", "reload", (path,))
    if path in (PATHS.unit(BOOT_HEALTH_UNIT), PATHS.script("boot-health.py")):
        return Restart(BOOT_HEALTH_UNIT, "restart", (path,))
    if path in (PATHS.unit(SCHEDULED_EVENTS_UNIT), *(f"{host_boot.LIB}/{p}" for p in POOL_PROGRAMS)):
        return Restart(SCHEDULED_EVENTS_UNIT, "restart", (path,))
    if path == PATHS.sysctl:
        return Restart("sysctl", "command", (path,), command=SYSCTL_STEP.command)
    if path == PATHS.unit(SYNC_TIMER):
        return Restart(SYNC_TIMER, "restart", (path,))
    if path == PATHS.unit(alerting.SECRETS_TIMER):
        return Restart(alerting.SECRETS_TIMER, "restart", (path,))
    if path == PATHS.unit(CERT_EXPIRY_TIMER):
        return Restart(CERT_EXPIRY_TIMER, "restart", (path,))
    # The issuer's service, program, configuration and certificate are read afresh by each run.
    if path == PATHS.unit(node_tokens.ISSUER_TIMER):
        return Restart(node_tokens.ISSUER_TIMER, "restart", (path,))
    return None


# Order of a run's actions: settings first, the runtime before what runs on it, etcd last (it waits).
_ACTION_ORDER = ("command", "containerd.service", "kubelet.service", "static-pod", "reload", "restart", "etcd.service")


def restart_map(node: NodeBundle) -> tuple[Restart, ...]:
    """One entry per unit and action, listing every path of the bundle that it reads."""
    merged: dict[tuple[str, str], Restart] = {}
    read_again = [f.path for f in node.files if not f.boot_only] + [s.path for s in node.secrets]
    for path in read_again:
        found = _restart_for(path)
        if found is None:
            continue
        key = (found.unit, found.action)
        have = merged.get(key)
        merged[key] = replace(have, paths=(*have.paths, path)) if have else found

    def order(r: Restart) -> tuple[int, str]:
        slot = r.unit if r.unit in _ACTION_ORDER else r.action
        return _ACTION_ORDER.index(slot), r.unit

    return tuple(sorted(merged.values(), key=order))


CERT_EXPIRY_SERVICE = "agk-cert-expiry.service"
CERT_EXPIRY_TIMER = "agk-cert-expiry.timer"
CERT_EXPIRY_TEXTFILE = f"{PATHS.node_exporter_textfiles}/agk_certificates.prom"
CERT_DIRS = (PATHS.pki, PATHS.etcd_pki, PATHS.prom_pki)
"""Every directory a fixed host keeps certificates in (those a role lacks are simply empty)."""
CERT_EXPIRY_STEP = Step("cert-expiry-timer", start(CERT_EXPIRY_TIMER))


def _cert_expiry() -> tuple[NodeFile, ...]:
    """The certificate expiry report of a fixed host (host/cert_expiry.py). Pool nodes need none: their
    kubelets report their own client certificate (kubelet_certificate_manager_client_ttl_seconds) and the
    kube-proxy certificate and CA they carry are the same certificates the NAT host reports."""
    lib = host_boot.LIB
    service = render(
        "agk-cert-expiry.service.j2",
        lib=lib,
        textfile=CERT_EXPIRY_TEXTFILE,
        textfile_dir=PATHS.node_exporter_textfiles,
        dirs=CERT_DIRS,
    )
    return (
        unit_file(CERT_EXPIRY_SERVICE, service),
        unit_file(CERT_EXPIRY_TIMER, render("agk-cert-expiry.timer.j2")),
        host_program("cert_expiry.py"),
    )


IMAGE_EXPECTED = "/etc/agk/image-expected.json"
"""The node image a host's bundle was made for (``image.py`` compares the image's manifest with it)."""


def image_check(ctx: BootstrapContext, role: Role) -> tuple[NodeFile, Step]:
    """The expectation file and the first boot step of every role: the host booted its role's node image, of the
    cluster's release, with the versions table's rows (host/image.py). Not retried: a wrong image stays wrong."""
    expected = ctx.node_images.get(role)
    if expected is None:
        raise KeyError(
            f"no node image for role {role}: the context names one per role (modules/stackplan/boot_context.py)"
        )
    text = json.dumps(expected.to_json(), indent=2, sort_keys=True) + "\n"
    return (
        NodeFile(IMAGE_EXPECTED, "image-expected.json", text),
        Step("image", f"python3 {host_boot.LIB}/image.py {IMAGE_EXPECTED}", tries=1),
    )


def delivered(ctx: BootstrapContext, node: NodeBundle) -> NodeBundle:
    """``node`` with what keeps its bundle reaching it: the image check first, the sync units, the host programs,
    the timer's boot step, the restart map and the gates; fixed hosts also report their certificates' expiry."""
    expected, check = image_check(ctx, node.role)
    files = (expected, *node.files)
    steps = (check, *node.steps)
    if node.role in POOL_ROLES:
        files = tuple(replace(f, boot_only=True) if f.path in POOL_RUNTIME_FILES else f for f in files)
    else:
        files = (*files, *_cert_expiry())
        steps = (*steps, CERT_EXPIRY_STEP)
    withsync = replace(
        node,
        files=(*files, *_sync(ctx, node.role, node.name)),
        steps=(*steps, SYNC_TIMER_STEP),
        gates=_gates(ctx, node.role, node.name),
    )
    return replace(withsync, restarts=restart_map(withsync))
