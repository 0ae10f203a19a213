"""What an etcd member needs for scheduled snapshots: the settings file, the unit and its timer, the host
library they run, and the alert rules on snapshot age (pure).

Only the main etcd cluster carries ``EtcdCluster.backup``; the events etcd renders none of this (its events
expire within an hour and nothing needs them after a restore: modules/stackplan/config.py ``EtcdConfig.backup``).
How one snapshot per interval is chosen among the members: modules/bootstrap/host/etcd_snapshot.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from modules.bootstrap.context import BootstrapContext, EtcdBackup, EtcdCluster
from modules.bootstrap.host import boot as host_boot
from modules.bootstrap.host import etcd_snapshot
from modules.bootstrap.layout import PATHS
from modules.bootstrap.monitoring import ETCD_BACKUP_STALE_INTERVALS
from modules.bootstrap.node_files import FactFile, NodeFile, host_program
from modules.bootstrap.steps import Step, start
from modules.bootstrap.templating import render

LIBRARY = ("blob.py", "etcd_snapshot.py", "etcd_restore.py")
"""Host programs only a backed-up member needs; imds.py comes with every host's (roles/upkeep.py HOST_PROGRAMS)."""
SNAPSHOT_UNIT = "agk-etcd-snapshot.service"
SNAPSHOT_TIMER = "agk-etcd-snapshot.timer"
SPOOL = "/var/lib/agk/etcd-snapshot"
"""Snapshots are written here (the OS disk, not etcd's data disk: etcd's fsyncs keep their disk alone)."""
TEXTFILE_DIR = PATHS.node_exporter_textfiles
"""Debian's and Ubuntu's prometheus-node-exporter reads this directory by default
(``--collector.textfile.directory``, built in by the package; the textfile collector is on by default)."""
ACCOUNT_URL_FACT = "etcd-backup-url"
"""The deploy-time value the cluster stack fills in: the storage account's blob service URL."""
MIN_TIMEOUT_S = 900


def on_calendar(every_minutes: int, index: int, members: int) -> str:
    """systemd ``OnCalendar`` for member ``index`` of ``members``: every ``every_minutes`` on the wall clock
    (synchronised on Azure VMs), shifted by ``index / members`` of an interval, so the members' runs are
    spread evenly and the next member is due one offset after the first."""
    offset = index * every_minutes * 60 // members
    if 60 % every_minutes == 0:
        minute, second = divmod(offset, 60)
        repeat = f"/{every_minutes}" if every_minutes < 60 else ""
        return f"*-*-* *:{minute:02d}{repeat}:{second:02d}"
    if every_minutes % 60 or 24 % (every_minutes // 60):
        raise ValueError(f"every_minutes {every_minutes}: use a divisor of 60 or whole hours that divide 24")
    hours = every_minutes // 60
    hour, rest = divmod(offset, 3600)
    minute, second = divmod(rest, 60)
    repeat = f"/{hours}" if hours < 24 else ""
    return f"*-*-* {hour:02d}{repeat}:{minute:02d}:{second:02d}"


def _timeout_s(backup: EtcdBackup) -> int:
    return max(MIN_TIMEOUT_S, backup.every_minutes * 60)


@dataclass(frozen=True)
class MemberBackup:
    """What member ``name``'s bundle gets for snapshots (all empty when its etcd is not backed up)."""

    files: tuple[NodeFile, ...] = ()
    facts: tuple[FactFile, ...] = ()
    """The storage account's URL, known at deploy."""
    steps: tuple[Step, ...] = ()


def member_files(ctx: BootstrapContext, etcd: EtcdCluster, name: str) -> MemberBackup:
    """Files, deploy-time facts and boot steps for member ``name``."""
    backup = etcd.backup
    if backup is None:
        return MemberBackup()
    index = [m.name for m in etcd.members].index(name)
    members = len(etcd.members)
    settings = render(
        "etcd-backup.json.j2",
        cluster=ctx.cluster,
        etcd_role=etcd.role,
        members=members,
        every_minutes=backup.every_minutes,
        container=backup.container,
        etcd_config=PATHS.etcd_config,
        pki_dir=PATHS.etcd_pki,
        spool=SPOOL,
        textfile=f"{TEXTFILE_DIR}/agk_etcd_backup.prom",
        account_url_file=etcd_snapshot.ACCOUNT_URL_FILE,
        host_config=host_boot.HOST_CONFIG,
        etcd_bin=PATHS.etcd_bin,
    )
    service = render(
        "agk-etcd-snapshot.service.j2",
        lib=host_boot.LIB,
        settings=etcd_snapshot.SETTINGS,
        timeout_s=_timeout_s(backup),
        state_dirs=" ".join(d.removeprefix("/var/lib/") for d in (SPOOL, TEXTFILE_DIR)),
    )
    timer = render(
        "agk-etcd-snapshot.timer.j2",
        every_minutes=backup.every_minutes,
        index=index,
        members=members,
        calendar=on_calendar(backup.every_minutes, index, members),
    )
    files = (
        NodeFile(etcd_snapshot.SETTINGS, "etcd-backup.json", settings),
        NodeFile(PATHS.unit(SNAPSHOT_UNIT), f"systemd/{SNAPSHOT_UNIT}", service),
        NodeFile(PATHS.unit(SNAPSHOT_TIMER), f"systemd/{SNAPSHOT_TIMER}", timer),
        *(host_program(lib) for lib in LIBRARY),
    )
    return MemberBackup(
        files,
        (FactFile(etcd_snapshot.ACCOUNT_URL_FILE, ACCOUNT_URL_FACT),),
        (Step("etcd-backup-timer", start(SNAPSHOT_TIMER)),),
    )


def alert_rules(ctx: BootstrapContext, **common: Any) -> dict[str, str]:
    """rules/etcd-backup.yml when the main etcd is backed up (``common``: the rule templates' helpers,
    severity and runbook, roles/prometheus.py alert_rules)."""
    backup = ctx.etcd.backup
    if backup is None:
        return {}
    text = render(
        "rules/etcd-backup.yml.j2",
        etcd_role=ctx.etcd.role,
        every_minutes=backup.every_minutes,
        stale_intervals=ETCD_BACKUP_STALE_INTERVALS,
        stale_seconds=ETCD_BACKUP_STALE_INTERVALS * backup.every_minutes * 60,
        **common,
    )
    return {"etcd-backup.yml": text}
