"""``azure-gpu-k8s:changes`` in a stack file: the reviewed, named exceptions to the change policies.

```yaml
azure-gpu-k8s:changes:
  allow:
    - name: prod-7500-etcd-0-data      # or urn: urn:pulumi:...
      action: replace                  # replace | delete | move (a subnet's new prefix)
      reason: OPS-1234 move etcd to Premium SSD v2
```

Read from the stack file itself (pure: no Pulumi engine). Unknown keys, a missing reason or an
unknown action are errors, one line each, as for every other config key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from modules.errors import ConfigError
from policies.rules.change import CHANGES_KEY, Allowance

ACTIONS = ("replace", "delete", "move")
_ITEM_KEYS = ("urn", "name", "action", "reason")


def parse(raw: Any, where: str) -> list[Allowance]:
    """Allowances from the value of ``azure-gpu-k8s:changes`` (``None``: there are none)."""
    if raw is None:
        return []
    key = f"{where}: {CHANGES_KEY}"
    if not isinstance(raw, dict):
        raise ConfigError(f"{key}: not a mapping: write 'allow:' with a list of {{name, action, reason}}")
    extra = sorted(set(raw) - {"allow"})
    if extra:
        raise ConfigError(f"{key}.{extra[0]}: unknown key: the only key is 'allow'")
    items = raw.get("allow")
    if items is None:
        items = []
    if not isinstance(items, list):
        raise ConfigError(f"{key}.allow: not a list: give a list of {{name, action, reason}}")
    out = []
    for index, item in enumerate(items):
        at = f"{key}.allow[{index}]"
        if not isinstance(item, dict):
            raise ConfigError(f"{at}: not a mapping: give name (or urn), action and reason")
        unknown = sorted(set(item) - set(_ITEM_KEYS))
        if unknown:
            raise ConfigError(f"{at}.{unknown[0]}: unknown key: use {', '.join(_ITEM_KEYS)}")
        targets = [k for k in ("urn", "name") if item.get(k) is not None]
        if len(targets) != 1:
            raise ConfigError(f"{at}: give exactly one of urn and name (the resource's logical name)")
        target = item[targets[0]]
        if not isinstance(target, str) or not target.strip():
            raise ConfigError(f"{at}.{targets[0]}: {target!r} is not a resource {targets[0]}: give it as text")
        action = item.get("action")
        if action not in ACTIONS:
            raise ConfigError(f"{at}.action: {action!r} is not allowed: use one of {', '.join(ACTIONS)}")
        reason = item.get("reason")
        if not isinstance(reason, str) or not reason.strip():
            raise ConfigError(f"{at}.reason: missing: say why the change is intended (e.g. the change ticket)")
        out.append(Allowance(action=action, reason=reason.strip(), **{targets[0]: target.strip()}))
    return out


def read(stacks_dir: Path, stack: str) -> list[Allowance]:
    """The allowances of ``stacks_dir/Pulumi.<stack>.yaml`` (none when the file does not exist)."""
    path = stacks_dir / f"Pulumi.{stack}.yaml"
    if not path.is_file():
        return []
    try:
        doc = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError:
        raise ConfigError(f"{path}: not valid YAML: fix the syntax") from None
    config = doc.get("config") if isinstance(doc, dict) else None
    return parse(config.get(CHANGES_KEY) if isinstance(config, dict) else None, stack)
