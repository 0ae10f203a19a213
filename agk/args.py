"""Arguments both command-line shells check before any work: stack names and paths.

Pure (no click, no pydantic): ``subnet-calc size`` imports this module on its start-up budget.
"""

from __future__ import annotations

import re
from pathlib import Path

from modules.errors import AgkError

# Pulumi's own rule for a stack's name (pulumi/pulumi pkg/backend/httpstate/backend.go,
# validateStackName: ^[A-Za-z0-9_.-]{1,100}$); the stack file is stacks/Pulumi.<name>.yaml.
_STACK_NAME = re.compile(r"[A-Za-z0-9_.-]{1,100}")


def stack_name(value: str, flag: str = "--stack") -> str:
    """``value`` when it can name a stack file, else one line saying why not."""
    if not value.strip():
        raise AgkError(f"{flag}: empty: give a stack name, e.g. {flag} dev (stacks/Pulumi.<stack>.yaml)")
    if "/" in value:
        own = value.rstrip("/").rsplit("/", 1)[-1] or "dev"
        raise AgkError(
            f"{flag} {value}: a qualified or path-like name: give the stack's own name ({flag} {own}),"
            " the <stack> of stacks/Pulumi.<stack>.yaml"
        )
    if not _STACK_NAME.fullmatch(value):
        raise AgkError(
            f"{flag} {value!r}: not a Pulumi stack name: use at most 100 ASCII letters, digits, '-', '_' and '.'"
        )
    return value


def path(value: str, flag: str, what: str) -> Path:
    """A path argument that names something: an empty one would silently mean the current directory."""
    if not value.strip():
        raise AgkError(f"{flag}: empty: give {what}")
    return Path(value)


def stacks_dir(value: str, flag: str = "--stacks-dir") -> Path:
    """The folder of stack files, which must exist: both commands say so in the same words."""
    folder = path(value, flag, "the folder with the Pulumi.<stack>.yaml files")
    if not folder.is_dir():
        raise AgkError(f"{flag} {folder}: no such directory: pass the folder with the Pulumi.<stack>.yaml files")
    return folder
