"""ClusterAddons: turns the pure object builders' dicts into pulumi_kubernetes resources.

Each object becomes the typed SDK resource of its kind, so mypy checks the keyword arguments;
the bodies are the builders' dicts, already in the API server's wire form (camelCase), which
the SDK passes through unchanged. Children are keyed by kind, namespace and name, never by
position, so adding an object never renames another.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from modules.cluster.manifests import render_manifests
from modules.cluster.objects.common import Obj
from modules.cluster.objects.queues import MANAGER as KUEUE_MANAGER
from modules.cluster.spec import AddonsSpec

# Created before everything else: namespaced objects need their namespace, pods their priority class.
FOUNDATION_KINDS = ("Namespace", "CustomResourceDefinition", "PriorityClass")


@dataclass
class ClusterAddonsArgs:
    spec: AddonsSpec
    """The validated add-ons spec, known when the program runs (so preview lists every object)."""
    provider: k8s.Provider | None = None
    """Kubernetes provider pointed at the cluster's API server (None: the ambient kubeconfig)."""


# Kinds whose whole body is `spec`: one typed SDK class each.
_SPEC_KINDS: dict[tuple[str, str], Any] = {
    ("v1", "Service"): k8s.core.v1.Service,
    ("v1", "ResourceQuota"): k8s.core.v1.ResourceQuota,
    ("policy/v1", "PodDisruptionBudget"): k8s.policy.v1.PodDisruptionBudget,
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"): (
        k8s.admissionregistration.v1.ValidatingAdmissionPolicy
    ),
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding"): (
        k8s.admissionregistration.v1.ValidatingAdmissionPolicyBinding
    ),
    (
        "admissionregistration.k8s.io/v1",
        "MutatingAdmissionPolicy",
    ): k8s.admissionregistration.v1.MutatingAdmissionPolicy,
    ("admissionregistration.k8s.io/v1", "MutatingAdmissionPolicyBinding"): (
        k8s.admissionregistration.v1.MutatingAdmissionPolicyBinding
    ),
    ("apps/v1", "Deployment"): k8s.apps.v1.Deployment,
    ("apps/v1", "DaemonSet"): k8s.apps.v1.DaemonSet,
    ("batch/v1", "CronJob"): k8s.batch.v1.CronJob,
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"): k8s.apiextensions.v1.CustomResourceDefinition,
    ("networking.k8s.io/v1", "NetworkPolicy"): k8s.networking.v1.NetworkPolicy,
}
_RBAC = "rbac.authorization.k8s.io/v1"
KUEUE_GROUP = "kueue.x-k8s.io"


def create_object(name: str, obj: Obj, opts: pulumi.ResourceOptions) -> pulumi.CustomResource:
    """The typed SDK resource for one builder object."""
    m: Any = obj["metadata"]
    kind = (obj["apiVersion"], obj["kind"])
    spec_kind = _SPEC_KINDS.get(kind)
    if spec_kind is not None:
        resource: pulumi.CustomResource = spec_kind(name, metadata=m, spec=obj["spec"], opts=opts)
        return resource
    if kind == ("v1", "Namespace"):
        return k8s.core.v1.Namespace(name, metadata=m, opts=opts)
    if kind == ("v1", "ConfigMap"):
        return k8s.core.v1.ConfigMap(name, metadata=m, data=obj["data"], opts=opts)
    if kind == ("v1", "Secret"):
        # pulumi-kubernetes stores a Secret's data and stringData as Pulumi secrets by itself.
        return k8s.core.v1.Secret(name, metadata=m, type=obj["type"], string_data=obj["stringData"], opts=opts)
    if kind == ("v1", "ServiceAccount"):
        return k8s.core.v1.ServiceAccount(
            name, metadata=m, automount_service_account_token=obj["automountServiceAccountToken"], opts=opts
        )
    if kind == ("scheduling.k8s.io/v1", "PriorityClass"):
        return k8s.scheduling.v1.PriorityClass(
            name,
            metadata=m,
            value=obj["value"],
            global_default=obj["globalDefault"],
            preemption_policy=obj["preemptionPolicy"],
            description=obj["description"],
            opts=opts,
        )
    if kind == (_RBAC, "ClusterRole"):
        return k8s.rbac.v1.ClusterRole(name, metadata=m, rules=obj["rules"], opts=opts)
    if kind == (_RBAC, "Role"):
        return k8s.rbac.v1.Role(name, metadata=m, rules=obj["rules"], opts=opts)
    if kind == (_RBAC, "ClusterRoleBinding"):
        return k8s.rbac.v1.ClusterRoleBinding(
            name, metadata=m, role_ref=obj["roleRef"], subjects=obj["subjects"], opts=opts
        )
    if kind == ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration"):
        return k8s.admissionregistration.v1.MutatingWebhookConfiguration(
            name, metadata=m, webhooks=obj["webhooks"], opts=opts
        )
    if kind == (_RBAC, "RoleBinding"):
        return k8s.rbac.v1.RoleBinding(name, metadata=m, role_ref=obj["roleRef"], subjects=obj["subjects"], opts=opts)
    if kind == ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration"):
        return k8s.admissionregistration.v1.MutatingWebhookConfiguration(
            name, metadata=m, webhooks=obj["webhooks"], opts=opts
        )
    if kind == ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration"):
        return k8s.admissionregistration.v1.ValidatingWebhookConfiguration(
            name, metadata=m, webhooks=obj["webhooks"], opts=opts
        )
    if kind[0].startswith(f"{KUEUE_GROUP}/"):
        # Kueue's own API (queues, flavors, topology): custom resources of the CRDs rendered with it.
        return k8s.apiextensions.CustomResource(
            name, api_version=kind[0], kind=kind[1], metadata=m, spec=obj["spec"], opts=opts
        )
    raise ValueError(f"no Pulumi resource for {kind[0]} {kind[1]}: add it to modules/azure/cluster_addons.py")


def placeholder_warning(name: str, spec: AddonsSpec) -> str:
    return (
        f"{name}: the cluster stack has not passed {', '.join(spec.placeholders)}: until it does, "
        "cloud-controller-manager and VM replacement cannot authenticate and the NetworkPolicies allow "
        "placeholder addresses (192.0.2.0/24) for the API servers and Prometheus"
    )


def object_key(obj: Obj) -> str:
    """Stable child name: kind, namespace and name."""
    meta = obj["metadata"]
    parts = [obj["kind"].lower(), meta.get("namespace", ""), meta["name"]]
    return "-".join(p for p in parts if p).replace(".", "-").replace(":", "-")


class ClusterAddons(pulumi.ComponentResource):
    """Every in-cluster object: priorities, teams, admission, balloons, gang scheduling, health."""

    objects: pulumi.Output[list[str]]
    """Child keys of the objects created (kind-namespace-name)."""
    team_namespaces: pulumi.Output[list[str]]
    """Namespaces research teams run in."""

    def __init__(self, name: str, args: ClusterAddonsArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        # The token keeps the area the component was first deployed from: a new token is a new URN for it and
        # every child, which Pulumi would replace.
        super().__init__("agk:cluster:ClusterAddons", name, None, opts)
        self._name, self._provider = name, args.provider
        if args.spec.placeholders:
            pulumi.log.warn(placeholder_warning(name, args.spec), resource=self)
        # Children are created here, never inside an apply: preview shows each of them.
        keys = self._create(args.spec)
        teams = pulumi.Output.from_input([t.name for t in args.spec.teams])
        self.objects = keys
        self.team_namespaces = teams
        self.register_outputs({"objects": keys, "team_namespaces": teams})

    def _create(self, spec: AddonsSpec) -> pulumi.Output[list[str]]:
        """Create every object; the keys resolve once every child is registered."""
        objs = render_manifests(spec)
        foundation: list[pulumi.Resource] = []
        kueue: pulumi.Resource | None = None
        keys: list[str] = []
        urns: list[pulumi.Output[str]] = []
        for obj in objs:
            key = object_key(obj)
            first = obj["kind"] in FOUNDATION_KINDS
            after = list(foundation)
            if obj["apiVersion"].startswith(f"{KUEUE_GROUP}/") and kueue is not None:
                # Kueue's webhooks validate its objects: they wait for its Deployment to be ready.
                after.append(kueue)
            opts = pulumi.ResourceOptions(parent=self, provider=self._provider, depends_on=None if first else after)
            resource = create_object(f"{self._name}-{key}", obj, opts)
            if obj["kind"] == "Deployment" and obj["metadata"]["name"] == KUEUE_MANAGER:
                kueue = resource
            if first:
                foundation.append(resource)
            keys.append(key)
            urns.append(resource.urn)
        return pulumi.Output.all(*urns).apply(lambda _: keys)
