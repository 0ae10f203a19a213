"""`agk review`: the policy pack in policies/ evaluated offline, with pulumi_policy's own types,
against a planned stack, every stack, or any `pulumi stack export` file."""

from __future__ import annotations

import sys
from pathlib import Path

from agk.review import config as policy_config_file
from agk.review import render
from agk.review.evaluate import Report, evaluate
from agk.review.export import Deployment, load_file, parse
from modules.errors import AgkError
from policies.pack import ENFORCEMENT, NAME, POLICIES, VERSION

FORMATS = ("text", "json", "sarif", "markdown")


def stack_names(stacks_dir: Path) -> list[str]:
    """Every stack in ``stacks_dir``, the hub first (cluster stacks reference its outputs)."""
    names = sorted(p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in stacks_dir.glob("Pulumi.*.yaml"))
    return sorted(names, key=lambda n: (n != "hub", n))


def planned(stack: str, stacks_dir: Path) -> Deployment:
    """Plan ``stack`` with the mock-runtime engine and read its export as `--file` would."""
    if not (stacks_dir / f"Pulumi.{stack}.yaml").is_file():
        known = ", ".join(stack_names(stacks_dir)) or "none"
        raise AgkError(f"--stack {stack}: no {stacks_dir}/Pulumi.{stack}.yaml: use one of {known}")
    from agk.plan.engine import export_state

    source = str(stacks_dir / f"Pulumi.{stack}.yaml")
    return parse(export_state(stack, stacks_dir), f"stack {stack}", source)


def review(deployments: list[Deployment], policy_config: Path | None) -> Report:
    settings = policy_config_file.settings(POLICIES, ENFORCEMENT, policy_config_file.read(policy_config))
    reports = [evaluate(POLICIES, settings, dep, NAME, VERSION) for dep in deployments]
    return Report(
        violations=[v for r in reports for v in r.violations],
        policies_run=reports[0].policies_run if reports else 0,
        stacks=[s for r in reports for s in r.stacks],
    )


def format_report(report: Report, fmt: str) -> str:
    if fmt == "json":
        return render.as_json(report)
    if fmt == "sarif":
        return render.sarif(report, POLICIES, VERSION)
    if fmt == "markdown":
        return render.markdown(report)
    return render.text(report)


def run(
    *,
    stack: str | None,
    all_stacks: bool,
    file: Path | None,
    fmt: str,
    policy_config: Path | None,
    stacks_dir: Path,
) -> int:
    """Print the review; 0: no mandatory violation, 1: at least one (bad input raises AgkError)."""
    if fmt not in FORMATS:
        raise AgkError(f"--format {fmt}: unknown format: use one of {', '.join(FORMATS)}")
    chosen = sum((stack is not None, all_stacks, file is not None))
    if chosen != 1:
        raise AgkError("choose what to review: give exactly one of --stack NAME, --all or --file STATE.json")
    # Validate the policy config before planning anything: bad input must fail fast.
    policy_config_file.settings(POLICIES, ENFORCEMENT, policy_config_file.read(policy_config))
    if file is not None:
        deployments = [load_file(file)]
    elif stack is not None:
        deployments = [planned(stack, stacks_dir)]
    else:
        names = stack_names(stacks_dir)
        if not names:
            raise AgkError(f"--all: no Pulumi.<stack>.yaml in {stacks_dir}: give --stacks-dir the stacks folder")
        deployments = [planned(name, stacks_dir) for name in names]
    report = review(deployments, policy_config)
    sys.stdout.write(format_report(report, fmt))
    return 1 if report.mandatory else 0
