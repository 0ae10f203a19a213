"""Checks that this host booted the node image its bundle was made for (stdlib only; Python 3.10).

The first boot step of every role. A host's software comes from its image (modules/images: containerd, runc,
the kubelet, etcd, Prometheus... each checked against the versions table's sha256 when the image was built);
the boot only configures it and downloads nothing. So a host booted from the wrong image (another role's, an
older build from before a row changed, a marketplace image) must stop here, before it starts anything, with one
line that says what it found and what it needed, not fail later on a missing program.

The bundle carries the expectation (``/etc/agk/image-expected.json``: the image role, the gallery version, the
Kubernetes release and every row's name, version and sha256); the image carries its manifest
(``/etc/agk/image.json``, written last by the build script, so an image that has one was built to the end).

usage: python3 /opt/agk/lib/image.py EXPECTED [MANIFEST]   (exit 0: the image is the expected one; 1: not)
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any

MANIFEST = "/etc/agk/image.json"


def _rows(items: Any) -> dict[str, tuple[str, str]]:
    out: dict[str, tuple[str, str]] = {}
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict):
            out[str(item.get("name"))] = (str(item.get("version")), str(item.get("sha256")))
    return out


def mismatches(expected: Mapping[str, Any], found: Mapping[str, Any]) -> list[str]:
    """What differs between the bundle's expectation and the image's manifest (empty: the right image)."""
    out = []
    if found.get("role") != expected["role"]:
        out.append(f"role {found.get('role')!r}, not {expected['role']!r}")
    if found.get("release") != expected["release"]:
        out.append(f"Kubernetes release {found.get('release')!r}, not {expected['release']!r}")
    have = _rows(found.get("artifacts"))
    for name, (version, sha256) in _rows(expected.get("artifacts")).items():
        if name not in have:
            out.append(f"no {name}")
        elif have[name][0] != version:
            out.append(f"{name} {have[name][0]}, not {version}")
        elif have[name][1] != sha256:
            out.append(f"{name} {version} with sha256 {have[name][1]}, not {sha256}")
    return out


def check(expected_path: str, manifest_path: str = MANIFEST) -> str | None:
    """None when the image is the expected one; otherwise the one line that says why not."""
    with open(expected_path, encoding="utf-8") as f:
        expected = json.load(f)
    want = f"the {expected['role']} image {expected['version']} (Kubernetes {expected['release']})"
    fix = "boot it from that gallery image version (cluster.node_images; docs/images.md)"
    try:
        with open(manifest_path, encoding="utf-8") as f:
            found = json.load(f)
    except FileNotFoundError:
        return f"{manifest_path} is missing: this host did not boot an agk node image; it needs {want}: {fix}"
    except (OSError, ValueError) as err:
        return f"{manifest_path} cannot be read ({err}): the image is damaged; it needs {want}: {fix}"
    if not isinstance(found, dict):
        return f"{manifest_path} is not a manifest: it needs {want}: {fix}"
    wrong = mismatches(expected, found)
    if wrong:
        return f"this host booted an image with {'; '.join(wrong)}; it needs {want}: {fix}"
    return None


def main(argv: Sequence[str]) -> int:
    if len(argv) not in (1, 2):
        print("usage: image.py EXPECTED [MANIFEST]", file=sys.stderr)
        return 2
    problem = check(*argv)
    if problem is not None:
        print(f"agk image: {problem}", file=sys.stderr)
        return 1
    print(f"agk image: {argv[1] if len(argv) == 2 else MANIFEST} is the image this host's bundle expects")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
