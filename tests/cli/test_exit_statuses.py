"""One table of exit statuses (agk.errors.EXIT_STATUSES) and the one mapping of errors onto it."""

from __future__ import annotations

import errno

import pytest

from agk.errors import EXIT_STATUSES, Exit, guard, status_of
from modules.errors import AgkError, ConfigError


def _raises(err: BaseException) -> int:
    raise err


def test_every_status_is_in_the_table_once() -> None:
    assert set(EXIT_STATUSES) == set(Exit)
    assert len({int(s) for s in Exit}) == len(Exit)
    # A crash in Python exits 1 by itself: a bug must never read as "a mandatory violation".
    assert int(Exit.VIOLATION) == 1 and 1 not in {int(Exit.BUG), int(Exit.BAD_INPUT), int(Exit.IO)}


CASES: list[tuple[BaseException, int, str]] = [
    (AgkError("--stack x: no such stack: use dev"), Exit.BAD_INPUT, "error: --stack x: no such stack: use dev\n"),
    (
        ConfigError("azure-gpu-k8s:location: 'mars' is not an Azure region", stack="dev"),
        Exit.BAD_INPUT,
        "error: dev: azure-gpu-k8s:location: 'mars' is not an Azure region\n",
    ),
    (
        KeyboardInterrupt(),
        Exit.INTERRUPTED,
        "error: interrupted: nothing was deployed; files under --out may be incomplete, run the command again\n",
    ),
    (
        OSError(errno.ENOSPC, "No space left on device", "out/dev/state.json"),
        Exit.IO,
        "error: out/dev/state.json: cannot be written or read (No space left on device): free disk space or choose"
        " another path\n",
    ),
    (BrokenPipeError(errno.EPIPE, "Broken pipe"), Exit.IO, ""),
]


@pytest.mark.parametrize(("err", "status", "stderr"), CASES, ids=[type(c[0]).__name__ for c in CASES])
def test_errors_map_to_their_status(
    capsys: pytest.CaptureFixture[str], err: BaseException, status: int, stderr: str
) -> None:
    assert guard(lambda: _raises(err)) == status
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", stderr)


def test_a_bug_shows_its_traceback_and_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    assert status_of(_caught(ZeroDivisionError("division by zero"))) == Exit.BUG
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert lines[-2:] == [
        "ZeroDivisionError: division by zero",
        "error: internal error (ZeroDivisionError): a bug, not your input; please report it with the traceback above",
    ]


def test_a_status_returned_is_kept_and_an_exit_passes_through() -> None:
    assert guard(lambda: 1) == Exit.VIOLATION
    with pytest.raises(SystemExit):
        guard(lambda: _raises(SystemExit(2)))


def _caught(err: BaseException) -> BaseException:
    try:
        raise err
    except BaseException as caught:
        return caught
