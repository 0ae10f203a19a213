"""How both command-line shells end: one table of exit statuses, one place that maps errors to them.

``agk`` and ``subnet-calc`` run their work through :func:`guard`, which turns what escapes into a
status from :data:`EXIT_STATUSES` and at most one line on stderr. Bad input (:class:`AgkError`, a
usage error) is ``error: <what is wrong>: <how to fix it>`` and status 2, never a traceback; only a
bug (an exception nobody expected) prints one. docs/plan-and-review.md's exit status table is this table
(tests/cli/test_readme_agrees.py checks it; tests/cli/test_exit_statuses.py the mapping).
"""

from __future__ import annotations

import errno
import sys
from collections.abc import Callable
from enum import IntEnum
from typing import NoReturn

from modules.errors import AgkError


class Exit(IntEnum):
    OK = 0
    VIOLATION = 1
    BAD_INPUT = 2
    BUG = 70
    IO = 74
    INTERRUPTED = 130


EXIT_STATUSES: dict[Exit, str] = {
    Exit.OK: "done: the answer is on stdout (and the files under --out)",
    Exit.VIOLATION: "`agk review`: at least one mandatory policy violation",
    Exit.BAD_INPUT: "bad input: a usage error, a stack file, an export, --out; one line on stderr, nothing written",
    Exit.BUG: "an internal error (a bug): a traceback on stderr; please report it",
    Exit.IO: "the output could not be written (stdout closed or full, the disk full under --out)",
    Exit.INTERRUPTED: "interrupted (Ctrl-C)",
}
"""Every status either command exits with (70 and 74 as in BSD's sysexits.h: EX_SOFTWARE, EX_IOERR;
130 is what a shell reports for a command ended by SIGINT)."""


def say(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)


def fail(message: str) -> NoReturn:
    """Bad input the shell itself found: one line, status 2."""
    say(message)
    raise SystemExit(Exit.BAD_INPUT)


def _output_closed() -> None:
    """stdout's reader has gone (``agk plan | head``): nothing more can be said there, and a final
    flush at exit must not fail again (Python's own advice for SIGPIPE)."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def status_of(err: BaseException) -> int:
    """The exit status for ``err``, after saying what it needs on stderr (at most one line, or a
    traceback for a bug)."""
    if isinstance(err, AgkError):
        say(str(err))
        return Exit.BAD_INPUT
    if isinstance(err, KeyboardInterrupt):
        say("interrupted: nothing was deployed; files under --out may be incomplete, run the command again")
        return Exit.INTERRUPTED
    if isinstance(err, BrokenPipeError) or (isinstance(err, OSError) and err.errno == errno.EPIPE):
        _output_closed()
        return Exit.IO
    if isinstance(err, OSError):
        where = f"{err.filename}: " if err.filename else "the output: "
        say(f"{where}cannot be written or read ({err.strerror or err}): free disk space or choose another path")
        return Exit.IO
    import traceback

    traceback.print_exception(err)
    say(f"internal error ({type(err).__name__}): a bug, not your input; please report it with the traceback above")
    return Exit.BUG


def guard(call: Callable[[], int]) -> int:
    """Run ``call`` (a command's work, returning its status) and map whatever escapes it."""
    try:
        return call()
    except SystemExit:
        raise
    except BaseException as err:  # the one place where every error becomes a status
        return status_of(err)
