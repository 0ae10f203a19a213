"""`cloud-init schema` accepts every role's user-data of every cluster stack (with real certificates)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from modules.bootstrap import pki
from modules.bootstrap.context import BootstrapContext
from modules.bootstrap.roles import ROLES, bundle, names
from modules.bootstrap.userdata import render_user_data

from .certs import issue


@pytest.mark.realtool
def test_cloud_init_schema_every_role(ctx: BootstrapContext, require: Callable[[str], str], tmp_path: Path) -> None:
    cloud_init = require("cloud-init")
    pems = issue(pki.pki_spec(ctx))
    checked = []
    for role in ROLES:
        for name in names(ctx, role):
            path = tmp_path / f"{name}.yaml"
            path.write_text(render_user_data(ctx, bundle(ctx, role, name), pems))
            run = subprocess.run(
                [cloud_init, "schema", "--config-file", str(path)], capture_output=True, text=True, check=False
            )
            assert run.returncode == 0, f"{role} {name}: {run.stdout}{run.stderr}"
            assert "Valid cloud-config" in run.stdout
            checked.append(role)
    assert set(checked) >= {"etcd", "apiserver", "gpu-node", "system-node", "prometheus", "nat"}


@pytest.mark.realtool
def test_cloud_init_schema_rejects_a_broken_document(require: Callable[[str], str], tmp_path: Path) -> None:
    # The check can fail: a wrong type in a known module is refused.
    path = tmp_path / "bad.yaml"
    path.write_text("#cloud-config\npackages: 7\nwrite_files: {path: x}\n")
    run = subprocess.run(
        [require("cloud-init"), "schema", "--config-file", str(path)], capture_output=True, text=True, check=False
    )
    assert run.returncode != 0


@pytest.mark.realtool
def test_install_scripts_parse(ctx: BootstrapContext, require: Callable[[str], str]) -> None:
    for role in ("apiserver", "gpu-node"):
        node = bundle(ctx, role, names(ctx, role)[0])
        for f in node.files:
            if f.path.endswith(".sh") or f.path == "/usr/sbin/policy-rc.d":
                run = subprocess.run(["sh", "-n"], input=f.content, capture_output=True, text=True, check=False)
                assert run.returncode == 0, f"{f.path}: {run.stderr}"
