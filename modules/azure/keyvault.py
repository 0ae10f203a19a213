"""The cluster's Key Vault: where every host's bundle (its files, certificates and keys) lives instead of customData.

Azure refuses to change a VM's customData after creation (PropertyChangeNotAllowed; the provider does
not replace the VM: pulumi-azure-native#577), and customData is readable by anyone who can read the
VM model. So customData stays a small, stable bootstrap, and what changes lives here: one secret per
fixed host (or pool) holding its bundle, whose new versions the host picks up on its agk-sync.timer
(modules/bootstrap/host/sync.py). RBAC authorization (set explicitly: the default changed with API
2026-02-01), no public network access (the hosts read through a private endpoint), and each host's
identity may read only its own secret (Key Vault Secrets User scoped to that secret:
key-vault/general/rbac-guide). Secrets are written through ARM (``Microsoft.KeyVault/vaults/secrets``,
which Azure lets through the vault's firewall: MicrosoftDocs/azure-docs#68668), so `pulumi up` needs no
data-plane access to the vault.

Deleting a secret is another matter: pulumi-azure-native deletes ``keyvault:Secret`` through the data
plane (provider/pkg/resources/customresources/custom_keyvault.go: "DELETE is implemented via the
KeyVault 'data plane' API, because it isn't available via ARM"), which this vault refuses from outside
its network. Every secret is therefore ``retain_on_delete``: removing a host or pool (or `pulumi destroy`)
forgets its secret instead of failing, and the secret stays in the vault, readable by nobody once its
role assignment (an ARM resource) is gone. A secret's name carries a digest of its reader's principal
id, so a host or pool added again under an old name (a new identity) gets a new secret and never
collides with the one left behind (the provider refuses to create a resource that already exists).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
from pulumi_azure_native import authorization, keyvault

from modules.azure.context import DeployContext
from modules.azure.dns import private_link
from modules.azure.rbac import grant

VAULT_ZONE = "privatelink.vaultcore.azure.net"
SECRETS_USER = ("Key Vault Secrets User", "4633458b-17de-408a-b874-0445c86b69e6")
"""Built-in role: read secret contents (RBAC vaults only): azure/role-based-access-control/built-in-roles."""
SECRETS_OFFICER = ("Key Vault Secrets Officer", "b86a8fe4-44ce-4948-aee5-eccb2c155cd7")
"""Built-in role: "Perform any action on the secrets of a key vault, except manage permissions" (RBAC
vaults only; key-vault/general/rbac-guide). The narrowest built-in role that may set a secret (Key
Vault Secrets User only reads; Key Vault Administrator acts on keys and certificates too). Scoped to one secret it acts on that secret alone
("Azure RBAC for key vault also allows users to have separate permissions on individual keys, secrets,
and certificates", rbac-guide, which names secrets "shared between multiple applications" as the case
for such an assignment: here the API servers write what a pool's nodes read)."""


def vault_name(cluster: str, subscription_id: str, location: str, stack: str) -> str:
    """3-24 letters, digits and single hyphens, starting with a letter: unique across Azure, so derived from
    the subscription (like the storage account), stable for one stack."""
    digest = hashlib.sha256(f"vault/{subscription_id}/{location}/{stack}/{cluster}".encode()).hexdigest()[:8]
    base = "".join(c for c in cluster if c.isalnum())[:12]
    return f"agk{base}-{digest}"


def secret_name(key: str, principal_id: str) -> str:
    """``<key>-<8 hex>``: 1-127 letters, digits and '-' (Key Vault object names), never reused by a
    later identity under the same key."""
    return f"{key}-{hashlib.sha256(principal_id.encode()).hexdigest()[:8]}"


@dataclass(frozen=True)
class ReaderSecret:
    """One host's (or pool's) bundle secrets, ``<name>``, ``<name>-2``, ..., and the grants that let its
    identity read each of them."""

    secrets: tuple[keyvault.Secret, ...]
    name: pulumi.Output[str]
    """The first secret's name (the host finds the others from it)."""
    grants: tuple[authorization.RoleAssignment, ...]


@dataclass(frozen=True)
class ClusterVaultArgs:
    ctx: DeployContext
    """Resource group, region, tags."""
    vault_name: pulumi.Input[str]
    """Globally unique name (``vault_name``)."""
    tenant_id: pulumi.Input[str]
    """The tenant whose identities authenticate to the vault."""
    endpoint_subnet_id: pulumi.Input[str]
    """Subnet of the private endpoint."""
    vnet_id: pulumi.Input[str]
    """The spoke VNet, linked to the hub's privatelink.vaultcore.azure.net zone."""
    dns_zone_id: pulumi.Input[str]
    """The hub's privatelink.vaultcore.azure.net zone."""
    dns_resource_group_name: pulumi.Input[str]
    """The hub's resource group."""
    purge_protection: bool = True
    """Deleted secrets and the vault itself stay recoverable, and unpurgeable, for the retention period.
    Irreversible once on ("Enabling this functionality is irreversible - that is, the property does not
    accept false as its value": KeyVaultProperties.EnablePurgeProtection), so off is sent as unset. Off
    suits a throwaway stack: after `pulumi destroy`, `az keyvault purge` frees the name at once."""
    soft_delete_retention_days: int = 90
    """7-90 days a deleted vault keeps its name (and, with purge protection, cannot be purged)."""
    depends_on: Sequence[pulumi.Resource] = ()
    """Wait for these (the VNet's last subnet) before creating the private endpoint and DNS link."""


class ClusterVault(pulumi.ComponentResource):
    """The vault, its private endpoint and DNS; hosts add their secrets with ``reader_secret`` once their
    identities exist (the secrets and grants are children of this component)."""

    id: pulumi.Output[str]
    name: pulumi.Output[str]
    uri: pulumi.Output[str]
    ready: tuple[pulumi.Resource, ...]
    """The private endpoint, its DNS zone group and the VNet link: a host's first fetch needs all three."""
    secrets: dict[str, ReaderSecret]
    """Key (host, ``pool-<pool>``) to its secret, as added so far."""

    def __init__(self, name: str, args: ClusterVaultArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("agk:security:ClusterVault", name, None, opts)
        self._name, self._ctx = name, args.ctx
        ctx = args.ctx
        vault = keyvault.Vault(
            f"{name}-vault",
            vault_name=args.vault_name,
            resource_group_name=ctx.resource_group_name,
            location=ctx.location,
            properties=keyvault.VaultPropertiesArgs(
                tenant_id=args.tenant_id,
                sku=keyvault.SkuArgs(family="A", name=keyvault.SkuName.STANDARD),
                enable_rbac_authorization=True,
                public_network_access="Disabled",
                network_acls=keyvault.NetworkRuleSetArgs(default_action="Deny", bypass="None"),
                enable_soft_delete=True,
                soft_delete_retention_in_days=args.soft_delete_retention_days,
                enable_purge_protection=True if args.purge_protection else None,
            ),
            tags=ctx.tags_for("security"),
            opts=pulumi.ResourceOptions(parent=self),
        )
        endpoint, group, link = private_link(
            name,
            name=f"{name}-vault",
            group="vault",
            target_id=vault.id,
            zone_name=VAULT_ZONE,
            zone_id=args.dns_zone_id,
            subnet_id=args.endpoint_subnet_id,
            vnet_id=args.vnet_id,
            dns_resource_group_name=args.dns_resource_group_name,
            ctx=ctx,
            role="security",
            parent=self,
            depends_on=args.depends_on,
        )
        self._vault = vault
        self.ready = (endpoint, group, link)
        self.secrets = {}
        self.id = vault.id
        self.name = vault.name
        self.uri = pulumi.Output.concat("https://", vault.name, ".vault.azure.net/")
        self.register_outputs({"id": self.id, "name": self.name, "uri": self.uri})

    def reader_secret(
        self, key: str, values: Sequence[pulumi.Input[str]], principal_id: pulumi.Input[str]
    ) -> ReaderSecret:
        """Secrets ``<key>-<digest>``, ``<key>-<digest>-2``, ... holding ``values``, readable by
        ``principal_id`` alone (a grant per secret: Key Vault Secrets User scoped to it)."""
        if key in self.secrets:
            raise ValueError(f"secret {key!r} added twice to {self._name}: one set of secrets per host or pool")
        ctx = self._ctx
        head = pulumi.Output.from_input(principal_id).apply(lambda p: secret_name(key, p))
        secrets, grants = [], []
        for index, value in enumerate(values, start=1):
            suffix = "" if index == 1 else f"-{index}"
            secret = keyvault.Secret(
                f"{self._name}-{key}{suffix}",
                secret_name=pulumi.Output.concat(head, suffix),
                vault_name=self._vault.name,
                resource_group_name=ctx.resource_group_name,
                properties=keyvault.SecretPropertiesArgs(value=pulumi.Output.secret(value)),
                tags=ctx.tags_for("security"),
                opts=pulumi.ResourceOptions(parent=self, retain_on_delete=True),
            )
            grants.append(
                grant(
                    f"{self._name}-{key}{suffix}-reader",
                    scope=secret.id,
                    principal_id=principal_id,
                    principal_type="ServicePrincipal",
                    role=SECRETS_USER,
                    resource_group_id=ctx.resource_group_id,
                    parent=self,
                )
            )
            secrets.append(secret)
        made = ReaderSecret(tuple(secrets), secrets[0].name, tuple(grants))
        self.secrets[key] = made
        return made

    def written_secret(self, key: str, placeholder: str, reader: pulumi.Input[str]) -> ReaderSecret:
        """Secret ``<key>-<digest of reader>`` whose value a host program keeps current (a pool's bootstrap
        token, written by the API servers' issuer), readable by ``reader`` alone; ``grant_writer`` lets the
        writers set it.

        Created holding ``placeholder``, which its writer knows is no value of its own. Pulumi must never
        send a value again: the provider's update is a PUT of the whole secret (a new version), so a
        later `pulumi up` would put the placeholder back over the current token and every node that
        synced before the next issuer run would have no token. Hence ``ignore_changes`` on the value and
        on the tags (a tag change is an update, and an update sends the value too); changing the secret
        means a new name, which a new reader identity brings anyway."""
        if key in self.secrets:
            raise ValueError(f"secret {key!r} added twice to {self._name}: one secret per pool")
        ctx = self._ctx
        secret = keyvault.Secret(
            f"{self._name}-{key}",
            secret_name=pulumi.Output.from_input(reader).apply(lambda p: secret_name(key, p)),
            vault_name=self._vault.name,
            resource_group_name=ctx.resource_group_name,
            properties=keyvault.SecretPropertiesArgs(value=placeholder, content_type="text/plain"),
            tags=ctx.tags_for("security"),
            opts=pulumi.ResourceOptions(parent=self, retain_on_delete=True, ignore_changes=["properties", "tags"]),
        )
        read = grant(
            f"{self._name}-{key}-reader",
            scope=secret.id,
            principal_id=reader,
            principal_type="ServicePrincipal",
            role=SECRETS_USER,
            resource_group_id=ctx.resource_group_id,
            parent=self,
        )
        made = ReaderSecret((secret,), secret.name, (read,))
        self.secrets[key] = made
        return made

    def grant_writer(self, key: str, writer: str, principal_id: pulumi.Input[str]) -> authorization.RoleAssignment:
        """Let ``writer`` (a host) set secret ``key`` (added with ``written_secret``), and only that secret."""
        secret = self.secrets[key].secrets[0]
        return grant(
            f"{self._name}-{key}-writer-{writer}",
            scope=secret.id,
            principal_id=principal_id,
            principal_type="ServicePrincipal",
            role=SECRETS_OFFICER,
            resource_group_id=self._ctx.resource_group_id,
            parent=self,
        )
