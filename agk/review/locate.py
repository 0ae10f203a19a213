"""Where in the stack file a finding comes from: the config key that made the resource, and its line.

Code scanning shows a SARIF result inline on a pull request only at a line the pull request touches; a
result at line 1 of the stack file (or of a generated state file) shows nowhere. Each finding is traced
to the key whose value built its resource: the pool (its ``agk-pool`` tag), the host role (``agk-role``:
``cluster.etcd``, ``cluster.api_servers``, ...), the admin login or zones an Azure refusal names, a
subnet's pool, the network, the allowances. The line comes from the YAML file itself (composed, never
constructed: no value is expanded).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from agk.review.evaluate import Violation
from modules.config_model import PROJECT
from policies.rules import fields

ROLE_KEYS = {
    "etcd": "cluster.etcd",
    "events-etcd": "cluster.events_etcd",
    "apiserver": "cluster.api_servers",
    "prometheus": "cluster.prometheus",
    "nat": "cluster.nat",
    "system-node": "cluster.system_pool",
}
ALLOWANCE_POLICIES = frozenset({"change-allowance-unused", "allowance-takes-quorum"})
_POOL_IN_MESSAGE = re.compile(r"^pool (?P<pool>[a-z0-9-]+) shrinks")
_REFUSED_KEYS = (
    ("osProfile.linuxConfiguration.ssh", "admin.ssh_public_keys"),
    ("osProfile.adminUsername", "admin.username"),
    ("zones", "cluster.api_servers.zones"),
)


def _pool_key(pool: str) -> str:
    return "cluster.system_pool" if pool == "system" else f"cluster.gpu_pools.{pool}"


def config_key(v: Violation, props: Mapping[str, Any] | None) -> str:
    """The stack-file key (``azure-gpu-k8s:<dotted path>``) whose value made the finding's resource."""
    if v.policy in ALLOWANCE_POLICIES:
        return f"{PROJECT}:changes"
    found = _POOL_IN_MESSAGE.match(v.message)
    if found:
        return f"{PROJECT}:{_pool_key(found['pool'])}"
    props = props or {}
    for path, key in _REFUSED_KEYS:
        if f"change {path}" in v.message or f"{path}," in v.message or f"{path} of" in v.message:
            return f"{PROJECT}:{key}"
    pool = fields.tag(props, "agk-pool")
    if pool:
        return f"{PROJECT}:{_pool_key(pool)}"
    role = fields.role(props)
    if role in ROLE_KEYS:
        return f"{PROJECT}:{ROLE_KEYS[role]}"
    subnet = str(props.get("subnetName") or "")
    if subnet.startswith("gpu-"):
        return f"{PROJECT}:{_pool_key(subnet.removeprefix('gpu-'))}"
    if v.type.startswith("azure-native:network:") or "subnet" in v.message:
        return f"{PROJECT}:network"
    if v.type.startswith("azure-native:storage:"):
        return f"{PROJECT}:cluster.storage"
    return f"{PROJECT}:cluster"


def key_line(path: Path, key: str) -> int:
    """The line (1-based) of ``key`` in the stack file, or of the deepest part of it the file has (1: none)."""
    try:
        root = yaml.compose(path.read_text(encoding="utf-8"), Loader=yaml.SafeLoader)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return 1
    namespace, _, dotted = key.partition(":")
    parts = [f"{namespace}:{dotted.split('.')[0]}", *dotted.split(".")[1:]] if dotted else [key]
    node, line = _child(root, "config"), 1
    if node is None:
        return line
    line = node[0]
    current = node[1]
    for part in parts:
        found = _child(current, part)
        if found is None:
            break
        line, current = found
    return line


def _child(node: Any, key: str) -> tuple[int, Any] | None:
    if not isinstance(node, yaml.MappingNode):
        return None
    for k, value in node.value:
        if isinstance(k, yaml.ScalarNode) and k.value == key:
            return k.start_mark.line + 1, value
    return None


def stack_file_for(v: Violation, stacks_dir: Path | None) -> Path | None:
    """The stack file a finding belongs to: its source when that is one, else ``stacks_dir``'s file of its stack."""
    source = Path(v.source)
    if source.suffix in (".yaml", ".yml") and source.is_file():
        return source
    if stacks_dir is not None and v.stack:
        candidate = stacks_dir / f"Pulumi.{v.stack}.yaml"
        if candidate.is_file():
            return candidate
    return None
