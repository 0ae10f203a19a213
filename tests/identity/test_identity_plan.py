"""Workload identity's documents and researchers' sign-in as planned (pure; no Azure, no API server)."""

from __future__ import annotations

import base64
import hashlib
from functools import cache
from typing import Any

import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from modules.bootstrap import pki
from modules.errors import ConfigError
from modules.identity import oidc
from modules.stackplan.config import load_stack, parse_config
from modules.stackplan.prepare import ClusterPrep, prepare_cluster
from tests.bootstrap.certs import issue
from tests.bootstrap.conftest import STACKS


@cache
def _dev() -> ClusterPrep:
    return prepare_cluster("dev", load_stack(STACKS, "dev"), STACKS)


def _b64int(value: str) -> int:
    return int.from_bytes(base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)), "big")


def test_the_service_account_key_is_rsa_and_the_jwks_publishes_it() -> None:
    """Entra verifies RSA only (AADSTS5002738 for ES256): the signing key is RSA, and the JWKS carries its modulus,
    exponent and the kid kube-apiserver puts in each token (sha256 of the PKIX DER)."""
    prep = _dev()
    pems = issue(pki.pki_spec(prep.bootstrap))
    public = pems[f"pub:{pki.SERVICE_ACCOUNT_RSA}"]
    key = serialization.load_pem_public_key(public.encode())
    assert isinstance(key, rsa.RSAPublicKey)
    (jwk,) = oidc.jwks([public])["keys"]
    numbers = key.public_numbers()
    assert (_b64int(jwk["n"]), _b64int(jwk["e"])) == (numbers.n, numbers.e)
    der = key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    assert jwk["kid"] == base64.urlsafe_b64encode(hashlib.sha256(der).digest()).rstrip(b"=").decode()
    assert (jwk["alg"], jwk["kty"], jwk["use"]) == ("RS256", "RSA", "sig")
    # The legacy ECDSA key stays a verification key of the API servers (tokens issued before), never published.
    with pytest.raises(ValueError, match="not an RSA public key"):
        oidc.rsa_jwk(pems[f"pub:{pki.SERVICE_ACCOUNT}"])


def test_the_issuer_documents_agree_with_the_api_server_flags() -> None:
    prep = _dev()
    identity, access = prep.bootstrap.identity, prep.addons.access
    assert identity is not None and access is not None
    public = identity.service_account_issuers[0]
    assert public == access.issuer
    assert public.startswith("https://agkoidcdev") and public.endswith(".blob.core.windows.net/oidc/")
    assert identity.service_account_issuers[1] == "https://kubernetes.default.svc.cluster.local"
    docs = oidc.documents(public, issue(pki.pki_spec(prep.bootstrap))[f"pub:{pki.SERVICE_ACCOUNT_RSA}"])
    discovery = yaml.safe_load(docs[oidc.DISCOVERY_PATH])
    assert discovery["issuer"] == public
    assert discovery["jwks_uri"] == identity.jwks_uri == public + "openid/v1/jwks"
    # Account names: 3-24 lowercase letters and digits.
    account = public.removeprefix("https://").split(".", 1)[0]
    assert 3 <= len(account) <= 24 and account.isalnum() and account.islower()


def test_authentication_config_maps_entra_claims_with_a_prefix() -> None:
    prep = _dev()
    assert prep.bootstrap.identity is not None
    doc: dict[str, Any] = yaml.safe_load(prep.bootstrap.identity.authentication_config)
    (jwt,) = doc["jwt"]
    config = load_stack(STACKS, "dev").cluster
    assert config is not None and config.identity is not None
    entra = config.identity.entra
    assert jwt["issuer"]["url"] == f"https://login.microsoftonline.com/{entra.tenant_id}/v2.0"
    assert jwt["issuer"]["audiences"] == [entra.client_id]
    assert jwt["claimMappings"]["username"] == {"claim": "oid", "prefix": "entra:"}
    assert jwt["claimMappings"]["groups"] == {"claim": "groups", "prefix": "entra:"}


def _dev_with(identity: dict[str, Any]) -> ConfigError | None:
    raw = yaml.safe_load((STACKS / "Pulumi.dev.yaml").read_text())
    raw["config"]["azure-gpu-k8s:cluster"]["identity"] = identity
    try:
        prepare_cluster("dev", parse_config(raw["config"]), STACKS)
    except ConfigError as err:
        return err
    return None


def test_a_group_for_a_team_that_does_not_exist_is_one_line_naming_the_key() -> None:
    entra = {"tenant_id": "5f1d0c2e-8b7a-4e3f-9c61-2a4b6d8e0f13", "client_id": "9c3e7a51-0d2f-4b6e-8a19-7e5c3b1d4f20"}
    err = _dev_with({"entra": entra, "teams": {"reserch": {"group": "4e8a1c37-6b2d-4f90-a5e3-1d7c9b0f2a68"}}})
    assert err is not None
    assert "cluster.identity.teams.reserch" in str(err) and "research" in str(err)
    assert "\n" not in str(err)
    bad = _dev_with({"entra": {**entra, "tenant_id": "contoso.onmicrosoft.com"}})
    assert bad is not None and "contoso.onmicrosoft.com" in str(bad)
