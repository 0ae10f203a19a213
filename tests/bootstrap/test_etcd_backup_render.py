"""What the etcd members get for snapshots: systemd reads the unit and timer (`systemd-analyze verify`),
the timers fire every interval with the members evenly offset (`systemd-analyze calendar`), disabled
backups and the events etcd render nothing, and a bad interval is one clear line."""

from __future__ import annotations

import itertools
import re
import subprocess
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from modules.bootstrap.context import BootstrapContext
from modules.bootstrap.etcd_backup import LIBRARY, SNAPSHOT_TIMER, SNAPSHOT_UNIT, on_calendar
from modules.bootstrap.roles import bundle, names
from modules.bootstrap.roles.prometheus import alert_rules
from modules.errors import ConfigError
from modules.stackplan.config import BACKUP_INTERVALS, parse_config
from modules.stackplan.prepare import prepare_cluster

from .conftest import STACKS, context
from .test_config import P, _dev
from .test_realtool_units import _root

BASE = "2027-01-03 23:59:59 UTC"
"""One second before midnight: member 0 fires first, at 00:00:00."""


def _fires(analyze: str, expression: str, count: int) -> list[float]:
    run = subprocess.run(
        [analyze, "calendar", f"--base-time={BASE}", f"--iterations={count}", expression],
        capture_output=True,
        text=True,
        check=False,
        env={"TZ": "UTC", "PATH": "/usr/bin:/bin"},
    )
    assert run.returncode == 0, run.stderr
    stamps = re.findall(r"(?:Next elapse|Iter\. #\d+): \w+ (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) UTC", run.stdout)
    assert len(stamps) == count, run.stdout
    return [datetime.strptime(s, "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC).timestamp() for s in stamps]


@pytest.mark.realtool
@pytest.mark.parametrize("members", [3, 5])
def test_timers_fire_every_interval_with_the_members_evenly_offset(require: Callable[[str], str], members: int) -> None:
    analyze = require("systemd-analyze")
    for every in BACKUP_INTERVALS:
        fires = {i: _fires(analyze, on_calendar(every, i, members), 3) for i in range(members)}
        for i, times in fires.items():
            assert {b - a for a, b in itertools.pairwise(times)} == {every * 60}, (every, i, times)
        # One interval of all members' runs: member 0 first, then one every interval / members.
        first = [fires[i][0] for i in range(members)]
        assert first == sorted(first), (every, first)
        assert {b - a for a, b in itertools.pairwise(first)} == {every * 60 / members}, (every, first)
        assert first[-1] - first[0] < every * 60


def test_every_member_has_its_own_offset(ctx: BootstrapContext) -> None:
    assert ctx.etcd.backup is not None
    every, count = ctx.etcd.backup.every_minutes, len(ctx.etcd.members)
    for i, name in enumerate(names(ctx, "etcd")):
        timer = bundle(ctx, "etcd", name).file(f"systemd/{SNAPSHOT_TIMER}").content
        assert f"OnCalendar={on_calendar(every, i, count)}\n" in timer
        assert "AccuracySec=1s\n" in timer and "WantedBy=timers.target" in timer


def test_the_timer_starts_after_etcd_and_the_host_library_is_written(ctx: BootstrapContext) -> None:
    node = bundle(ctx, "etcd", names(ctx, "etcd")[0])
    order = [s.name for s in node.steps]
    assert order.index("etcd-backup-timer") > order.index("etcd")
    step = next(s for s in node.steps if s.name == "etcd-backup-timer")
    assert step.command == f"systemctl enable {SNAPSHOT_TIMER} && systemctl restart {SNAPSHOT_TIMER}"
    lib = Path(__file__).resolve().parents[2] / "modules/bootstrap/host"
    for name in ("imds.py", "blob.py", "etcd_snapshot.py", "etcd_restore.py"):
        assert node.file(f"lib/{name}").content == (lib / name).read_text()  # verbatim: the tests import these


@pytest.mark.realtool
def test_systemd_accepts_the_snapshot_unit_and_timer(
    ctx: BootstrapContext, require: Callable[[str], str], tmp_path: Path
) -> None:
    analyze = require("systemd-analyze")
    node = bundle(ctx, "etcd", names(ctx, "etcd")[1])
    root, units = _root(tmp_path, node)
    assert SNAPSHOT_UNIT in units
    run = subprocess.run(
        [analyze, "verify", f"--root={root}", "--man=no", SNAPSHOT_TIMER, SNAPSHOT_UNIT],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0 and not (run.stdout + run.stderr).strip(), run.stdout + run.stderr


def _changed(**changes: Any) -> BootstrapContext:
    return prepare_cluster("dev", parse_config(_dev(**changes)), STACKS).bootstrap


def test_disabled_backups_render_no_timer_no_settings_no_alerts() -> None:
    ctx = _changed(**{"cluster.etcd.backup.enabled": False})
    assert ctx.etcd.backup is None
    node = bundle(ctx, "etcd", names(ctx, "etcd")[0])
    rendered = {f.rel for f in node.files}
    assert not {f"systemd/{SNAPSHOT_TIMER}", f"systemd/{SNAPSHOT_UNIT}", "etcd-backup.json"} & rendered
    assert not {f"lib/{program}" for program in LIBRARY} & rendered
    assert "etcd-backup-timer" not in [s.name for s in node.steps]
    assert "etcd-backup.yml" not in alert_rules(ctx)
    assert bundle(context("dev"), "etcd", names(ctx, "etcd")[0]).file(f"systemd/{SNAPSHOT_TIMER}")


def test_the_events_etcd_is_never_backed_up(prod: BootstrapContext) -> None:
    assert prod.events_etcd is not None and prod.events_etcd.backup is None and prod.etcd.backup is not None
    for name in names(prod, "events-etcd"):
        rels = {f.rel for f in bundle(prod, "events-etcd", name).files}
        assert f"systemd/{SNAPSHOT_TIMER}" not in rels and "etcd-backup.json" not in rels


def test_the_interval_comes_from_the_stack() -> None:
    ctx = _changed(**{"cluster.etcd.backup.every_minutes": 15})
    assert ctx.etcd.backup is not None and ctx.etcd.backup.every_minutes == 15
    timer = bundle(ctx, "etcd", names(ctx, "etcd")[2]).file(f"systemd/{SNAPSHOT_TIMER}").content
    assert "OnCalendar=*-*-* *:10/15:00\n" in timer
    assert "> 1800\n" in alert_rules(ctx)["etcd-backup.yml"]  # two intervals


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            45,
            f"{P}:cluster.etcd.backup.every_minutes: every_minutes 45 cannot be kept by a wall-clock timer: use one of "
            "5, 6, 10, 12, 15, 20, 30, 60, 120, 180, 240, 360, 480, 720, 1440 (a divisor of 60, or whole hours that "
            "divide 24)",
        ),
    ],
)
def test_an_interval_no_timer_can_keep_is_one_line(value: Any, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(_dev(**{"cluster.etcd.backup.every_minutes": value}))
    assert str(err.value) == message
