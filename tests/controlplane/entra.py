"""Stand-ins for Microsoft Entra ID, which cannot be reached here: an OIDC issuer on loopback HTTPS with its own
key (for researchers' sign-in), and the checks Entra's token exchange makes of a federated token (for workload
identity). Both are stand-ins, named as such in the tests that use them.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import ssl
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from ipaddress import IPv4Address
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.x509.oid import NameOID

from modules.identity import oidc


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def sign(key: rsa.RSAPrivateKey, kid: str, claims: Mapping[str, Any]) -> str:
    header = _b64(json.dumps({"alg": "RS256", "typ": "JWT", "kid": kid}).encode())
    body = _b64(json.dumps(dict(claims)).encode())
    signature = key.sign(f"{header}.{body}".encode(), padding.PKCS1v15(), hashes.SHA256())
    return f"{header}.{body}.{_b64(signature)}"


def decode(token: str) -> tuple[dict[str, Any], dict[str, Any]]:
    header, body, _ = token.split(".")
    return json.loads(_unb64(header)), json.loads(_unb64(body))


def verify(token: str, jwks: Mapping[str, Any]) -> dict[str, Any]:
    """The token's claims once its RS256 signature checks against the JWKS key its ``kid`` names."""
    header, claims = decode(token)
    assert header["alg"] == "RS256", header
    key = next((k for k in jwks["keys"] if k["kid"] == header["kid"]), None)
    assert key is not None, f"kid {header['kid']} is not in the JWKS ({[k['kid'] for k in jwks['keys']]})"
    public = rsa.RSAPublicNumbers(int.from_bytes(_unb64(key["e"]), "big"), int.from_bytes(_unb64(key["n"]), "big"))
    signed, _, signature = token.rpartition(".")
    public.public_key().verify(_unb64(signature), signed.encode(), padding.PKCS1v15(), hashes.SHA256())
    return claims


@dataclass(frozen=True)
class Credential:
    """A federated identity credential as the cluster stack creates it (modules/azure/workload_identity.py)."""

    client_id: str
    issuer: str
    subject: str
    audiences: tuple[str, ...] = (oidc.AUDIENCE,)


def exchange_standin(token: str, blobs: Mapping[str, str], credential: Credential) -> str:
    """STAND-IN for Entra's token exchange (client_credentials with a client_assertion; learn.microsoft.com,
    "Workload identity federation" and "Microsoft identity platform application authentication certificate
    credentials"): the checks it makes of the assertion, against the documents the issuer publishes (``blobs``:
    path under the issuer -> content, what the cluster stack uploads). Returns the client id on success."""
    _, claims = decode(token)
    assert claims["iss"] == credential.issuer, f"iss {claims['iss']} is not the credential's {credential.issuer}"
    discovery = json.loads(blobs[oidc.DISCOVERY_PATH])
    assert discovery["issuer"] == claims["iss"], "the discovery document names another issuer"
    jwks_path = discovery["jwks_uri"].removeprefix(credential.issuer)
    verify(token, json.loads(blobs[jwks_path]))
    audiences = claims["aud"] if isinstance(claims["aud"], list) else [claims["aud"]]
    assert set(audiences) & set(credential.audiences), f"aud {audiences} is not {credential.audiences}"
    assert claims["sub"] == credential.subject, f"sub {claims['sub']} is not {credential.subject}"
    assert claims["exp"] > time.time()
    return credential.client_id


def _cert(
    name: str, key: ec.EllipticCurvePrivateKey, issuer: tuple[x509.Name, ec.EllipticCurvePrivateKey] | None, ca: bool
) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer[0] if issuer else subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(hours=2))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if not ca:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.IPAddress(IPv4Address("127.0.0.1"))]), False)
    return builder.sign(issuer[1] if issuer else key, hashes.SHA256())


def loopback_tls(folder: Path, name: str) -> tuple[str, Path, Path]:
    """A CA (PEM) and a server certificate and key for 127.0.0.1 under ``folder``."""
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = _cert(f"{name} CA", ca_key, None, True)
    leaf = _cert(name, key, (ca.subject, ca_key), False)
    folder.mkdir(parents=True, exist_ok=True)
    crt, pem = folder / "tls.crt", folder / "tls.key"
    crt.write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    pem.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return ca.public_bytes(serialization.Encoding.PEM).decode(), crt, pem


@dataclass
class EntraStandIn:
    """STAND-IN for Entra ID's v2.0 issuer of one tenant: discovery and keys on loopback HTTPS, tokens signed
    with its own RSA key, shaped as Entra's (iss, aud = the app's client id, oid, groups)."""

    issuer: str
    ca_pem: str
    key: rsa.RSAPrivateKey
    kid: str

    def token(self, audience: str, *, groups: list[str], oid: str | None = None, **extra: Any) -> str:
        now = int(time.time())
        claims = {
            "iss": self.issuer,
            "aud": audience,
            "oid": oid or str(uuid.uuid4()),
            "groups": groups,
            "iat": now,
            "nbf": now - 5,
            "exp": now + 3600,
            **extra,
        }
        return sign(self.key, self.kid, claims)


@contextmanager
def entra_standin(folder: Path, tenant: str) -> Iterator[EntraStandIn]:
    key = rsa.generate_private_key(65537, 2048)
    public = (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    ca_pem, crt, pem = loopback_tls(folder, "entra stand-in")
    documents: dict[str, Any] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = documents.get(self.path)
            data = json.dumps(body).encode() if body is not None else b"{}"
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(crt), str(pem))
    server.socket = context.wrap_socket(server.socket, server_side=True)
    issuer = f"https://127.0.0.1:{server.server_port}/{tenant}/v2.0"
    prefix = f"/{tenant}/v2.0"
    documents[f"{prefix}/.well-known/openid-configuration"] = {
        "issuer": issuer,
        "jwks_uri": f"https://127.0.0.1:{server.server_port}/{tenant}/discovery/v2.0/keys",
        "response_types_supported": ["id_token"],
        "subject_types_supported": ["pairwise"],
        "id_token_signing_alg_values_supported": ["RS256"],
    }
    documents[f"/{tenant}/discovery/v2.0/keys"] = oidc.jwks([public])
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield EntraStandIn(issuer, ca_pem, key, oidc.key_id(public))
    finally:
        server.shutdown()
        server.server_close()
