"""The one error type users see: a message naming the bad value and how to fix it.

Every planner and config check raises a subclass of ``ValueError`` (as ``ipaddress`` does), so
callers that only know the standard library still catch them. The command-line shells print
``error: <message>`` on one line and exit with status 2.
"""

from __future__ import annotations


class AgkError(ValueError):
    """Bad input: ``str(err)`` is ``"<what is wrong>: <how to fix it>"``."""


class ConfigError(AgkError):
    """A stack's configuration is invalid; nothing may be built from it."""
