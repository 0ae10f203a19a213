"""Host tier: the bundle format both sides read (encode at deploy, decode on the host)."""

from __future__ import annotations

import base64
import gzip
import json
from typing import Any

import pytest

from modules.bootstrap.host import bundle


def doc(**extra: Any) -> dict[str, Any]:
    return {
        "format": 1,
        "role": "etcd",
        "name": "e-0",
        "files": [{"path": "/etc/x", "mode": "0644", "owner": "root:root", "content": "x\n"}],
        "boot": [],
        "restarts": [],
        "gates": {},
        **extra,
    }


def test_round_trip_and_an_unchanged_bundle_is_an_unchanged_value() -> None:
    value = bundle.encode(doc())
    assert bundle.decode(value) == doc()
    assert bundle.encode(doc()) == value  # no timestamp in the gzip header: no new secret version
    assert json.loads(gzip.decompress(base64.b64decode(value))) == doc()


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"format": 2}, "format 2: this program reads 1"),
        ({"files": [{"path": "etc/x", "mode": "0644", "owner": "root:root", "content": ""}]}, "file path 'etc/x'"),
        ({"files": [{"path": "/etc/../x", "mode": "0644", "owner": "root:root", "content": ""}]}, "normalised"),
        ({"files": [{"path": "/etc/x", "mode": "644", "owner": "root:root", "content": ""}]}, "/etc/x: mode '644'"),
        ({"restarts": [{"unit": "u", "action": "kill", "paths": []}]}, "action must be one of"),
        ({"boot": "apt-get install"}, "boot: missing or not a list"),
    ],
)
def test_a_document_this_program_would_misapply_is_refused(bad: dict[str, Any], message: str) -> None:
    with pytest.raises(bundle.BundleError, match=message.replace("(", r"\(").replace(".", r"\.")):
        bundle.decode(bundle.encode(doc(**bad)))


def test_a_value_that_is_not_a_bundle_is_refused() -> None:
    with pytest.raises(bundle.BundleError, match="not base64"):
        bundle.decode("-----BEGIN CERTIFICATE-----")


def test_parts_carry_their_count_and_the_whole_values_digest() -> None:
    value = bundle.encode(doc(pad="z" * 10_000))
    parts = bundle.split(value, 2)
    assert [p.split(" ", 2)[1] for p in parts] == ["1/2", "2/2"]
    store = dict(zip(("h", "h-2"), parts, strict=True))
    assert bundle.join(store.__getitem__, "h") == value
    store["h-2"] = "something else"
    with pytest.raises(bundle.BundleError, match="h-2: not a part of a bundle"):
        bundle.join(store.__getitem__, "h")
