"""`agk plan`, the command: plans the chosen stacks (agk.plan), reviews each (agk.review) and reports.

The real ``infra/`` program runs under Pulumi's mock runtime (see :mod:`agk.plan.engine`); the
result is reported as text, JSON or a pull-request comment, and ``--out`` writes per stack the
``pulumi stack export`` state, the comment and the address plan. Every stack is planned before
anything is written: bad input leaves no files behind. It sits above both packages: the plan report
carries the policy pack's verdict, and the review plans what it reviews.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agk import review
from agk.plan.blast import blast_radius
from agk.plan.diff import load_base
from agk.plan.engine import REPO_ROOT, Planner, StackPlan, deployment
from agk.plan.prices import load as load_prices
from agk.plan.progress import Progress
from agk.plan.report import Changes, as_json, markdown, text
from agk.plan.topology import address_plan
from agk.subnet_calc import plan_json
from modules.errors import AgkError


def addresses_for(plan: StackPlan, stacks_dir: Path, project_root: Path = REPO_ROOT) -> dict[str, Any]:
    """The address plan: the planner's own (``subnet-calc plan``) for this project, else as built."""
    built = address_plan(plan)
    if project_root.resolve() != REPO_ROOT or not built["vnets"]:
        return built
    result: dict[str, Any] = plan_json(plan.stack, stacks_dir)
    return result


def review_verdict(state: dict[str, Any], stack: str, changes: Any = None) -> str | None:
    """One line from the policy pack (`agk review`, with the change policies given ``changes``)."""
    return review.verdict(state, stack, changes)


def _choose(stack: str | None, all_stacks: bool, planner: Planner) -> list[StackPlan]:
    if stack is not None and all_stacks:
        raise AgkError("--stack and --all both given: use one of them")
    if stack is None and not all_stacks:
        known = ", ".join(planner.stacks()) or "(none)"
        raise AgkError(f"no stack chosen: pass --stack <name> (one of {known}) or --all")
    if all_stacks:
        if not planner.stacks():
            raise AgkError(f"no stacks in {planner.stacks_dir}: add Pulumi.<stack>.yaml files or fix --stacks-dir")
        return planner.plan_all()
    return [planner.plan(stack)] if stack is not None else []


def run(
    *,
    stack: str | None,
    all_stacks: bool,
    fmt: str,
    out: Path | None,
    stacks_dir: Path,
    project_root: Path = REPO_ROOT,
    base: Path | None = None,
    prices_file: Path | None = None,
) -> int:
    if not stacks_dir.is_dir():
        raise AgkError(f"{stacks_dir}: no such directory: pass --stacks-dir with the Pulumi.<stack>.yaml files")
    # Bad --base input fails before anything is planned.
    base_state = load_base(base) if base is not None else None
    prices = load_prices(prices_file) if prices_file is not None else None
    if prices is not None and base_state is None:
        raise AgkError(f"--prices {prices_file}: prices a change, and no --base is given: add --base")
    if base_state is not None and all_stacks and not base_state.is_folder:
        only = base_state.stacks()[0] if base_state.stacks() else "?"
        raise AgkError(f"--base {base}: one stack's export ({only}): give --stack {only}, or a folder for --all")
    if base_state is not None and stack is not None and not all_stacks:
        base_state.state(stack)
    progress = Progress.for_stderr()
    planner = Planner(
        stacks_dir,
        project_root,
        on_planned=lambda p: progress.line(_planned_line(p)),
        last_outputs=base_state.outputs if base_state is not None else None,
    )
    plans = _choose(stack, all_stacks, planner)
    rendered = []
    for plan in plans:
        state = deployment(plan)
        addresses = addresses_for(plan, stacks_dir, project_root)
        changes: Changes | None = None
        change_set = None
        if base_state is not None:
            change_set = review.change_set(plan.stack, state, base_state, all_stacks, stacks_dir)
            changes = (change_set.diff, blast_radius(change_set.diff), prices)
        verdict = review_verdict(state, plan.stack, change_set)
        refs = tuple(planner.plan(ref.rsplit("/", 1)[-1]) for ref in plan.references)
        rendered.append((plan, state, addresses, verdict, refs, changes))
    if out is not None:
        if out.exists() and not out.is_dir():
            raise AgkError(f"--out {out}: exists and is not a directory: choose a directory")
        for plan, state, addresses, verdict, refs, changes in rendered:
            folder = out / plan.stack
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "state.json").write_text(json.dumps(state, indent=2) + "\n")
            (folder / "plan.md").write_text(markdown(plan, addresses, verdict, refs, changes))
            (folder / "addresses.json").write_text(json.dumps(addresses, indent=2) + "\n")
    if fmt == "json":
        docs = [as_json(p, a, v, r, c) for p, _, a, v, r, c in rendered]
        print(json.dumps(docs[0] if len(docs) == 1 and not all_stacks else {"stacks": docs}, indent=2))
    elif fmt == "markdown":
        print("\n---\n\n".join(markdown(p, a, v, r, c) for p, _, a, v, r, c in rendered), end="")
    else:
        print("\n\n".join(text(p, a, v, r, c) for p, _, a, v, r, c in rendered))
        if out is not None:
            print(f"\nWrote state.json, plan.md and addresses.json per stack under {out}/")
    return 0


def _planned_line(plan: StackPlan) -> str:
    return f"planned {plan.stack} in {plan.seconds:.1f} s ({len(plan.resources):,} resources)"
