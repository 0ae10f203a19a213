"""Suite-wide: one plan per distinct input, shared by the test workers.

About 350 plans run in the plan, review, sizing and infra tests, and half of them are the same stack of the
same stack files (the unchanged side of a change, the hub behind every spoke): about 300 s of the suite on two
cores, measured. A plan is a pure function of the program's code, the stack files of its folder, the last
deployed outputs, the environment and the day (not the folder's path: a copy plans the same), so within one session (the code cannot change) a plan keyed on
the others is the plan. The cached copy is unpickled afresh for each caller, so no test sees another's edits.

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


def _key(planner: engine.Planner, stack: str) -> str:
    digest = hashlib.sha256()
    folder = Path(planner.stacks_dir)
    for path in sorted(folder.glob("Pulumi.*.yaml")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    # The planner points the program at its folder through the environment itself (read before it does so).
    environment = {k: v for k, v in os.environ.items() if k != stacks_dir.ENV and not k.startswith(("PYTEST_", "COV_"))}
    for part in (
        stack,
        str(Path(planner.project_root).resolve()),
        repr(planner.last_outputs),
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
        if _patched():
            return run(self, stack)
        path = store / f"{_key(self, stack)}.pickle"
        if path.is_file():
            os.environ[stacks_dir.ENV] = str(Path(self.stacks_dir).resolve())  # as the plan it stands for did
            plan: engine.StackPlan = pickle.loads(path.read_bytes())
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
