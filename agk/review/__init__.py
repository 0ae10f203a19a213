"""`agk review`: the policy pack in policies/ evaluated offline, with pulumi_policy's own types,
against a planned stack, every stack, or any `pulumi stack export` file; with ``--base``, the
change policies (policies/changes.py) over what the change does to the base as well."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pulumi_policy import Policy

from agk.plan.blast import props_of
from agk.plan.diff import StackDiff, diff_against, load_base, resources_of
from agk.plan.engine import Planner, deployment
from agk.plan.progress import Progress
from agk.review import allowances, formats
from agk.review import config as policy_config_file
from agk.review.changes import change_args, evaluate_changes
from agk.review.evaluate import Report, evaluate
from agk.review.locate import config_key
from agk.stack_export import Deployment, load_file, parse
from modules.errors import AgkError
from modules.stackplan.config import stack_file
from modules.stackplan.config import stack_names as config_stack_names
from policies.changes import CHANGE_POLICIES
from policies.pack import ENFORCEMENT, NAME, POLICIES, VERSION
from policies.rules.change import Allowance

FORMATS = ("text", "json", "sarif", "markdown")
ALL_POLICIES: list[Policy] = [*POLICIES, *CHANGE_POLICIES]
"""Every policy a config may name (the change policies run only with --base)."""


@dataclass(frozen=True)
class ChangeSet:
    """One stack's change against the base, with the allowances its stack file declares."""

    diff: StackDiff
    allowances: list[Allowance]
    source: str


def stack_names(stacks_dir: Path) -> list[str]:
    """Every stack in ``stacks_dir``, the hub first (cluster stacks reference its outputs)."""
    return sorted(config_stack_names(stacks_dir), key=lambda n: (n != "hub", n))


def _state(stack: str, stacks_dir: Path, planner: Planner | None) -> dict[str, Any]:
    if not stack_file(stacks_dir, stack).is_file():
        known = ", ".join(stack_names(stacks_dir)) or "none"
        raise AgkError(f"--stack {stack}: no {stacks_dir}/Pulumi.{stack}.yaml: use one of {known}")
    return deployment((planner or Planner(stacks_dir)).plan(stack))


def planned(stack: str, stacks_dir: Path, planner: Planner | None = None) -> Deployment:
    """Plan ``stack`` with the mock-runtime engine and read its export as `--file` would.

    Pass one ``planner`` for several stacks: it plans each (and each referenced hub) once.
    """
    return parse(_state(stack, stacks_dir, planner), f"stack {stack}", str(stacks_dir / f"Pulumi.{stack}.yaml"))


def review(deployments: list[Deployment], policy_config: Path | None, changes: Sequence[ChangeSet] = ()) -> Report:
    settings = policy_config_file.settings(ALL_POLICIES, ENFORCEMENT, policy_config_file.read(policy_config))
    reports = [evaluate(POLICIES, settings, dep, NAME, VERSION) for dep in deployments]
    reports += [
        evaluate_changes(CHANGE_POLICIES, settings, change_args(c.diff, c.allowances), c.diff, c.source)
        for c in changes
    ]
    props: dict[str, Any] = {}
    for dep in deployments:
        for res in dep.resources:
            props[res.urn] = {**res.inputs, **res.outputs}
    for c in changes:
        for state in [*c.diff.base_resources, *c.diff.head_resources]:
            props.setdefault(str(state["urn"]), props_of(state))
    for r in reports:
        r.violations[:] = [replace(v, key=config_key(v, props.get(v.urn))) for v in r.violations]
    per_pack = reports[0].policies_run if deployments else 0
    per_changes = reports[-1].policies_run if changes else 0
    stacks = list(dict.fromkeys(s for r in reports for s in r.stacks))
    return Report(
        violations=[v for r in reports for v in r.violations], policies_run=per_pack + per_changes, stacks=stacks
    )


def format_report(report: Report, fmt: str, with_changes: bool = False, stacks_dir: Path | None = None) -> str:
    if fmt == "json":
        return formats.as_json(report)
    if fmt == "sarif":
        return formats.sarif(report, ALL_POLICIES if with_changes else POLICIES, VERSION, stacks_dir)
    if fmt == "markdown":
        return formats.markdown(report)
    return formats.text(report)


def verdict(state: dict[str, Any], stack: str, changes: ChangeSet | None = None) -> str:
    """The one review line `agk plan` prints for a stack."""
    report = review([parse(state, f"stack {stack}", f"agk plan --stack {stack}")], None, [changes] if changes else [])
    mandatory = len(report.mandatory)
    advisory = len(report.violations) - mandatory
    head = "FAIL" if mandatory else "pass"
    base = " --base BASE" if changes else ""
    return (
        f"{head}: {mandatory} mandatory and {advisory} advisory violations of {report.policies_run} policies"
        f" (details: agk review --stack {stack}{base})"
    )


def change_set(stack: str, head: dict[str, Any], base: Any, all_stacks: bool, stacks_dir: Path) -> ChangeSet:
    diff = diff_against(stack, head, base, all_stacks)
    return ChangeSet(diff, allowances.read(stacks_dir, stack), str(stacks_dir / f"Pulumi.{stack}.yaml"))


def run(
    *,
    stack: str | None,
    all_stacks: bool,
    file: Path | Sequence[Path] | None,
    fmt: str,
    policy_config: Path | None,
    stacks_dir: Path,
    base: Path | None = None,
) -> int:
    """Print the review; 0: no mandatory violation, 1: at least one (bad input raises AgkError).

    ``file`` may be several exports (``--file`` repeated), e.g. every ``state.json`` one
    `agk plan --all --out` wrote: a pull request's workflow plans once and reviews those.
    """
    if fmt not in FORMATS:
        raise AgkError(f"--format {fmt}: unknown format: use one of {', '.join(FORMATS)}")
    files = [file] if isinstance(file, Path) else list(file or [])
    chosen = sum((stack is not None, all_stacks, bool(files)))
    if chosen != 1:
        raise AgkError("choose what to review: give exactly one of --stack NAME, --all or --file STATE.json")
    # Validate the policy config and the base before planning anything: bad input must fail fast.
    policy_config_file.settings(ALL_POLICIES, ENFORCEMENT, policy_config_file.read(policy_config))
    base_state = load_base(base) if base is not None else None
    if base_state is not None and all_stacks and not base_state.is_folder:
        only = base_state.stacks()[0] if base_state.stacks() else "?"
        raise AgkError(f"--base {base}: one stack's export ({only}): give --stack {only}, or a folder for --all")
    changes: list[ChangeSet] = []
    deployments: list[Deployment] = []
    if files:
        deployments = [load_file(path) for path in files]
        if base_state is not None:
            for path, dep in zip(files, deployments, strict=True):
                head = json.loads(path.read_text())
                if not resources_of(head):
                    raise AgkError(f"--file {path}: no resources: give a `pulumi stack export` with resources")
                # Several files stand for every stack (as --all): one the base lacks is new.
                changes.append(change_set(dep.stack, head, base_state, len(files) > 1, stacks_dir))
    else:
        names = [stack] if stack is not None else stack_names(stacks_dir)
        if not names:
            raise AgkError(f"--all: no Pulumi.<stack>.yaml in {stacks_dir}: give --stacks-dir the stacks folder")
        if base_state is not None:
            for name in names:
                allowances.read(stacks_dir, name)
            if stack is not None:
                base_state.state(stack)
        # As `agk plan --base` and `pulumi up` plan it: the program reads its own last outputs (the base's), so
        # deployed subnets and scale-set splits stay where they are.
        planner = Planner(stacks_dir, last_outputs=base_state.outputs if base_state is not None else None)
        progress = Progress.for_stderr()
        for name in names:
            started = time.perf_counter()
            state = _state(name, stacks_dir, planner)
            planned_s = time.perf_counter() - started
            deployments.append(parse(state, f"stack {name}", str(stacks_dir / f"Pulumi.{name}.yaml")))
            if base_state is not None:
                changes.append(change_set(name, state, base_state, all_stacks, stacks_dir))
            progress.line(f"planned {name} in {planned_s:.1f} s ({len(state['deployment']['resources'])} resources)")
    report = review(deployments, policy_config, changes)
    sys.stdout.write(format_report(report, fmt, with_changes=base_state is not None, stacks_dir=stacks_dir))
    return 1 if report.mandatory else 0
