"""The ``cluster.identity`` section of a cluster stack: Entra sign-in, groups, team service accounts."""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from modules.config_model import StrictModel

_GUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def _guid(what: str, value: str) -> str:
    if not _GUID.match(value):
        raise ValueError(f"{value!r} is not a {what}: use the GUID the portal or `az` prints (lowercase)")
    return value


class EntraConfig(StrictModel):
    """The Microsoft Entra ID app registration researchers sign in to (kubelogin)."""

    tenant_id: str = Field(
        description="Directory (tenant) ID: the issuer is https://login.microsoftonline.com/<it>/v2.0."
    )
    client_id: str = Field(
        description="Application (client) ID of the app registration researchers sign in to (kubelogin --client-id): "
        "the audience (aud) of their v2.0 tokens."
    )
    username_claim: str = Field(
        default="oid",
        description="Claim that names the user: oid (the object ID, never reassigned; Entra's advice for "
        "authorization) or upn/email.",
    )
    groups_claim: str = Field(
        default="groups",
        description="Claim holding the user's group object IDs (the app registration's groupMembershipClaims).",
    )
    prefix: str = Field(
        default="entra:",
        description="Prefix of every username and group from Entra, so no token can name a system: user or group.",
    )

    @field_validator("tenant_id", "client_id")
    @classmethod
    def _ids(cls, v: str) -> str:
        return _guid("tenant or application ID", v)

    @field_validator("prefix")
    @classmethod
    def _prefix(cls, v: str) -> str:
        if not v or v.startswith("system:"):
            raise ValueError(f"{v!r}: the prefix must be set and must not start with system: (e.g. entra:)")
        return v


class TeamAccessConfig(StrictModel):
    """One team's people and pods."""

    group: str = Field(description="Entra group (object ID) whose members may run jobs in the team's namespace.")
    service_accounts: list[str] = Field(
        default_factory=lambda: ["training"],
        description="Service accounts of the team's namespace whose pods may use the team's Azure identity "
        "(a federated credential each; Azure allows 20 per identity).",
    )

    @field_validator("group")
    @classmethod
    def _group(cls, v: str) -> str:
        return _guid("group object ID", v)

    @field_validator("service_accounts")
    @classmethod
    def _accounts(cls, v: list[str]) -> list[str]:
        for sa in v:
            if not _DNS_LABEL.match(sa):
                raise ValueError(f"{sa!r} is not a service account name: use lowercase letters, digits and '-'")
        # Federated identity credentials per managed identity: at most 20 (learn.microsoft.com, workload identity
        # federation "Considerations and restrictions").
        if not 1 <= len(v) <= 20:
            raise ValueError(f"{len(v)} service accounts: a team identity takes 1 to 20 federated credentials")
        return v


class IdentityConfig(StrictModel):
    """Researchers sign in with Entra ID; pods reach their team's blob containers with workload identity."""

    entra: EntraConfig
    read_only_group: str | None = Field(
        default=None, description="Entra group (object ID) whose members may read (get, list, watch) the whole cluster."
    )
    teams: dict[str, TeamAccessConfig] = Field(
        default_factory=dict, description="Per team (as named on the GPU pools or under addons.teams): its Entra group."
    )

    @field_validator("read_only_group")
    @classmethod
    def _ro(cls, v: str | None) -> str | None:
        return None if v is None else _guid("group object ID", v)
