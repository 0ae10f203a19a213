"""Run the real Pulumi program for a stack under a mock engine and record what it would create.

No Pulumi CLI, no cloud, no credentials: the program runs in this process against
:class:`~agk.plan.monitor.CaptureMonitor`, with the stack's config in Pulumi's runtime form.

Each stack runs in a thread of its own with an empty ``contextvars.Context``: every piece of
Pulumi's runtime state (settings, root stack, config) is a context variable, so a fresh
context is a fresh runtime, and a stack reference can plan the referenced stack while the
referencing program waits. (Measured against one subprocess per stack, see bench/plan.py: the
subprocess pays Python and provider SDK imports again for every stack.)
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import contextvars
import gc
import hashlib
import heapq
import importlib.metadata
import os
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pulumi
from pulumi.runtime.config import set_all_config
from pulumi.runtime.settings import ROOT, SETTINGS, Settings, configure
from pulumi.runtime.stack import run_in_stack

from agk.plan import wire
from agk.plan.monitor import STACK_TYPE, Captured, CaptureMonitor, LastOutputs
from agk.plan.stackconfig import project_name, runtime_config
from modules.errors import AgkError, ConfigError
from modules.stackplan.config import stack_names
from modules.stackplan.stacks_dir import ENV as STACKS_DIR_ENV

REPO_ROOT = Path(__file__).resolve().parents[2]


class StackGraphError(ConfigError):
    """Stack references that cannot be planned (a cycle); the message names every stack involved."""


@dataclass
class StackPlan:
    """Everything one stack's program registered, in the order an export lists it."""

    stack: str
    project: str
    resources: list[Captured]
    references: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0
    """Wall time of the whole plan: the program plus the SDK's registration of every resource."""
    program_seconds: float = 0.0
    """Wall time of the program's own code (config, planning, constructing components)."""

    @property
    def stack_resource(self) -> Captured:
        return next(r for r in self.resources if r.type == STACK_TYPE)

    @property
    def outputs(self) -> dict[str, Any]:
        """Stack outputs in wire form (secrets tagged)."""
        return self.stack_resource.outputs

    def by_type(self, type_: str) -> list[Captured]:
        return [r for r in self.resources if r.type == type_]


class _Engine:
    """Collects what the program logs: warnings go in the report, errors fail the plan."""

    def __init__(self) -> None:
        self.warnings: list[str] = []
        self.errors: list[str] = []

    def Log(self, request: Any) -> None:
        from pulumi.runtime.proto import engine_pb2

        if request.severity == engine_pb2.ERROR:
            self.errors.append(request.message)
        elif request.severity == engine_pb2.WARNING:
            self.warnings.append(request.message)


_path_lock = threading.Lock()
_path_users: dict[str, int] = {}


@contextlib.contextmanager
def _program_on_path(directory: Path) -> Iterator[None]:
    """Put the program directory on ``sys.path`` as Pulumi's Python host does (nesting-safe)."""
    entry = str(directory)
    with _path_lock:
        _path_users[entry] = _path_users.get(entry, 0) + 1
        if _path_users[entry] == 1:
            sys.path.insert(0, entry)
    try:
        yield
    finally:
        with _path_lock:
            _path_users[entry] -= 1
            if _path_users[entry] == 0:
                del _path_users[entry]
                with contextlib.suppress(ValueError):
                    sys.path.remove(entry)


_gc_lock = threading.Lock()
_gc_pauses = [0, False]
"""[plans running, whether the collector was on before the first]"""


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a program registers its resources.

    The SDK keeps an Output, a task and ~60 alias futures alive per resource until the program
    settles, and each full collection walks all of them again: measured on prod-7500 (bench/plan.py),
    collections were more than half of the plan and made it grow faster than the resource count.
    Reference counting still frees what it can; the cycles are collected once, after the plan.
    Nesting-safe: a stack reference plans another stack inside this one.
    """
    with _gc_lock:
        if _gc_pauses[0] == 0:
            _gc_pauses[1] = gc.isenabled()
            gc.disable()
        _gc_pauses[0] += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_pauses[0] -= 1
            if _gc_pauses[0] == 0 and _gc_pauses[1]:
                gc.enable()


def _exec_program(main: Path) -> None:
    path = main / "__main__.py" if main.is_dir() else main
    code = compile(path.read_text(), str(path), "exec")
    with _program_on_path(path.parent):
        exec(code, {"__name__": "__main__", "__file__": str(path), "__builtins__": builtins})


def _user_error(err: BaseException, stack: str) -> AgkError | None:
    """The configuration error behind a failed run, if that is what it was.

    The program runs in this process, so the AgkError itself is in the chain (infra/__main__.py raises
    its one-line RunError with the error as context): it keeps the stack it names (a sibling's error
    stays the sibling's), and gets ``stack`` only when it names none.
    """
    chain: list[BaseException] = []
    current: BaseException | None = err
    while current is not None and all(current is not c for c in chain):
        chain.append(current)
        current = current.__cause__ or current.__context__
    for found in chain:
        if isinstance(found, StackGraphError):
            return found
    for found in chain:
        if isinstance(found, AgkError):
            return found.in_stack(stack)
    for found in chain:
        if isinstance(found, pulumi.RunError):
            return ConfigError(str(found).removeprefix("error: "), stack=stack)
    return None


def _in_fresh_runtime(body: Any) -> Any:
    """Run ``body()`` in a new thread with an empty context and its own event loop."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = body()
        except BaseException as err:
            box["error"] = err

    thread = threading.Thread(target=lambda: contextvars.Context().run(target), name="agk-plan")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


async def _settle_outputs() -> None:
    """Wait for every output the program created, in rounds, before the SDK's own wait.

    The SDK's ``wait_for_rpcs`` waits on all pending outputs with ``FIRST_COMPLETED`` and puts the
    rest back, so each completion costs a pass over every pending output: quadratic in their
    number (azure-native adds ~60 type aliases per resource, each a few outputs; at prod-7500 that
    wait was a fifth of the plan). Here one ``asyncio.wait`` per round covers a snapshot of them;
    outputs created meanwhile form the next round. On the first failure this stops and leaves the
    failed output where the SDK finds and raises it, so errors surface exactly as before.
    """
    while True:
        with SETTINGS.lock:
            pending = [task for task in SETTINGS.outputs if not task.done()]
        if not pending:
            return
        done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_EXCEPTION)
        if any(not task.cancelled() and task.exception() is not None for task in done):
            return


def _export_order(resources: dict[str, Captured]) -> list[Captured]:
    """Dependencies before dependents (parent, provider, dependencies), ties by URN: stable output."""
    after: dict[str, set[str]] = {urn: set() for urn in resources}
    for res in resources.values():
        refs = {res.parent, res.provider.rsplit("::", 1)[0] if res.provider else None, *res.dependencies}
        for urns in res.property_dependencies.values():
            refs.update(urns)
        after[res.urn] = {u for u in refs if u is not None and u in resources and u != res.urn}
    users: dict[str, list[str]] = {urn: [] for urn in resources}
    for urn, needs in after.items():
        for need in needs:
            users[need].append(urn)
    pending = {urn: len(needs) for urn, needs in after.items()}

    def key(urn: str) -> tuple[int, str]:
        return (0 if resources[urn].type == STACK_TYPE else 1, urn)

    ready = [key(u) for u, n in pending.items() if n == 0]
    heapq.heapify(ready)
    order: list[Captured] = []
    while ready:
        _, urn = heapq.heappop(ready)
        order.append(resources[urn])
        for user in users[urn]:
            pending[user] -= 1
            if pending[user] == 0:
                heapq.heappush(ready, key(user))
    placed = {r.urn for r in order}
    order.extend(sorted((r for r in resources.values() if r.urn not in placed), key=lambda r: r.urn))
    return order


class Planner:
    """Plans stacks of one project; remembers each plan so references are planned once."""

    def __init__(
        self,
        stacks_dir: Path,
        project_root: Path = REPO_ROOT,
        on_planned: Callable[[StackPlan], None] | None = None,
        last_outputs: LastOutputs | None = None,
    ) -> None:
        self.stacks_dir = stacks_dir
        self.last_outputs = last_outputs
        """A stack's last deployed outputs (from ``--base``): what the program pins its addresses from."""
        self.on_planned = on_planned
        """Called once per stack as its plan completes (progress lines)."""
        self.project_root = project_root
        self.project, self.main = project_name(project_root)
        self._plans: dict[str, StackPlan] = {}
        self._active: list[str] = []
        self._lock = threading.RLock()

    def stacks(self) -> list[str]:
        return stack_names(self.stacks_dir)

    def plan(self, stack: str) -> StackPlan:
        with self._lock:
            if stack in self._plans:
                return self._plans[stack]
            if stack in self._active:
                chain = " -> ".join([*self._active[self._active.index(stack) :], stack])
                raise StackGraphError(f"stack references form a cycle ({chain}): a stack cannot depend on itself")
            self._active.append(stack)
        try:
            result = self._run(stack)
        finally:
            with self._lock:
                self._active.remove(stack)
        with self._lock:
            self._plans[stack] = result
        if self.on_planned is not None:
            self.on_planned(result)
        return result

    def plan_all(self) -> list[StackPlan]:
        """Every stack, referenced stacks first (hub, then clusters, then their add-ons)."""
        plans = {name: self.plan(name) for name in self.stacks()}
        depth: dict[str, int] = {}

        def level(name: str) -> int:
            if name not in depth:
                refs = [ref for ref in plans[name].references if ref in plans]
                depth[name] = 1 + max((level(ref) for ref in refs), default=-1)
            return depth[name]

        return sorted(plans.values(), key=lambda p: (level(p.stack), p.stack))

    def _resolve(self, reference: str) -> tuple[dict[str, Any], list[str]]:
        name = reference.rsplit("/", 1)[-1]
        if not (self.stacks_dir / f"Pulumi.{name}.yaml").is_file():
            known = ", ".join(self.stacks()) or "(none)"
            raise ConfigError(f"stack reference {reference!r}: no such stack in {self.stacks_dir}: use one of {known}")
        exported = self.plan(name).outputs
        values = {k: wire.plain(v) for k, v in exported.items()}
        return values, sorted(k for k, v in exported.items() if wire.is_secret(v))

    def _missing_output(self, err: BaseException, stack: str, references: list[str]) -> AgkError | None:
        """``require_output`` of a name the referenced stack does not export fails with a bare KeyError."""
        if not isinstance(err, KeyError) or not err.args or not isinstance(err.args[0], str):
            return None
        for reference in references:
            plan = self._plans.get(reference.rsplit("/", 1)[-1])
            if plan is not None and err.args[0] not in plan.outputs:
                return ConfigError(
                    f"{stack}: stack {reference!r} has no output {err.args[0]!r}:"
                    f" export it from {reference} (outputs: {', '.join(sorted(plan.outputs)) or 'none'})"
                )
        return None

    def _run(self, stack: str) -> StackPlan:
        # A failed stack reference leaves SDK coroutines unawaited; the failure is reported once, as an error.
        warnings.filterwarnings("ignore", message="coroutine .* was never awaited", category=RuntimeWarning)
        config, secret_keys = runtime_config(self.stacks_dir, stack, self.project)
        # The program reads its network's other stacks (hub, sibling spokes) from files: the same
        # directory this plan reads, not the repository's default stacks/.
        os.environ[STACKS_DIR_ENV] = str(self.stacks_dir.resolve())
        monitor = CaptureMonitor(stack, self.project, config, self._resolve, self.last_outputs)
        engine = _Engine()
        started = time.perf_counter()

        program_seconds = [0.0]

        def timed_program() -> Awaitable[None]:
            begun = time.perf_counter()
            try:
                _exec_program(self.main)
            finally:
                program_seconds[0] = time.perf_counter() - begun
            return _settle_outputs()

        def body() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            # A failed program leaves futures nobody awaits; the failure itself is reported once.
            loop.set_exception_handler(lambda _loop, _context: None)
            # One worker: the monitor answers in the order the program asked (stable dynamic IPs).
            loop.set_default_executor(ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"agk-{stack}"))
            ROOT.set(None)
            settings = Settings(
                project=self.project,
                stack=stack,
                monitor=monitor,
                engine=engine,
                dry_run=False,
                organization="organization",
                root_directory=str(self.project_root),
            )
            configure(settings)
            set_all_config(config, secret_keys)
            try:
                loop.run_until_complete(run_in_stack(timed_program))
            finally:
                pending = asyncio.all_tasks(loop)
                for task in pending:
                    task.cancel()
                if pending:
                    loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
                loop.run_until_complete(loop.shutdown_default_executor())
                asyncio.set_event_loop(None)
                loop.close()

        try:
            with _collector_paused():
                _in_fresh_runtime(body)
        except Exception as err:
            user = _user_error(err, stack) or self._missing_output(err, stack, monitor.references)
            if user is not None:
                raise user from None
            raise
        if engine.errors:
            raise ConfigError(engine.errors[0].strip().splitlines()[0], stack=stack)
        return StackPlan(
            stack=stack,
            project=self.project,
            resources=_export_order(monitor.captured),
            references=sorted(set(monitor.references)),
            warnings=engine.warnings,
            seconds=time.perf_counter() - started,
            program_seconds=program_seconds[0],
        )


def _state_resource(res: Captured) -> dict[str, Any]:
    out: dict[str, Any] = {"urn": res.urn, "custom": res.custom}
    if res.id:
        out["id"] = res.id
    out["type"] = res.type
    if res.inputs:
        out["inputs"] = wire.to_state(res.inputs)
    if res.outputs:
        out["outputs"] = wire.to_state(res.outputs)
    if res.parent:
        out["parent"] = res.parent
    if res.protect:
        out["protect"] = True
    if res.delete_before_replace:
        # Not a field of `pulumi stack export` (the engine keeps it per registration): the plan records it so
        # a diff can tell a delete-first replacement (the host is down meanwhile) from one that creates first.
        out["deleteBeforeReplace"] = True
    if res.replace_on_changes:
        # Likewise the registration's: a change under one of these paths is a replacement the program asked for
        # (e.g. a VM's image: modules/azure/vm.py), where the provider alone would update and Azure refuse.
        out["replaceOnChanges"] = list(res.replace_on_changes)
    if res.external:
        out["external"] = True
    if res.dependencies:
        # The SDK sends a resource's dependencies from a set: sorted, two plans of one input export the same bytes.
        out["dependencies"] = sorted(res.dependencies)
    if res.provider:
        out["provider"] = res.provider
    if res.property_dependencies:
        out["propertyDependencies"] = {key: sorted(urns) for key, urns in res.property_dependencies.items()}
    if res.aliases:
        out["aliases"] = list(res.aliases)
    return out


def _manifest() -> dict[str, str]:
    version = f"v{importlib.metadata.version('pulumi')}"
    epoch = _source_date_epoch()
    moment = datetime.fromtimestamp(epoch, UTC) if epoch is not None else datetime.now(UTC)
    return {
        "time": moment.isoformat().replace("+00:00", "Z"),
        "magic": hashlib.sha256(version.encode()).hexdigest(),
        "version": version,
    }


def _source_date_epoch() -> int | None:
    value = os.environ.get("SOURCE_DATE_EPOCH", "")
    return int(value) if value.isdigit() else None


def deployment(plan: StackPlan) -> dict[str, Any]:
    """The plan as ``pulumi stack export`` writes it (deployment version 3)."""
    return {
        "version": 3,
        "deployment": {"manifest": _manifest(), "resources": [_state_resource(r) for r in plan.resources]},
    }


def export_state(stack: str, stacks_dir: Path, project_root: Path = REPO_ROOT) -> dict[str, Any]:
    """``pulumi stack export`` of what ``pulumi up --stack <stack>`` would create."""
    return deployment(Planner(stacks_dir, project_root).plan(stack))


# -- where --out writes ----------------------------------------------------------------------------
def _writable(path: Path) -> bool:
    """Whether a folder can take new entries: the permissions, then a probe (a directory made and removed
    at once), since root passes every permission check on file systems that refuse entries (/proc, /sys)."""
    if not os.access(path, os.W_OK | os.X_OK):
        return False
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".agk-probe-", dir=path))
    except OSError:
        return False
    return True


def check_out(out: Path, layout: dict[str, tuple[str, ...]], flag: str = "--out") -> None:
    """Refuse ``out`` before any work when the files ``layout`` names could not be written there.

    ``layout`` maps each folder under ``out`` to the files written into it. Nothing is created here:
    a command that fails later (bad config) must leave ``out`` absent or unchanged. As root,
    ``os.access`` still answers for read-only file systems (EROFS); permissions do not stop root.
    """
    try:
        _check_out(out, layout, flag)
    except OSError as err:  # a folder on the way that cannot even be looked into
        raise AgkError(f"{flag} {out}: cannot be reached ({err.strerror}): give a directory you can write to") from None


def _dangling(path: Path) -> bool:
    return path.is_symlink() and not path.exists()


def _check_out(out: Path, layout: dict[str, tuple[str, ...]], flag: str) -> None:
    for path in (out, *(out / f for f in layout), *(out / f / n for f, names in layout.items() for n in names)):
        if _dangling(path):
            raise AgkError(f"{flag} {out}: {path} is a symbolic link to nothing: remove it or give another {flag}")
    if out.exists() and not out.is_dir():
        raise AgkError(f"{flag} {out}: a file, not a directory: give a directory (created when missing)")
    if not out.exists():
        ancestor = out.parent
        while not ancestor.exists() and ancestor != ancestor.parent:
            ancestor = ancestor.parent
        if not ancestor.is_dir():
            raise AgkError(f"{flag} {out}: {ancestor} is a file, not a directory: give a path outside it")
        if not _writable(ancestor):
            raise AgkError(
                f"{flag} {out}: cannot be created ({ancestor} is not writable): give a directory you can write to"
            )
        return
    if not _writable(out):
        raise AgkError(f"{flag} {out}: not writable: give a directory you can write to")
    for folder, files in layout.items():
        where = out / folder
        if where.exists() and not where.is_dir():
            raise AgkError(f"{flag} {out}: {where} is a file, not a directory: remove it or give another {flag}")
        if where.is_dir() and not _writable(where):
            raise AgkError(f"{flag} {out}: {where} is not writable: give a directory you can write to")
        for name in files:
            path = where / name
            if path.is_dir():
                raise AgkError(f"{flag} {out}: {path} is a directory, not a file: remove it or give another {flag}")
            if path.exists() and not os.access(path, os.W_OK):
                raise AgkError(f"{flag} {out}: {path} is not writable: give a directory you can write to")
