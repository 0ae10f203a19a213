"""Azurite, Microsoft's Azure Storage emulator (npm ``azurite``, installed by ``make azurite``), started on
loopback for the blob tests, and a stand-in IMDS that hands out tokens it accepts.

What is real: Azurite's Blob service (its REST handlers, Put Blob / Put Block / Put Block List / Get Blob /
List Blobs, MD5 checks, and its OAuth check with ``--oauth basic``: Bearer only over HTTPS, a JWT whose
issuer is Microsoft Entra's (``https://sts.windows.net/<tenant>/``), audience storage's
(``https://storage.azure.com``) and lifetime current; it does not check the signature or RBAC, so these
tests do not exercise Azure's role assignments). What is faked: IMDS (the loopback server answers the two
endpoints the hosts call, enforcing ``Metadata: true``), the signature of its tokens, and the TLS
certificate (self-signed for 127.0.0.1, trusted through blob.py's ``cafile``).
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import shutil
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from ipaddress import IPv4Address
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from modules.bootstrap.host import imds
from modules.bootstrap.host.boot import HostConfig

ROOT = Path(__file__).resolve().parents[3]
AZURITE = ROOT / "tools/azurite/node_modules/.bin/azurite-blob"
ACCOUNT = "devstoreaccount1"
"""Azurite's built-in account; its path-style URL is https://127.0.0.1:<port>/devstoreaccount1."""
TENANT = "72f988bf-86f1-41af-91ab-2d7cd011db47"


def _require() -> tuple[str, Path]:
    where = "CI requires it" if os.environ.get("CI") == "true" else "the blob tests need it"
    node = shutil.which("node")
    if node is None:
        pytest.fail(f"node is not installed ({where}): apt-get install npm", pytrace=False)
    if not AZURITE.exists():
        pytest.fail(f"Azurite is not installed ({where}): make azurite", pytrace=False)
    return node, AZURITE


def jwt(
    audience: str = "https://storage.azure.com", issuer: str = f"https://sts.windows.net/{TENANT}/", **claims: Any
) -> str:
    """An access token shaped like Entra's (unsigned: Azurite's basic level does not check signatures)."""
    now = int(time.time())

    def part(d: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(d).encode()).rstrip(b"=").decode()

    body = {"aud": audience, "iss": issuer, "iat": now - 60, "nbf": now - 60, "exp": now + 3600, **claims}
    return f"{part({'alg': 'RS256', 'typ': 'JWT'})}.{part(body)}.{base64.urlsafe_b64encode(b'sig').decode()}"


def self_signed(folder: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "azurite.test")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(IPv4Address("127.0.0.1"))]), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "azurite.crt", folder / "azurite.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


@dataclass(frozen=True)
class Azurite:
    account_url: str
    """https://127.0.0.1:<port>/devstoreaccount1 (the account's blob service, path style)."""
    cafile: str
    started_s: float
    """Seconds from exec to listening (a figure for the report, never asserted)."""

    def create_container(self, name: str) -> None:
        """What the cluster stack does (BlobContainer), with a Bearer token."""
        request = urllib.request.Request(f"{self.account_url}/{name}?restype=container", method="PUT", data=b"")
        request.add_header("Authorization", f"Bearer {jwt()}")
        request.add_header("x-ms-version", "2021-08-06")
        with urllib.request.urlopen(request, context=ssl.create_default_context(cafile=self.cafile)) as response:
            assert response.status == 201


@contextmanager
def azurite(folder: Path) -> Iterator[Azurite]:
    """Azurite's Blob service on a free loopback port, HTTPS, OAuth basic, in memory."""
    node, program = _require()
    folder.mkdir(parents=True, exist_ok=True)
    cert, key = self_signed(folder)
    log = folder / "azurite.log"
    # Port 0: the system picks a free one, which Azurite prints. OAuth (basic) needs HTTPS (--cert/--key).
    argv = [node, str(program), "--blobHost", "127.0.0.1", "--blobPort", "0", "--inMemoryPersistence", "--silent"]
    argv += ["--oauth", "basic", "--cert", str(cert), "--key", str(key), "--disableTelemetry"]
    started = time.monotonic()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=folder,
        )
    try:
        deadline = time.monotonic() + 60
        port = None
        while port is None:
            text = log.read_text()
            if "successfully listens on https://127.0.0.1:" in text:
                port = int(text.split("successfully listens on https://127.0.0.1:")[1].split()[0].strip("/"))
                break
            assert proc.poll() is None, f"Azurite exited:\n{text}"
            assert time.monotonic() < deadline, f"Azurite did not start:\n{text}"
            time.sleep(0.05)
        yield Azurite(f"https://127.0.0.1:{port}/{ACCOUNT}", str(cert), time.monotonic() - started)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def host_facts(home: Path, account_url: str, client_id: str) -> dict[str, str]:
    """What a backed-up member has before a snapshot run, in ``home``: the host's facts (host.json, as
    customData writes it) and the account URL file (as the host sync writes it from the bundle); the
    Settings keys that point at them."""
    home.mkdir(parents=True, exist_ok=True)
    host = HostConfig("etcd", home.name, "dev", "https://vault.invalid/", "dev-keys-x", client_id)
    (home / "host.json").write_text(host.to_json())
    (home / "etcd-backup-url").write_text(account_url + "\n")
    return {"host_config": str(home / "host.json"), "account_url_file": str(home / "etcd-backup-url")}


class StorageImds:
    """IMDS for one VM: its identity's storage tokens. Refuses what IMDS refuses (no ``Metadata: true``),
    and tokens for any other client id or resource (404, like IMDS for an identity the VM does not have)."""

    def __init__(self, client_id: str, token: str | None = None) -> None:
        self.client_id, self.token = client_id, token
        self.calls: list[str] = []

    def __call__(
        self, method: str, path: str, query: dict[str, list[str]], headers: dict[str, str], body: bytes
    ) -> tuple[int, dict[str, str], Any]:
        self.calls.append(path)
        if headers.get("Metadata") != "true":
            return 400, {}, {"error": "invalid_request", "error_description": "Required metadata header not specified"}
        if path == "/metadata/identity/oauth2/token" and query.get("api-version") == [imds.API_VERSION]:
            if query.get("client_id") != [self.client_id] or query.get("resource") != [imds.STORAGE]:
                return 404, {}, {"error": "invalid_request", "error_description": "Identity not found"}
            return 200, {}, {"access_token": self.token or jwt(), "expires_in": "86399", "resource": imds.STORAGE}
        return 404, {}, None
