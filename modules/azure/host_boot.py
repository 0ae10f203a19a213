"""How every machine of a cluster gets its customData: its bundle in a Key Vault secret only its own identity
reads, and the facts known only at deploy time (the pools' bootstrap token secrets, the alert receivers'
secrets, etcd's storage account).

A pool also gets its bootstrap token secret (readable by the pool alone; the API servers write it:
``grant_token_writers``); an API server's bundle names every pool's (``token_secrets``: pool -> secret name).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pulumi
from pulumi_azure_native import managedidentity

from modules.azure.customdata import bundle_parts, custom_data
from modules.azure.keyvault import ClusterVault
from modules.azure.pki import ClusterPki
from modules.azure.vm import IdentityBound
from modules.bootstrap import alerting, node_tokens
from modules.bootstrap.context import BootstrapContext
from modules.bootstrap.host import alert_secrets
from modules.bootstrap.host.node_token import PLACEHOLDER
from modules.bootstrap.roles import POOL_ROLES, Role
from modules.bootstrap.roles.prometheus import prometheus_secrets


@dataclass(frozen=True)
class HostBoot:
    """What every host's and pool's customData is made from (passed, never global)."""

    bootstrap: BootstrapContext
    pki: ClusterPki
    keys: ClusterVault
    token_secrets: pulumi.Output[dict[str, str]]
    """Pool -> the name of its bootstrap token secret, which the API servers' bundles name (known once the
    pools' identities exist: a deferred output the composition resolves after the pools)."""

    def __call__(self, role: Role, name: str, facts: Mapping[str, pulumi.Input[str]] | None = None) -> IdentityBound:
        """customData of fixed host (or pool) ``name``, made once its identity exists: its bundle goes into its
        own secret, readable by that identity alone, and the machine waits for the grant and for the vault's
        private endpoint and DNS, so its first fetch can succeed (it retries anyway). ``facts``: the bundle's
        deploy-time values (node_files.FactFile)."""
        pool = role in POOL_ROLES
        key = f"pool-{name}" if pool else name

        def bind(identity: managedidentity.UserAssignedIdentity) -> pulumi.Output[str]:
            given = {**(facts or {}), **self._role_facts(role, name, identity)}
            made = self.keys.reader_secret(
                key, bundle_parts(self.bootstrap, self.pki, role, name, given), identity.principal_id
            )
            return custom_data(
                self.bootstrap,
                role,
                name,
                vault_uri=self.keys.uri,
                secret_name=made.name,
                client_id=identity.client_id,
                after=[*(g.id for g in made.grants), *(r.urn for r in self.keys.ready)],
            )

        return IdentityBound(f"{role} {name}", bind)

    def _role_facts(
        self, role: Role, name: str, identity: managedidentity.UserAssignedIdentity
    ) -> dict[str, pulumi.Input[str]]:
        if role in POOL_ROLES:
            token = self.keys.written_secret(node_tokens.token_secret_key(name), PLACEHOLDER, identity.principal_id)
            return {node_tokens.NODE_FACT: token.name.apply(node_tokens.node_config)}
        if role == "apiserver":
            bootstrap = self.bootstrap
            return {
                node_tokens.ISSUER_FACT: self.token_secrets.apply(lambda m: node_tokens.issuer_config(bootstrap, m))
            }
        if role == "prometheus" and prometheus_secrets(self.bootstrap):
            # One copy of each receiver secret per host, readable by it alone; the operator sets the values.
            copies = {
                s: self.keys.written_secret(
                    alerting.vault_key(name, s), alert_secrets.PLACEHOLDER, identity.principal_id
                ).name
                for s in prometheus_secrets(self.bootstrap)
            }
            return {alerting.ALERT_FACT: pulumi.Output.all(**copies).apply(alerting.settings_json)}
        return {}


def grant_token_writers(
    keys: ClusterVault, pools: Mapping[str, object], apiservers: Mapping[str, pulumi.Output[str]]
) -> None:
    """Every API server (its identity's principal id) may set every pool's bootstrap token secret."""
    for pool in pools:
        for host, principal in apiservers.items():
            keys.grant_writer(node_tokens.token_secret_key(pool), host, principal)
