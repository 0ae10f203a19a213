"""A placeholder checksum is no checksum: refuse any resource that carries one (issue 21).

An all-zero sha256 is what a stack or table writes while the real value is not known yet (the cluster stacks
shipped one for Azure CNI): a node that checks against it refuses the download and fails its boot; one that
does not check trusts anything. The plan refuses such a row or key first (modules/bootstrap/versions.py
``require_verified``, exit status 2); this policy refuses it in any state the pack reviews, `pulumi stack export`
files included, wherever it sits: a plain input, the Image Builder build script (base64 in the template's inline
commands), or a host's bundle (``base64(gzip(JSON))`` in a Key Vault secret's value).
"""

from __future__ import annotations

import base64
import binascii
import gzip
import re
import zlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from pulumi_policy import ReportViolation, ResourceValidationArgs
from pulumi_policy.proxy import UnknownValueError

ZERO_SHA256 = re.compile(r"(?<![0-9A-Fa-f])0{64}(?![0-9A-Fa-f])")
_BLOB = re.compile(r"[A-Za-z0-9+/]{64,}={0,2}")
"""A run of base64 long enough to hold a script or a bundle (a sha256 in hex is 64 characters, not base64)."""
_DEPTH = 3


def _item(container: Any, key: Any) -> Any:
    """``container[key]``, or None for a value unknown during preview: an unknown value is no placeholder
    (the policy sees the real one at `pulumi up`), and reading it would make the SDK report the whole policy
    as unable to run on every resource with any unknown input."""
    try:
        return container[key]
    except UnknownValueError:
        return None


def _strings(value: Any, path: str = "") -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, Mapping):
        for key in value:
            yield from _strings(_item(value, key), f"{path}.{key}" if path else str(key))
    elif isinstance(value, Sequence) and not isinstance(value, bytes):
        for i in range(len(value)):
            yield from _strings(_item(value, i), f"{path}[{i}]")


def _decoded(text: str) -> Iterator[str]:
    """The texts inside ``text``'s base64 runs (gunzipped when gzip), for a second look."""
    for run in _BLOB.findall(text):
        if len(run) % 4:
            continue
        try:
            raw = base64.b64decode(run, validate=True)
        except (binascii.Error, ValueError):
            continue
        if raw[:2] == b"\x1f\x8b":
            try:
                raw = gzip.decompress(raw)
            except (OSError, EOFError, zlib.error):
                continue
        yield raw.decode("utf-8", "replace")


def placeholders(text: str, depth: int = 0) -> bool:
    """Whether ``text``, or any base64 (or base64 gzip) text inside it, carries an all-zero sha256."""
    if ZERO_SHA256.search(text):
        return True
    return depth < _DEPTH and any(placeholders(inner, depth + 1) for inner in _decoded(text))


def no_placeholder_checksum(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    for path, text in _strings(args.props):
        if placeholders(text):
            report_violation(
                f"{args.resource_type.split(':', 1)[-1]} {args.name} carries an all-zero sha256 at {path or 'its value'}:"
                " a placeholder, not a checksum (a node checking it refuses the download; one not checking trusts"
                " anything): put the sha256 its publisher pairs with the version, with the source, in"
                " modules/bootstrap/versions.py and plan again",
                None,
            )
            return
