"""agk: plan every stack offline, review it against the policy pack, render node files.

A thin shell: each subcommand parses arguments and calls one function. Bad input is one line on
stderr (``error: <what>: <fix>``) and exit status 2, never a traceback; every status comes from
``agk.errors`` (one table, one mapping, shared with ``subnet-calc``).
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import click

from agk import args
from agk.errors import Exit, fail, guard, status_of
from modules.errors import AgkError
from modules.images import IMAGE_ROLES

STACKS_DIR = Path("stacks")


class _Checked(click.ParamType[Any]):
    """An option value checked by ``agk.args`` as it is parsed: the command gets a stack name or a
    Path (defaults too), and a bad one is the same one line as any other bad input (AgkError)."""

    def __init__(self, name: str, check: Callable[[str, str], Any]) -> None:
        self.name = name
        self._check = check

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            value = str(value)
        flag = param.opts[0] if param is not None and param.opts else self.name
        return self._check(value, flag)


STACK = _Checked("stack", lambda v, flag: args.stack_name(v, flag))
STACKS = _Checked("directory", lambda v, flag: args.stacks_dir(v, flag))


def _path(what: str) -> _Checked:
    return _Checked("path", lambda v, flag: args.path(v, flag, what))


_stack = click.option("--stack", type=STACK, default=None, help="One stack from stacks/.")
_all = click.option("--all", "all_stacks", is_flag=True, help="Every stack in stacks/ (hub first).")
_base = click.option(
    "--base",
    type=_path("a folder written by `agk plan --out` or an export"),
    default=None,
    help="Compare with a base: a folder written by `agk plan --out` or one stack's `pulumi stack export`.",
)
_stacks_dir = click.option(
    "--stacks-dir",
    type=STACKS,
    default=STACKS_DIR,
    show_default=True,
    help="Where the Pulumi.<stack>.yaml files are.",
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="azure-gpu-k8s", prog_name="agk", message="%(prog)s %(version)s")
def app() -> None:
    """Azure GPU Kubernetes: plan, review and render stacks offline."""


@app.command()
@_stack
@_all
@click.option("--format", "fmt", type=click.Choice(["text", "json", "markdown"]), default="text")
@click.option(
    "--out",
    type=_path("a directory to write the plans into"),
    default=None,
    help="Write state.json, plan.md, addresses.json.",
)
@_base
@click.option(
    "--prices",
    "prices_file",
    type=_path("a saved Azure Retail Prices API answer"),
    default=None,
    help="With --base: price the change from a saved Azure Retail Prices API answer (JSON).",
)
@_stacks_dir
def plan(
    stack: str | None,
    all_stacks: bool,
    fmt: str,
    out: Path | None,
    base: Path | None,
    prices_file: Path | None,
    stacks_dir: Path,
) -> None:
    """Run the real infra/ program under Pulumi's mock runtime: what `pulumi up` would create
    (with --base: what it would change, and what goes with it)."""

    def work() -> int:
        from agk.plan.engine import check_out
        from agk.plan_command import run
        from modules.stackplan.config import stack_names

        if out is not None:
            # Before any planning: a plan takes seconds to minutes, a wrong --out is known now.
            chosen = [stack] if stack is not None else stack_names(stacks_dir)
            check_out(out, {s: ("state.json", "plan.md", "addresses.json") for s in chosen})
        return run(
            stack=stack,
            all_stacks=all_stacks,
            fmt=fmt,
            out=out,
            stacks_dir=stacks_dir,
            base=base,
            prices_file=prices_file,
        )

    _exit(work)


@app.command()
@_stack
@_all
@click.option(
    "--file",
    "files",
    type=_path("a `pulumi stack export` file"),
    multiple=True,
    help="A `pulumi stack export` file (repeat it for several stacks).",
)
@click.option("--format", "fmt", type=click.Choice(["text", "json", "sarif", "markdown"]), default="text")
@click.option(
    "--policy-config",
    type=_path("a JSON file"),
    default=None,
    help="Policy config in the format of `pulumi preview --policy-pack-config`.",
)
@_base
@_stacks_dir
def review(
    stack: str | None,
    all_stacks: bool,
    files: tuple[Path, ...],
    fmt: str,
    policy_config: Path | None,
    base: Path | None,
    stacks_dir: Path,
) -> None:
    """Evaluate the policy pack offline. Exit 0: clean, 1: a mandatory violation, 2: bad input."""

    def work() -> int:
        from agk.review import run
        from agk.stack_export import read_json

        for i, path in enumerate(files):
            twice = next((p for p in files[:i] if p.exists() and path.exists() and p.samefile(path)), None)
            if twice is not None:
                raise AgkError(f"--file {path}: the same file as --file {twice}: give each stack's export once")
        if policy_config is not None and policy_config.is_file():
            # The JSON itself first, as strictly as an export (duplicate keys, nesting, NaN): the
            # policy config reader then checks what it says.
            read_json(policy_config, f"--policy-config {policy_config}", "fix the file")
        return run(
            stack=stack,
            all_stacks=all_stacks,
            file=list(files),
            fmt=fmt,
            policy_config=policy_config,
            stacks_dir=stacks_dir,
            base=base,
        )

    _exit(work)


@app.command()
@click.option("--stack", type=STACK, required=True, help="The stack whose files to render.")
@click.option(
    "--out",
    type=_path("a directory to write the files into"),
    required=True,
    help="Output directory (its nodes/ and manifests/ are replaced).",
)
@_stacks_dir
def render(stack: str, out: Path, stacks_dir: Path) -> None:
    """Write every file a node or the cluster receives (cloud-config, configs, manifests)."""
    from agk.render import run

    _exit(lambda: run(stack=stack, out=out, stacks_dir=stacks_dir))


@app.command()
@click.option(
    "--role",
    type=click.Choice(IMAGE_ROLES),
    required=True,
    help="The image role (events etcd boots the etcd image).",
)
@click.option("--kubernetes", required=True, help="The Kubernetes release its kubelet is: 1.36 or 1.36.4.")
@click.option("--manifest", is_flag=True, help="Print the image's manifest (/etc/agk/image.json) instead.")
def image(role: str, kubernetes: str, manifest: bool) -> None:
    """Print a role's image build script (bash, run as root on the base image) from the versions table."""

    def work() -> int:
        from modules.images.build import script
        from modules.images.recipe import recipe

        r = recipe(role, kubernetes)  # type: ignore[arg-type]  # click.Choice checked it
        sys.stdout.write(r.manifest_json() if manifest else script(r))
        return Exit.OK

    _exit(work)


def _exit(call: Callable[[], int]) -> NoReturn:
    """The command's work, its errors mapped here (before click's own EPIPE handling sees them)."""
    sys.exit(guard(call))


def usage_line(err: click.UsageError, argv: list[str] | None = None) -> str:
    """A click usage error in this project's words: what is wrong, then the help to read (the
    subcommand's, when ``argv`` names one and click's error does not say which)."""
    if err.ctx is not None:
        where = err.ctx.command_path
    else:
        words = sys.argv[1:] if argv is None else argv
        where = f"agk {words[0]}" if words and words[0] in app.commands else "agk"
    if isinstance(err, click.BadOptionUsage) and "requires an argument" in err.message:
        what = f"{err.option_name}: needs a value"
    elif isinstance(err, click.NoSuchOption):
        guesses = sorted(err.possibilities or [])
        hint = f" (did you mean {' or '.join(guesses)}?)" if guesses else ""
        what = f"{err.option_name}: no such option{hint}"
    elif isinstance(err, click.MissingParameter) and err.param is not None:
        what = f"{_param(err.param)}: missing"
    elif isinstance(err, click.BadParameter) and err.param is not None:
        what = f"{_param(err.param)}: {err.message.rstrip('.')}"
    elif err.ctx is not None and isinstance(err.ctx.command, click.Group) and "No such command" in err.message:
        unknown = err.message.split("'")[1] if err.message.count("'") >= 2 else "?"
        what = f"{unknown}: no such command (commands: {', '.join(err.ctx.command.list_commands(err.ctx))})"
    else:
        message = err.format_message().rstrip(".")
        what = message[:1].lower() + message[1:]
    return f"{what}: see '{where} --help'"


def _param(param: click.Parameter) -> str:
    return "/".join(param.opts) if param.opts else str(param.name)


def run_group(group: click.Group, prog: str, argv: list[str] | None = None) -> None:
    """Run a click group (on ``argv``, else the command line) with usage errors as one line and
    exit status 2; always ends in SystemExit with a status from agk.errors (an option that its
    type refuses raises AgkError while click parses: guard maps it like any other)."""

    def parse_and_run() -> int:
        try:
            code = group.main(argv, prog_name=prog, standalone_mode=False)
        except click.exceptions.NoArgsIsHelpError as err:
            click.echo(err.ctx.get_help() if err.ctx else "", err=True)
            return Exit.BAD_INPUT
        except click.UsageError as err:
            fail(usage_line(err, argv))
        except click.exceptions.Abort:
            raise KeyboardInterrupt from None
        return code if isinstance(code, int) else Exit.OK

    sys.exit(guard(parse_and_run))


def main() -> None:
    # A short-lived command: the cyclic collector's passes over the Pulumi SDK's object graph (an
    # Output, a task and ~60 alias futures per resource) buy nothing that exit does not return, and
    # neither does tearing the interpreter down (a last full collection and every module's
    # finalisation). Measured on prod-7500 (2 shared cores): 8.2 s -> 5.6 s wall, 5.1 s -> 3.4 s CPU,
    # the same peak memory (317 MB); `agk plan --all` peaks 45 MB higher. Library users keep their
    # collector (agk/plan/engine.py only pauses it while a program registers).
    gc.disable()
    try:
        run_group(app, "agk")
    except SystemExit as done:
        _leave(done.code)
    _leave(0)


def _leave(code: object) -> NoReturn:
    """Exit now: every file is written and closed, every thread joined; only the output is buffered."""
    if isinstance(code, str):
        print(code, file=sys.stderr)
        code = 1
    status = code if isinstance(code, int) else (0 if code is None else 1)
    try:
        sys.stdout.flush()
    except OSError as err:
        # Most output is still buffered here: a full disk or a closed pipe shows now, not in print().
        status = status or status_of(err)
    except ValueError:
        status = status or Exit.IO
    try:
        sys.stderr.flush()
    except (OSError, ValueError):
        status = status or Exit.IO
    os._exit(status)
