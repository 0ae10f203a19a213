"""Pulumi's wire form of property values, and the form `pulumi stack export` writes.

On the wire (gRPC ``Struct``) special values are objects tagged with a signature key: secrets,
resource references, assets, archives. State files keep the same tags, except that a secret's
value is stored as a JSON-encoded ``plaintext`` (what ``--show-secrets`` exports) or a
``ciphertext``.
"""

from __future__ import annotations

import json
from typing import Any

from google.protobuf import json_format, struct_pb2

SIG = "4dabf18193072939515e22adb298388d"
SECRET_SIG = "1b47061264138c4ac30d75fd1eb44270"
RESOURCE_SIG = "5cf8f73096256a8f31e491e813e4eb8e"
OUTPUT_SIG = "d0e6a833031e9bbcd3f4e8bde6ca49a4"


def from_struct(struct: struct_pb2.Struct) -> dict[str, Any]:
    """A ``Struct`` as JSON, with whole numbers as ints (the engine writes them so)."""
    result = _ints(json_format.MessageToDict(struct))
    assert isinstance(result, dict)
    return result


def to_struct(value: dict[str, Any]) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    struct.update(value)
    return struct


def _ints(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _ints(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_ints(v) for v in value]
    return value


def is_secret(value: Any) -> bool:
    return isinstance(value, dict) and value.get(SIG) == SECRET_SIG


def secret(value: Any) -> dict[str, Any]:
    return {SIG: SECRET_SIG, "value": value}


def plain(value: Any) -> Any:
    """The value a program or a reader means: secrets opened, resource references as their id or URN."""
    if isinstance(value, dict):
        sig = value.get(SIG)
        if sig == SECRET_SIG:
            if "plaintext" in value:
                return plain(json.loads(value["plaintext"]))
            return plain(value.get("value"))
        if sig == RESOURCE_SIG:
            return value.get("id") or value.get("urn")
        if sig == OUTPUT_SIG:
            return plain(value.get("value"))
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def to_state(value: Any) -> Any:
    """Wire form to state-file form: secrets become ``plaintext`` (JSON of the value)."""
    if isinstance(value, dict):
        if value.get(SIG) == SECRET_SIG:
            return {SIG: SECRET_SIG, "plaintext": json.dumps(plain(value.get("value")), sort_keys=True)}
        return {k: to_state(v) for k, v in value.items()}
    if isinstance(value, list):
        return [to_state(v) for v in value]
    return value


def from_state(value: Any) -> Any:
    """State-file form back to wire form (the inverse of :func:`to_state` for plaintext secrets)."""
    if isinstance(value, dict):
        if value.get(SIG) == SECRET_SIG and "plaintext" in value:
            return secret(json.loads(value["plaintext"]))
        return {k: from_state(v) for k, v in value.items()}
    if isinstance(value, list):
        return [from_state(v) for v in value]
    return value
