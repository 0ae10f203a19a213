"""A stack file's ``config:`` turned into the form the Pulumi engine hands a program.

The engine passes every value as a string: strings as they are, everything else as JSON
(objects with sorted keys, as the Go engine marshals them). Keys without a namespace belong to
the project. ``secure:`` values cannot be decrypted offline: the key stays marked secret and
the program sees a placeholder.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from modules.errors import ConfigError
from modules.stackplan.config import read_stack_file, stack_file, stack_names

SECRET_PLACEHOLDER = "[secret]"


def project_name(project_root: Path) -> tuple[str, Path]:
    """The project name and the program directory (``main:``) from ``Pulumi.yaml``."""
    path = project_root / "Pulumi.yaml"
    try:
        doc = yaml.safe_load(path.read_text())
    except OSError:
        raise ConfigError(f"{path}: no Pulumi.yaml: run from the project root") from None
    except yaml.YAMLError:
        raise ConfigError(f"{path}: not valid YAML: fix the syntax") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("name"), str):
        raise ConfigError(f"{path}: no project 'name': add 'name: <project>'")
    main = doc.get("main") or "."
    return doc["name"], project_root / str(main)


def _runtime_value(value: Any) -> tuple[str, bool]:
    """``(string the program sees, whether it is secret)``."""
    if isinstance(value, dict) and set(value) == {"secure"}:
        return SECRET_PLACEHOLDER, True
    secret = _has_secure(value)
    if secret:
        value = _mask_secure(value)
    if isinstance(value, str):
        return value, secret
    return json.dumps(value, sort_keys=True, separators=(",", ":")), secret


def _has_secure(value: Any) -> bool:
    if isinstance(value, dict):
        return set(value) == {"secure"} or any(_has_secure(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_secure(v) for v in value)
    return False


def _mask_secure(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {"secure"}:
            return SECRET_PLACEHOLDER
        return {k: _mask_secure(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_mask_secure(v) for v in value]
    return value


def runtime_config(stacks_dir: Path, stack: str, project: str) -> tuple[dict[str, str], list[str]]:
    """``(config, secret keys)`` for ``pulumi.runtime.set_all_config``."""
    path = stack_file(stacks_dir, stack)
    if not path.exists() and not path.is_symlink():
        known = ", ".join(stack_names(stacks_dir)) or "(none)"
        raise ConfigError(f"unknown stack {stack!r}: no {path}: use one of {known}")
    raw = read_stack_file(path)  # the program's own reader: duplicate keys, encodings, Pulumi's keys
    config: dict[str, str] = {}
    secrets: list[str] = []
    for key, value in raw.items():
        full = str(key) if ":" in str(key) else f"{project}:{key}"
        config[full], secret = _runtime_value(value)
        if secret:
            secrets.append(full)
    return config, sorted(secrets)
