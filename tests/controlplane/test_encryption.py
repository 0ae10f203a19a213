"""Secrets encrypted at rest, on dev's real control plane (the rendered kube-apiserver command, its rendered
``--encryption-provider-config`` file from the cluster's PKI as ClusterPki makes it: tests/bootstrap/certs.py).

A Secret created through the API is ``k8s:enc:secretbox:v1:<key>:`` ciphertext in etcd (read with the real
etcdctl) and plaintext through the API. An etcd snapshot of it (``etcdctl snapshot save``, what the backup
timer uploads), restored with the real etcdutl into a fresh data directory and served by a fresh etcd, reads
back through an API server started with the same configuration; one started with another key gets an error,
never the plaintext. Nothing here stands in for anything: no Azure is involved (the key reaches the host in
its Key Vault bundle, which tests/bootstrap/test_encryption.py checks as rendered).
"""

from __future__ import annotations

import base64
import json
import secrets
import ssl
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from modules.bootstrap import encryption
from modules.bootstrap.layout import PATHS
from tests.bootstrap.conftest import tool
from tests.bootstrap.test_realtool_etcd import _ports

from .cluster import ControlPlane, Process, StartFailed, argv_on_loopback, wait

SECRETS = "/api/v1/namespaces/default/secrets"


def _request(ctx: ssl.SSLContext, url: str) -> tuple[int, str]:
    req = urllib.request.Request(url, headers={"Accept": "application/json"})
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=30) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()
    except (urllib.error.URLError, OSError) as err:
        return 0, str(err)


def _etcd_value(cp: ControlPlane, key: str) -> bytes:
    run = cp.etcd.ctl("get", key, "-w", "json")
    assert run.returncode == 0, run.stderr
    (kv,) = json.loads(run.stdout)["kvs"]
    return base64.b64decode(kv["value"])


@contextmanager
def _restored_etcd(cp: ControlPlane, snapshot: Path, root: Path) -> Iterator[str]:
    """A one-member etcd restored from ``snapshot`` with the real etcdutl into a fresh data directory, serving
    clients over TLS with dev's first member's certificates (its server certificate names 127.0.0.1); yields
    its client URL."""
    client, peer = _ports(2)
    peer_url = f"http://127.0.0.1:{peer}"
    data = root / "restored-data"
    restore = subprocess.run(
        [
            tool("etcdutl"),
            "snapshot",
            "restore",
            str(snapshot),
            f"--data-dir={data}",
            "--name=restored",
            f"--initial-cluster=restored={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert restore.returncode == 0, restore.stdout + restore.stderr
    pki = Path(cp.etcd.client_cert[0]).parent
    url = f"https://127.0.0.1:{client}"
    etcd = Process(
        "restored etcd",
        [
            tool("etcd"),
            "--name=restored",
            f"--data-dir={data}",
            f"--listen-client-urls={url}",
            f"--advertise-client-urls={url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=restored={peer_url}",
            f"--cert-file={pki / 'server.crt'}",
            f"--key-file={pki / 'server.key'}",
            f"--trusted-ca-file={pki / 'ca.crt'}",
            "--client-cert-auth",
        ],
        root / "restored-etcd.log",
    )
    etcd.start()
    try:
        ca, crt, key = cp.etcd.client_cert
        health = [tool("etcdctl"), f"--endpoints={url}", f"--cacert={ca}", f"--cert={crt}", f"--key={key}"]
        wait(
            "the restored etcd",
            lambda: subprocess.run([*health, "endpoint", "health"], capture_output=True, check=False).returncode == 0,
            [etcd],
            timeout=60,
        )
        yield url
    finally:
        etcd.stop()


@contextmanager
def _api_server(cp: ControlPlane, etcd_url: str, config: Path, root: Path, name: str) -> Iterator[str]:
    """The first API server host's rendered kube-apiserver command on the restored etcd, on a port of its own,
    reading ``config`` as its ``--encryption-provider-config``; yields its URL once it answers at all."""
    host = cp.hosts[0]
    (port,) = _ports(1)
    root.mkdir(parents=True, exist_ok=True)
    replaced = {
        "--etcd-servers": etcd_url,
        "--secure-port": str(port),
        "--encryption-provider-config": str(config),
        "--audit-log-path": str(root / f"{name}-audit.log"),
    }
    argv = []
    for arg in argv_on_loopback(cp, host, "kube-apiserver"):
        flag = arg.partition("=")[0]
        if flag == "--etcd-servers-overrides":  # events into the restored etcd too: it is the only one here
            continue
        argv.append(f"{flag}={replaced[flag]}" if flag in replaced else arg)
    assert f"--encryption-provider-config={config}" in argv, "the rendered command names no encryption config"
    server = Process(name, argv, root / f"{name}.log")
    server.start()
    url = f"https://127.0.0.1:{port}"
    try:
        wait(f"{name} to answer", lambda: _request(cp.context(), url + "/version")[0] == 200, [server])
        yield url
    finally:
        server.stop()


def _other_key_config(path: Path) -> Path:
    """The same key name with other material: what an API server given the wrong key file reads."""
    seed = ed25519.Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    key = "secrets-1"
    path.write_text(encryption.config_yaml([key], {encryption.seed_secret(key): seed.decode()}))
    path.chmod(0o600)
    return path


def test_secrets_are_ciphertext_in_etcd_and_in_a_restored_snapshot_only_the_key_reads(
    dev_plane: ControlPlane, tmp_path: Path
) -> None:
    cp = dev_plane
    (key,) = cp.ctx.control_plane.encryption_keys
    name = f"enc-{secrets.token_hex(4)}"
    plaintext = f"plaintext-{secrets.token_hex(16)}"
    body = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "stringData": {"password": plaintext}}
    status, created = cp.call("POST", SECRETS, body)
    assert status == 201, created

    stored = _etcd_value(cp, f"/registry/secrets/default/{name}")
    assert stored.startswith(f"k8s:enc:{encryption.PROVIDER}:v1:{key}:".encode()), stored[:40]
    assert plaintext.encode() not in stored and base64.b64encode(plaintext.encode()) not in stored
    got = cp.get(f"{SECRETS}/{name}")
    assert base64.b64decode(got["data"]["password"]).decode() == plaintext

    # What the backup timer takes and uploads: a snapshot of one member.
    snapshot = tmp_path / "snapshot.db"
    saved = cp.etcd.ctl("snapshot", "save", str(snapshot), endpoints=[cp.etcd.members[0]], timeout="60s")
    assert saved.returncode == 0, saved.stdout + saved.stderr
    assert plaintext.encode() not in snapshot.read_bytes()

    host_config = cp.hosts[0].root / PATHS.encryption_config.lstrip("/")
    with _restored_etcd(cp, snapshot, tmp_path) as etcd_url:
        with _api_server(cp, etcd_url, host_config, tmp_path / "same-key", "apiserver-same-key") as url:
            status, text = _request(cp.context(), f"{url}{SECRETS}/{name}")
            assert status == 200, text
            assert base64.b64decode(json.loads(text)["data"]["password"]).decode() == plaintext
            wait("the restored API server's /readyz", lambda: _request(cp.context(), url + "/readyz")[0] == 200, [])

        wrong = _other_key_config(tmp_path / "other-key.yaml")
        with _api_server(cp, etcd_url, wrong, tmp_path / "other-key", "apiserver-other-key") as url:
            status, text = _request(cp.context(), f"{url}{SECRETS}/{name}")
            assert status == 500, text
            assert plaintext not in text and base64.b64encode(plaintext.encode()).decode() not in text
            # secretbox's open fails (the API says "output array was not large enough for encryption").
            assert json.loads(text)["reason"] == "InternalError", text
            # Other objects still read: only what the key encrypted is locked.
            assert _request(cp.context(), f"{url}/api/v1/namespaces/default")[0] == 200
    assert cp.call("DELETE", f"{SECRETS}/{name}")[0] == 200  # the session's plane, as the other tests find it


def test_a_server_whose_config_is_missing_does_not_start(dev_plane: ControlPlane, tmp_path: Path) -> None:
    """The flag is enforced, not advisory: an API server host without its key file (a bundle not yet synced)
    fails at start rather than serving, and writing, Secrets in plaintext."""
    cp = dev_plane
    absent = tmp_path / "absent.yaml"
    with (
        pytest.raises(StartFailed, match="encryption"),
        _api_server(cp, cp.etcd.members[0].client_url, absent, tmp_path, "apiserver-no-key"),
    ):
        pytest.fail("an API server without its encryption config started")
