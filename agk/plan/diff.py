"""What a change does: a planned stack against a base (an earlier `agk plan --out`, or `pulumi stack export`).

Resources are matched the way the Pulumi engine matches them: by URN, or by one of the new
resource's aliases. A URN that changes without an alias (a renamed pool, a new parent, a new type)
is a delete and a create. A matched resource is the same, an update (the changed input keys), or
a replacement, when :mod:`policies.rules.replacements` says a changed input forces one; changes Azure
refuses in place are marked ``refused``. Pure: state dicts in, :class:`StackDiff` out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agk.plan import wire
from agk.plan.cloud import arm_path
from agk.stack_export import parse, read_json
from modules.errors import AgkError
from policies.rules.replacements import ARM_PATH, FIXED_NAME, Effect, covers, refusals, rules_for

ACTIONS = ("create", "update", "replace", "delete")
_SKIPPED = ("pulumi:pulumi:Stack",)
_BASE_HINT = "give a folder written by 'agk plan --out' or a 'pulumi stack export' file"

State = Mapping[str, Any]
"""One resource as a state file holds it (``urn``, ``type``, ``inputs``, ``outputs``, ...)."""


@dataclass(frozen=True)
class Change:
    urn: str
    type: str
    action: str
    keys: tuple[str, ...]
    """update: the changed top-level inputs; replace: the inputs that force the replacement."""
    paths: tuple[str, ...] = ()
    """Every changed input path (``[]`` for list elements)."""
    refused: tuple[str, ...] = ()
    """Changed inputs Azure refuses to change in place (``pulumi up`` would fail on them): rows of
    :data:`policies.rules.replacements.RULES`, each with its fix."""
    restarts: tuple[str, ...] = ()
    """Changed inputs Azure applies by restarting the VM (a resize)."""
    before: State | None = None
    after: State | None = None
    renamed_from: str | None = None
    """The base URN when an alias matched the resource."""
    delete_first: bool = False
    """A replacement that deletes the old resource before it creates the new one (``deleteBeforeReplace``):
    whatever runs on it is down meanwhile."""

    @property
    def name(self) -> str:
        return self.urn.rsplit("::", 1)[-1]

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "urn": self.urn,
            "type": self.type,
            "action": self.action,
            "keys": list(self.keys),
            "paths": list(self.paths),
            "refused": list(self.refused),
        }
        if self.refused:
            out["refusals"] = [
                {"path": r.path, "fix": r.fix, "source": r.source} for r in refusals(self.type, self.refused)
            ]
        if self.restarts:
            out["restarts"] = list(self.restarts)
        if self.renamed_from:
            out["renamed_from"] = self.renamed_from
        if self.action == "replace":
            out["delete_first"] = self.delete_first
        return out


@dataclass(frozen=True)
class StackDiff:
    stack: str
    base: str
    """Where the base state came from (shown in reports)."""
    changes: list[Change]
    new_stack: bool = False
    """The base has no state for this stack: everything is created."""
    warnings: list[str] = field(default_factory=list)
    base_resources: list[State] = field(default_factory=list)
    head_resources: list[State] = field(default_factory=list)
    root: str = ""
    """The stack resource's URN (stack-wide findings point at it)."""
    base_outputs: Mapping[str, Any] = field(default_factory=dict)
    head_outputs: Mapping[str, Any] = field(default_factory=dict)
    """The stack's outputs before and after (plain values)."""

    def counts(self) -> dict[str, int]:
        return {action: sum(c.action == action for c in self.changes) for action in ACTIONS}


# -- the base --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Base:
    """``--base``: a folder of ``<stack>/state.json`` files, or one stack's export."""

    path: Path
    single: dict[str, Any] | None = None
    """The export, when BASE is one file."""

    @property
    def is_folder(self) -> bool:
        return self.single is None

    def stacks(self) -> list[str]:
        if self.single is not None:
            return [_stack_of(self.single)]
        return sorted(p.parent.name for p in self.path.glob("*/state.json"))

    def state(self, stack: str) -> tuple[dict[str, Any], str]:
        """``(export, where it came from)`` for ``stack``; AgkError when BASE has none."""
        if self.single is not None:
            found = _stack_of(self.single)
            if found != stack:
                raise AgkError(
                    f"--base {self.path}: an export of stack {found!r}, not {stack!r}:"
                    f" give --stack {found} or a folder written by 'agk plan --out'"
                )
            return self.single, str(self.path)
        path = self.path / stack / "state.json"
        if not path.is_file():
            known = ", ".join(self.stacks()) or "none"
            raise AgkError(
                f"--base {self.path}: no {path}: plan the base with 'agk plan --stack {stack} --out {self.path}'"
                f" (stacks there: {known})"
            )
        return _read_export(path, f"--base {path}"), str(path)

    def has(self, stack: str) -> bool:
        return stack in self.stacks()

    def outputs(self, stack: str) -> dict[str, Any]:
        """The stack's outputs as BASE recorded them (plain values), ``{}`` when BASE lacks the stack:
        what its program reads as its own last outputs, so `agk plan --base` pins as `pulumi up` does."""
        if not self.has(stack):
            return {}
        export, _ = self.state(stack)
        for res in (export.get("deployment") or {}).get("resources") or []:
            if isinstance(res, dict) and res.get("type") == "pulumi:pulumi:Stack":
                outputs = res.get("outputs")
                return {k: wire.plain(v) for k, v in outputs.items()} if isinstance(outputs, dict) else {}
        return {}


def load_base(path: Path) -> Base:
    """Check ``--base`` before anything is planned: bad input fails fast, with one line."""
    if path.is_dir():
        base = Base(path)
        for stack in base.stacks():
            base.state(stack)
        return base
    if not path.exists():
        raise AgkError(f"--base {path}: no such file or directory: {_BASE_HINT}")
    return Base(path, _read_export(path, f"--base {path}"))


def _read_export(path: Path, where: str) -> dict[str, Any]:
    data = read_json(path, where, _BASE_HINT)
    parse(data, where, str(path))  # the same structural checks `agk review --file` makes
    assert isinstance(data, dict)
    if not resources_of(data):
        raise AgkError(
            f"{where}: no resources (a stack never deployed): leave out --base, and the plan lists every"
            " resource as created"
        )
    return data


def _stack_of(export: Mapping[str, Any]) -> str:
    for res in resources_of(export):
        return str(res["urn"]).split("::", 1)[0].removeprefix("urn:pulumi:")
    return ""


def resources_of(export: Mapping[str, Any]) -> list[State]:
    """The live resources of an export that :func:`agk.stack_export.parse` accepted: copies of a
    URN marked ``delete`` (left by a replacement that has not finished) are not what runs."""
    deployment = export.get("deployment") or {}
    return [r for r in deployment.get("resources") or [] if not (isinstance(r, dict) and r.get("delete") is True)]


# -- comparing -------------------------------------------------------------------------------------
def _is_ciphertext(value: Any) -> bool:
    return isinstance(value, dict) and value.get(wire.SIG) == wire.SECRET_SIG and "ciphertext" in value


def _has_ciphertext(value: Any) -> bool:
    if _is_ciphertext(value):
        return True
    if isinstance(value, dict):
        return any(_has_ciphertext(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_ciphertext(v) for v in value)
    return False


def changed_paths(old: Any, new: Any, prefix: str = "") -> set[str]:
    """Input paths whose values differ; ``[]`` stands for list elements (compared by position)."""
    if old == new:
        return set()
    if _is_ciphertext(old) or _is_ciphertext(new):
        return set()  # an encrypted secret cannot be compared; the diff warns about it once
    if isinstance(old, dict) and isinstance(new, dict):
        out: set[str] = set()
        for key in old.keys() | new.keys():
            out |= changed_paths(old.get(key), new.get(key), f"{prefix}.{key}" if prefix else key)
        return out
    if isinstance(old, list) and isinstance(new, list):
        out = set() if len(old) == len(new) else {f"{prefix}[]"}
        for a, b in zip(old, new, strict=False):
            out |= changed_paths(a, b, f"{prefix}[]")
        return out
    if old is None and new is None:
        return set()
    return {prefix}


def _value_at(props: Any, path: str) -> Any:
    value = props
    for part in path.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def _values_at(props: Any, path: str) -> list[Any]:
    """Every value at ``path``, ``[]`` standing for each element of a list (in order)."""
    head, sep, rest = path.partition("[].")
    if not sep:
        return [_value_at(props, path)]
    items = _value_at(props, head)
    return [v for item in items for v in _values_at(item, rest)] if isinstance(items, list) else []


def _shrinks(old: Any, new: Any, path: str) -> bool:
    """Whether a number at ``path`` (list elements compared by position) is smaller after than before."""
    pairs = zip(_values_at(old, path), _values_at(new, path), strict=False)
    return any(isinstance(a, int | float) and isinstance(b, int | float) and b < a for a, b in pairs)


def _open(value: Any) -> Any:
    """Values as the program meant them (:func:`wire.plain`), encrypted secrets kept as they are."""
    if _is_ciphertext(value):
        return value
    if isinstance(value, dict):
        if value.get(wire.SIG) is not None:
            return wire.plain(value)
        return {k: _open(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_open(v) for v in value]
    return value


def _plain_inputs(res: State) -> dict[str, Any]:
    value = _open(res.get("inputs") or {})
    return value if isinstance(value, dict) else {}


def _location(value: Any) -> str:
    return str(value or "").replace(" ", "").lower()


def _arm_keys(type_: str, inputs: Mapping[str, Any]) -> set[str]:
    keys = {"resourceGroupName"}
    for collection, key in arm_path(type_, dict(inputs)).segments:
        if not key.startswith("="):
            keys.add(key)
        if collection == "{recordType}":
            keys.add("recordType")
    return keys


def _same_name(type_: str, old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Whether a replacement keeps the resource's ARM name: every name input of its path is given (not
    auto-named) and unchanged, so a create-first replacement would collide with the resource it replaces."""
    names = _arm_keys(type_, new) - {"resourceGroupName", "recordType"}
    return bool(names) and all(new.get(k) is not None and old.get(k) == new.get(k) for k in names)


def _replace_on_changes(res: State) -> tuple[str, ...]:
    return tuple(p for p in res.get("replaceOnChanges") or [] if isinstance(p, str))


def classify(
    res_type: str, old: Mapping[str, Any], new: Mapping[str, Any], replace_on: Sequence[str] = ()
) -> Change | None:
    """The action for one matched resource (``None``: the same), with keys, paths and refusals.

    ``replace_on``: the resource's ``replaceOnChanges`` paths (the program's choice, as Pulumi applies it): a
    change at or below one replaces the resource whatever the provider would do."""
    paths = changed_paths(old, new)
    if "location" in paths and _location(old.get("location")) == _location(new.get("location")):
        paths.discard("location")
    if not paths:
        return None
    replace: set[str] = {r for r in replace_on if any(covers(r, p) for p in paths)}
    refused: set[str] = set()
    restarts: set[str] = set()
    for rule in rules_for(res_type):
        if rule.path == ARM_PATH:
            replace |= paths & (_arm_keys(res_type, old) | _arm_keys(res_type, new))
            continue
        if not any(covers(rule.path, p) for p in paths):
            continue
        if rule.effect is Effect.REPLACE:
            replace.add(rule.path)
        elif rule.effect is Effect.RESTART:
            restarts.add(rule.path)
        elif rule.effect is Effect.REFUSED:
            refused.add(rule.path)
        elif rule.effect is Effect.GROW_ONLY:
            if _shrinks(old, new, rule.path):
                refused.add(rule.path)
        elif rule.effect is Effect.ONE_WAY and not (
            _value_at(old, rule.path) is True and _value_at(new, rule.path) is False
        ):
            refused.add(rule.path)
    top = sorted({p.split(".", 1)[0].split("[", 1)[0] for p in paths})
    if replace:
        # A replacement creates a new resource: nothing is changed in place, so nothing is refused or restarted.
        return Change("", res_type, "replace", tuple(sorted(replace)), tuple(sorted(paths)))
    return Change(
        "", res_type, "update", tuple(top), tuple(sorted(paths)), tuple(sorted(refused)), tuple(sorted(restarts))
    )


def _aliases(res: State) -> list[str]:
    return [a for a in res.get("aliases") or [] if isinstance(a, str)]


def diff_states(
    stack: str,
    base: Iterable[State],
    head: Iterable[State],
    base_source: str,
    new_stack: bool = False,
) -> StackDiff:
    """Every create, update, replace and delete from ``base`` to ``head`` (the same is not listed)."""
    base_all, head_all = list(base), list(head)
    root = next((str(r["urn"]) for r in [*head_all, *base_all] if r.get("type") == _SKIPPED[0]), "")
    base_list = [r for r in base_all if r.get("type") not in _SKIPPED]
    head_list = [r for r in head_all if r.get("type") not in _SKIPPED]
    olds = {str(r["urn"]): r for r in base_list}
    matched: set[str] = set()
    changes: list[Change] = []
    encrypted = False
    for res in head_list:
        urn, type_ = str(res["urn"]), str(res["type"])
        old = olds.get(urn)
        renamed = None
        if old is None:
            renamed = next((a for a in _aliases(res) if a in olds and a not in matched), None)
            old = olds.get(renamed) if renamed else None
        if old is None:
            if not res.get("external"):
                changes.append(Change(urn, type_, "create", (), after=res))
            continue
        matched.add(str(old["urn"]))
        if res.get("external") or not res.get("custom", False):
            if renamed:
                changes.append(Change(urn, type_, "update", (), before=old, after=res, renamed_from=renamed))
            continue
        encrypted = encrypted or _has_ciphertext(old.get("inputs"))
        found = classify(type_, _plain_inputs(old), _plain_inputs(res), _replace_on_changes(res))
        if found is None and renamed is None:
            continue
        found = found or Change("", type_, "update", ())
        delete_first = bool(res.get("deleteBeforeReplace"))
        refused = found.refused
        if found.action == "replace" and not delete_first and _same_name(type_, _plain_inputs(old), _plain_inputs(res)):
            refused = (FIXED_NAME,)
        changes.append(
            Change(
                urn,
                type_,
                found.action,
                found.keys,
                found.paths,
                refused,
                found.restarts,
                before=old,
                after=res,
                renamed_from=renamed,
                delete_first=delete_first and found.action == "replace",
            )
        )
    for urn, old in olds.items():
        if urn not in matched and not old.get("external"):
            changes.append(Change(urn, str(old["type"]), "delete", (), before=old))
    warnings = []
    if encrypted:
        warnings.append(
            f"{base_source}: some inputs are encrypted secrets and were not compared:"
            " export the base with 'pulumi stack export --show-secrets'"
        )
    order = {action: i for i, action in enumerate(("replace", "delete", "update", "create"))}
    changes.sort(key=lambda c: (order[c.action], c.type, c.urn))
    return StackDiff(
        stack,
        base_source,
        changes,
        new_stack,
        warnings,
        base_list,
        head_list,
        root,
        _stack_outputs(base_all),
        _stack_outputs(head_all),
    )


def _stack_outputs(resources: Iterable[State]) -> dict[str, Any]:
    for res in resources:
        if res.get("type") == _SKIPPED[0] and isinstance(res.get("outputs"), dict):
            return {k: wire.plain(v) for k, v in res["outputs"].items()}
    return {}


def diff_against(stack: str, head_state: Mapping[str, Any], base: Base, all_stacks: bool) -> StackDiff:
    """The diff of one planned stack (its ``pulumi stack export`` form) against ``base``.

    With ``--all`` and a folder, a stack the base lacks is new (everything is created); with
    ``--stack`` a folder that lacks it is an error, as it is more likely a wrong folder.
    """
    if all_stacks and base.is_folder and not base.has(stack):
        return diff_states(stack, [], resources_of(head_state), f"{base.path} (no state for {stack})", new_stack=True)
    export, source = base.state(stack)
    return diff_states(stack, resources_of(export), resources_of(head_state), source)
