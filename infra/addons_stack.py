"""The program of a ``<cluster>-addons`` stack: the cluster's Kubernetes objects.

Why a separate stack: the objects need a live API server, which answers only minutes after the
cluster stack's VMs boot (cloud-init, etcd quorum, certificates). Inside the cluster stack every
Kubernetes resource would fail the first `pulumi up` (or need a fragile readiness gate), and a
broken API server would block changes to the Azure resources that could fix it. So the cluster
stack validates the ``addons`` section with its pools and exports ``addons_spec`` and the
(secret) ``kubeconfig``; this stack reads both through a StackReference. Order:
``pulumi up --stack <cluster>``, wait until the API servers answer, ``pulumi up --stack <cluster>-addons``.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from infra.config import StackConfig
from modules.cluster.component import ClusterAddons, ClusterAddonsArgs
from modules.cluster.spec import AddonsSpec
from modules.errors import ConfigError


def _spec(raw: Any) -> AddonsSpec:
    if raw is None:
        raise ConfigError("the cluster stack has no 'addons_spec' output: run `pulumi up` on the cluster stack first")
    return AddonsSpec.from_json(raw)


def build(config: StackConfig) -> dict[str, object]:
    """Create the add-ons of ``config.addons_stack.cluster_stack``; returns the outputs to export."""
    if config.addons_stack is None:
        raise ConfigError("azure-gpu-k8s:addons_stack: missing: add cluster_stack: <the cluster stack>")
    cluster = config.addons_stack.cluster_stack
    ref = pulumi.StackReference(f"{cluster}-ref", stack_name=cluster)
    spec = ref.get_output("addons_spec").apply(_spec)
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
        "objects": addons.objects,
        "team_namespaces": addons.team_namespaces,
    }
