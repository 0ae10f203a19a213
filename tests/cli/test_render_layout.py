"""`agk render`'s layout: portable file names, every host by name, nothing stale left behind."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agk.render import file_name
from modules.bootstrap.roles import ROLES, names
from modules.stackplan.config import load_stack
from modules.stackplan.prepare import prepare_cluster

from .badinput import STACKS, agk, files

PORTABLE = re.compile(r"[A-Za-z0-9._-]+")


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("render")
    done = agk("render", "--stack", "dev", "--out", str(out))
    assert done.code == 0, done.err
    return out


def test_every_path_is_portable(rendered: Path) -> None:
    """No ':' (RBAC's system:coredns; Windows refuses it, scp and rsync read host:path) nor any
    other character outside letters, digits, '.', '_' and '-'."""
    bad = [str(p.relative_to(rendered)) for p in rendered.rglob("*") if not PORTABLE.fullmatch(p.name)]
    assert bad == []
    # The number is the object's place in apply order, which moves as add-ons are added.
    assert [p.name[4:] for p in (rendered / "manifests").glob("*-clusterrole-system_coredns.yaml")] == [
        "clusterrole-system_coredns.yaml"
    ]


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("system:coredns", "system_coredns"),
        ("a b/c", "a_b_c"),
        ("..", "unnamed"),
        ("", "unnamed"),
        ("x.yaml", "x.yaml"),
    ],
)
def test_file_name(text: str, name: str) -> None:
    assert file_name(text) == name


def test_every_host_is_under_by_name_and_the_role_folder_is_the_first(rendered: Path) -> None:
    ctx = prepare_cluster("dev", load_stack(STACKS, "dev"), STACKS).bootstrap
    for role in ROLES:
        hosts = names(ctx, role)
        folder = rendered / "nodes" / role
        if not hosts:
            assert not folder.exists()
            continue
        assert sorted(p.name for p in (folder / "by-name").iterdir()) == sorted(hosts)
        for host in hosts:
            assert (folder / "by-name" / host / "user-data.yaml").read_text().startswith("#cloud-config\n")
        first = files(folder / "by-name" / hosts[0])
        own = {rel: data for rel, data in (files(folder) or {}).items() if not rel.startswith("by-name")}
        assert own == first, role


def test_a_second_render_replaces_nodes_and_manifests_only(tmp_path: Path, rendered: Path) -> None:
    (tmp_path / "manifests").mkdir()
    (tmp_path / "manifests" / "999-deployment-removed.yaml").write_text("kind: Deployment\n")
    (tmp_path / "nodes" / "gpu-node" / "by-name" / "old-pool").mkdir(parents=True)
    (tmp_path / "notes.txt").write_text("mine")
    assert agk("render", "--stack", "dev", "--out", str(tmp_path)).code == 0
    assert (tmp_path / "notes.txt").read_text() == "mine"
    assert not (tmp_path / "manifests" / "999-deployment-removed.yaml").exists()
    assert not (tmp_path / "nodes" / "gpu-node" / "by-name" / "old-pool").exists()
    mine = files(tmp_path) or {}
    assert {k: v for k, v in mine.items() if k != "notes.txt"} == files(rendered)
