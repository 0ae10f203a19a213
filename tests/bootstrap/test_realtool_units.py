"""systemd and containerd read what every role renders: `systemd-analyze verify` on every unit and
drop-in, `containerd config dump` on every containerd configuration.

`systemd-analyze verify --root` loads the units from a throwaway root holding the distribution's units
(this machine's /usr/lib/systemd/system), the node image's base units of what it installs (containerd's and
the kubelet's, modules/images/recipe.py UNITS), and the files the role writes. etcd's unit is ours, whole (no package's unit under it),
and runs the real etcd of the versions table (tools/bin, built at that release) from where the image
puts it. A command a unit runs must be a real program here, or one the role's node image installs (then an
empty stand-in marks its place).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from modules.bootstrap import versions
from modules.bootstrap.context import BootstrapContext
from modules.bootstrap.layout import PATHS
from modules.bootstrap.roles import ROLES, NodeBundle, bundle, names
from modules.images.recipe import Recipe, image_role, recipe

from .conftest import tool

IMAGE_UNITS = "/usr/local/lib/systemd/system"
"""Where the node image puts the base units of what it installs (modules/images/recipe.py UNITS)."""
IMAGE_ETCD = ("etcd", "etcdctl", "etcdutl")
"""Installed by the node image build into PATHS.etcd_bin (no boot step, no package)."""
UNIT_DIR = "/etc/systemd/system/"
# Keys newer than Debian bookworm's containerd (1.6.20): the nodes run 1.7 or later (Ubuntu's and
# the HPC image's packages), and `config dump` of 1.6 drops what it does not know.
NEWER_THAN_TEST_CONTAINERD = {
    "plugins.io.containerd.grpc.v1.cri.image_pull_progress_timeout": "containerd 1.7.0 (containerd/containerd#6150)",
}


def ctx_release(node: NodeBundle) -> str:
    return str(json.loads(node.file("image-expected.json").content)["release"])


def _image_programs(made: Recipe) -> set[str]:
    """The programs the node image installs from the versions table (where modules/images puts them)."""
    out = set()
    for i in made.installs:
        p = i.placement
        if p.kind == "file":
            out.add(p.dest)
        elif p.kind == "extract":
            out |= {f"{p.dest}/{m.rsplit('/', 1)[-1]}" for m in p.paths(i.row.version)}
        elif i.row.name == "containerd":
            out |= {f"{p.dest}/bin/containerd", f"{p.dest}/bin/ctr"}
    return out


def _every_node(ctx: BootstrapContext) -> list[NodeBundle]:
    """The first host of each fixed role (they differ only in names and addresses) and every pool."""
    fixed = [
        (role, names(ctx, role)[0]) for role in ROLES if names(ctx, role) and role not in ("gpu-node", "system-node")
    ]
    return [bundle(ctx, role, name) for role, name in fixed] + [bundle(ctx, p.role, p.name) for p in ctx.pools]


def _exec_paths(text: str) -> list[str]:
    out = []
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if key.strip().startswith("Exec") and value.strip():
            out.append(value.strip().lstrip("-@:+!").split()[0])
    return out


def _root(tmp: Path, node: NodeBundle) -> tuple[Path, list[str]]:
    root = tmp / node.name
    (root / "usr/lib/systemd").mkdir(parents=True)
    shutil.copytree("/usr/lib/systemd/system", root / "usr/lib/systemd/system", symlinks=True)
    (root / "lib").symlink_to("usr/lib")
    made = recipe(image_role(node.role), ctx_release(node))
    for unit_path, text in made.units:
        (root / unit_path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        (root / unit_path.lstrip("/")).write_text(text)
    installed = _image_programs(made)
    units = []
    for f in node.files:
        if f.path.startswith(UNIT_DIR):
            path = root / f.path.lstrip("/")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f.content)
            if f.path.endswith(".service"):
                units.append(f.path.removeprefix(UNIT_DIR))
            else:  # a drop-in: verify the unit it extends
                units.append(f.path.removeprefix(UNIT_DIR).split("/")[0].removesuffix(".d"))
    ours = {p for f in node.files if f.path.startswith(UNIT_DIR) for p in _exec_paths(f.content)}
    # The packaged units our drop-ins extend (containerd, etcd, kubelet) run the package's programs.
    packaged = {
        p
        for u in set(units)
        for d in ("usr/lib/systemd/system", IMAGE_UNITS.lstrip("/"))
        if (root / d / u).is_file()
        for p in _exec_paths((root / d / u).read_text())
    }
    for program in ours | packaged:
        target = root / program.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        if Path(program).is_file():
            shutil.copy2(program, target)
        elif Path(program).parent == Path(PATHS.etcd_bin) and Path(program).name in IMAGE_ETCD:
            # The node image's etcd: the versions table's release, which is what tools/bin holds.
            shutil.copy2(tool(Path(program).name), target)
        elif program in installed:
            target.write_text(f"#!/bin/sh\n# stand-in: the {made.role} node image installs it\n")
            target.chmod(0o755)
        elif program in ours:
            raise AssertionError(f"{node.name}: a unit runs {program}, which is not on this machine")
        else:
            target.write_text("#!/bin/sh\n# stand-in: the package that ships the unit ships it\n")
            target.chmod(0o755)
    return root, sorted(set(units))


@pytest.mark.realtool
def test_systemd_accepts_every_unit(ctx: BootstrapContext, require: Callable[[str], str], tmp_path: Path) -> None:
    analyze = require("systemd-analyze")
    require("containerd")  # its unit is what our drop-in extends
    checked = set()
    for node in _every_node(ctx):
        root, units = _root(tmp_path, node)
        assert units, node.name
        run = subprocess.run(
            [analyze, "verify", f"--root={root}", "--man=no", *units], capture_output=True, text=True, check=False
        )
        # verify exits 0 on "Unknown key ... ignoring": any output at all is a finding.
        assert run.returncode == 0 and not (run.stdout + run.stderr).strip(), f"{node.name}: {run.stdout}{run.stderr}"
        checked |= set(units)
    assert {"kubelet.service", "containerd.service", "agk-node-network.service", "agk-boot-health.service"} <= checked
    assert {"etcd.service", "prometheus.service", "agk-node-identity.service", "agk-service-nat.service"} <= checked


@pytest.mark.realtool
def test_etcd_runs_from_a_whole_unit_of_ours(
    dev: BootstrapContext, require: Callable[[str], str], tmp_path: Path
) -> None:
    """etcd's unit stands alone: verified in a root with no other etcd.service, no drop-in beside it, and
    what it starts is the table's etcd where the image installs it."""
    analyze = require("systemd-analyze")
    node = bundle(dev, "etcd", names(dev, "etcd")[0])
    assert not [f.path for f in node.files if f.path.startswith(UNIT_DIR + "etcd.service.d/")]
    root, units = _root(tmp_path, node)
    assert not (root / "usr/lib/systemd/system/etcd.service").exists()
    assert (root / PATHS.unit("etcd.service").lstrip("/")).is_file() and "etcd.service" in units
    run = subprocess.run(
        [analyze, "verify", f"--root={root}", "--man=no", "etcd.service"], capture_output=True, text=True, check=False
    )
    assert run.returncode == 0 and not (run.stdout + run.stderr).strip(), run.stdout + run.stderr
    assert _exec_paths(node.file("systemd/etcd.service").content) == [PATHS.etcd_program("etcd")]
    version = subprocess.run(
        [str(root / PATHS.etcd_program("etcd").lstrip("/")), "--version"], capture_output=True, text=True, check=True
    )
    assert version.stdout.splitlines()[0] == f"etcd Version: {versions.ETCD}"


@pytest.mark.realtool
def test_systemd_verify_can_fail(require: Callable[[str], str], tmp_path: Path) -> None:
    analyze = require("systemd-analyze")
    bad = tmp_path / "bad.service"
    bad.write_text("[Unit]\nDescriptio=typo\n[Service]\nType=oneshott\nExecStart=/bin/true\n")
    run = subprocess.run([analyze, "verify", "--man=no", str(bad)], capture_output=True, text=True, check=False)
    assert "Unknown key" in run.stderr and "oneshott" in run.stderr


def _subset(ours: Any, dumped: Any, where: tuple[str, ...] = ()) -> None:
    """Every key we set comes back from ``config dump`` with our value."""
    key = ".".join(where)
    if isinstance(ours, dict):
        assert isinstance(dumped, dict), key
        for name, value in ours.items():
            path = (*where, name)
            if ".".join(path) in NEWER_THAN_TEST_CONTAINERD:
                continue
            assert name in dumped, f"{'.'.join(path)} is not in the dump: containerd does not know it"
            _subset(value, dumped[name], path)
    else:
        assert ours == dumped, f"{key}: {ours!r} became {dumped!r}"


@pytest.mark.realtool
def test_containerd_loads_every_config(ctx: BootstrapContext, require: Callable[[str], str], tmp_path: Path) -> None:
    containerd = require("containerd")
    seen = set()
    for node in _every_node(ctx):
        text = next((f.content for f in node.files if f.path == "/etc/containerd/config.toml"), None)
        if text is None or text in seen:
            continue
        seen.add(text)
        path = tmp_path / f"{node.name}.toml"
        path.write_text(text)
        run = subprocess.run(
            [containerd, "--config", str(path), "config", "dump"], capture_output=True, text=True, check=False
        )
        assert run.returncode == 0, f"{node.name}: {run.stderr}"
        # config dump silently drops keys it does not know: every key we set must come back.
        _subset(tomllib.loads(text), tomllib.loads(run.stdout))
    assert len(seen) >= 2  # GPU (nvidia runtime) and CPU hosts


@pytest.mark.realtool
def test_containerd_refuses_a_bad_config(require: Callable[[str], str], tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text('version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n  max_concurrent_downloads = "ten"\n')
    run = subprocess.run(
        [require("containerd"), "--config", str(path), "config", "dump"], capture_output=True, text=True, check=False
    )
    assert run.returncode != 0
