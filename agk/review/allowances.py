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

from modules.errors import ConfigError
from modules.stackplan.config import ChangesConfig, parse_section, read_stack_file, stack_file
from policies.rules.change import CHANGES_KEY, Allowance


def parse(raw: Any, where: str) -> list[Allowance]:
    """Allowances from the value of ``azure-gpu-k8s:changes`` (``None``: there are none), validated by the
    stack config's own model, so the program and the review refuse the same mistakes the same way."""
    if raw is None:
        return []
    try:
        changes = parse_section(ChangesConfig, raw, CHANGES_KEY.split(":", 1)[1])
    except ConfigError as err:
        raise ConfigError(f"{where}: {err}") from None
    return [Allowance(action=a.action, reason=a.reason, urn=a.urn, name=a.name) for a in changes.allow]


def read(stacks_dir: Path, stack: str) -> list[Allowance]:
    """The allowances of ``stacks_dir/Pulumi.<stack>.yaml`` (none when the file does not exist)."""
    path = stack_file(stacks_dir, stack)
    if not path.is_file():
        return []
    return parse(read_stack_file(path).get(CHANGES_KEY), stack)
