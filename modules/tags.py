"""Tags every taggable Azure resource carries, and the facts tags hand to the policy pack.

Policies see resources one at a time in wire form; these tags carry what a rule needs to know
about the cluster around a resource (its role, its pool's declared maxPods, the raised quotas
the stack depends on) in a form that survives `pulumi stack export`.
"""

from __future__ import annotations

from collections.abc import Mapping

REQUIRED = ("owner", "cost-center", "cluster")

ROLE = "agk-role"
"""apiserver | etcd | events-etcd | prometheus | nat | jump | gpu-node | system-node | network | storage | oidc-issuer"""
POOL = "agk-pool"
POD_IPS = "agk-pod-ips"
"""On scale sets: the pool's pod IPs per node (the NIC carries 1 + this many IP configurations)."""
SURGE = "agk-surge"
"""On scale sets: the pool's surge node count (upgrade headroom), counted once per pool."""
CLUSTER_NODES = "agk-cluster-nodes"
"""On API server VMs: the node count the cluster is planned for (sizing rules)."""
LIMITS = "agk-limits"
"""On VNets: raised limits, ``name=value`` joined by ``,`` (empty: Azure's defaults)."""
NETWORK_KIND = "agk-network"
"""On VNets: ``hub`` or ``spoke``."""

JUSTIFICATION = "azure-gpu-k8s/justification"
"""Kubernetes annotation saying why a workload needs more than the restricted baseline
(privileged, host networking); the policy pack refuses such workloads without it."""


def base_tags(owner: str, cost_center: str, cluster: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    tags = dict(extra or {})
    tags.update({"owner": owner, "cost-center": cost_center, "cluster": cluster})
    return tags


def encode_limits(overrides: Mapping[str, int]) -> str:
    return ",".join(f"{name}={value}" for name, value in sorted(overrides.items()))


def decode_limits(text: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in filter(None, text.split(",")):
        name, _, value = item.partition("=")
        out[name] = int(value)
    return out
