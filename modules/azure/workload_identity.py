"""Workload identity for the self-managed cluster: the public service-account issuer and one Azure identity
per team, federated with the team's service accounts (azure.github.io/azure-workload-identity, "Self-Managed
Clusters"; learn.microsoft.com "Workload identity federation").

- The issuer: a storage account of its own (tag ``agk-role: oidc-issuer``), reachable from the internet because
  Entra fetches the documents from there, anonymous read of the blobs in one container (``oidc``; no listing),
  holding only the discovery document and the JWKS that modules/identity/oidc.py renders from the cluster's
  service-account public key. Shared keys stay allowed on this account only: azure-native's Blob resource
  uploads with the account key and fails where shared keys are off (pulumi/pulumi-azure-native#2015, open).
- Per team: a user-assigned identity and, per service account of the team, a federated identity credential
  (issuer, subject ``system:serviceaccount:<team>:<sa>``, audience ``api://AzureADTokenExchange``). The identity
  gets Storage Blob Data Contributor on the team's own containers only (the cluster plan's storage grants,
  modules/stackplan/storage_access.py, go to ClusterStorage, which scopes each to one container): another
  team's token exchanges into an identity that has no role on them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
from pulumi_azure_native import managedidentity, storage

from modules.azure.context import DeployContext
from modules.identity import oidc
from modules.identity.plan import TeamAccess

ROLE = "oidc-issuer"
"""The issuer account's ``agk-role`` tag: the policy pack lets this account, and no other, serve blobs publicly."""


@dataclass(frozen=True)
class WorkloadIdentityArgs:
    ctx: DeployContext
    """Resource group, region, tags."""
    account_name: str
    """The issuer's storage account (oidc.issuer_account_name: known before deploy, the API servers' flags name it)."""
    issuer: str
    """The service-account issuer URL (oidc.issuer_url of the account): what the credentials trust."""
    signing_public_key: pulumi.Input[str]
    """The service-account signing key's public half (PKIX PEM, RSA): the JWKS is made from it."""
    teams: Sequence[TeamAccess]
    """Each team's service accounts (its namespace is the team's name)."""


class WorkloadIdentity(pulumi.ComponentResource):
    issuer: pulumi.Output[str]
    client_ids: pulumi.Output[dict[str, str]]
    principal_ids: dict[str, pulumi.Output[str]]

    def __init__(self, name: str, args: WorkloadIdentityArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("agk:security:WorkloadIdentity", name, None, opts)
        ctx, child = args.ctx, pulumi.ResourceOptions(parent=self)
        account = storage.StorageAccount(
            f"{name}-issuer",
            account_name=args.account_name,
            resource_group_name=ctx.resource_group_name,
            location=ctx.location,
            kind=storage.Kind.STORAGE_V2,
            sku=storage.SkuArgs(name=storage.SkuName.STANDARD_ZRS),
            enable_https_traffic_only=True,
            minimum_tls_version=storage.MinimumTlsVersion.TLS1_2,
            allow_blob_public_access=True,
            allow_shared_key_access=True,
            public_network_access=storage.PublicNetworkAccess.ENABLED,
            tags=ctx.tags_for(ROLE),
            opts=child,
        )
        container = storage.BlobContainer(
            f"{name}-issuer-{oidc.ISSUER_CONTAINER}",
            container_name=oidc.ISSUER_CONTAINER,
            account_name=account.name,
            resource_group_name=ctx.resource_group_name,
            public_access=storage.PublicAccess.BLOB,
            opts=child,
        )
        documents = pulumi.Output.from_input(args.signing_public_key).apply(
            lambda pem: oidc.documents(args.issuer, pem)
        )

        def asset(blob: str) -> pulumi.Output[pulumi.Asset]:
            return documents.apply(lambda docs: pulumi.StringAsset(docs[blob]))

        for blob, what in ((oidc.DISCOVERY_PATH, "discovery"), (oidc.JWKS_PATH, "jwks")):
            storage.Blob(
                f"{name}-issuer-{what}",
                blob_name=blob,
                account_name=account.name,
                container_name=container.name,
                resource_group_name=ctx.resource_group_name,
                type=storage.BlobType.BLOCK,
                content_type="application/json",
                source=asset(blob),
                opts=child,
            )
        client_ids: dict[str, pulumi.Output[str]] = {}
        self.principal_ids = {}
        for team in args.teams:
            identity = managedidentity.UserAssignedIdentity(
                f"{name}-{team.team}",
                resource_name_=f"{name}-{team.team}",
                resource_group_name=ctx.resource_group_name,
                location=ctx.location,
                tags=ctx.tags_for("security", **{"agk-team": team.team}),
                opts=child,
            )
            # One at a time per identity: Azure refuses concurrent federated credential writes under one
            # user-assigned identity with a 409 (learn.microsoft.com/entra/workload-id/
            # workload-identity-federation-considerations, "Concurrent updates aren't supported").
            previous: list[pulumi.Resource] = []
            for sa in team.service_accounts:
                credential = managedidentity.FederatedIdentityCredential(
                    f"{name}-{team.team}-{sa}",
                    federated_identity_credential_resource_name=f"{team.team}-{sa}",
                    resource_name_=identity.name,
                    resource_group_name=ctx.resource_group_name,
                    issuer=args.issuer,
                    subject=oidc.subject(team.team, sa),
                    audiences=[oidc.AUDIENCE],
                    opts=pulumi.ResourceOptions(parent=identity, depends_on=previous),
                )
                previous = [credential]
            client_ids[team.team] = identity.client_id
            self.principal_ids[team.team] = identity.principal_id
        self.issuer = pulumi.Output.from_input(args.issuer)
        self.client_ids = pulumi.Output.all(**client_ids).apply(dict) if client_ids else pulumi.Output.from_input({})
        self.register_outputs({"issuer": self.issuer, "client_ids": self.client_ids})
