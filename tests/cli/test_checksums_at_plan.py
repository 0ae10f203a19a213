"""A placeholder checksum, or a key the images replaced, is bad input at plan time (issue 21): exit status 2 and
one line naming the row or key and the fix, nothing planned."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from modules.bootstrap import versions

from .badinput import STACKS, agk


def test_an_all_zero_row_in_the_versions_table_stops_the_plan(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    zeros = replace(versions.ARTIFACTS["runc"], sha256=versions.ZEROS)
    monkeypatch.setitem(versions.ARTIFACTS, "runc", zeros)
    done = agk("plan", "--stack", "dev", "--out", str(tmp_path / "out"))
    assert done.code == 2
    assert done.out == ""
    assert done.err == (
        "error: dev: azure-gpu-k8s:cluster.kubernetes_version: runc 1.4.3: no verified sha256 in "
        "modules/bootstrap/versions.py (a placeholder or none): add the sha256 the release publishes, with its "
        "source, to that row, or choose a version whose row has one\n"
    )
    assert not (tmp_path / "out").exists()


def test_an_old_stack_file_with_the_azure_cni_checksum_is_one_line(tmp_path: Path) -> None:
    stacks = tmp_path / "stacks"
    shutil.copytree(STACKS, stacks)
    dev = stacks / "Pulumi.dev.yaml"
    zeros = "0" * 64
    dev.write_text(dev.read_text() + f'  azure-gpu-k8s:bootstrap:\n    nodes:\n      azure_cni_sha256: "{zeros}"\n')
    done = agk("plan", "--stack", "dev", "--stacks-dir", str(stacks))
    assert done.code == 2
    assert done.err.count("\n") == 1
    assert done.err.startswith(
        "error: dev: azure-gpu-k8s:bootstrap.nodes.azure_cni_sha256: removed: Azure CNI now comes with the node image"
    )
