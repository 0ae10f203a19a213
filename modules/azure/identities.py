"""The cluster's own Azure identities: cloud-provider-azure's, and the one that replaces failed GPU VMs.

Both are user-assigned identities on the system pool's scale sets, where those controllers run. Each
gets what its job needs and nothing more:

- cloud-controller-manager and cloud-node-manager read the VMs and scale sets to give nodes their
  providerIDs and addresses, and delete Node objects whose VM is gone: Reader on the resource group.
  (LoadBalancer Services would also need Network Contributor; this cluster exposes none.)
- the remediation job deletes a fenced node's scale-set instance and restores the set's capacity, and the
  pool roll lists the instances behind the set's model and brings one at a time to it (Update Instances, and
  Reimage when an applied update did not restart it):
  a custom role with exactly those actions, assigned on each GPU scale set only (``grant_replacer``).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import pulumi
from pulumi_azure_native import authorization, managedidentity

from modules.azure.context import DeployContext
from modules.azure.rbac import grant
from modules.cluster.scripts.azure import ARM_CALLS

READER = ("Reader", "acdd72a7-3385-48ef-bd42-f606fba81ae7")
"""Built-in role: view everything, change nothing (role-based-access-control/built-in-roles)."""
REPLACER_ACTIONS = tuple(dict.fromkeys(call.action for call in ARM_CALLS))
"""What the remediation job's and the pool roll's calls need (modules/cluster/scripts/azure.py ARM_CALLS: read
the set and its instances, delete instances, set the capacity back, update or reimage an instance), nothing
more: derived from the calls, not typed twice."""


def replacer_role_guid(resource_group_id: str) -> str:
    """The remediation role's GUID for the resource group ``/subscriptions/<sub>/resourceGroups/agk-<stack>``."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"agk{resource_group_id.lower()}/vmss-instance-replacer"))


@dataclass(frozen=True)
class ClusterIdentitiesArgs:
    ctx: DeployContext
    """Resource group (the scope of both roles), region, tags."""
    cluster: str
    """Cluster name: names the identities and the custom role."""


class ClusterIdentities(pulumi.ComponentResource):
    id: pulumi.Output[str]
    name: pulumi.Output[str]
    cloud_provider_id: pulumi.Output[str]
    cloud_provider_client_id: pulumi.Output[str]
    remediation_id: pulumi.Output[str]
    remediation_client_id: pulumi.Output[str]

    def __init__(self, name: str, args: ClusterIdentitiesArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("agk:security:ClusterIdentities", name, None, opts)
        ctx = args.ctx

        def identity(role: str) -> managedidentity.UserAssignedIdentity:
            return managedidentity.UserAssignedIdentity(
                f"{name}-{role}",
                resource_name_=f"{name}-{role}",
                resource_group_name=ctx.resource_group_name,
                location=ctx.location,
                tags=ctx.tags_for("security"),
                opts=pulumi.ResourceOptions(parent=self),
            )

        cloud = identity("cloud-provider")
        replacer = identity("remediation")
        grant(
            f"{name}-cloud-provider-reader",
            scope=ctx.resource_group_id,
            principal_id=cloud.principal_id,
            principal_type="ServicePrincipal",
            role=READER,
            resource_group_id=ctx.resource_group_id,
            parent=self,
        )
        # A custom role's id (a GUID the template chooses) and its name are unique in the tenant (Azure Landing
        # Zones library, role definitions: "must be unique within the tenant"): both derive from the resource
        # group's id, which names the subscription and the stack, so the same stack in a second subscription of
        # the tenant, or a second stack of one cluster name, gets its own role.
        role_guid = pulumi.Output.from_input(ctx.resource_group_id).apply(replacer_role_guid)
        self.replacer_role = authorization.RoleDefinition(
            f"{name}-replacer-role",
            role_definition_id=role_guid,
            role_name=pulumi.Output.from_input(ctx.resource_group_id).apply(
                lambda rg: (
                    f"agk {args.cluster} scale-set instance replacer ({rg.split('/')[2]}/{rg.rsplit('/', 1)[-1]})"
                )
            ),
            description="Replace a failed VM of a GPU scale set and restore the set's capacity (XID remediation); "
            "bring an instance to the set's model (pool roll).",
            scope=ctx.resource_group_id,
            assignable_scopes=[ctx.resource_group_id],
            permissions=[authorization.PermissionArgs(actions=list(REPLACER_ACTIONS))],
            opts=pulumi.ResourceOptions(parent=self),
        )
        self._prefix, self._role_guid, self._ctx = name, role_guid, ctx
        self.id = cloud.id
        self.name = pulumi.Output.from_input(name)
        self.cloud_provider_id = cloud.id
        self.cloud_provider_client_id = cloud.client_id
        self.remediation_id = replacer.id
        self.remediation_client_id = replacer.client_id
        self._replacer_principal = replacer.principal_id
        self.register_outputs(
            {
                "id": self.id,
                "name": self.name,
                "cloud_provider_id": self.cloud_provider_id,
                "cloud_provider_client_id": self.cloud_provider_client_id,
                "remediation_id": self.remediation_id,
                "remediation_client_id": self.remediation_client_id,
            }
        )

    def grant_replacer(self, key: str, scale_set_id: pulumi.Input[str]) -> authorization.RoleAssignment:
        """Let the remediation identity replace instances of one scale set (``key``: its stable name)."""
        return grant(
            f"{self._prefix}-replacer-{key}",
            scope=scale_set_id,
            principal_id=self._replacer_principal,
            principal_type="ServicePrincipal",
            role=("agk scale-set instance replacer", self._role_guid),
            resource_group_id=self._ctx.resource_group_id,
            parent=self,
            depends_on=[self.replacer_role],
        )
