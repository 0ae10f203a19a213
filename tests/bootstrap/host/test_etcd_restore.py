"""Host tier: the restore command's choices against Azurite (the full restore of a real cluster is
tests/bootstrap/test_realtool_etcd_backup.py): which snapshot, the dry run, and its errors."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from modules.bootstrap.host import blob, etcd_restore
from modules.bootstrap.host.etcd_snapshot import BackupError, Settings
from modules.bootstrap.roles import bundle
from tests.bootstrap.conftest import context, tool
from tests.bootstrap.host.azurite import Azurite, StorageImds, azurite, host_facts, jwt
from tests.bootstrap.host.loopback import serve

pytestmark = pytest.mark.realtool
NAMES = ("20261201T000000Z-dev-etcd-0", "20261201T010000Z-dev-etcd-1", "20261201T020000Z-dev-etcd-2")


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Azurite]:
    folder = tmp_path_factory.mktemp("azurite")
    with azurite(folder) as az:
        az.create_container("etcd-backups")
        c = blob.Container(az.account_url, "etcd-backups", jwt, cafile=az.cafile)
        (folder / "x").write_bytes(b"not a snapshot")
        for i, name in enumerate(NAMES):
            c.put(f"dev/etcd/{name}.db", str(folder / "x"), {"member": f"dev-etcd-{i}", "revision": str(100 + i)})
        c.put("dev/events-etcd/20261201T030000Z-dev-events-etcd-0.db", str(folder / "x"))
        c.put("dev/etcd/README.txt", str(folder / "x"))
        yield az


@pytest.fixture
def settings(emulator: Azurite, tmp_path: Path) -> Iterator[Settings]:
    ctx = context("dev")
    node = bundle(ctx, "etcd", "dev-etcd-1")
    conf = tmp_path / "etcd.conf.yml"
    conf.write_text(node.file("etcd.conf.yml").content)
    raw = json.loads(node.file("etcd-backup.json").content)
    fake = StorageImds("cid-1")
    with serve(fake) as url:
        raw.update(etcd_config=str(conf), spool=str(tmp_path / "spool"), imds=url, cafile=emulator.cafile)
        raw.update(host_facts(tmp_path / "dev-etcd-1", emulator.account_url, "cid-1"))
        yield Settings(**raw)


def test_list_shows_this_clusters_snapshots_oldest_first(settings: Settings) -> None:
    lines: list[str] = []
    assert etcd_restore.list_snapshots(settings, out=lines.append) == 0
    assert [line.split()[0] for line in lines[:-1]] == [f"dev/etcd/{n}.db" for n in NAMES]
    assert "revision 102  by dev-etcd-2" in lines[2]
    assert lines[-1] == f"3 snapshots; latest: dev/etcd/{NAMES[-1]}.db"


@pytest.mark.parametrize(
    ("name", "chosen"),
    [("latest", NAMES[2]), (NAMES[0] + ".db", NAMES[0]), (f"dev/etcd/{NAMES[1]}.db", NAMES[1])],
)
def test_choose_by_name_or_latest(settings: Settings, name: str, chosen: str) -> None:
    container = etcd_restore.etcd_snapshot.storage(settings)
    assert etcd_restore.choose(container, settings, name).name == f"dev/etcd/{chosen}.db"


def test_an_unknown_snapshot_says_how_to_find_one(settings: Settings) -> None:
    container = etcd_restore.etcd_snapshot.storage(settings)
    with pytest.raises(BackupError, match=r"^no snapshot 'x\.db' under etcd-backups/dev/etcd/: `list` shows"):
        etcd_restore.choose(container, settings, "x.db")


def test_without_yes_it_only_says_what_it_would_do(settings: Settings) -> None:
    lines: list[str] = []
    calls: list[tuple[str, ...]] = []
    code = etcd_restore.restore(settings, "latest", yes=False, systemctl=lambda *a: calls.append(a), out=lines.append)
    assert code == 0 and calls == []
    assert lines[0].startswith(f"snapshot dev/etcd/{NAMES[2]}.db: taken 2026-12-01 02:00:00 UTC by dev-etcd-2")
    assert lines[1].startswith("member dev-etcd-1: data directory /var/lib/etcd/data; cluster dev-etcd-0=https://")
    assert lines[-1].startswith("dry run: add --yes")
    assert not Path(settings.spool).exists()


@pytest.mark.realtool
def test_a_corrupt_download_stops_before_etcd_is_touched(settings: Settings) -> None:
    # The image's etcdutl, by its path: here, the table's build.
    settings = replace(settings, etcd_bin=str(Path(tool("etcdutl")).parent))
    calls: list[tuple[str, ...]] = []
    with pytest.raises(BackupError, match=r"snapshot status .*: exit"):
        etcd_restore.restore(settings, "latest", yes=True, systemctl=lambda *a: calls.append(a), out=lambda s: None)
    assert calls == []  # "not a snapshot": etcdutl refuses it, and etcd keeps running
