"""People's access (``cluster.identity``): each team's Entra group works in its namespace, a read-only group
sees the whole cluster, and each team's service accounts carry the team's Azure identity.

Users and groups arrive from the API server's AuthenticationConfiguration with the Entra prefix
(modules/identity/oidc.py), so a binding names ``<prefix><group object ID>``. The admin kubeconfig the
cluster stack exports (system:masters) is break-glass only (docs/researchers.md): nobody's daily access.
"""

from __future__ import annotations

from modules.cluster.objects.common import Obj, meta
from modules.cluster.spec import AddonsSpec
from modules.identity.plan import AccessSpec, TeamAccess

APP = "researcher-access"
TEAM_ROLE = "agk-team-member"
READ_ONLY = "agk-read-only"
CLIENT_ID = "azure.workload.identity/client-id"
TENANT_ID = "azure.workload.identity/tenant-id"
"""Service-account annotations the Azure Workload Identity webhook reads (its docs, "Service Account Labels and
Annotations"); a pod opts in with the label ``azure.workload.identity/use: "true"``."""
USE_LABEL = "azure.workload.identity/use"

WRITE = ["get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"]
READ = ["get", "list", "watch"]
TEAM_RULES: list[Obj] = [
    # What a training job needs and no more: its pods and jobs, their logs and shells, their config.
    {"apiGroups": [""], "resources": ["pods", "services", "configmaps", "persistentvolumeclaims"], "verbs": WRITE},
    {"apiGroups": [""], "resources": ["pods/log"], "verbs": READ},
    {"apiGroups": [""], "resources": ["pods/exec", "pods/portforward"], "verbs": ["create", "get"]},
    {"apiGroups": ["batch"], "resources": ["jobs", "cronjobs"], "verbs": WRITE},
    {"apiGroups": ["scheduling.x-k8s.io"], "resources": ["podgroups"], "verbs": WRITE},
    # The gang example's StatefulSet (docs/gpu-jobs.md).
    {"apiGroups": ["apps"], "resources": ["statefulsets"], "verbs": WRITE},
    # Where a queued job stands (docs/queues.md: kubectl get/describe workloads); Kueue writes these itself.
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads", "localqueues"], "verbs": READ},
    # Read only: a member must not re-point a service account at another identity, raise the quota, or grant.
    {
        "apiGroups": [""],
        "resources": ["serviceaccounts", "events", "resourcequotas", "limitranges"],
        "verbs": READ,
    },
    {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": READ},
]
"""The team's Role. Kept as data so the other team features (queues) can add their rules next to these."""
CLUSTER_READ_RULES: list[Obj] = [
    # The cluster-scoped objects a reader needs beside the built-in view role (namespaced only). No Secrets:
    # view excludes them ("view" in kubernetes.io, "Using RBAC Authorization", user-facing roles).
    {
        "apiGroups": [""],
        "resources": ["nodes", "namespaces", "persistentvolumes"],
        "verbs": READ,
    },
    {"apiGroups": ["scheduling.k8s.io"], "resources": ["priorityclasses"], "verbs": READ},
    {"apiGroups": ["storage.k8s.io"], "resources": ["storageclasses"], "verbs": READ},
]


def _group(access: AccessSpec, object_id: str) -> Obj:
    return {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": access.group(object_id)}


def team_access(access: AccessSpec, team: TeamAccess) -> list[Obj]:
    ns = team.team
    role: Obj = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": meta(TEAM_ROLE, ns, app=APP),
        "rules": TEAM_RULES,
    }
    binding: Obj = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": meta(TEAM_ROLE, ns, app=APP),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": TEAM_ROLE},
        "subjects": [_group(access, team.group)],
    }
    accounts: list[Obj] = [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": meta(sa, ns, app=APP, annotations={CLIENT_ID: team.client_id, TENANT_ID: access.tenant_id}),
            # No Kubernetes API token in training pods by default (they need none, and the team's role grants the
            # service account nothing); the webhook mounts the Azure-audience token on its own.
            "automountServiceAccountToken": False,
        }
        for sa in team.service_accounts
    ]
    return [role, binding, *accounts]


def read_only(access: AccessSpec) -> list[Obj]:
    if access.read_only_group is None:
        return []
    subjects = [_group(access, access.read_only_group)]
    role: Obj = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": meta(READ_ONLY, app=APP),
        "rules": CLUSTER_READ_RULES,
    }

    def bind(name: str, to: str) -> Obj:
        return {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": meta(name, app=APP),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": to},
            "subjects": subjects,
        }

    return [role, bind(READ_ONLY, READ_ONLY), bind(f"{READ_ONLY}-view", "view")]


def researchers(spec: AddonsSpec) -> list[Obj]:
    access = spec.access
    if access is None:
        return []
    return [obj for team in access.teams for obj in team_access(access, team)] + read_only(access)
