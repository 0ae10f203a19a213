"""Reading a `pulumi stack export` (deployment version 3) into what the policy SDK hands policies.

Props go through the same path the analyzer's gRPC server uses: a protobuf ``Struct`` (so numbers
are floats, as policies see them under `pulumi preview`), ``deserialize_properties`` and the SDK's
``unknown_checking_proxy``. Encrypted secrets (an export without ``--show-secrets``) become the
text ``[secret]``: the engine would know them, a file does not.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf import json_format, struct_pb2
from pulumi_policy.deserialize import SPECIAL_SECRET_SIG, SPECIAL_SIG_KEY, deserialize_properties
from pulumi_policy.proxy import unknown_checking_proxy

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

    @property
    def name(self) -> str:
        return self.urn.rsplit("::", 1)[-1]


@dataclass(frozen=True)
class Deployment:
    stack: str
    source: str
    """Where the result points: the stack file, or the export file given."""
    resources: list[Exported] = field(default_factory=list)


def load_file(path: Path) -> Deployment:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise AgkError(f"--file {path}: no such file: give the path of a `pulumi stack export` JSON") from None
    except (OSError, UnicodeDecodeError) as err:
        raise AgkError(f"--file {path}: cannot read it ({err}): give a readable JSON file") from None
    except json.JSONDecodeError as err:
        raise AgkError(
            f"--file {path}: not JSON (line {err.lineno}: {err.msg}): give the output of `pulumi stack export`"
        ) from None
    return parse(data, f"--file {path}", str(path))


def parse(data: Any, where: str, source: str) -> Deployment:
    if not isinstance(data, dict) or "deployment" not in data:
        raise AgkError(f"{where}: no 'deployment' key: give the output of `pulumi stack export`")
    if data.get("version") != 3:
        raise AgkError(
            f"{where}: version {data.get('version')!r} is not supported: export with Pulumi 3 (deployment version 3)"
        )
    deployment = data["deployment"]
    raw = deployment.get("resources") if isinstance(deployment, dict) else None
    if raw is None:
        raw = []
    if not isinstance(raw, list):
        raise AgkError(f"{where}: deployment.resources is not a list: give an unmodified stack export")
    resources = [_resource(item, f"{where}: deployment.resources[{i}]") for i, item in enumerate(raw)]
    stack = next((r.urn.split("::")[0].removeprefix("urn:pulumi:") for r in resources), "")
    return Deployment(stack=stack, source=source, resources=resources)


def _resource(item: Any, where: str) -> Exported:
    if not isinstance(item, dict):
        raise AgkError(f"{where}: not an object: give an unmodified stack export")
    urn, kind = item.get("urn"), item.get("type")
    if not isinstance(urn, str) or not urn.startswith("urn:pulumi:") or urn.count("::") < 3:
        raise AgkError(f"{where}: urn {urn!r} is not a Pulumi URN: give an unmodified stack export")
    if not isinstance(kind, str) or not kind:
        raise AgkError(f"{where}: missing 'type': give an unmodified stack export")
    for key in ("inputs", "outputs", "propertyDependencies"):
        if not isinstance(item.get(key) or {}, dict):
            raise AgkError(f"{where}: '{key}' is not an object: give an unmodified stack export")
    return Exported(
        urn=urn,
        type=kind,
        custom=bool(item.get("custom", False)),
        inputs=item.get("inputs") or {},
        outputs=item.get("outputs") or {},
        parent=item.get("parent") or None,
        provider=item.get("provider") or None,
        dependencies=list(item.get("dependencies") or []),
        property_dependencies={k: list(v or []) for k, v in (item.get("propertyDependencies") or {}).items()},
        protect=bool(item.get("protect", False)),
    )


def _reveal(value: Any) -> Any:
    if isinstance(value, list):
        return [_reveal(v) for v in value]
    if isinstance(value, dict):
        if value.get(SPECIAL_SIG_KEY) == SPECIAL_SECRET_SIG:
            if "plaintext" in value:
                try:
                    return _reveal(json.loads(value["plaintext"]))
                except (TypeError, json.JSONDecodeError):
                    return value["plaintext"]
            if "value" in value:
                return _reveal(value["value"])
            return "[secret]"
        return {k: _reveal(v) for k, v in value.items()}
    return value


def wire_props(props: Mapping[str, Any]) -> Any:
    """Props exactly as the analyzer hands them to a policy."""
    struct = struct_pb2.Struct()
    struct.update(_reveal(dict(props)))
    return unknown_checking_proxy(deserialize_properties(json_format.MessageToDict(struct)))
