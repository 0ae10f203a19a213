"""The cluster program's workload identity under Pulumi's mock runtime (the real infra/ program; Azure's control
plane is the stand-in that cannot exist here): each team's identity is federated with its own service accounts
and holds a data role on its own containers only."""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path
from typing import Any

import yaml

from agk.plan.engine import export_state
from modules.identity import oidc
from modules.identity.plan import team_containers
from tests.bootstrap.conftest import STACKS

IDENTITY = "azure-native:managedidentity:UserAssignedIdentity"
CREDENTIAL = "azure-native:managedidentity:FederatedIdentityCredential"
ASSIGNMENT = "azure-native:authorization:RoleAssignment"
CONTAINER = "azure-native:storage:BlobContainer"
BLOB = "azure-native:storage:Blob"
CONTRIBUTOR = "ba92f5b4-2d11-453d-a403-e96b0029c9fe"
"""Storage Blob Data Contributor (learn.microsoft.com, Azure built-in roles, Storage)."""


def two_teams(tmp: Path) -> Path:
    """The shipped stacks, with dev's h100 pool given to a second team (vision) that has an Entra group too."""
    stacks = tmp / "stacks"
    shutil.copytree(STACKS, stacks)
    path = stacks / "Pulumi.dev.yaml"
    raw = yaml.safe_load(path.read_text())
    cluster = raw["config"]["azure-gpu-k8s:cluster"]
    cluster["gpu_pools"]["h100"]["team"] = "vision"
    cluster["identity"]["teams"]["vision"] = {
        "group": "7d2c9e10-5a4b-4c3d-8e2f-0a1b2c3d4e5f",
        "service_accounts": ["training", "eval", "serve"],
    }
    path.write_text(yaml.safe_dump(raw))
    return stacks


def test_each_team_identity_reaches_its_own_containers_only(tmp_path: Path) -> None:
    doc = export_state("dev", two_teams(tmp_path))
    resources: list[dict[str, Any]] = doc["deployment"]["resources"]
    by_type: dict[str, list[dict[str, Any]]] = {}
    for r in resources:
        by_type.setdefault(r["type"], []).append(r)
    identities = {
        r["inputs"]["tags"]["agk-team"]: r for r in by_type[IDENTITY] if "agk-team" in (r["inputs"].get("tags") or {})
    }
    assert sorted(identities) == ["research", "vision"]
    containers = {r["inputs"]["containerName"]: r for r in by_type[CONTAINER]}
    for team in identities:
        for name in team_containers(team):
            assert name in containers, f"{name} is not created"

    # Every data role on a team container, by the identity holding it (principal ids are the mock's outputs).
    principal_of = {r["outputs"]["principalId"]: team for team, r in identities.items()}
    container_of = {r["id"]: name for name, r in containers.items()}
    held: dict[str, set[str]] = {team: set() for team in identities}
    for a in by_type[ASSIGNMENT]:
        team = principal_of.get(a["inputs"]["principalId"])
        if team is None:
            continue
        assert a["inputs"]["roleDefinitionId"].endswith(CONTRIBUTOR)
        assert a["inputs"]["principalType"] == "ServicePrincipal"
        held[team].add(container_of[a["inputs"]["scope"]])
    assert held == {"research": set(team_containers("research")), "vision": set(team_containers("vision"))}

    # One credential per service account: the issuer the API servers sign as, the token's exact subject.
    issuer = next(r for r in by_type[CREDENTIAL])["inputs"]["issuer"]
    assert issuer.endswith(".blob.core.windows.net/oidc/")
    subjects = {
        (r["inputs"]["resourceName"], r["inputs"]["subject"], tuple(r["inputs"]["audiences"]))
        for r in by_type[CREDENTIAL]
    }
    accounts = {"research": ["training"], "vision": ["training", "eval", "serve"]}
    assert subjects == {
        (identities[t]["outputs"]["name"], oidc.subject(t, sa), (oidc.AUDIENCE,))
        for t in identities
        for sa in accounts[t]
    }
    # Under one identity they are created one after another: Azure refuses concurrent credential writes there.
    vision = sorted(
        (r for r in by_type[CREDENTIAL] if r["inputs"]["resourceName"] == identities["vision"]["outputs"]["name"]),
        key=lambda r: accounts["vision"].index(r["inputs"]["subject"].rsplit(":", 1)[1]),
    )
    for before, after in itertools.pairwise(vision):
        assert before["urn"] in after.get("dependencies", []), (after["urn"], after.get("dependencies"))
    # The issuer's two documents are uploaded, the discovery document naming that issuer.
    blobs = {r["inputs"]["blobName"]: r for r in by_type[BLOB]}
    assert set(blobs) == {oidc.DISCOVERY_PATH, oidc.JWKS_PATH}
    stack = next(r for r in resources if r["type"] == "pulumi:pulumi:Stack")
    assert stack["outputs"]["workload_identity"]["issuer"] == issuer
    assert json.dumps(stack["outputs"]["workload_identity"]["client_ids"])
