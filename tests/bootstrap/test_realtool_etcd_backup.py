"""Backup and restore end to end, with the real pieces: a real 3-member etcd cluster started from the rendered
etcd.conf.yml (as test_realtool_etcd.py does), the host library exactly as the bundle writes it to
/opt/agk/lib run as the timer runs it, Azurite for blob storage (OAuth over HTTPS), and a fresh 3-member
cluster rebuilt by the restore command's own code path. Faked: IMDS (tokens and VM tags, loopback) and
systemctl (the test starts the etcd processes that ``systemctl start etcd`` would); tests/bootstrap/host/azurite.py.
"""

from __future__ import annotations

import base64
import json
import os
import pwd
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from modules.bootstrap import pki
from modules.bootstrap.context import BootstrapContext
from modules.bootstrap.host import blob, etcd_restore, etcd_snapshot
from modules.bootstrap.host.boot import LIB
from modules.bootstrap.layout import PATHS
from modules.bootstrap.roles import bundle, names
from tests.bootstrap.host.azurite import Azurite, StorageImds, azurite, host_facts
from tests.bootstrap.host.loopback import serve

from .certs import issue
from .conftest import context, tool
from .test_realtool_etcd import Cluster, Member, lay_out

pytestmark = pytest.mark.realtool


def _members(ctx: BootstrapContext, root: Path, pems: dict[str, str]) -> list[Member]:
    """Every member's rewritten config, PKI and data directory under ``root`` (nothing started)."""
    return lay_out(ctx, root, pems)[0]


def _cluster(members: list[Member], root: Path) -> Cluster:
    pki_dir = root / members[0].name / "pki"
    client = (pki_dir / "ca.crt", pki_dir / "healthcheck-client.crt", pki_dir / "healthcheck-client.key")
    return Cluster(members, tool("etcd"), tool("etcdctl"), client)


class Keys:
    """Bulk writes and full reads through etcdctl on one member (txn batches; values base64 text, so any
    byte string round-trips)."""

    def __init__(self, cluster: Cluster, member: Member) -> None:
        ca, crt, key = cluster.client_cert
        self.argv = [
            cluster.etcdctl,
            f"--endpoints={member.client_url}",
            f"--cacert={ca}",
            f"--cert={crt}",
            f"--key={key}",
        ]

    def _run(self, *args: str, stdin: str = "") -> str:
        done = subprocess.run(
            [*self.argv, *args], input=stdin, capture_output=True, text=True, env={"ETCDCTL_API": "3"}, check=False
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    def put(self, pairs: dict[bytes, bytes]) -> None:
        items = list(pairs.items())
        for i in range(0, len(items), 100):  # etcd's --max-txn-ops default is 128
            ops = "\n".join(f"put {k.decode()} {base64.b64encode(v).decode()}" for k, v in items[i : i + 100])
            assert self._run("txn", stdin=f"\n{ops}\n\n\n").startswith("SUCCESS")

    def everything(self) -> tuple[dict[bytes, bytes], int]:
        got = json.loads(self._run("get", "", "--prefix", "-w", "json"))
        kvs = {
            base64.b64decode(kv["key"]): base64.b64decode(base64.b64decode(kv["value"])) for kv in got.get("kvs", [])
        }
        return kvs, int(got["header"]["revision"])


def _host_lib(ctx: BootstrapContext, folder: Path) -> Path:
    """The host library files exactly as the etcd bundle writes them to /opt/agk/lib."""
    folder.mkdir(parents=True)
    node = bundle(ctx, "etcd", names(ctx, "etcd")[0])
    libs = [f for f in node.files if f.path.startswith(LIB + "/")]
    assert {Path(f.path).name for f in libs} >= {"imds.py", "blob.py", "etcd_snapshot.py", "etcd_restore.py"}
    for f in libs:
        (folder / Path(f.path).name).write_text(f.content)
    return folder


def _settings(ctx: BootstrapContext, member: Member, az: Azurite, imds_url: str) -> Path:
    """The rendered etcd-backup.json with the test's paths: config, PKI, spool and textfile under the
    member's folder, the stand-in IMDS, and the emulator's CA."""
    home = member.config.parent
    raw = json.loads(bundle(ctx, "etcd", member.name).file("etcd-backup.json").content)
    for key in ("cacert", "cert", "key"):
        raw[key] = raw[key].replace(PATHS.etcd_pki, str(home / "pki"))
    raw.update(
        etcd_config=str(member.config),
        spool=str(home / "spool"),
        textfile=str(home / "textfile" / "agk_etcd_backup.prom"),
        imds=imds_url,
        cafile=az.cafile,
        # The image's etcdctl and etcdutl (PATHS.etcd_bin): here, the table's build.
        etcd_bin=str(Path(tool("etcdctl")).parent),
        # Where the member's files are: its host.json and the account URL its bundle carries.
        **host_facts(home / "facts", az.account_url, f"client-{member.name}"),
    )
    path = home / "etcd-backup.json"
    path.write_text(json.dumps(raw))
    return path


@pytest.fixture
def started() -> Iterator[list[Cluster]]:
    clusters: list[Cluster] = []
    yield clusters
    for cluster in clusters:
        for m in cluster.members:
            if m.proc is not None:
                cluster.kill(m)


def test_snapshots_upload_to_blob_storage_and_restore_into_a_fresh_cluster(
    require: Callable[[str], str], tmp_path: Path, started: list[Cluster], monkeypatch: pytest.MonkeyPatch
) -> None:
    require("etcd")
    require("etcdctl")
    require("etcdutl")
    ctx = context("dev")
    assert ctx.etcd.backup is not None
    interval = ctx.etcd.backup.every_minutes * 60
    spec = pki.pki_spec(ctx)
    members = names(ctx, "etcd")
    pems = issue(
        spec, only={pki.ETCD_HEALTHCHECK} | {c(n) for n in members for c in (pki.etcd_server_cert, pki.etcd_peer_cert)}
    )

    old = _cluster(_members(ctx, tmp_path / "old", pems), tmp_path / "old")
    started.append(old)
    for m in old.members:
        old.start(m)
    old.wait_healthy(old.members)
    first = {f"/registry/pods/ns-{i % 7}/pod-{i}".encode(): os.urandom(2048) for i in range(600)}
    Keys(old, old.members[0]).put(first)

    lib = _host_lib(ctx, tmp_path / "opt-agk-lib")
    with ExitStack() as stack:
        az = stack.enter_context(azurite(tmp_path / "azurite"))
        az.create_container(ctx.etcd.backup.container)
        idents = {m.name: StorageImds(f"client-{m.name}") for m in old.members}
        urls = {name: stack.enter_context(serve(fake)) for name, fake in idents.items()}
        settings = {m.name: _settings(ctx, m, az, urls[m.name]) for m in old.members}
        # Nothing of etcd on PATH: the host programs run the image's by its path (the settings' etcd_bin).
        env = {**os.environ, "PATH": "/usr/bin:/bin"}

        # Member 0's timer, as the host runs it: python3 /opt/agk/lib/etcd_snapshot.py (its own imports).
        run = subprocess.run(
            [sys.executable, str(lib / "etcd_snapshot.py"), "--config", str(settings[members[0]])],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        assert run.returncode == 0, run.stderr
        assert run.stdout.startswith(f"uploaded {ctx.cluster}/etcd/"), run.stdout
        print(f"\nAzurite started in {az.started_s:.2f} s; {run.stdout.strip()}")
        # Member 1, one offset later: the fresh snapshot makes it skip.
        run = subprocess.run(
            [sys.executable, str(lib / "etcd_snapshot.py"), "--config", str(settings[members[1]])],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        assert run.returncode == 0 and run.stdout.startswith("skipped: the newest snapshot"), run.stdout + run.stderr
        assert all("/metadata/identity/oauth2/token" in idents[n].calls for n in members[:2])

        later = {f"/registry/configmaps/late-{i}".encode(): os.urandom(512) for i in range(100)}
        later[b"/registry/pods/ns-0/pod-0"] = b"overwritten after the first snapshot"
        Keys(old, old.members[2]).put(later)
        # An interval on, member 2 is the one due (member 0 is down, say); snapshots this large go in blocks.
        monkeypatch.setattr(blob, "SINGLE_PUT_MAX", 256 * 1024)
        monkeypatch.setattr(blob, "BLOCK_SIZE", 256 * 1024)
        s2 = etcd_snapshot.Settings.load(str(settings[members[2]]))
        outcome = etcd_snapshot.run(s2, now=time.time() + interval)
        assert outcome.uploaded and outcome.size > 4 * 256 * 1024
        container = etcd_snapshot.storage(s2)
        held = etcd_snapshot.snapshots(container, s2)
        assert [b.metadata["member"] for b in held] == [members[0], members[2]]
        assert held[-1].name == outcome.uploaded and int(held[-1].metadata["revision"]) == outcome.revision
        expected, revision = Keys(old, old.members[1]).everything()
        assert expected == {**first, **later} and revision == outcome.revision

        # Disaster: the whole cluster is gone. A fresh cluster (new ports, new directories) is rebuilt; member 0's
        # host kept its old data directory, which the restore sets aside.
        for m in old.members:
            old.kill(m)
        fresh = _cluster(_members(ctx, tmp_path / "fresh", pems), tmp_path / "fresh")
        started.append(fresh)
        data0 = tmp_path / "fresh" / members[0] / "var" / "data"
        shutil.copytree(tmp_path / "old" / members[0] / "var" / "data", data0)
        calls: list[tuple[str, ...]] = []
        for m in fresh.members:
            fake = StorageImds(f"client-{m.name}")
            s = etcd_snapshot.Settings.load(str(_settings(ctx, m, az, stack.enter_context(serve(fake)))))
            lines: list[str] = []
            # The data directory goes to etcd's user on a host (Ubuntu's package makes it); here, to ours.
            me = pwd.getpwuid(os.getuid()).pw_name
            assert (
                etcd_restore.restore(
                    s, "latest", yes=True, systemctl=lambda *a: calls.append(a), out=lines.append, owner=me
                )
                == 0
            )
            assert lines[0].startswith(f"snapshot {outcome.uploaded}: taken"), lines
            assert etcd_restore.WATCHERS in lines and lines.index(etcd_restore.WATCHERS) < len(lines) - 1
        assert (
            calls
            == [
                ("stop", "agk-etcd-snapshot.timer", "agk-etcd-snapshot.service", "etcd.service"),
                ("start", "--no-block", "etcd.service"),
            ]
            * 3
        )
        kept = [p for p in data0.parent.iterdir() if p.name.startswith("data.before-restore-")]
        assert len(kept) == 1 and (kept[0] / "member").is_dir()

    for m in fresh.members:
        fresh.start(m)
    fresh.wait_healthy(fresh.members)
    for m in fresh.members:
        got, now_revision = Keys(fresh, m).everything()
        assert got == expected, m.name
        assert now_revision >= revision
    listed = fresh.ctl("member", "list", "-w", "json")
    assert listed.returncode == 0, listed.stderr
    peers = {x["name"]: x["peerURLs"] for x in json.loads(listed.stdout)["members"]}
    assert set(peers) == set(members)
    assert peers[members[0]] != [f"https://{ctx.etcd.members[0].ip}:2380"]  # the fresh cluster's own URLs
    # The restored cluster takes writes.
    Keys(fresh, fresh.members[1]).put({b"/registry/after-restore": b"ok"})
    assert Keys(fresh, fresh.members[2]).everything()[0][b"/registry/after-restore"] == b"ok"
