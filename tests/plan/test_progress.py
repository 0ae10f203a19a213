"""Progress lines: one per stack on a terminal's stderr, nothing when stderr is a pipe or a file."""

from __future__ import annotations

import io
import os
import pty
import subprocess
import sys
from pathlib import Path

from agk.plan.engine import REPO_ROOT
from agk.plan.progress import Progress

AGK = Path(sys.executable).parent / "agk"


def test_nothing_without_a_terminal() -> None:
    done = subprocess.run(
        [str(AGK), "plan", "--stack", "hub"], cwd=REPO_ROOT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0
    assert done.stderr == ""


def test_one_line_per_stack_on_a_terminal() -> None:
    leader, follower = pty.openpty()
    try:
        done = subprocess.run(
            [str(AGK), "plan", "--stack", "dev"],
            cwd=REPO_ROOT,
            stdout=subprocess.DEVNULL,
            stderr=follower,
            check=False,
        )
        os.close(follower)
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(leader)
    assert done.returncode == 0
    lines = b"".join(chunks).decode().splitlines()
    assert [line.split(" in ")[0] for line in lines] == [
        "agk: planned images",
        "agk: planned hub",
        "agk: planned dev",
    ]
    assert all(line.endswith(" resources)") and " s (" in line for line in lines)


def test_a_closed_or_odd_stream_is_not_a_terminal() -> None:
    quiet = Progress(io.StringIO(), enabled=False)
    quiet.line("x")
    assert quiet.stream is not None and quiet.stream.getvalue() == ""  # type: ignore[attr-defined]
    loud = Progress(io.StringIO(), enabled=True)
    loud.line("planned dev in 1.0 s (137 resources)")
    assert loud.stream.getvalue() == "agk: planned dev in 1.0 s (137 resources)\n"  # type: ignore[union-attr]
