"""Suite-wide: one plan per distinct input, shared by the test workers.

About 350 plans run in the plan, review, sizing and infra tests, and half of them are the same stack of the
same stack files (the unchanged side of a change, the hub behind every spoke): about 300 s of the suite on two
cores, measured. A plan is a pure function of the program's code, the stack files of its folder, the last
deployed outputs, the environment and the day (not the folder's path: a copy plans the same), so within one
session (the code cannot change) a plan keyed on the others is the plan; a plan with deployed outputs (``--base``)
always runs. The cached copy is unpickled afresh for each caller, so no test sees another's edits.

A test that patched anything (``monkeypatch``, ``pytest.MonkeyPatch.context()``) has changed the code a plan
runs, which no key can see: while any patch is in force, every plan runs. ``AGK_TEST_PLAN_CACHE=0`` turns
the cache off for a whole run.
"""

from __future__ import annotations

import datetime
import hashlib
import os
import pickle
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agk.plan import engine
from modules.stackplan import stacks_dir

_LIVE: weakref.WeakSet[pytest.MonkeyPatch] = weakref.WeakSet()


def _patched() -> bool:
    """Whether any MonkeyPatch holds a change it has not undone (an unknown pytest counts as patched)."""
    for patch in list(_LIVE):
        try:
            if patch._setattr or patch._setitem or patch._cwd is not None or patch._savesyspath is not None:
                return True
        except AttributeError:
            return True
    return False


def _key(planner: engine.Planner, stack: str) -> str | None:
    """The plan's inputs, hashed; None where they cannot all be keyed (the plan then runs)."""
    if planner.last_outputs is not None:
        # Deployed outputs come from a function (its repr names a memory address CPython reuses): not keyable.
        return None
    digest = hashlib.sha256()
    folder = Path(planner.stacks_dir)
    try:
        for path in sorted(folder.glob("Pulumi.*.yaml")):
            if not path.is_file():
                return None
            digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    except OSError:
        return None
    # The planner points the program at its folder through the environment itself (read before it does so).
    environment = {k: v for k, v in os.environ.items() if k != stacks_dir.ENV and not k.startswith(("PYTEST_", "COV_"))}
    for part in (
        stack,
        str(Path(planner.project_root).resolve()),
        repr(sorted(environment.items())),
        datetime.datetime.now(datetime.UTC).date().isoformat(),
    ):
        digest.update(part.encode() + b"\0")
    return digest.hexdigest()


@pytest.fixture(scope="session", autouse=True)
def _one_plan_per_input(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    if os.environ.get("AGK_TEST_PLAN_CACHE") == "0":
        yield
        return
    base = tmp_path_factory.getbasetemp()
    # Workers of one xdist run share the parent of their base folders; a new run gets a new one.
    store = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "plans"
    store.mkdir(exist_ok=True)
    run = engine.Planner._run
    track = pytest.MonkeyPatch.__init__

    def tracked(self: pytest.MonkeyPatch, *args: Any, **kwargs: Any) -> None:
        track(self, *args, **kwargs)
        _LIVE.add(self)

    def cached(self: engine.Planner, stack: str) -> engine.StackPlan:
        key = None if _patched() else _key(self, stack)
        if key is None:
            return run(self, stack)
        path = store / f"{key}.pickle"
        if path.is_file():
            plan: engine.StackPlan = pickle.loads(path.read_bytes())
            # What the run it stands for also did: plan the stacks it references into this planner (progress
            # lines, references resolved later) and point the environment at this folder.
            for reference in plan.references:
                self.plan(reference.rsplit("/", 1)[-1])
            os.environ[stacks_dir.ENV] = str(Path(self.stacks_dir).resolve())
            return plan
        plan = run(self, stack)
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_bytes(pickle.dumps(plan))
        partial.replace(path)
        return plan

    pytest.MonkeyPatch.__init__ = tracked  # type: ignore[method-assign]
    engine.Planner._run = cached  # type: ignore[method-assign]
    try:
        yield
    finally:
        engine.Planner._run = run  # type: ignore[method-assign]
        pytest.MonkeyPatch.__init__ = track  # type: ignore[method-assign]
