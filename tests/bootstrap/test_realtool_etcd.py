"""Real etcd clusters (3 members for dev, 5 for prod-7500) from the rendered etcd.conf.yml, each member
started by its rendered etcd.service's ExecStart (``as_the_unit_starts``).

Only addresses, ports and paths are rewritten (every member on 127.0.0.1, its own ports, a
temporary directory); TLS, timing, quota and compaction are the rendered values. Certificates
come from the same PKI spec ClusterPki deploys.
"""

from __future__ import annotations

import os
import random
import shlex
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from modules.bootstrap import pki
from modules.bootstrap.context import BootstrapContext
from modules.bootstrap.layout import PATHS
from modules.bootstrap.roles import Role, bundle, names

from .certs import issue


@dataclass
class Member:
    name: str
    config: Path
    client_url: str
    log: Path
    unit: str
    """The member's rendered etcd.service: ``Cluster.start`` runs its ExecStart."""
    proc: subprocess.Popen[bytes] | None = None


def as_the_unit_starts(unit: str, etcd: str, config: Path) -> list[str]:
    """The rendered unit's ExecStart, with the image's etcd replaced by ``etcd`` (the table's release, built
    here) and the config file path by ``config`` (the member's config rewritten onto loopback)."""
    execs = [v for k, _, v in (line.partition("=") for line in unit.splitlines()) if k.strip() == "ExecStart"]
    assert len(execs) == 1, unit
    argv = shlex.split(execs[0])
    assert argv[0] == PATHS.etcd_program("etcd"), argv
    return [etcd, *(str(config) if a == PATHS.etcd_config else a for a in argv[1:])]


_HANDED_OUT: set[int] = set()


def _ports(count: int) -> list[int]:
    """Free loopback ports below the kernel's ephemeral range. A port the kernel handed out for port 0 may
    be handed to another process (another test worker, an outgoing connection) while a member restarts;
    these never are, and a random start keeps parallel workers apart."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    # Each xdist worker draws from its own slice: two workers starting planes at once (dev's on one, the
    # scale tier's fleet on the other) once drew the same port from the shared range, and an etcd member
    # died with "address already in use".
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
    span = (low - 10_000) // max(workers, 1)
    first = 10_000 + worker * span
    out: list[int] = []
    for port in random.Random().sample(range(first, first + span), span):
        if port in _HANDED_OUT:  # free now, but promised to a process not yet started
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        out.append(port)
        if len(out) == count:
            _HANDED_OUT.update(out)
            return out
    raise RuntimeError(f"no {count} free ports between {first} and {first + span}")


def loopback_url(ports: dict[tuple[str, int], int]) -> Callable[[str], str | None]:
    """A member URL onto this machine's loopback port for it; None for the member's own loopback listener
    (its address one is on loopback here already)."""

    def url(u: str) -> str | None:
        parts = urlsplit(u)
        host, port = parts.hostname or "", parts.port or 0
        if host == "127.0.0.1":
            return None
        return f"{parts.scheme}://127.0.0.1:{ports[(host, port)]}"

    return url


def on_loopback(conf: dict[str, Any], ports: dict[tuple[str, int], int]) -> None:
    """Every URL of an etcd config (in place) onto loopback ports."""
    url = loopback_url(ports)
    for key in (
        "listen-peer-urls",
        "listen-client-urls",
        "listen-metrics-urls",
        "advertise-client-urls",
        "initial-advertise-peer-urls",
    ):
        conf[key] = ",".join(u for u in (url(x) for x in conf[key].split(",")) if u)
    conf["initial-cluster"] = ",".join(
        f"{n}={url(u)}" for n, u in (item.split("=", 1) for item in conf["initial-cluster"].split(","))
    )


def _rewrite(text: str, ports: dict[tuple[str, int], int], root: Path) -> str:
    """Every https/http URL of the config onto loopback, paths under ``root``."""
    conf = yaml.safe_load(text)
    on_loopback(conf, ports)
    conf["data-dir"] = conf["data-dir"].replace(PATHS.etcd_mount, str(root / "var"))
    for section in ("client-transport-security", "peer-transport-security"):
        for key in ("cert-file", "key-file", "trusted-ca-file"):
            conf[section][key] = conf[section][key].replace(PATHS.etcd_pki, str(root / "pki"))
    return yaml.safe_dump(conf, sort_keys=False)


@dataclass
class Cluster:
    members: list[Member]
    etcd: str
    etcdctl: str
    client_cert: tuple[Path, Path, Path]

    def start(self, member: Member, env: dict[str, str] | None = None) -> None:
        """The member's etcd as its unit starts it (``env``: added to the environment)."""
        argv = as_the_unit_starts(member.unit, self.etcd, member.config)
        with member.log.open("ab") as log:
            member.proc = subprocess.Popen(argv, stdout=log, stderr=log, env={**os.environ, **(env or {})})

    def kill(self, member: Member) -> None:
        assert member.proc is not None
        member.proc.kill()
        member.proc.wait()
        member.proc = None

    def ctl(
        self, *args: str, endpoints: list[Member] | None = None, cert: bool = True, timeout: str = "15s"
    ) -> subprocess.CompletedProcess[str]:
        ca, crt, key = self.client_cert
        urls = ",".join(m.client_url for m in (endpoints or self.members))
        tls = [f"--cacert={ca}"] + ([f"--cert={crt}", f"--key={key}"] if cert else [])
        return subprocess.run(
            [self.etcdctl, f"--endpoints={urls}", f"--command-timeout={timeout}", "--dial-timeout=3s", *tls, *args],
            capture_output=True,
            text=True,
            check=False,
            env={"ETCDCTL_API": "3", "PATH": "/usr/bin:/bin"},
        )

    def put_with_retries(self, key: str, value: str, endpoints: list[Member]) -> subprocess.CompletedProcess[str]:
        """A write as clients make it: retried while a new leader is elected (a few seconds)."""
        for _ in range(5):
            run = self.ctl("put", key, value, endpoints=endpoints, timeout="10s")
            if run.returncode == 0:
                break
        return run

    def wait_healthy(self, members: list[Member]) -> None:
        deadline = time.monotonic() + 90
        while True:
            run = self.ctl("endpoint", "health", endpoints=members, timeout="3s")
            if run.returncode == 0:
                return
            for m in members:
                assert m.proc is not None and m.proc.poll() is None, f"{m.name} exited:\n{m.log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, run.stdout + run.stderr
            time.sleep(0.5)


def lay_out(
    ctx: BootstrapContext, root: Path, pems: dict[str, str], role: Role = "etcd"
) -> tuple[list[Member], dict[tuple[str, int], int]]:
    """Every member of ``ctx``'s etcd (or events etcd, ``role``) under ``root/<name>``: its PKI from ``pems`` and
    its rendered config on loopback ports (nothing started). Also returns the ports: (member address, port) ->
    loopback port."""
    members = names(ctx, role)
    cluster = ctx.etcd if role == "etcd" else ctx.events_etcd
    assert cluster is not None, role
    hosts = {m.name: str(m.ip) for m in cluster.members}
    free = iter(_ports(3 * len(members)))
    ports = {(hosts[n], p): next(free) for n in members for p in (2379, 2380, 2381)}
    out = []
    for name in members:
        node = bundle(ctx, role, name)
        home = root / name
        for secret in node.secrets:
            path = home / "pki" / Path(secret.path).name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(pems[secret.secret])
            path.chmod(0o600)
        config = home / "etcd.conf.yml"
        config.write_text(_rewrite(node.file("etcd.conf.yml").content, ports, home))
        unit = node.file("systemd/etcd.service").content
        out.append(Member(name, config, f"https://127.0.0.1:{ports[(hosts[name], 2379)]}", home / "etcd.log", unit))
    return out, ports


@pytest.fixture
def cluster_of(require: Callable[[str], str], tmp_path: Path) -> Iterator[Callable[[BootstrapContext], Cluster]]:
    started: list[Cluster] = []

    def build(ctx: BootstrapContext) -> Cluster:
        etcd, etcdctl = require("etcd"), require("etcdctl")
        members = names(ctx, "etcd")
        spec = pki.pki_spec(ctx)
        wanted = {pki.ETCD_HEALTHCHECK} | {c(n) for n in members for c in (pki.etcd_server_cert, pki.etcd_peer_cert)}
        pems = issue(spec, only=wanted)
        out, _ = lay_out(ctx, tmp_path, pems)
        pki_dir = tmp_path / members[0] / "pki"
        cluster = Cluster(
            out,
            etcd,
            etcdctl,
            (pki_dir / "ca.crt", pki_dir / "healthcheck-client.crt", pki_dir / "healthcheck-client.key"),
        )
        started.append(cluster)
        for m in out:
            cluster.start(m)
        cluster.wait_healthy(out)
        return cluster

    yield build
    for cluster in started:
        for m in cluster.members:
            if m.proc is not None:
                cluster.kill(m)


@pytest.mark.realtool
@pytest.mark.parametrize("stack", ["dev", "prod-7500"])
def test_etcd_cluster_quorum_and_tls(stack: str, cluster_of: Callable[[BootstrapContext], Cluster]) -> None:
    from .conftest import context

    ctx = context(stack)
    cluster = cluster_of(ctx)
    n = len(cluster.members)
    assert n == (3 if stack == "dev" else 5)

    refused = cluster.ctl("put", "no-cert", "x", cert=False, timeout="5s")
    assert refused.returncode != 0
    assert "no-cert" not in cluster.ctl("get", "--prefix", "").stdout

    for i in range(3):
        assert cluster.ctl("put", f"/k/{i}", f"v{i}").returncode == 0

    tolerable = (n - 1) // 2
    for m in cluster.members[:tolerable]:
        cluster.kill(m)
    alive = cluster.members[tolerable:]
    ok = cluster.put_with_retries("/k/degraded", "yes", alive)
    assert ok.returncode == 0, ok.stderr

    cluster.kill(alive[0])
    lost = cluster.ctl("put", "/k/no-quorum", "no", endpoints=alive[1:], timeout="3s")
    assert lost.returncode != 0

    for m in cluster.members:
        if m.proc is None:
            cluster.start(m)
    cluster.wait_healthy(cluster.members)
    got = cluster.ctl("get", "--prefix", "/k/", "--print-value-only=false")
    assert got.returncode == 0, got.stderr
    keys = {k for k in got.stdout.split("\n")[0::2] if k}
    acknowledged = {"/k/0", "/k/1", "/k/2", "/k/degraded"}
    assert acknowledged <= keys
    # The refused write may sit uncommitted in the old leader's log and commit once quorum is
    # back (raft makes no promise either way for a timed-out request); nothing else may appear.
    assert keys - acknowledged <= {"/k/no-quorum"}
