"""The one error type users see: a message naming the bad value and how to fix it.

Every planner and config check raises a subclass of ``ValueError`` (as ``ipaddress`` does), so
callers that only know the standard library still catch them. The command-line shells print
``error: <message>`` on one line and exit with status 2 (``agk.errors`` maps errors to statuses).

The stack an error belongs to is not part of the message: it is set once, by whoever knows it
(``in_stack``), and printed once, so no message ever reads ``dev: dev: ...`` and an error found in a
sibling stack keeps that stack's name.
"""

from __future__ import annotations

from typing import Self


class AgkError(ValueError):
    """Bad input: ``str(err)`` is ``"[<stack>: ]<what is wrong>: <how to fix it>"``."""

    def __init__(self, message: str, *, stack: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.stack = stack

    def __str__(self) -> str:
        return f"{self.stack}: {self.message}" if self.stack else self.message

    def in_stack(self, stack: str) -> Self:
        """This error, attributed to ``stack`` unless it already names the stack it belongs to."""
        if self.stack is not None:
            return self
        return type(self)(self.message, stack=stack)


class ConfigError(AgkError):
    """A stack's configuration is invalid; nothing may be built from it."""
