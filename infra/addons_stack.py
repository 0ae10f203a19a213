"""The program of a ``<cluster>-addons`` stack: the cluster's Kubernetes objects.

Why a separate stack: the objects need a live API server, which answers only minutes after the
cluster stack's VMs boot (cloud-init, etcd quorum, certificates). Inside the cluster stack every
Kubernetes resource would fail the first `pulumi up` (or need a fragile readiness gate), and a
broken API server would block changes to the Azure resources that could fix it. Order:
``pulumi up --stack <cluster>``, wait until the API servers answer, ``pulumi up --stack <cluster>-addons``.

The spec is computed here, synchronously, from the cluster stack's own file (the same
``prepare_cluster`` the cluster program runs), so every object is a plain resource that preview
lists; resources created inside an ``apply`` would be invisible to the first preview. Only the
(secret) ``kubeconfig`` comes through the StackReference; the cluster's exported ``addons_spec``
is compared with the local one, and a difference (cluster stack not yet updated) is a warning.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from modules.azure.cluster_addons import ClusterAddons, ClusterAddonsArgs
from modules.cluster.spec import AddonsSpec
from modules.errors import ConfigError
from modules.stackplan.config import AddonsStack, load_stack
from modules.stackplan.prepare import prepare_cluster
from modules.stackplan.stacks_dir import stacks_dir


def cluster_spec(cluster_stack: str) -> AddonsSpec:
    """What the cluster stack exports as ``addons_spec``, from its stack file (no engine)."""
    name = cluster_stack.rsplit("/", 1)[-1]  # org/project/stack names the same file
    directory = stacks_dir()
    config = load_stack(directory, name)
    if config.kind != "cluster":
        raise ConfigError(
            f"azure-gpu-k8s:addons_stack.cluster_stack: {name!r} is a {config.kind} stack: name a cluster stack"
        )
    return prepare_cluster(name, config, directory).addons


def matches(exported: Any, spec: AddonsSpec) -> bool:
    """The cluster stack's ``addons_spec`` output is ``spec`` (an older toolkit's shape is not)."""
    if exported is None:
        return False
    try:
        return AddonsSpec.from_json(exported) == spec
    except ConfigError:
        return False


def _current(exported: Any, spec: AddonsSpec, cluster: str) -> bool:
    if matches(exported, spec):
        return True
    pulumi.log.warn(
        f"{cluster}: its exported addons_spec differs from its stack file: run `pulumi up --stack {cluster}` "
        "first, or these objects may not match the nodes"
    )
    return False


def cluster_outputs(cluster_stack: str) -> dict[str, Any]:
    """The cluster stack's outputs, now, before any object is built (StackReference's sync path, the
    builtin `pulumi:pulumi:readStackOutputs` invoke): objects must not be created inside an apply."""
    result = pulumi.runtime.invoke("pulumi:pulumi:readStackOutputs", {"name": cluster_stack})
    outputs = result.value.get("outputs") if isinstance(result.value, dict) else None
    return outputs if isinstance(outputs, dict) else {}


def with_team_identities(spec: AddonsSpec, outputs: dict[str, Any]) -> AddonsSpec:
    """The spec with each team identity's client id (the cluster stack's ``workload_identity`` output)."""
    got = outputs.get("workload_identity")
    ids = got.get("client_ids") if isinstance(got, dict) else None
    if spec.access is None or not isinstance(ids, dict):
        return spec  # not deployed yet: the service accounts carry the placeholder client id
    teams = tuple(replace(t, client_id=str(ids.get(t.team) or t.client_id)) for t in spec.access.teams)
    return replace(spec, access=replace(spec.access, teams=teams))


def with_cloud_ids(spec: AddonsSpec, outputs: dict[str, Any]) -> AddonsSpec:
    """The spec with the Azure ids only a deployed cluster stack knows (its ``cloud_ids`` output)."""
    ids = outputs.get("cloud_ids")
    if not isinstance(ids, dict):
        return spec  # not deployed yet (or an older toolkit): the objects warn about the placeholders
    keys = ("tenant_id", "subscription_id", "controller_client_id", "remediation_client_id")
    return replace(spec, cloud=replace(spec.cloud, **{k: str(ids[k]) for k in keys if ids.get(k)}))


def build(config: AddonsStack) -> dict[str, object]:
    """Create the add-ons of ``config.addons_stack.cluster_stack``; returns the outputs to export."""
    cluster = config.addons_stack.cluster_stack
    local = cluster_spec(cluster)
    outputs = cluster_outputs(cluster)
    spec = with_team_identities(with_cloud_ids(local, outputs), outputs)
    ref = pulumi.StackReference(f"{cluster}-ref", stack_name=cluster)
    current = ref.get_output("addons_spec").apply(lambda exported: _current(exported, local, cluster))
    provider = k8s.Provider(
        f"{cluster}-k8s",
        kubeconfig=ref.require_output("kubeconfig"),
        # Objects are applied server-side, so fields other managers own are left alone.
        enable_server_side_apply=True,
    )
    addons = ClusterAddons(
        f"{cluster}-addons",
        ClusterAddonsArgs(spec=spec, provider=provider),
        opts=pulumi.ResourceOptions(providers=[provider]),
    )
    return {
        "cluster_stack": cluster,
        "cluster_stack_current": current,
        "objects": addons.objects,
        "team_namespaces": addons.team_namespaces,
    }
