"""Boot steps: what each host runs after cloud-init has written its files, in order, each retried.

``sync.py boot`` runs the lines in order, each in its own shell, and goes on after one fails (as
cloud-init's runcmd would). Each step therefore goes through ``agk-step`` (templates/agk-step.sh.j2):
it retries the command with a back-off, records ``<step>.done`` or ``failed`` under the boot state
directory, and refuses to run once an earlier step has failed. The boot health endpoint of pool
nodes reads the same records.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from modules.bootstrap.layout import PATHS

STEP_SCRIPT = PATHS.script("agk-step")
_NAME = re.compile(r"^[a-z][a-z0-9-]*$")


@dataclass(frozen=True)
class Step:
    name: str
    """Stable name (``<name>.done`` in the boot state directory; the README's boot sequence)."""
    command: str
    """One shell command line; idempotent, since a failed try runs again."""
    tries: int = 5

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ValueError(f"step name {self.name!r}: use lowercase letters, digits and '-'")

    @property
    def runcmd(self) -> str:
        return f"{STEP_SCRIPT} {self.name} {self.tries} {shlex.quote(self.command)}"


def start(unit: str) -> str:
    """Enable ``unit`` for later boots and start it now (a oneshot fails the step if it fails)."""
    return f"systemctl enable {unit} && systemctl restart {unit}"
