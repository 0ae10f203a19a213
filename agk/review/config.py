"""The policy config file, in the format of `pulumi preview --policy-pack-config FILE`.

``{"all": "advisory", "<policy>": "disabled", "<policy>": {"enforcementLevel": "...", "<prop>": ...}}``:
``all`` sets every policy's level, a policy's own entry overrides it, and a policy's properties are
validated against its config schema (JSON Schema), with the schema's defaults filled in as the
Pulumi CLI does. Unknown policies and properties are errors: a typo must not silently do nothing.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
from pulumi_policy import EnforcementLevel, Policy

from modules.errors import AgkError

LEVELS = {level.value: level for level in EnforcementLevel}


@dataclass(frozen=True)
class Settings:
    """What one policy runs with: its enforcement level and its config properties."""

    level: EnforcementLevel
    config: dict[str, Any]


def _schema(policy: Policy) -> dict[str, Any]:
    schema = policy.config_schema
    return {
        "type": "object",
        "properties": dict(schema.properties) if schema else {},
        "required": list(schema.required or []) if schema else [],
        "additionalProperties": False,
    }


def _level(value: Any, where: str) -> EnforcementLevel:
    if not isinstance(value, str) or value not in LEVELS:
        raise AgkError(f"{where}: {value!r} is not an enforcement level: use one of {', '.join(LEVELS)}")
    return LEVELS[value]


def read(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise AgkError(f"--policy-config {path}: no such file: give a JSON policy config file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise AgkError(f"--policy-config {path}: not readable JSON ({err}): fix the file") from None
    if not isinstance(data, dict):
        raise AgkError(f"--policy-config {path}: not a JSON object: map policy names to levels or settings")
    return data


def settings(policies: Sequence[Policy], default: EnforcementLevel, data: dict[str, Any]) -> dict[str, Settings]:
    """Each policy's level and config: pack default, then ``all``, then the policy's own entry."""
    known = {p.name: p for p in policies}
    for key in data:
        if key != "all" and key not in known:
            raise AgkError(f"policy config: unknown policy {key!r}: use 'all' or one of {', '.join(sorted(known))}")
    everyone = _level(data["all"], "policy config: all") if "all" in data else None
    out: dict[str, Settings] = {}
    for name, policy in known.items():
        level = everyone or policy.enforcement_level or default
        props: dict[str, Any] = {}
        entry = data.get(name)
        if isinstance(entry, str):
            level = _level(entry, f"policy config: {name}")
        elif isinstance(entry, dict):
            props = {k: v for k, v in entry.items() if k != "enforcementLevel"}
            if "enforcementLevel" in entry:
                level = _level(entry["enforcementLevel"], f"policy config: {name}.enforcementLevel")
        elif entry is not None:
            raise AgkError(f"policy config: {name}: {entry!r} is neither a level nor an object: use e.g. 'advisory'")
        schema = _schema(policy)
        for prop, spec in schema["properties"].items():
            if prop not in props and "default" in spec:
                props[prop] = copy.deepcopy(spec["default"])
        try:
            jsonschema.validate(props, schema)
        except jsonschema.ValidationError as err:
            where = ".".join(str(p) for p in err.absolute_path) or "(properties)"
            allowed = ", ".join(sorted(schema["properties"])) or "none"
            raise AgkError(
                f"policy config: {name}.{where}: {err.message}: fix it to match the policy's config schema "
                f"(properties: {allowed})"
            ) from None
        out[name] = Settings(level, props)
    return out
