"""`make bench` keeps working as the code changes: the quick areas run here (the timed figures are not
asserted: machines are shared and noisy), the slow ones (whole plans and reviews) only in `make bench`."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import __main__ as runner
from bench import bootstrap, cluster, vault_boot


def test_the_bootstrap_and_cluster_areas_produce_their_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bootstrap, "RUNS", 1)
    rows = dict(bootstrap.rows()) | dict(cluster.rows())
    assert "bootstrap: gpu-node bundle (real ECDSA certs)" in rows
    assert rows["cluster: Kubernetes objects (prod-7500)"].isdigit()


def test_an_area_that_fails_is_one_row(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "broken.py").write_text("def rows():\n    raise TypeError('signature changed')\n")
    monkeypatch.syspath_prepend(str(tmp_path.parent))
    (tmp_path / "__init__.py").write_text("")
    rows = runner.collect(tmp_path, tmp_path.name)
    assert rows == [("broken", "error", "TypeError: signature changed (broken.py:2)")]


def test_the_vault_boot_area_produces_its_rows() -> None:
    # 300 hosts stay under the vault's budget: the rows, not the 7,576-host figures (tests/bootstrap/host has those).
    rows = dict(vault_boot.rows(vault_boot.RUNS[:1], hosts=300))
    assert rows["vault boot (full jitter, Retry-After): 429s"] == "0"
    assert rows["vault boot (full jitter, Retry-After): last bundle"] == "0.0 s virtual"
