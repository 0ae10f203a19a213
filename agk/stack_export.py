"""Reading a `pulumi stack export` (deployment version 3): every way a file cannot be one is a line.

Shared by `agk review --file` and `agk plan --base`, which check a file the same way; what the policy
SDK then makes of the props is agk.review.evaluate's ``wire_props``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from modules.errors import AgkError

STACK_TYPE = "pulumi:pulumi:Stack"


@dataclass(frozen=True)
class Exported:
    """One resource of the export, as the file has it."""

    urn: str
    type: str
    custom: bool
    inputs: Mapping[str, Any]
    outputs: Mapping[str, Any]
    parent: str | None
    provider: str | None
    dependencies: list[str]
    property_dependencies: dict[str, list[str]]
    protect: bool = False
    token: str = ""
    """The type token as the export spells it, when that is a versioned one (``type`` is then unversioned)."""

    @property
    def name(self) -> str:
        return self.urn.rsplit("::", 1)[-1]


@dataclass(frozen=True)
class Deployment:
    stack: str
    source: str
    """Where the result points: the stack file, or the export file given."""
    resources: list[Exported] = field(default_factory=list)


FILE_HINT = "give the output of `pulumi stack export`"
MAX_DEPTH = 100
"""Levels of nesting an export may have: the recursion limit of protobuf's C++ and Java parsers
(protocolbuffers/protobuf-go 3992ea8 aligns Go with them), which the engine's gRPC messages to a
policy pack pass through. Real exports stay far below it (the planned prod-7500: 12)."""


class _DuplicateKey(ValueError):
    pass


class _NotANumber(ValueError):
    pass


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # JSON leaves duplicate names to the reader and Python keeps the last: a hand-merged export could
    # hide a resource's first `inputs`. Pulumi writes each key once (Go's encoding/json).
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def _constant(name: str) -> Any:
    raise _NotANumber(name)


def _depth(data: Any) -> int:
    deepest, todo = 0, [(data, 1)]
    while todo:
        value, level = todo.pop()
        deepest = max(deepest, level)
        children = value.values() if isinstance(value, dict) else value
        todo.extend((c, level + 1) for c in children if isinstance(c, dict | list))
    return deepest


def read_json(path: Path, where: str, hint: str = FILE_HINT) -> Any:
    """The JSON document at ``path``; every way it cannot be one is a line naming ``where``.

    UTF-8 only, as RFC 8259 asks of JSON between programs and as `pulumi stack export` writes it; a
    UTF-16 file (Windows PowerShell's ``>`` writes one) or a BOM is named as such. NaN and Infinity,
    which Python reads but no `pulumi stack export` writes, are refused.
    """
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise AgkError(f"{where}: no such file: {hint}") from None
    except IsADirectoryError:
        raise AgkError(f"{where}: a directory, not a file: {hint}") from None
    except OSError as err:
        raise AgkError(f"{where}: cannot read it ({err.strerror or err}): {hint}") from None
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise AgkError(f"{where}: UTF-16, not UTF-8: write it with `pulumi stack export --file <path>` ({hint})")
    if raw.startswith(b"\xef\xbb\xbf"):
        raise AgkError(f"{where}: starts with a byte order mark: save it as UTF-8 without one ({hint})")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise AgkError(f"{where}: not UTF-8 (byte {err.start}): save it as UTF-8 ({hint})") from None
    try:
        data = json.loads(text, object_pairs_hook=_unique, parse_constant=_constant)
    except json.JSONDecodeError as err:
        raise AgkError(f"{where}: not JSON (line {err.lineno}: {err.msg}): {hint}") from None
    except RecursionError:
        raise AgkError(f"{where}: nested deeper than {MAX_DEPTH} levels: {hint}") from None
    except _DuplicateKey as err:
        raise AgkError(f"{where}: key {err.args[0]!r} given twice in one object: {hint}") from None
    except _NotANumber as err:
        raise AgkError(f"{where}: {err.args[0]} is not a JSON number: {hint}") from None
    if isinstance(data, dict | list) and _depth(data) > MAX_DEPTH:
        raise AgkError(f"{where}: nested deeper than {MAX_DEPTH} levels: {hint}")
    return data


def load_file(path: Path) -> Deployment:
    """``--file``: one stack's export, with at least one resource to review."""
    where = f"--file {path}"
    if not path.exists() and not path.is_symlink():
        raise AgkError(f"{where}: no such file: give the path of a `pulumi stack export` JSON")
    deployment = parse(read_json(path, where), where, str(path))
    if not deployment.resources:
        raise AgkError(
            f"{where}: no resources (a stack never deployed?): nothing to review; {FILE_HINT} of a deployed stack"
        )
    custom = sorted({r.type for r in deployment.resources if r.custom and not r.type.startswith("pulumi:")})
    if custom and not any(t.startswith(CHECKED_PREFIXES) for t in custom):
        shown = ", ".join(custom[:3]) + (f" and {len(custom) - 3} more" if len(custom) > 3 else "")
        raise AgkError(
            f"{where}: no Azure (azure-native) or Kubernetes resource ({shown}): the policy pack checks those only,"
            " so nothing in it could be checked; give the export of an Azure stack"
        )
    return deployment


_VERSIONED = re.compile(r"^(azure-native:[^:/]+)/v[0-9a-z]+:([^:]+)$")
"""An explicit API version's type token (``azure-native:containerservice/v20240901:ManagedCluster``): the same
resource as the unversioned token, so the same policies apply (pulumi-azure-native publishes every API version
as its own module, and a real export keeps the one the program imported)."""

CHECKED_PREFIXES = ("azure-native:", "kubernetes:")
"""Type tokens the policy pack has rules for: an export without any is not one this review can check."""

SHAPES: dict[str, dict[str, type]] = {
    "*": {"tags": dict, "location": str},
    "azure-native:compute:VirtualMachine": {
        "hardwareProfile": dict,
        "osProfile": dict,
        "storageProfile": dict,
        "networkProfile": dict,
        "securityProfile": dict,
        "zones": list,
    },
    "azure-native:compute:VirtualMachineScaleSet": {"sku": dict, "virtualMachineProfile": dict, "zones": list},
    "azure-native:compute:Disk": {"sku": dict, "creationData": dict, "zones": list},
    "azure-native:network:VirtualNetwork": {"addressSpace": dict, "subnets": list},
    "azure-native:network:Subnet": {"addressPrefix": str, "addressPrefixes": list, "networkSecurityGroup": dict},
    "azure-native:network:NetworkSecurityGroup": {"securityRules": list},
    "azure-native:network:NetworkInterface": {"ipConfigurations": list},
    "azure-native:network:LoadBalancer": {"frontendIPConfigurations": list},
    "azure-native:storage:StorageAccount": {"sku": dict, "networkRuleSet": dict},
}
"""Input kinds the policies read (the SDK's argument types): a value of another kind is not checkable, and a
policy reading it would pass it silently, so the export is refused instead."""


def checked_type(token: str) -> str:
    """The type the policies know ``token`` as (a versioned azure-native token as its unversioned one)."""
    found = _VERSIONED.match(token)
    return f"{found.group(1)}:{found.group(2)}" if found else token


def _shape(kind: str, inputs: Mapping[str, Any], where: str) -> None:
    for key, expected in (*SHAPES["*"].items(), *SHAPES.get(kind, {}).items()):
        value = inputs.get(key)
        if value is not None and not isinstance(value, expected):
            raise AgkError(
                f"{where}: inputs.{key} of {kind} is {_kind(value)}, not {_kind(expected())}: the policies cannot check"
                " it (they would pass it silently): give an unmodified stack export"
            )


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(type(value), "a number")


def parse(data: Any, where: str, source: str) -> Deployment:
    """A ``pulumi stack export`` checked as Pulumi checks a snapshot it imports (VerifyIntegrity in
    pulumi/pulumi pkg/resource/deploy/snapshot.go): at most one live resource per URN (others are
    marked ``delete``), parents, dependencies and providers before the resources that name them;
    and one stack per file."""
    if not isinstance(data, dict):
        raise AgkError(f"{where}: {_kind(data)}, not an object: {FILE_HINT}")
    if "deployment" not in data:
        raise AgkError(f"{where}: no 'deployment' key: {FILE_HINT}")
    if data.get("version") != 3 or isinstance(data.get("version"), bool):
        raise AgkError(
            f"{where}: version {data.get('version')!r} is not supported: export with Pulumi 3 (deployment version 3)"
        )
    deployment = data["deployment"]
    if not isinstance(deployment, dict):
        raise AgkError(f"{where}: 'deployment' is {_kind(deployment)}, not an object: {FILE_HINT}")
    raw = deployment.get("resources")
    if raw is None:
        raw = []
    if not isinstance(raw, list):
        raise AgkError(f"{where}: deployment.resources is not a list: give an unmodified stack export")
    resources: list[Exported] = []
    seen: dict[str, int] = {}
    providers: set[str] = set()
    for i, item in enumerate(raw):
        at = f"{where}: deployment.resources[{i}]"
        res = _resource(item, at)
        if resources:
            _same_stack(resources[0], res, where, i)
        for ref, what in [(res.parent, "parent"), *((d, "dependency") for d in res.dependencies)]:
            if ref is not None and ref not in seen:
                later = any(isinstance(o, dict) and o.get("urn") == ref for o in raw[i + 1 :])
                place = "comes after it" if later else "is not in the export"
                raise AgkError(f"{at}: its {what} {ref} {place}: give an unmodified stack export")
        if res.provider is not None and res.provider not in providers:
            raise AgkError(
                f"{at}: provider {res.provider!r} is not a provider listed before it: give an unmodified stack export"
            )
        pending_delete = item.get("delete") is True
        if res.urn in seen and not pending_delete:
            raise AgkError(
                f"{at}: urn {res.urn} repeats deployment.resources[{seen[res.urn]}] (only copies marked"
                " delete may): give an unmodified stack export"
            )
        if res.urn not in seen or not pending_delete:
            seen[res.urn] = i
        if res.type.startswith("pulumi:providers:") and isinstance(item.get("id"), str):
            providers.add(f"{res.urn}::{item['id']}")
        if not pending_delete:
            resources.append(res)
    stack = next((r.urn.split("::")[0].removeprefix("urn:pulumi:") for r in resources), "")
    return Deployment(stack=stack, source=source, resources=resources)


def _same_stack(first: Exported, res: Exported, where: str, i: int) -> None:
    ours, theirs = first.urn.split("::")[:2], res.urn.split("::")[:2]
    if ours != theirs:
        raise AgkError(
            f"{where}: resources of two stacks, {_stack_name(*ours)} (deployment.resources[0]) and"
            f" {_stack_name(*theirs)} (deployment.resources[{i}]): export one stack per file"
        )


def _stack_name(stack: str, project: str) -> str:
    return f"{stack.removeprefix('urn:pulumi:')} of project {project}"


_URN = re.compile(r"urn:pulumi:[^:]+::[^:]+::(?:[^:$]+:[^:$]*:[^:$]+\$)*([^:$]+:[^:$]*:[^:$]+)::.+", re.DOTALL)


def _urns(value: Any, where: str, key: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise AgkError(f"{where}: '{key}' is {_kind(value)}, not a list of URNs: give an unmodified stack export")
    for j, urn in enumerate(value):
        if not isinstance(urn, str) or not _URN.fullmatch(urn):
            raise AgkError(f"{where}: {key}[{j}] is {urn!r}, not a Pulumi URN: give an unmodified stack export")
    return list(value)


def _optional_str(item: dict[str, Any], key: str, where: str) -> str | None:
    value = item.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise AgkError(f"{where}: '{key}' is {_kind(value)}, not a string: give an unmodified stack export")
    return value


def _resource(item: Any, where: str) -> Exported:
    if not isinstance(item, dict):
        raise AgkError(f"{where}: not an object: give an unmodified stack export")
    urn, kind = item.get("urn"), item.get("type")
    if not isinstance(urn, str) or not urn.startswith("urn:pulumi:") or urn.count("::") < 3:
        raise AgkError(f"{where}: urn {urn!r} is not a Pulumi URN: give an unmodified stack export")
    if kind is None or kind == "":
        raise AgkError(f"{where}: missing 'type': give an unmodified stack export")
    if not isinstance(kind, str):
        raise AgkError(f"{where}: 'type' is {_kind(kind)}, not a type token: give an unmodified stack export")
    match = _URN.fullmatch(urn)
    if match is None or match.group(1) != kind:
        raise AgkError(f"{where}: type {kind!r} is not the type its urn names ({urn}): give an unmodified stack export")
    for key in ("inputs", "outputs", "propertyDependencies"):
        if not isinstance(item.get(key) or {}, dict):
            raise AgkError(f"{where}: '{key}' is not an object: give an unmodified stack export")
    for key in ("custom", "protect", "external", "delete"):
        if key in item and not isinstance(item[key], bool):
            raise AgkError(
                f"{where}: '{key}' is {_kind(item[key])}, not true or false: give an unmodified stack export"
            )
    property_dependencies = {
        name: _urns(urns, where, f"propertyDependencies.{name}")
        for name, urns in (item.get("propertyDependencies") or {}).items()
    }
    _urns(item.get("aliases"), where, "aliases")
    checked = checked_type(kind)
    _shape(checked, item.get("inputs") or {}, where)
    return Exported(
        urn=urn,
        type=checked,
        token=kind if checked != kind else "",
        custom=bool(item.get("custom", False)),
        inputs=item.get("inputs") or {},
        outputs=item.get("outputs") or {},
        parent=_optional_str(item, "parent", where),
        provider=_optional_str(item, "provider", where),
        dependencies=_urns(item.get("dependencies"), where, "dependencies"),
        property_dependencies=property_dependencies,
        protect=bool(item.get("protect", False)),
    )
