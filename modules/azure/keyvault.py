"""The cluster's Key Vault: where every host's certificates, keys and files live instead of customData.

Azure refuses to change a VM's customData after creation (PropertyChangeNotAllowed; the provider does
not replace the VM: pulumi-azure-native#577), and customData is readable by anyone who can read the
VM model. So customData stays a small, stable bootstrap, and what rotates lives here: one secret per
host (or pool), whose new versions a host picks up on its own timer. RBAC authorization (set
explicitly: the default changed with API 2026-02-01), no public network access (the hosts read
through a private endpoint), and each host's identity may read only its own secret (Key Vault Secrets
User scoped to that secret: key-vault/general/rbac-guide). Secrets are written through ARM
(``Microsoft.KeyVault/vaults/secrets``), so `pulumi up` needs no data-plane access to the vault.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pulumi
from pulumi_azure_native import keyvault, network

from modules.azure.context import DeployContext
from modules.azure.dns import link_vnet
from modules.azure.rbac import grant

VAULT_ZONE = "privatelink.vaultcore.azure.net"
SECRETS_USER = ("Key Vault Secrets User", "4633458b-17de-408a-b874-0445c86b69e6")
"""Built-in role: read secret contents (RBAC vaults only): azure/role-based-access-control/built-in-roles."""
SECRETS_OFFICER = ("Key Vault Secrets Officer", "b86a8fe4-44ce-4948-aee5-eccb2c155cd7")


def vault_name(cluster: str, subscription_id: str, location: str, stack: str) -> str:
    """3-24 letters, digits and single hyphens, starting with a letter: unique across Azure, so derived from
    the subscription (like the storage account), stable for one stack."""
    digest = hashlib.sha256(f"vault/{subscription_id}/{location}/{stack}/{cluster}".encode()).hexdigest()[:8]
    base = "".join(c for c in cluster if c.isalnum())[:12]
    return f"agk{base}-{digest}"


@dataclass(frozen=True)
class VaultSecret:
    """One secret and the identities that may read it."""

    name: str
    """Secret name (1-127 letters, digits and '-')."""
    value: pulumi.Input[str]
    """Its content (a Pulumi secret)."""
    readers: Mapping[str, pulumi.Input[str]]
    """Stable key (host or pool) to the principal id of a managed identity that reads it."""


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
    secrets: Sequence[VaultSecret]
    """Every secret, each with its readers."""
    purge_protection: bool = True
    """Deleted secrets stay recoverable for the retention period (irreversible once on)."""
    depends_on: Sequence[pulumi.Resource] = ()
    """Wait for these (the VNet's last subnet) before creating the private endpoint and DNS link."""


class ClusterVault(pulumi.ComponentResource):
    id: pulumi.Output[str]
    name: pulumi.Output[str]
    uri: pulumi.Output[str]
    secrets: pulumi.Output[dict[str, str]]
    """Secret name to its ARM id."""

    def __init__(self, name: str, args: ClusterVaultArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("agk:security:ClusterVault", name, None, opts)
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
                soft_delete_retention_in_days=90,
                enable_purge_protection=True if args.purge_protection else None,
            ),
            tags=ctx.tags_for("security"),
            opts=pulumi.ResourceOptions(parent=self),
        )
        endpoint = network.PrivateEndpoint(
            f"{name}-endpoint",
            private_endpoint_name=f"{name}-vault",
            resource_group_name=ctx.resource_group_name,
            location=ctx.location,
            subnet=network.SubnetArgs(id=args.endpoint_subnet_id),
            private_link_service_connections=[
                network.PrivateLinkServiceConnectionArgs(
                    name="vault", private_link_service_id=vault.id, group_ids=["vault"]
                )
            ],
            tags=ctx.tags_for("security"),
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on)),
        )
        link_vnet(
            f"{name}-dns-link",
            link_name=f"{name}-vault",
            zone_name=VAULT_ZONE,
            resource_group_name=args.dns_resource_group_name,
            vnet_id=args.vnet_id,
            tags=ctx.tags_for("security"),
            parent=self,
            depends_on=args.depends_on,
        )
        network.PrivateDnsZoneGroup(
            f"{name}-dns-group",
            private_dns_zone_group_name="vault",
            private_endpoint_name=endpoint.name,
            resource_group_name=ctx.resource_group_name,
            private_dns_zone_configs=[
                network.PrivateDnsZoneConfigArgs(name="vault", private_dns_zone_id=args.dns_zone_id)
            ],
            opts=pulumi.ResourceOptions(parent=self),
        )
        created: dict[str, keyvault.Secret] = {}
        for secret in args.secrets:
            created[secret.name] = keyvault.Secret(
                f"{name}-{secret.name}",
                secret_name=secret.name,
                vault_name=vault.name,
                resource_group_name=ctx.resource_group_name,
                properties=keyvault.SecretPropertiesArgs(value=pulumi.Output.secret(secret.value)),
                tags=ctx.tags_for("security"),
                opts=pulumi.ResourceOptions(parent=self),
            )
            for key, principal in secret.readers.items():
                grant(
                    f"{name}-{secret.name}-{key}-reader",
                    scope=created[secret.name].id,
                    principal_id=principal,
                    principal_type="ServicePrincipal",
                    role=SECRETS_USER,
                    resource_group_id=ctx.resource_group_id,
                    parent=self,
                )
        self.id = vault.id
        self.name = vault.name
        self.uri = pulumi.Output.concat("https://", vault.name, ".vault.azure.net/")
        self.secrets = pulumi.Output.all(**{k: v.id for k, v in created.items()}).apply(dict)
        self.register_outputs({"id": self.id, "name": self.name, "uri": self.uri, "secrets": self.secrets})
