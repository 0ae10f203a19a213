"""The dev plan wires the pools' bootstrap tokens: no pool certificate anywhere, one token secret per pool
holding the issuer's placeholder, read by the pool alone and written by the API servers alone, and the
bundles that name it (the API servers' issuer configuration, each pool's token settings)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agk.plan import wire
from agk.plan.diff import resources_of
from modules.azure.keyvault import SECRETS_OFFICER, SECRETS_USER
from modules.bootstrap import node_tokens
from modules.bootstrap.host import bundle as host_bundle
from modules.bootstrap.host import node_token
from modules.bootstrap.host.bootstrap_tokens import DEFAULT_CONFIG, IssuerConfig
from modules.bootstrap.layout import PATHS

from .changed_stacks import export, stack_folder

POOLS = ("a100", "h100", "system")
APISERVERS = ("dev-apiserver-0", "dev-apiserver-1", "dev-apiserver-2")


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return export(stack_folder(tmp_path_factory.mktemp("dev")))


def _by_name(state: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {r["urn"].rsplit("::", 1)[1]: r for r in resources_of(state) if r["type"] == kind}


def _bundle(state: dict[str, Any], key: str) -> dict[str, str]:
    """Path -> content of the bundle in host (or pool) ``key``'s secrets."""
    secrets = _by_name(state, "azure-native:keyvault:Secret")
    values = {name: wire.plain(r["inputs"]["properties"]["value"]) for name, r in secrets.items()}
    doc = host_bundle.decode(host_bundle.join(values.__getitem__, f"dev-keys-{key}"))
    return {f["path"]: f["content"] for f in doc["files"]}


def test_no_pool_bootstrap_certificate_or_key_exists(state: dict[str, Any]) -> None:
    tls = [r for r in resources_of(state) if r["type"].startswith("tls:")]
    assert tls and not [r["urn"] for r in tls if "kubelet-bootstrap" in r["urn"]]
    for pool in POOLS:
        files = _bundle(state, f"pool-{pool}")
        keys = sorted(p for p in files if p.endswith(".key"))
        # The only private key a pool node receives is kube-proxy's client key.
        assert keys == [f"{PATHS.pki}/kube-proxy.key"], (pool, keys)
        assert not [p for p in files if "bootstrap" in p and p.startswith(PATHS.pki)]


def test_each_pool_has_a_token_secret_its_identity_reads_and_the_api_servers_write(state: dict[str, Any]) -> None:
    secrets = _by_name(state, "azure-native:keyvault:Secret")
    grants = _by_name(state, "azure-native:authorization:RoleAssignment")
    identities = _by_name(state, "azure-native:managedidentity:UserAssignedIdentity")
    apiserver_principals = {h: identities[f"{h}-identity"]["outputs"]["principalId"] for h in APISERVERS}
    tokens = {n: r for n, r in secrets.items() if n.endswith("-bootstrap-token")}
    assert sorted(tokens) == [f"dev-keys-pool-{p}-bootstrap-token" for p in POOLS]
    for pool in POOLS:
        secret = tokens[f"dev-keys-pool-{pool}-bootstrap-token"]
        assert wire.plain(secret["inputs"]["properties"]["value"]) == node_token.PLACEHOLDER
        assert not node_token.TOKEN_PATTERN.match(node_token.PLACEHOLDER)
        assert secret["inputs"]["secretName"].startswith(f"{node_tokens.token_secret_key(pool)}-")
        on_it = {n: g["inputs"] for n, g in grants.items() if g["inputs"]["scope"] == secret["id"]}
        pool_principal = identities[f"{pool}-identity" if pool != "system" else "dev-system-identity"]["outputs"][
            "principalId"
        ]
        expected = {(pool_principal, SECRETS_USER[1])} | {
            (p, SECRETS_OFFICER[1]) for p in apiserver_principals.values()
        }
        assert {(g["principalId"], g["roleDefinitionId"].rsplit("/", 1)[1]) for g in on_it.values()} == expected
        # Each grant is scoped to that one secret, never the vault.
        assert all(g["scope"].endswith(f"/secrets/{secret['inputs']['secretName']}") for g in on_it.values())


def test_the_bundles_name_the_token_secrets_the_stack_creates(state: dict[str, Any]) -> None:
    secrets = _by_name(state, "azure-native:keyvault:Secret")
    names = {p: secrets[f"dev-keys-pool-{p}-bootstrap-token"]["inputs"]["secretName"] for p in POOLS}
    for host in APISERVERS:
        files = _bundle(state, host)
        config = IssuerConfig.from_json(files[DEFAULT_CONFIG], vault_url="https://v/", client_id="c")
        assert dict(config.pools) == names
        assert config.cert_file in files and config.key_file in files
        assert f"{PATHS.unit(node_tokens.ISSUER_TIMER)}" in files
        assert "/opt/agk/lib/bootstrap_tokens.py" in files
    for pool in POOLS:
        files = _bundle(state, f"pool-{pool}")
        settings = json.loads(files[node_token.CONFIG])
        assert settings == {"secret": names[pool], "file": node_tokens.TOKEN_FILE}
        kubeconfig = files[PATHS.bootstrap_kubeconfig]
        assert f"tokenFile: {node_tokens.TOKEN_FILE}" in kubeconfig
        assert "client-key" not in kubeconfig and "token:" not in kubeconfig
