"""Running both commands on bad input: the exit status, stdout, the one stderr line, what is on disk."""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
STACKS = ROOT / "stacks"
BIN = Path(sys.executable).parent


@dataclass(frozen=True)
class Done:
    code: int
    out: str
    err: str


def agk(*argv: str) -> Done:
    """`agk ARGV` in this process, through the console script's own entry (agk.cli.run_group): the
    same parsing, error mapping and status as the installed command, without a second interpreter."""
    from agk.cli import app, run_group

    out, err = io.StringIO(), io.StringIO()
    code: object = None
    saved = sys.argv
    sys.argv = [str(BIN / "agk"), *argv]
    try:
        with contextlib.chdir(ROOT), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            run_group(app, "agk")
    except SystemExit as done:
        code = done.code
    finally:
        sys.argv = saved
    assert isinstance(code, int), code
    return Done(code, out.getvalue(), err.getvalue())


def run(tool: str, *argv: str, **kwargs: Any) -> Done:
    """The installed console script ``tool`` in a process of its own."""
    done = subprocess.run(
        [str(BIN / tool), *argv], capture_output=True, text=True, cwd=ROOT, timeout=300, check=False, **kwargs
    )
    return Done(done.returncode, done.stdout, done.stderr)


def files(root: Path) -> dict[str, bytes] | None:
    """Everything under ``root`` (``None``: it does not exist): compared before and after a refusal."""
    if not root.exists():
        return None
    if root.is_file():
        return {".": root.read_bytes()}
    return {str(p.relative_to(root)): p.read_bytes() if p.is_file() else b"<dir>" for p in sorted(root.rglob("*"))}


def assert_refused(done: Done, line: str) -> None:
    """Exit 2, nothing on stdout, and exactly ``error: <line>`` on stderr."""
    assert "Traceback" not in done.err, done.err
    assert (done.code, done.out, done.err) == (2, "", f"error: {line}\n")
