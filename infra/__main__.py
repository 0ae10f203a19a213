"""The Pulumi program of every stack: load config, build the stack's components, export."""

import pulumi

from infra.program import build, export, load
from modules.errors import AgkError

try:
    stack, config = load()
    export(build(stack, config))
except AgkError as err:
    # One line, no traceback: the engine prints a RunError's message as the failure.
    raise pulumi.RunError(f"error: {err}") from None
