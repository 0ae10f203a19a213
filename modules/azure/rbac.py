"""Azure RBAC role assignments: one helper, so every grant is named, scoped and typed the same way."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import pulumi
from pulumi_azure_native import authorization


def role_definition_id(resource_group_id: pulumi.Input[str], role_guid: pulumi.Input[str]) -> pulumi.Output[str]:
    """``/subscriptions/<sub>/providers/Microsoft.Authorization/roleDefinitions/<guid>`` from the RG's id."""
    return pulumi.Output.all(resource_group_id, role_guid).apply(
        lambda ids: (
            str(ids[0]).split("/resourceGroups/")[0] + f"/providers/Microsoft.Authorization/roleDefinitions/{ids[1]}"
        )
    )


def assignment_name(*parts: str) -> str:
    """Role assignment names are GUIDs, unique per tenant: derive them from the scope, principal and role,
    so a re-plan never renames one and two stacks never pick the same."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "/".join(parts)))


def grant(
    name: str,
    *,
    scope: pulumi.Input[str],
    principal_id: pulumi.Input[str],
    principal_type: str,
    role: tuple[str, pulumi.Input[str]],
    resource_group_id: pulumi.Input[str],
    parent: pulumi.Resource,
    depends_on: Sequence[pulumi.Resource] = (),
) -> authorization.RoleAssignment:
    """Give ``principal_id`` the built-in ``role`` (display name, GUID) on ``scope``.

    ``principal_type`` is set explicitly (ServicePrincipal for managed identities): Azure then skips the
    directory lookup that fails while a just-created identity replicates (role-based-access-control/
    troubleshooting); the SDK's default would be User.
    """
    display, guid = role
    return authorization.RoleAssignment(
        name,
        role_assignment_name=pulumi.Output.all(scope, principal_id, guid).apply(
            lambda ids: assignment_name(str(ids[0]), str(ids[1]), str(ids[2]))
        ),
        principal_id=principal_id,
        principal_type=principal_type,
        role_definition_id=role_definition_id(resource_group_id, guid),
        scope=scope,
        description=display,
        opts=pulumi.ResourceOptions(parent=parent, depends_on=list(depends_on)),
    )
