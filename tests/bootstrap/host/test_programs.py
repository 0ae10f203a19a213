"""Host tier: the host programs as the hosts run them, top-level modules in /opt/agk/lib run by the
image's python3 (3.10 on the HPC image: no newer syntax), not as this package's modules."""

from __future__ import annotations

import ast
import shutil
import subprocess
from pathlib import Path

import pytest

from modules.bootstrap import host, node_tokens
from modules.bootstrap.etcd_backup import LIBRARY
from modules.bootstrap.roles.pool import POOL_PROGRAMS
from modules.bootstrap.roles.upkeep import HOST_PROGRAMS

PROGRAMS = (*HOST_PROGRAMS, *POOL_PROGRAMS, *LIBRARY, *node_tokens.LIBRARY)

SOURCE = Path(host.__file__).parent


@pytest.mark.parametrize("name", PROGRAMS)
def test_parses_as_python_3_10(name: str) -> None:
    ast.parse((SOURCE / name).read_text(), filename=name, feature_version=(3, 10))


def test_they_import_each_other_from_a_flat_directory_and_sync_runs_as_a_script(tmp_path: Path) -> None:
    for name in PROGRAMS:
        shutil.copy(SOURCE / name, tmp_path / name)
    python = "/usr/bin/python3"  # the system interpreter, without this project on its path
    names = ", ".join(n.removesuffix(".py") for n in PROGRAMS)
    run = subprocess.run(
        [python, "-I", "-c", f"import sys; sys.path.insert(0, {str(tmp_path)!r}); import {names}"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    # As the units run it: `python3 /opt/agk/lib/sync.py` (the script's folder first on sys.path), with
    # no environment or user site that could lend it this project.
    bare = {"PATH": "/usr/bin:/bin"}
    run = subprocess.run(
        [python, "-s", str(tmp_path / "sync.py"), "--help"], capture_output=True, text=True, check=False, env=bare
    )
    assert run.returncode == 0 and run.stdout.startswith("usage: sync.py [-h] [--root ROOT]"), run.stdout + run.stderr
    # Without its host facts a run says so in one line and fails (the timer tries again next hour).
    run = subprocess.run(
        [python, "-s", str(tmp_path / "sync.py"), "run", "--root", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
        env=bare,
    )
    assert run.returncode == 1 and run.stderr == ""
    assert run.stdout.startswith("agk-sync: no bundle applied: [Errno 2] No such file or directory:")


def test_standalone_programs_name_the_imds_address_the_plan_does() -> None:
    # Host programs and in-cluster scripts run without this package, so they keep their own constant.
    import inspect

    from modules.address_plan.addressing import IMDS
    from modules.bootstrap.host import imds
    from modules.cluster.scripts import azure

    assert f"http://{IMDS}" == imds.ENDPOINT
    default = inspect.signature(azure.Arm.__init__).parameters["imds_endpoint"].default
    assert default == f"http://{IMDS}"
