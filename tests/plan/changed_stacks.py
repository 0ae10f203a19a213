"""Fixture stack folders for the change tests: copies of stacks/ with one edit, planned by the real program."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from agk.plan.blast import BlastRadius, blast_radius
from agk.plan.diff import Change, StackDiff, diff_states, resources_of
from agk.plan.engine import REPO_ROOT, Planner, deployment

STACKS = REPO_ROOT / "stacks"
Edit = Callable[[dict[str, Any]], None]
"""Changes a stack file's ``config:`` mapping in place."""


def stack_folder(where: Path, stack: str = "dev", edit: Edit | None = None) -> Path:
    where.mkdir(parents=True, exist_ok=True)
    for path in STACKS.glob("Pulumi.*.yaml"):
        shutil.copy(path, where / path.name)
    if edit is not None:
        path = where / f"Pulumi.{stack}.yaml"
        doc = yaml.safe_load(path.read_text())
        edit(doc["config"])
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return where


def export(folder: Path, stack: str = "dev") -> dict[str, Any]:
    return deployment(Planner(folder).plan(stack))


def diff(base: dict[str, Any], head: dict[str, Any], stack: str = "dev") -> tuple[StackDiff, BlastRadius]:
    found = diff_states(stack, resources_of(base), resources_of(head), "base")
    return found, blast_radius(found)


def line(change: Change) -> str:
    """One change as the tests compare it: action, type, logical name, keys (and refusals)."""
    text = f"{change.action} {change.type.rsplit(':', 1)[-1]} {change.name} [{', '.join(change.keys)}]"
    return text + (f" refused={', '.join(change.refused)}" if change.refused else "")


def cluster(config: dict[str, Any]) -> dict[str, Any]:
    value = config["azure-gpu-k8s:cluster"]
    assert isinstance(value, dict)
    return value


def pins(state: dict[str, Any]) -> dict[str, str]:
    """Every subnet of a planned stack and its CIDR, as ``network.pinned`` takes them."""
    out = {}
    for res in resources_of(state):
        if res["type"] == "azure-native:network:Subnet":
            inputs = res["inputs"]
            out[str(inputs["subnetName"])] = str(inputs["addressPrefix"])
    return out


def pinned(state: dict[str, Any], *keep: str) -> Edit:
    """Pin every subnet of ``state`` except ``keep`` (what a user does after the first deploy)."""

    def edit(config: dict[str, Any]) -> None:
        config["azure-gpu-k8s:network"]["pinned"] = {k: v for k, v in pins(state).items() if k not in keep}

    return edit


def both(*edits: Edit) -> Edit:
    def edit(config: dict[str, Any]) -> None:
        for one in edits:
            one(config)

    return edit


def outputs_of(state: dict[str, Any]) -> dict[str, Any]:
    """A planned stack's outputs in plain form: what `pulumi up` left for the next run to read."""
    from agk.plan import wire

    stack = next(r for r in resources_of(state) if r["type"] == "pulumi:pulumi:Stack")
    return {k: wire.plain(v) for k, v in stack.get("outputs", {}).items()}


def export_after(folder: Path, base: dict[str, Any], stack: str = "dev") -> dict[str, Any]:
    """Plan ``stack`` as its next `pulumi up` would: the program reads its own last outputs (``base``)."""
    last = outputs_of(base)
    return deployment(Planner(folder, last_outputs=lambda name: last if name == stack else {}).plan(stack))
