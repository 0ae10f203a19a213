"""Certificate renewal on a running etcd cluster (issue 12, item 2), through the hosts' own code path.

A real 3-member etcd cluster runs from the rendered etcd.conf.yml (addresses and paths moved onto
loopback and a temporary root, as in test_realtool_etcd.py). Each member's bundle is published to a
loopback Key Vault (tests/bootstrap/host/fakes.py: the Get Secret API, Bearer tokens from a loopback IMDS, a read
grant per secret), and each member applies it with sync.py's real ``run``: fetch every part, rewrite
the changed files, ask every other member's /health, restart. The one stand-in is systemd: the
restart hook the test provides restarts that member's etcd process (systemctl cannot run here).

While a writer keeps writing, the server, peer and health-check client certificates of every member
are renewed one member at a time: no acknowledged write is lost, every write succeeds (quorum held),
a member whose peer is down defers its restart until the peer is back, and afterwards every member
serves its renewed certificates on both its client and its peer port.
"""

from __future__ import annotations

import datetime as dt
import socket
import ssl
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from modules.bootstrap import pki
from modules.bootstrap.context import ETCD_CLIENT_PORT, ETCD_METRICS_PORT, ETCD_PEER_PORT, BootstrapContext
from modules.bootstrap.delivery import PARTS, document, encode, placeholder_facts
from modules.bootstrap.host import boot, bundle, sync
from modules.bootstrap.layout import PATHS
from modules.bootstrap.roles import bundle as node_bundle
from modules.bootstrap.roles import names
from tests.bootstrap.host.fakes import FakeVault, azure

from .certs import issue, leaf
from .test_realtool_etcd import Cluster, Member, _ports, loopback_url, on_loopback

ETCD_PORTS = (ETCD_CLIENT_PORT, ETCD_PEER_PORT, ETCD_METRICS_PORT)


def _localize(doc: dict[str, Any], root: Path, ports: dict[tuple[str, int], int]) -> dict[str, Any]:
    """The member's bundle as this machine can run it: its etcd on loopback ports, its files under ``root``."""
    for f in doc["files"]:
        if f["path"] == PATHS.etcd_config:
            conf = yaml.safe_load(f["content"])
            on_loopback(conf, ports)
            conf["data-dir"] = f"{root}{conf['data-dir']}"
            for section in ("client-transport-security", "peer-transport-security"):
                for key in ("cert-file", "key-file", "trusted-ca-file"):
                    conf[section][key] = f"{root}{conf[section][key]}"
            f["content"] = yaml.safe_dump(conf, sort_keys=False)
    gate = doc["gates"]["etcd"]
    url = loopback_url(ports)
    gate["members"] = {n: url(u) for n, u in gate["members"].items()}
    return doc


class Writer(threading.Thread):
    """A client writing one key after another with etcdctl (etcd's own client: every member as an
    endpoint, the next one tried when one does not answer); a write that no member acknowledges within
    15 s is a failure. (etcd's JSON gateway is no option: with client-cert-auth it dials its own gRPC
    server with the member's server certificate, which has no clientAuth usage.)"""

    def __init__(self, cluster: Cluster) -> None:
        super().__init__(daemon=True)
        self.cluster = cluster
        self.acked: list[str] = []
        self.failed: list[str] = []
        self.stop = threading.Event()

    def put(self, key: str) -> bool:
        end = time.monotonic() + 15
        while time.monotonic() < end:
            if self.cluster.ctl("put", key, "v", timeout="3s").returncode == 0:
                return True
            time.sleep(0.1)
        return False

    def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            key = f"/renewal/{n:06d}"
            (self.acked if self.put(key) else self.failed).append(key)
            n += 1


def _served(port: int, ca: Path, cert: Path, key: Path) -> bytes:
    """The certificate a member presents on ``port`` (DER), asked with a client certificate."""
    context = ssl.create_default_context(cafile=str(ca))
    context.load_cert_chain(str(cert), str(key))
    context.check_hostname = False
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, context.wrap_socket(raw) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return der


def _der(pem: str) -> bytes:
    return x509.load_pem_x509_certificate(pem.encode()).public_bytes(serialization.Encoding.DER)


def _renewed(spec: pki.PkiSpec, pems: dict[str, str], members: Sequence[str]) -> dict[str, str]:
    """New server, peer and health-check client certificates (and keys) from the same etcd CA."""
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    ca_key = load_pem_private_key(pems[f"key:{pki.ETCD_CA}"].encode(), None)
    ca_cert = x509.load_pem_x509_certificate(pems[f"cert:{pki.ETCD_CA}"].encode())
    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)
    out = dict(pems)
    renew = [pki.ETCD_HEALTHCHECK, *(c(m) for m in members for c in (pki.etcd_server_cert, pki.etcd_peer_cert))]
    for name in renew:
        key, cert = leaf(spec.cert(name), ca_key, ca_cert, now)  # type: ignore[arg-type]
        out[f"cert:{name}"] = cert
        out[f"key:{name}"] = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
        ).decode()
    return out


@pytest.mark.realtool
def test_renewing_every_members_certificates_one_at_a_time_keeps_quorum_and_every_write(
    dev: BootstrapContext, require: Callable[[str], str], tmp_path: Path
) -> None:
    etcd, etcdctl = require("etcd"), require("etcdctl")
    members = names(dev, "etcd")
    assert len(members) == 3
    spec = pki.pki_spec(dev)
    v1 = issue(
        spec, only={pki.ETCD_HEALTHCHECK, *(c(m) for m in members for c in (pki.etcd_server_cert, pki.etcd_peer_cert))}
    )
    v2 = _renewed(spec, v1, members)
    ip = {m.name: str(m.ip) for m in dev.etcd.members}
    free = iter(_ports(3 * len(members)))
    ports = {(ip[n], p): next(free) for n in members for p in ETCD_PORTS}
    roots = {n: tmp_path / n for n in members}
    kv = FakeVault()
    secret = {n: f"{n}-59292334" for n in members}

    def publish(name: str, pems: dict[str, str]) -> None:
        node = node_bundle(dev, "etcd", name)
        doc = _localize(document(node, pems, placeholder_facts(dev, node)), roots[name], ports)
        doc["boot"] = []  # the boot steps install packages; here etcd is already installed
        for i, part in enumerate(encode(doc), start=1):
            kv.put(bundle.part_name(secret[name], i), part, f"client-{name}")

    # The client the test's cluster helper and writer use: version 1 of the health-check certificate.
    client = tmp_path / "client"
    client.mkdir()
    for file, name in (
        ("ca.crt", f"cert:{pki.ETCD_CA}"),
        ("c.crt", f"cert:{pki.ETCD_HEALTHCHECK}"),
        ("c.key", f"key:{pki.ETCD_HEALTHCHECK}"),
    ):
        (client / file).write_text(v1[name])
    cluster = Cluster(
        [
            Member(
                n,
                roots[n] / PATHS.etcd_config.lstrip("/"),
                f"https://127.0.0.1:{ports[(ip[n], ETCD_CLIENT_PORT)]}",
                tmp_path / f"{n}.log",
                node_bundle(dev, "etcd", n).file("systemd/etcd.service").content,
            )
            for n in members
        ],
        etcd,
        etcdctl,
        (client / "ca.crt", client / "c.crt", client / "c.key"),
    )
    by_name = {m.name: m for m in cluster.members}
    lines: list[str] = []

    def runtime(name: str) -> sync.Runtime:
        def systemctl(args: Sequence[str]) -> None:
            if list(args) == ["restart", "etcd.service"]:
                cluster.kill(by_name[name])
                cluster.start(by_name[name])

        return sync.Runtime(
            root=str(roots[name]),
            systemctl=systemctl,
            command=lambda line: None,
            imds_endpoint=imds_url,
            log=lambda line: lines.append(f"{name}: {line}"),
        )

    with azure(kv) as (vault_url, imds_url):
        # First boot of each member: boot.py's fetch, then sync.py boot writes every file of the bundle.
        for name in members:
            publish(name, v1)
            config = roots[name] / boot.HOST_CONFIG.lstrip("/")
            config.parent.mkdir(parents=True)
            config.write_text(
                boot.HostConfig("etcd", name, dev.cluster, vault_url, secret[name], f"client-{name}").to_json()
            )
            rt = runtime(name)
            value = boot.fetch(boot.HostConfig.load(str(config)), deadline_s=30, imds_endpoint=imds_url)
            assert sync.first_boot(rt, value) == 0
            assert sync.apply(sync.fetch(boot.HostConfig.load(str(config)), rt), rt).written == []  # idempotent
        try:
            for m in cluster.members:
                cluster.start(m)
            cluster.wait_healthy(cluster.members)
            writer = Writer(cluster)
            writer.start()
            time.sleep(1)
            first, second, last = members
            for name in (first, second):
                publish(name, v2)
                # On the hosts the members' runs are 60/n minutes apart; here, as soon as all are healthy
                # (on a loaded machine a restarted member may take a while to report healthy again).
                cluster.wait_healthy(cluster.members)
                out = sync.run(runtime(name))
                # A peer that briefly reports unhealthy (an election after the last restart) defers the
                # restart to the next run, as on the hosts; that run restarts from its pending list.
                for _ in range(3):
                    if out.done[-1:] == ["restart etcd.service"] or out.failed:
                        break
                    assert out.deferred == ["restart etcd.service"], lines
                    cluster.wait_healthy(cluster.members)
                    out = sync.run(runtime(name))
                assert out.done[-1:] == ["restart etcd.service"] and out.failed == [], lines
            # A member whose peer is down waits: restarting now would cost the cluster its quorum.
            publish(last, v2)
            cluster.kill(by_name[second])
            pid = by_name[last].proc.pid  # type: ignore[union-attr]
            out = sync.run(runtime(last))
            assert out.deferred == ["restart etcd.service"] and by_name[last].proc.pid == pid  # type: ignore[union-attr]
            # Killing a member may cost the cluster its leader, so a survivor can briefly report unhealthy too:
            # the deferral must name the dead member, and may name more.
            deferrals = [x for x in lines if x.startswith(f"{last}: deferred restart etcd.service: ")]
            assert deferrals and deferrals[-1].endswith(" not healthy; the next run retries"), lines
            named = deferrals[-1].split(": ", 2)[2].removesuffix(" not healthy; the next run retries").split(", ")
            assert second in named and last not in named, deferrals
            cluster.start(by_name[second])
            cluster.wait_healthy(cluster.members)
            out = sync.run(runtime(last))  # nothing changed on disk: the pending restart alone
            assert out.written == [] and out.done == ["restart etcd.service"], lines
            time.sleep(1)
            writer.stop.set()
            writer.join(timeout=30)
            # No write failed (quorum held throughout), and none that was acknowledged is lost.
            assert writer.failed == []
            # And the writer wrote throughout: at least two writes per member restart (hundreds on an idle
            # machine, 39 on a loaded one: a count of writes a second would test the machine, not etcd).
            assert len(writer.acked) >= 2 * (len(members) + 1), len(writer.acked)
            got = cluster.ctl("get", "--prefix", "/renewal/", "--keys-only")
            assert got.returncode == 0, got.stderr
            assert set(writer.acked) <= set(got.stdout.split())
            # Every member serves its renewed certificates, to clients and to its peers.
            for name in members:
                pki_dir = roots[name] / PATHS.etcd_pki.lstrip("/")
                ca, crt, key = (
                    pki_dir / "ca.crt",
                    pki_dir / "healthcheck-client.crt",
                    pki_dir / "healthcheck-client.key",
                )
                assert crt.read_text() == v2[f"cert:{pki.ETCD_HEALTHCHECK}"]
                served = _served(ports[(ip[name], ETCD_CLIENT_PORT)], ca, crt, key)
                assert (
                    served
                    == _der(v2[f"cert:{pki.etcd_server_cert(name)}"])
                    != _der(v1[f"cert:{pki.etcd_server_cert(name)}"])
                )
                peer = _served(ports[(ip[name], ETCD_PEER_PORT)], ca, pki_dir / "peer.crt", pki_dir / "peer.key")
                assert peer == _der(v2[f"cert:{pki.etcd_peer_cert(name)}"])
            assert sum(line.endswith("healthy again") for line in lines) == 3
            # Every member's bundle spans all its parts (each read and joined by sync.py).
            assert PARTS > 1 and all(
                len(kv.secrets[bundle.part_name(secret[n], i)]) > 0 for n in members for i in range(1, PARTS + 1)
            )
        finally:
            for m in cluster.members:
                if m.proc is not None:
                    cluster.kill(m)
