"""An etcd member whose peers boot later: its boot neither blocks on nor fails for the quorum.

etcd (Type=notify) is "started" only once it has joined a quorum, so the drop-in lifts systemd's
90 s start timeout and the boot step starts it without waiting (--no-block); the separate
`etcd-joined` step then waits, bounded and not fatal, for `etcdctl endpoint health`. Proved with the
real etcd from the rendered config (test_realtool_etcd's rewrite onto loopback): one member alone
has no quorum and the step goes on; once its peers start, the step sees the quorum.
"""

from __future__ import annotations

import configparser
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from modules.bootstrap import pki
from modules.bootstrap.context import BootstrapContext
from modules.bootstrap.layout import PATHS
from modules.bootstrap.roles import bundle, names

from .certs import issue
from .conftest import tool
from .test_realtool_etcd import Cluster, Member, lay_out


def _service(text: str) -> configparser.SectionProxy:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(text)
    return parser["Service"]


def test_etcd_waits_for_its_quorum_without_a_start_timeout(dev: BootstrapContext) -> None:
    node = bundle(dev, "etcd", names(dev, "etcd")[0])
    assert _service(node.file("systemd/etcd.service.d/10-agk.conf").content)["TimeoutStartSec"] == "infinity"
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
    for member in out:
        root = tmp_path / member.name
        text = bundle(ctx, "etcd", member.name).file("etcd-joined.sh").content
        (root / "etcd-joined.sh").write_text(
            text.replace(f"https://{ips[member.name]}:2379", member.client_url).replace(
                PATHS.etcd_pki, str(root / "pki")
            )
        )
    pki_dir = tmp_path / hosts[0] / "pki"
    cluster = Cluster(out, require("etcd"), require("etcdctl"), (pki_dir / "ca.crt", pki_dir / "a", pki_dir / "b"))
    yield cluster
    for m in out:
        if m.proc is not None:
            cluster.kill(m)


def _joined_step(member: Member, wait_s: int) -> subprocess.CompletedProcess[str]:
    script = member.config.parent / "etcd-joined.sh"
    # The host's etcdctl is on its PATH (the packages step); here, the pinned build's folder.
    built = str(Path(tool("etcdctl")).parent)
    env = {"PATH": f"{built}:/usr/bin:/bin:/usr/sbin:/sbin", "AGK_ETCD_WAIT_S": str(wait_s)}
    return subprocess.run(["sh", str(script)], capture_output=True, text=True, check=False, env=env, timeout=300)


@pytest.mark.realtool
def test_a_member_booting_before_its_peers_goes_on_and_joins_when_they_come(members: Cluster) -> None:
    first, *peers = members.members
    members.start(first)
    alone = _joined_step(first, wait_s=4)
    assert alone.returncode == 0, alone.stderr
    assert f"etcd {first.name} has no quorum after 4 s: its peers may still be booting" in alone.stderr
    assert first.proc is not None and first.proc.poll() is None  # still running, waiting for its peers
    for m in peers:
        members.start(m)
    together = _joined_step(first, wait_s=120)
    assert together.returncode == 0, together.stderr
    assert f"etcd {first.name} is part of a quorum after" in together.stdout
