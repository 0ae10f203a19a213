"""`--out` of `agk plan` and `agk render` is checked before any work: one line, exit 2, nothing written."""

from __future__ import annotations

import ctypes
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from .badinput import STACKS, agk, assert_refused, files, run

Setup = Callable[[Path], tuple[str, str]]
"""Prepares a --out under the test's folder: (the --out argument, the expected message)."""


def _under_a_file(tmp: Path) -> tuple[str, str]:
    (tmp / "afile").write_text("x")
    out = tmp / "afile" / "plans"
    return str(out), f"--out {out}: {tmp / 'afile'} is a file, not a directory: give a path outside it"


def _deep_under_a_file(tmp: Path) -> tuple[str, str]:
    (tmp / "afile").write_text("x")
    out = tmp / "afile" / "a" / "b"
    return str(out), f"--out {out}: {tmp / 'afile'} is a file, not a directory: give a path outside it"


def _a_file(tmp: Path) -> tuple[str, str]:
    (tmp / "out").write_text("x")
    return str(tmp / "out"), f"--out {tmp / 'out'}: a file, not a directory: give a directory (created when missing)"


def _empty(what: str) -> Setup:
    return lambda tmp: ("", f"--out: empty: give a directory to write the {what} into")


def _folder_is_a_file(folder: str) -> Setup:
    def setup(tmp: Path) -> tuple[str, str]:
        (tmp / "out").mkdir()
        (tmp / "out" / folder).write_text("x")
        where = tmp / "out" / folder
        return str(
            tmp / "out"
        ), f"--out {tmp / 'out'}: {where} is a file, not a directory: remove it or give another --out"

    return setup


def _file_is_a_folder(rel: str) -> Setup:
    def setup(tmp: Path) -> tuple[str, str]:
        (tmp / "out" / rel).mkdir(parents=True)
        (tmp / "out" / rel / "keep").write_text("x")
        where = tmp / "out" / rel
        return str(
            tmp / "out"
        ), f"--out {tmp / 'out'}: {where} is a directory, not a file: remove it or give another --out"

    return setup


def _dangling(rel: str) -> Setup:
    def setup(tmp: Path) -> tuple[str, str]:
        link = tmp / "out" / rel if rel else tmp / "out"
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(tmp / "gone")
        out = tmp / "out"
        return str(out), f"--out {out}: {link} is a symbolic link to nothing: remove it or give another --out"

    return setup


PLAN = ["plan", "--stack", "dev"]
RENDER = ["render", "--stack", "dev"]

CASES: list[tuple[str, list[str], Setup]] = [
    ("plan: under a file", PLAN, _under_a_file),
    ("plan: deep under a file", PLAN, _deep_under_a_file),
    ("plan: a file", PLAN, _a_file),
    ("plan: empty", PLAN, _empty("plans")),
    ("plan: <stack> is a file", PLAN, _folder_is_a_file("dev")),
    ("plan --all: hub is a file", ["plan", "--all"], _folder_is_a_file("hub")),
    ("plan: <stack>/state.json is a folder", PLAN, _file_is_a_folder("dev/state.json")),
    ("plan: <stack>/plan.md is a folder", PLAN, _file_is_a_folder("dev/plan.md")),
    (
        "plan json: <stack>/addresses.json is a folder",
        [*PLAN, "--format", "json"],
        _file_is_a_folder("dev/addresses.json"),
    ),
    ("render: under a file", RENDER, _under_a_file),
    ("render: a file", RENDER, _a_file),
    ("render: empty", RENDER, _empty("files")),
    ("render: nodes is a file", RENDER, _folder_is_a_file("nodes")),
    ("render: manifests is a file", RENDER, _folder_is_a_file("manifests")),
    ("plan: a link to nothing", PLAN, _dangling("")),
    ("plan: <stack> a link to nothing", PLAN, _dangling("dev")),
    ("plan: <stack>/plan.md a link to nothing", PLAN, _dangling("dev/plan.md")),
    ("render: a link to nothing", RENDER, _dangling("")),
    ("render: nodes a link to nothing", RENDER, _dangling("nodes")),
]


@pytest.mark.parametrize(("command", "setup"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_out_is_one_line_and_nothing_is_written(tmp_path: Path, command: list[str], setup: Setup) -> None:
    out, message = setup(tmp_path)
    before = files(tmp_path)
    assert_refused(agk(*command, "--out", out), message)
    assert files(tmp_path) == before


def test_out_is_checked_before_the_stack_is_even_read(tmp_path: Path) -> None:
    """A wrong --out is reported first: not after a plan of seconds (prod-7500) or a config error."""
    stacks = tmp_path / "stacks"
    shutil.copytree(STACKS, stacks, ignore=shutil.ignore_patterns("schema.json"))
    dev = stacks / "Pulumi.dev.yaml"
    dev.write_text(dev.read_text() + "  azure-gpu-k8s:colour: blue\n")
    out, message = _under_a_file(tmp_path)
    for command in (PLAN, RENDER):
        assert_refused(agk(*command, "--stacks-dir", str(stacks), "--out", out), message)
    # ... and the config error is what remains once --out is right.
    done = agk(*PLAN, "--stacks-dir", str(stacks), "--out", str(tmp_path / "fine"))
    assert done.code == 2 and "colour: unknown key" in done.err
    assert not (tmp_path / "fine").exists()


@pytest.fixture
def shared() -> Iterator[Path]:
    """Folders every user can reach (pytest's tmp is 0700): ``ro`` (0555), ``rw`` (0777) holding a
    0555 ``dev``, and ``locked`` (0000)."""
    top = Path(tempfile.mkdtemp(prefix="agk-out-", dir="/tmp"))
    top.chmod(0o755)
    for name, mode in (("ro", 0o555), ("rw", 0o777), ("rw/dev", 0o555), ("locked", 0o000)):
        (top / name).mkdir()
        (top / name).chmod(mode)
    try:
        yield top
    finally:
        for name in ("ro", "rw", "rw/dev", "locked"):
            (top / name).chmod(0o755)
        shutil.rmtree(top)


def _drop_root_override() -> None:
    """In the child, before exec: drop CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH from the bounding
    set (prctl PR_CAPBSET_DROP), so that after exec root keeps uid 0 (it still reads the venv, which
    may live under /root) but file permissions bind it as they bind anyone (capabilities(7))."""
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
        if libc.prctl(24, capability, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def _as_someone_else() -> dict[str, object]:
    """Permissions do not stop root: as root the command runs without the capabilities that let it
    write anywhere. Either way the same check meets the same folders; nothing is skipped."""
    return {"preexec_fn": _drop_root_override} if os.geteuid() == 0 else {}


UNWRITABLE = [
    ("plan: not writable", PLAN, "ro", "--out {top}/ro: not writable: give a directory you can write to"),
    (
        "plan: cannot be created",
        PLAN,
        "ro/plans",
        "--out {top}/ro/plans: cannot be created ({top}/ro is not writable): give a directory you can write to",
    ),
    (
        "plan: <stack> not writable",
        PLAN,
        "rw",
        "--out {top}/rw: {top}/rw/dev is not writable: give a directory you can write to",
    ),
    (
        "plan: cannot be reached",
        PLAN,
        "locked/plans",
        "--out {top}/locked/plans: cannot be reached (Permission denied): give a directory you can write to",
    ),
    ("render: not writable", RENDER, "ro", "--out {top}/ro: not writable: give a directory you can write to"),
    (
        "render: cannot be created",
        RENDER,
        "ro/r/x",
        "--out {top}/ro/r/x: cannot be created ({top}/ro is not writable): give a directory you can write to",
    ),
    (
        "render: cannot be reached",
        RENDER,
        "locked/r",
        "--out {top}/locked/r: cannot be reached (Permission denied): give a directory you can write to",
    ),
]


@pytest.mark.parametrize(("command", "sub", "message"), [c[1:] for c in UNWRITABLE], ids=[c[0] for c in UNWRITABLE])
def test_unwritable_out(shared: Path, command: list[str], sub: str, message: str) -> None:
    before = {name: files(shared / name) for name in ("ro", "rw")}
    done = run("agk", *command, "--out", str(shared / sub), **_as_someone_else())
    assert_refused(done, message.format(top=shared))
    assert {name: files(shared / name) for name in ("ro", "rw")} == before


PSEUDO = [
    ("plan", PLAN, "/proc/agk-test", "--out /proc/agk-test: cannot be created (/proc is not writable): "),
    ("plan", PLAN, "/sys/agk/x", "--out /sys/agk/x: cannot be created (/sys is not writable): "),
    ("render", RENDER, "/proc/agk-test", "--out /proc/agk-test: cannot be created (/proc is not writable): "),
]


@pytest.mark.parametrize(("command", "out", "message"), [c[1:] for c in PSEUDO], ids=[f"{c[0]} {c[2]}" for c in PSEUDO])
def test_a_file_system_that_takes_no_new_entries_is_refused_before_work(
    command: list[str], out: str, message: str
) -> None:
    # Root passes every permission check on /proc and /sys; only creating something there fails.
    assert_refused(run("agk", *command, "--out", out), message + "give a directory you can write to")
