"""An etcd member whose peers boot later: its boot neither blocks on nor fails for the quorum.

etcd (Type=notify) is "started" only once it has joined a quorum, so our unit lifts systemd's
90 s start timeout and the boot step starts it without waiting (--no-block); the separate
`etcd-joined` step then waits, bounded and not fatal, for `etcdctl endpoint health`. Proved with the
real etcd of the versions table, started by the rendered unit's ExecStart from the rendered config
(test_realtool_etcd's rewrite onto loopback), with a notify socket where systemd would hold one: one
member alone has no quorum, sends no READY=1, and the step goes on; once its peers start, etcd sends
READY=1 and the step sees the quorum. systemd itself is the stand-in here (no systemd runs the tests).
"""

from __future__ import annotations

import configparser
import socket
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from modules.bootstrap import pki
from modules.bootstrap.context import BootstrapContext
from modules.bootstrap.layout import PATHS
from modules.bootstrap.roles import bundle, names

from .certs import issue
from .test_realtool_etcd import Cluster, Member, lay_out


def _service(text: str) -> configparser.SectionProxy:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(text)
    return parser["Service"]


def test_etcd_waits_for_its_quorum_without_a_start_timeout(dev: BootstrapContext) -> None:
    node = bundle(dev, "etcd", names(dev, "etcd")[0])
    unit = _service(node.file("systemd/etcd.service").content)
    assert (unit["Type"], unit["TimeoutStartSec"]) == ("notify", "infinity")
    order = [s.name for s in node.steps]
    etcd = next(s for s in node.steps if s.name == "etcd")
    assert "--no-block" in etcd.command
    joined = next(s for s in node.steps if s.name == "etcd-joined")
    assert order.index("etcd") + 1 == order.index("etcd-joined") and joined.tries == 1


@pytest.fixture
def members(require: Callable[[str], str], tmp_path: Path) -> Iterator[Cluster]:
    """The dev etcd cluster from its rendered configs, none started."""
    from .conftest import context

    ctx = context("dev")
    require("etcd")
    require("etcdctl")
    hosts = names(ctx, "etcd")
    wanted = {pki.ETCD_HEALTHCHECK} | {c(n) for n in hosts for c in (pki.etcd_server_cert, pki.etcd_peer_cert)}
    pems = issue(pki.pki_spec(ctx), only=wanted)
    ips = {m.name: str(m.ip) for m in ctx.etcd.members}
    out, _ = lay_out(ctx, tmp_path, pems)
    etcdctl = require("etcdctl")
    for member in out:
        root = tmp_path / member.name
        text = bundle(ctx, "etcd", member.name).file("etcd-joined.sh").content
        assert f"{PATHS.etcd_program('etcdctl')} " in text
        (root / "etcd-joined.sh").write_text(
            text.replace(f"https://{ips[member.name]}:2379", member.client_url)
            .replace(PATHS.etcd_pki, str(root / "pki"))
            .replace(PATHS.etcd_program("etcdctl"), etcdctl)
        )
    pki_dir = tmp_path / hosts[0] / "pki"
    cluster = Cluster(out, require("etcd"), require("etcdctl"), (pki_dir / "ca.crt", pki_dir / "a", pki_dir / "b"))
    yield cluster
    for m in out:
        if m.proc is not None:
            cluster.kill(m)


def _joined_step(member: Member, wait_s: int) -> subprocess.CompletedProcess[str]:
    script = member.config.parent / "etcd-joined.sh"
    # No etcdctl on PATH: the script runs the image's, by its path (here, the table's build in its place).
    env = {"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "AGK_ETCD_WAIT_S": str(wait_s)}
    return subprocess.run(["sh", str(script)], capture_output=True, text=True, check=False, env=env, timeout=300)


@contextmanager
def notify_socket(folder: Path) -> Iterator[socket.socket]:
    """A datagram socket where etcd (sd_notify) sends READY=1, as systemd's for a Type=notify unit."""
    path = folder / "notify.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(path))
        yield sock


def _notified(sock: socket.socket, wait_s: float) -> list[str]:
    sock.settimeout(wait_s)
    try:
        return sock.recv(4096).decode().split("\n")
    except TimeoutError:
        return []


@pytest.mark.realtool
def test_a_member_booting_before_its_peers_goes_on_and_joins_when_they_come(members: Cluster, tmp_path: Path) -> None:
    first, *peers = members.members
    with notify_socket(tmp_path) as sock:
        members.start(first, env={"NOTIFY_SOCKET": sock.getsockname()})
        alone = _joined_step(first, wait_s=4)
        assert alone.returncode == 0, alone.stderr
        assert f"etcd {first.name} has no quorum after 4 s: its peers may still be booting" in alone.stderr
        assert first.proc is not None and first.proc.poll() is None  # still running, waiting for its peers
        # Not "started" for systemd yet: what TimeoutStartSec=infinity is for.
        assert _notified(sock, 1.0) == []
        for m in peers:
            members.start(m)
        assert "READY=1" in _notified(sock, 120.0)
    together = _joined_step(first, wait_s=120)
    assert together.returncode == 0, together.stderr
    assert f"etcd {first.name} is part of a quorum after" in together.stdout
