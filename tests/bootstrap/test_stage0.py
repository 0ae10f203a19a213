"""customData's stage 0 is pinned: Azure refuses a change to an existing VM's customData, so a toolkit
change to these programs would make every later `pulumi up` of a running cluster fail."""

from __future__ import annotations

import subprocess
from pathlib import Path

from modules.bootstrap.host.boot import BOOTED, LIB, STAGE0
from modules.bootstrap.userdata import BOOT_COMMAND, PER_BOOT, STAGE0_SHA256, stage0_digest, stage0_files


def test_stage0_is_the_pinned_one() -> None:
    assert [f.path for f in stage0_files()] == [*(f"{LIB}/{name}" for name in STAGE0), PER_BOOT]
    assert stage0_digest() == STAGE0_SHA256, (
        "the stage-0 programs (host.boot.STAGE0) changed: every VM's customData changes with them, which "
        "Azure refuses on existing VMs; keep stage 0 as it was, or make it a decision: update "
        "userdata.STAGE0_SHA256 and say in the release notes that existing clusters need their fixed hosts "
        "replaced (agk plan --base lists them)"
    )


def test_the_per_boot_script_boots_until_the_host_has_booted_once(tmp_path: Path) -> None:
    """The script cloud-init runs on every boot, run by sh with its two paths moved under tmp_path."""
    script = next(f for f in stage0_files() if f.path == PER_BOOT).content
    assert script.count(BOOTED) == 1 and script.count(BOOT_COMMAND) == 1, script
    booted, ran = tmp_path / "booted", tmp_path / "ran"
    moved = script.replace(BOOTED, str(booted)).replace(BOOT_COMMAND, f"sh -c 'echo boot >> {ran}; exit 3'")
    (tmp_path / "agk-boot").write_text(moved)

    def boot() -> int:
        return subprocess.run(["sh", str(tmp_path / "agk-boot")], check=False).returncode

    # A first boot whose fetch failed, then a reboot: boot.py runs again, and its failure shows.
    assert boot() == 3 and boot() == 3
    assert ran.read_text() == "boot\nboot\n"
    booted.write_text("bundle 0123, 0 step lines failed\n")  # what sync.py boot writes at the end
    assert boot() == 0 and ran.read_text() == "boot\nboot\n"
