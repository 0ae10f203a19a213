"""The documents two issuers need: the cluster's service-account issuer as Azure reads it, and the API
server's trust in Microsoft Entra ID for researchers. Pure functions of the config and the public key.

Workload identity on a self-managed cluster (azure.github.io/azure-workload-identity, "Self-Managed
Clusters", its "OpenID Connect Issuer" pages): Entra fetches ``{issuer}/.well-known/openid-configuration``
and the JWKS it names (``{issuer}/openid/v1/jwks``) from a public HTTPS URL, then checks the projected
token's signature, ``iss`` and ``aud`` (``api://AzureADTokenExchange``) before exchanging it. The
issuer here is a blob container of a storage account the cluster stack creates.

Entra verifies RSA signatures only: an ES256 service-account token is refused with AADSTS5002738
("'ES256' is not a supported signature algorithm", AzureAD/microsoft-identity-web#3467), which is why the
service-account signing key is RSA (modules/bootstrap/pki.py) while every other key stays ECDSA.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from typing import Any

import yaml

from modules.identity.config import EntraConfig

AUDIENCE = "api://AzureADTokenExchange"
"""The audience Entra expects of a federated token (Microsoft's default for federated identity credentials;
azure-workload-identity's webhook projects tokens for it)."""
ISSUER_CONTAINER = "oidc"
"""The public (blob-level, no listing) container holding only the two documents below."""
DISCOVERY_PATH = ".well-known/openid-configuration"
JWKS_PATH = "openid/v1/jwks"
BLOB_SUFFIX = "blob.core.windows.net"
ENTRA_AUTHORITY = "https://login.microsoftonline.com"
_RSA_OID = bytes.fromhex("2a864886f70d010101")  # 1.2.840.113549.1.1.1 rsaEncryption


def issuer_account_name(cluster: str, tenant_id: str, location: str, stack: str) -> str:
    """The issuer's storage account: 3-24 lowercase letters and digits, unique across Azure.

    Derived from the Entra tenant (a deploying organisation's own) rather than the subscription, so the
    issuer URL is known before deploy: the API servers' flags name it and the bundle is rendered offline.
    """
    digest = hashlib.sha256(f"{tenant_id}/{location}/{stack}/{cluster}".encode()).hexdigest()[:8]
    return ("agkoidc" + "".join(c for c in cluster if c.isalnum()))[:16] + digest


def issuer_url(account: str) -> str:
    """The issuer as tokens carry it in ``iss``: a trailing slash, as Azure's walkthrough writes it."""
    return f"https://{account}.{BLOB_SUFFIX}/{ISSUER_CONTAINER}/"


def jwks_uri(issuer: str) -> str:
    return issuer + JWKS_PATH


def in_cluster_issuer(cluster_domain: str) -> str:
    """The issuer tokens carried before workload identity: still accepted, never used to sign."""
    return f"https://kubernetes.default.svc.{cluster_domain}"


def entra_issuer(tenant_id: str) -> str:
    """Entra's v2.0 issuer (its discovery document's ``issuer``; tokens of a v2.0 app carry it)."""
    return f"{ENTRA_AUTHORITY}/{tenant_id}/v2.0"


def _der(data: bytes, at: int) -> tuple[int, int, int]:
    """(tag, start of content, end of content) of the DER element at ``at``."""
    tag, length = data[at], data[at + 1]
    at += 2
    if length & 0x80:
        n = length & 0x7F
        length = int.from_bytes(data[at : at + n], "big")
        at += n
    return tag, at, at + length


def _spki(pem: str) -> bytes:
    lines = [ln.strip() for ln in pem.strip().splitlines()]
    if not lines or lines[0] != "-----BEGIN PUBLIC KEY-----" or lines[-1] != "-----END PUBLIC KEY-----":
        raise ValueError(f"not a PEM public key (BEGIN PUBLIC KEY): {pem[:40]!r}")
    return base64.b64decode("".join(lines[1:-1]))


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def key_id(public_pem: str) -> str:
    """The ``kid`` kube-apiserver puts in the tokens it signs: base64url (unpadded) of the SHA-256 of the key's
    PKIX DER (kubernetes pkg/serviceaccount/jwt.go keyIDFromPublicKey)."""
    return _b64(hashlib.sha256(_spki(public_pem)).digest())


def rsa_jwk(public_pem: str) -> dict[str, str]:
    """One RSA public key (PKIX PEM, as pulumi-tls and openssl write it) as a JWK for RS256."""
    der = _spki(public_pem)
    _, start, _ = _der(der, 0)  # SubjectPublicKeyInfo
    _, alg_start, alg_end = _der(der, start)  # AlgorithmIdentifier
    _, oid_start, oid_end = _der(der, alg_start)
    if der[oid_start:oid_end] != _RSA_OID:
        raise ValueError(f"not an RSA public key (Entra verifies RS256 only): {public_pem.strip()[:60]!r}...")
    _, bits_start, _ = _der(der, alg_end)  # BIT STRING: one byte of unused bits, then RSAPublicKey
    _, seq_start, _ = _der(der, bits_start + 1)
    _, n_start, n_end = _der(der, seq_start)
    _, e_start, e_end = _der(der, n_end)
    n, e = der[n_start:n_end].lstrip(b"\0"), der[e_start:e_end].lstrip(b"\0")
    return {"use": "sig", "kty": "RSA", "kid": key_id(public_pem), "alg": "RS256", "n": _b64(n), "e": _b64(e)}


def jwks(public_pems: list[str]) -> dict[str, Any]:
    return {"keys": [rsa_jwk(p) for p in public_pems]}


def discovery(issuer: str) -> dict[str, Any]:
    """The minimal discovery document of Azure's walkthrough ("Discovery Document")."""
    return {
        "issuer": issuer,
        "jwks_uri": jwks_uri(issuer),
        "response_types_supported": ["id_token"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["RS256"],
    }


def documents(issuer: str, public_pem: str) -> dict[str, str]:
    """Blob name -> content, what the issuer container holds."""
    return {
        DISCOVERY_PATH: json.dumps(discovery(issuer), indent=2) + "\n",
        JWKS_PATH: json.dumps(jwks([public_pem]), indent=2) + "\n",
    }


def subject(namespace: str, service_account: str) -> str:
    """The ``sub`` of a service account's token, which a federated identity credential must name exactly."""
    return f"system:serviceaccount:{namespace}:{service_account}"


@dataclass(frozen=True)
class ServiceAccountIssuer:
    """The API servers' service-account issuer flags."""

    issuers: tuple[str, ...]
    """The first signs (and is Azure's); the rest are still accepted (kube-apiserver --service-account-issuer:
    "When this flag is specified multiple times, the first is used to generate tokens and all are used to
    determine which issuers are accepted")."""
    jwks_uri: str


def service_account_issuer(public: str, cluster_domain: str) -> ServiceAccountIssuer:
    return ServiceAccountIssuer((public, in_cluster_issuer(cluster_domain)), jwks_uri(public))


def authentication_config(entra: EntraConfig) -> str:
    """The API server's AuthenticationConfiguration (apiserver.config.k8s.io/v1, GA in 1.34; kubernetes.io
    "Authenticating", "Using Authentication Configuration"): Entra's v2.0 tokens for the researchers' app.

    Usernames and groups carry ``entra.prefix`` so RBAC names them unambiguously; the validation rules refuse
    any mapped name in Kubernetes' ``system:`` space, whatever a token says. Client certificates (the
    break-glass admin, the components) and service-account tokens are unaffected.
    """
    doc = {
        "apiVersion": "apiserver.config.k8s.io/v1",
        "kind": "AuthenticationConfiguration",
        "jwt": [
            {
                "issuer": {
                    "url": entra_issuer(entra.tenant_id),
                    "audiences": [entra.client_id],
                    "audienceMatchPolicy": "MatchAny",
                },
                "claimMappings": {
                    "username": {"claim": entra.username_claim, "prefix": entra.prefix},
                    "groups": {"claim": entra.groups_claim, "prefix": entra.prefix},
                },
                "userValidationRules": [
                    {
                        "expression": "!user.username.startsWith('system:')",
                        "message": "usernames from Entra may not be in the system: namespace",
                    },
                    {
                        "expression": "user.groups.all(g, !g.startsWith('system:'))",
                        "message": "groups from Entra may not be in the system: namespace",
                    },
                ],
            }
        ],
    }
    return yaml.safe_dump(doc, sort_keys=False)
