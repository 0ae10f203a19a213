"""The versions table's containerd column: the oldest containerd each Kubernetes minor supports, and
the refusal of a minor whose containerd the node images cannot meet (exact text)."""

from __future__ import annotations

import dataclasses

import pytest

from modules.bootstrap import versions
from modules.errors import ConfigError


def test_every_minor_names_its_oldest_containerd() -> None:
    # containerd RELEASES.md, Kubernetes Support: 1.35 -> 1.7.28+ and newer; 1.36 -> 2.2.0+, 2.3.0+.
    assert {m: r.containerd_min for m, r in versions.TABLE.items()} == {"1.35": "1.7", "1.36": "2.2", "1.37": "2.2"}


def test_every_minor_runs_on_the_containerd_the_node_images_install() -> None:
    for minor in versions.TABLE:
        versions.check_image_containerd(minor)


def test_a_minor_the_node_images_containerd_cannot_run_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    old = dataclasses.replace(versions.ARTIFACTS["containerd"], version="1.7.28")
    monkeypatch.setitem(versions.ARTIFACTS, "containerd", old)
    with pytest.raises(ConfigError) as err:
        versions.check_image_containerd("1.36")
    assert str(err.value) == (
        "azure-gpu-k8s:cluster.kubernetes_version: Kubernetes 1.36 needs containerd 2.2 or newer, but the node "
        "images install containerd 1.7.28: bump the containerd row of modules/bootstrap/versions.py and rebuild "
        "the images, or use an older kubernetes_version"
    )
