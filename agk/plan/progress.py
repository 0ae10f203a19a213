"""Progress of long commands: one line per stack on stderr when a person watches it, nothing otherwise.

Only a terminal gets the lines (``isatty``): CI logs, pipes and the tests' captured stderr stay
exactly as they were, so scripts that read stderr for the one-line error still see only that.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    def __init__(self, stream: TextIO | None, enabled: bool) -> None:
        self.stream = stream
        self.enabled = enabled and stream is not None
        self.started = time.perf_counter()

    @classmethod
    def for_stderr(cls) -> Progress:
        stream = sys.stderr
        try:
            tty = stream.isatty()
        except (AttributeError, ValueError):
            tty = False
        return cls(stream, tty)

    def line(self, text: str) -> None:
        if self.enabled and self.stream is not None:
            self.stream.write(f"agk: {text}\n")
            self.stream.flush()
