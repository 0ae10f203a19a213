"""What Azure or the cluster would refuse later is refused at plan time (issue 20, item 9): one line, exit 2.

Before issue 20 `agk plan` accepted admin user names Azure reserves (`admin`, `root`), tags over Azure's
limits, zone "4" and a /30 service range whose DNS address falls outside it (each failing later, at
`pulumi up` or in the cluster); a YAML alias bomb hung it (the value was expanded before it was checked)
and a 50 MB stack file took minutes.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from agk.cli import app

ROOT = Path(__file__).resolve().parents[2]
KEY = "azure-gpu-k8s"


def _folder(where: Path) -> Path:
    where.mkdir(parents=True, exist_ok=True)
    for path in (ROOT / "stacks").glob("Pulumi.*.yaml"):
        shutil.copy(path, where / path.name)
    return where


def _plan(folder: Path) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["plan", "--stack", "dev", "--stacks-dir", str(folder)])
    return result.exit_code, result.stdout, result.stderr


def _edited(where: Path, edit: Any) -> Path:
    folder = _folder(where)
    path = folder / "Pulumi.dev.yaml"
    doc = yaml.safe_load(path.read_text())
    edit(doc["config"])
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return folder


def _admin(name: str) -> Any:
    return lambda c: c[f"{KEY}:admin"].__setitem__("username", name)


def _extra(tags: dict[str, str]) -> Any:
    return lambda c: c[f"{KEY}:tags"].__setitem__("extra", tags)


def _cluster(key: str, value: Any) -> Any:
    return lambda c: c[f"{KEY}:cluster"].__setitem__(key, value)


def _api_zones(zones: list[str]) -> Any:
    return lambda c: c[f"{KEY}:cluster"]["api_servers"].__setitem__("zones", zones)


CASES = [
    (
        _admin("root"),
        f"{KEY}:admin.username: 'root' is a user name Azure refuses for a VM's admin account (compute API,"
        " OSProfile.adminUsername): use another, e.g. azureuser",
    ),
    (
        _admin("Admin"),
        f"{KEY}:admin.username: 'Admin' is a user name Azure refuses for a VM's admin account (compute API,"
        " OSProfile.adminUsername): use another, e.g. azureuser",
    ),
    (
        _extra({"team/name": "x"}),
        f"{KEY}:tags: tag name 'team/name' contains /, which Azure refuses in tag names: rename it",
    ),
    (
        _extra({"note": "v" * 300}),
        f"{KEY}:tags: tag 'note': its value has 300 characters: use at most 256 (Azure's limit)",
    ),
    (
        _extra({f"t{i}": "x" for i in range(43)}),
        f"{KEY}:tags: extra: 43 tags, but Azure takes at most 50 per resource and the toolkit sets up to 8: use at"
        " most 42 (or one tag with a JSON value)",
    ),
    (_api_zones(["1", "4"]), f"{KEY}:cluster.api_servers.zones: zone '4' does not exist: use 1, 2, 3"),
    (
        _cluster("service_cidr", "172.20.0.0/30"),
        f"{KEY}:cluster.service_cidr: 172.20.0.0/30 has 4 addresses, so the cluster DNS address 172.20.0.10 is"
        " outside it: use a /28 or larger (a /16 leaves room for services)",
    ),
]


@pytest.mark.parametrize(("edit", "message"), CASES)
def test_refused_with_one_line(tmp_path: Path, edit: Any, message: str) -> None:
    code, out, err = _plan(_edited(tmp_path / "stacks", edit))
    assert (code, out) == (2, "")
    assert err.startswith(f"error: dev: {message}") or err.startswith(f"error: {message}"), err


def test_an_alias_bomb_is_refused_before_it_is_expanded(tmp_path: Path) -> None:
    folder = _folder(tmp_path / "stacks")
    path = folder / "Pulumi.dev.yaml"
    levels = ["x0: &x0 [" + ", ".join(["lol"] * 10) + "]"]
    levels += [f"x{i}: &x{i} [" + ", ".join([f"*x{i - 1}"] * 10) + "]" for i in range(1, 9)]
    path.write_text(
        path.read_text().replace("config:\n", "bomb:\n" + "".join(f"  {x}\n" for x in levels) + "config:\n", 1)
    )
    # Expanded, it would be 10**9 values: the refusal comes from the composed document, before any is built.
    code, out, err = _plan(folder)
    assert (code, out) == (2, "")
    assert err.startswith(f"error: {path} line ") and "expands to more than 100,000 values" in err


def test_an_oversized_stack_file_is_refused_unread(tmp_path: Path) -> None:
    folder = _folder(tmp_path / "stacks")
    path = folder / "Pulumi.dev.yaml"
    path.write_text(path.read_text() + "#" + "x" * (2 * 1024 * 1024) + "\n")
    code, out, err = _plan(folder)
    assert (code, out) == (2, "")
    assert err == (
        f"error: {path}: {path.stat().st_size:,} bytes, more than a stack file's 1,048,576: is it the right file?\n"
    )
