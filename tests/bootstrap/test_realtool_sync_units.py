"""systemd reads the sync timer every role installs: `systemd-analyze verify` on agk-sync.timer with the
service it starts, and `systemd-analyze calendar` on each fixed host's OnCalendar (the minute it acts)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from modules.bootstrap.context import BootstrapContext
from modules.bootstrap.roles import bundle, names
from modules.bootstrap.roles.upkeep import SYNC_SERVICE, SYNC_TIMER, sync_minute

from .test_realtool_units import _every_node, _root


@pytest.mark.realtool
def test_systemd_accepts_the_sync_timer_of_every_role(
    ctx: BootstrapContext, require: Callable[[str], str], tmp_path: Path
) -> None:
    analyze = require("systemd-analyze")
    roles = set()
    for node in _every_node(ctx):
        root, _ = _root(tmp_path, node)
        run = subprocess.run(
            [analyze, "verify", f"--root={root}", "--man=no", SYNC_TIMER, SYNC_SERVICE],
            capture_output=True,
            text=True,
            check=False,
        )
        assert run.returncode == 0 and not (run.stdout + run.stderr).strip(), f"{node.name}: {run.stdout}{run.stderr}"
        roles.add(node.role)
    assert roles >= {"etcd", "apiserver", "gpu-node", "system-node", "prometheus", "nat"}


@pytest.mark.realtool
def test_each_fixed_host_acts_at_its_own_minute(ctx: BootstrapContext, require: Callable[[str], str]) -> None:
    analyze = require("systemd-analyze")
    for role in ("etcd", "apiserver", "prometheus", "nat"):
        for host in names(ctx, role):
            line = next(
                x
                for x in bundle(ctx, role, host).file("systemd/agk-sync.timer").content.splitlines()
                if x.startswith("OnCalendar=")
            )
            run = subprocess.run(
                [analyze, "calendar", line.removeprefix("OnCalendar=")], capture_output=True, text=True, check=False
            )
            assert run.returncode == 0, run.stderr
            normalized = next(x for x in run.stdout.splitlines() if "Normalized form:" in x)
            assert normalized.strip().endswith(f"*-*-* *:{sync_minute(ctx, role, host):02d}:00"), (host, run.stdout)
