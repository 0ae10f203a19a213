"""A host's bundle: every file it needs, its boot steps and its restart map, in Key Vault secrets.

The value is ``base64(gzip(JSON))``: Key Vault stores a secret as at most 25 KB of octets
(learn.microsoft.com, "About Azure Key Vault secrets") and its APIs take and return strings, so the
JSON is compressed and base64 keeps it a plain string. It is split over a fixed number of secrets,
``<name>``, ``<name>-2``, ...: each part starts ``agk-bundle <i>/<n> <sha256 of the whole value>``, so
the host knows how many to read and refuses parts of two different versions (Pulumi writes them one
after the other). The same module encodes it at deploy (modules.bootstrap.delivery) and decodes it on
the host, so both sides read one format.

A document::

    {"format": 1, "role": "etcd", "name": "dev-etcd-0",
     "files": [{"path": "/etc/etcd/etcd.conf.yml", "mode": "0644", "owner": "root:root", "content": "..."}],
     "boot": ["<shell line>", ...],           # first boot only, in order (each through agk-step)
     "restarts": [{"unit": "etcd.service", "action": "restart", "paths": [...], "gate": "etcd"}, ...],
     "gates": {"etcd": {"self": "...", "members": {"<name>": "<health url>"}}, ...}}
"""

from __future__ import annotations

import base64
import binascii
import gzip
import hashlib
import json
import posixpath
import zlib
from collections.abc import Callable, Mapping
from typing import Any

FORMAT = 1
ACTIONS = ("restart", "reload", "command", "static-pod")
GATES = ("etcd", "apiserver")


class BundleError(Exception):
    """The secret's value is not a bundle this program can apply; the message says what is wrong."""


def canonical(doc: Mapping[str, Any]) -> bytes:
    """The document's one byte form: sorted keys, no spaces (the same bundle always encodes the same)."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def encode(doc: Mapping[str, Any]) -> str:
    # mtime=0: the gzip header carries no timestamp, so an unchanged bundle is an unchanged secret.
    return base64.b64encode(gzip.compress(canonical(doc), compresslevel=9, mtime=0)).decode()


PART_TAG = "agk-bundle"


def part_name(head: str, index: int) -> str:
    """The name of part ``index`` (1-based) of the bundle whose first secret is ``head``."""
    return head if index == 1 else f"{head}-{index}"


def split(value: str, parts: int) -> list[str]:
    whole = hashlib.sha256(value.encode()).hexdigest()
    size = -(-len(value) // parts)
    return [f"{PART_TAG} {i + 1}/{parts} {whole} {value[i * size : (i + 1) * size]}" for i in range(parts)]


def join(read: Callable[[str], str], head: str) -> str:
    """The value stored under ``head`` and its further parts; ``read`` fetches one secret by name."""
    first = _part(read(head), head)
    chunks = [first[2]]
    for index in range(2, first[0] + 1):
        count, whole, chunk = _part(read(part_name(head, index)), part_name(head, index))
        if (count, whole) != first[:2]:
            raise BundleError(f"{part_name(head, index)} is from another version than {head}: read again later")
        chunks.append(chunk)
    value = "".join(chunks)
    if hashlib.sha256(value.encode()).hexdigest() != first[1]:
        raise BundleError(f"the parts of {head} do not add up to the value they name: read again later")
    return value


def _part(text: str, name: str) -> tuple[int, str, str]:
    tag, _, rest = text.partition(" ")
    numbers, _, rest = rest.partition(" ")
    whole, _, chunk = rest.partition(" ")
    index, _, count = numbers.partition("/")
    if tag != PART_TAG or not count.isdigit() or not index.isdigit() or len(whole) != 64:
        raise BundleError(f"{name}: not a part of a bundle (it starts {text[:40]!r})")
    return int(count), whole, chunk


def digest(doc: Mapping[str, Any]) -> str:
    return hashlib.sha256(canonical(doc)).hexdigest()


def decode(text: str) -> dict[str, Any]:
    try:
        doc = json.loads(gzip.decompress(base64.b64decode(text, validate=True)))
    except (binascii.Error, OSError, EOFError, zlib.error, ValueError) as err:
        raise BundleError(f"not base64(gzip(JSON)): {err}") from None
    check(doc)
    return doc  # type: ignore[no-any-return]


def check(doc: Any) -> None:
    """Refuse a document this program would misapply (a path outside /, a mode that is not octal)."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise BundleError(
            f"format {doc.get('format') if isinstance(doc, dict) else doc!r}: this program reads {FORMAT}"
        )
    for key, kind in (("role", str), ("name", str), ("files", list), ("boot", list), ("restarts", list)):
        if not isinstance(doc.get(key), kind):
            raise BundleError(f"{key}: missing or not a {kind.__name__}")
    for f in doc["files"]:
        path = f.get("path") if isinstance(f, dict) else None
        if not isinstance(path, str) or not path.startswith("/") or posixpath.normpath(path) != path:
            raise BundleError(f"file path {path!r}: must be absolute and normalised")
        mode = f.get("mode")
        if not isinstance(mode, str) or len(mode) != 4 or any(c not in "01234567" for c in mode):
            raise BundleError(f"{path}: mode {mode!r} is not four octal digits")
        if not isinstance(f.get("content"), str) or not isinstance(f.get("owner"), str):
            raise BundleError(f"{path}: content and owner must be strings")
    for r in doc["restarts"]:
        if not isinstance(r, dict) or r.get("action") not in ACTIONS or r.get("gate", "") not in ("", *GATES):
            raise BundleError(f"restart {r!r}: action must be one of {ACTIONS}, gate one of {GATES}")
