"""``cluster.identity`` to what the API servers, the add-ons and Azure are built from (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from modules.bootstrap.context import ApiserverIdentity
from modules.identity import oidc
from modules.identity.config import IdentityConfig

PLACEHOLDER_CLIENT_ID = "ffffffff-ffff-ffff-ffff-ffffffffffff"
"""A team identity's client id until the cluster stack has created it (the add-ons stack reads it back)."""
CONTAINERS = ("datasets", "checkpoints")
"""Each team's own blob containers, ``<team>-<kind>``: its identity may read and write these and no other."""


def workload_identity_component(cluster: str) -> str:
    """The WorkloadIdentity component's name; each team's identity is ``<it>-<team>`` (identity_name)."""
    return f"{cluster}-workload-identity"


def identity_name(cluster: str, team: str) -> str:
    """The team's user-assigned identity, as Azure names it."""
    return f"{workload_identity_component(cluster)}-{team}"


def team_containers(team: str) -> tuple[str, ...]:
    return tuple(f"{team}-{kind}" for kind in CONTAINERS)


@dataclass(frozen=True)
class TeamAccess:
    """One team's people (an Entra group) and pods (service accounts federated with its Azure identity)."""

    team: str
    group: str
    """The Entra group's object ID, as tokens carry it (RBAC names it with the prefix: ``AccessSpec.group``)."""
    service_accounts: tuple[str, ...]
    client_id: str = PLACEHOLDER_CLIENT_ID
    """The team identity's client id (``azure.workload.identity/client-id`` on its service accounts)."""

    @property
    def containers(self) -> tuple[str, ...]:
        return team_containers(self.team)


@dataclass(frozen=True)
class AccessSpec:
    """What the add-ons build people's and pods' access from."""

    prefix: str
    """The Entra prefix of usernames and groups (AuthenticationConfiguration's claim mappings)."""
    tenant_id: str
    issuer: str
    """The service-account issuer Azure trusts (the federated credentials name it)."""
    read_only_group: str | None
    teams: tuple[TeamAccess, ...]

    def group(self, object_id: str) -> str:
        """A group as the API server names it after the claim mapping."""
        return self.prefix + object_id

    def team(self, name: str) -> TeamAccess | None:
        return next((t for t in self.teams if t.team == name), None)

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> AccessSpec:
        return cls(
            prefix=raw["prefix"],
            tenant_id=raw["tenant_id"],
            issuer=raw["issuer"],
            read_only_group=raw.get("read_only_group"),
            teams=tuple(
                TeamAccess(
                    t["team"], t["group"], tuple(t["service_accounts"]), t.get("client_id", PLACEHOLDER_CLIENT_ID)
                )
                for t in raw["teams"]
            ),
        )


def public_issuer(identity: IdentityConfig, *, cluster: str, location: str, stack: str) -> str:
    account = oidc.issuer_account_name(cluster, identity.entra.tenant_id, location, stack)
    return oidc.issuer_url(account)


def apiserver_identity(
    identity: IdentityConfig | None, *, cluster: str, location: str, stack: str, cluster_domain: str
) -> ApiserverIdentity | None:
    if identity is None:
        return None
    sa = oidc.service_account_issuer(
        public_issuer(identity, cluster=cluster, location=location, stack=stack), cluster_domain
    )
    return ApiserverIdentity(sa.issuers, sa.jwks_uri, oidc.authentication_config(identity.entra))


def access_spec(identity: IdentityConfig | None, *, cluster: str, location: str, stack: str) -> AccessSpec | None:
    if identity is None:
        return None
    return AccessSpec(
        prefix=identity.entra.prefix,
        tenant_id=identity.entra.tenant_id,
        issuer=public_issuer(identity, cluster=cluster, location=location, stack=stack),
        read_only_group=identity.read_only_group,
        teams=tuple(TeamAccess(name, t.group, tuple(t.service_accounts)) for name, t in sorted(identity.teams.items())),
    )
