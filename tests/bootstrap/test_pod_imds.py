"""Which pools let pods reach IMDS, checked against what the add-ons put on each pool.

IMDS hands any pod that reaches it a token for the node's managed identity, so pools in
``POD_IMDS_BLOCKED`` drop pod -> 169.254.169.254 (forward-pod-traffic.sh; proved on a replayed boot in
test_realtool_boot). That is only safe where no pod-network workload needs IMDS. A workload needs it
when it takes a managed-identity token (the add-ons say so in its pods' justification annotation):
each of those runs on the host network, whose traffic keeps IMDS, so every pool can cut its pods off.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from modules.bootstrap.roles import bundle
from modules.bootstrap.roles.parts import IMDS_ADDRESS, POD_IMDS_BLOCKED
from modules.cluster.manifests import render_manifests
from modules.cluster.objects.common import JUSTIFICATION
from modules.cluster.objects.health import IMDS_WHY
from modules.cluster.placement import NodeTaint, lands_on
from modules.stackplan.config import load_stack
from modules.stackplan.prepare import prepare_cluster

from .conftest import STACKS

WORKLOADS = ("Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "Job")


def _pod(obj: dict[str, Any]) -> dict[str, Any] | None:
    if obj.get("kind") in WORKLOADS:
        return obj["spec"]["template"]  # type: ignore[no-any-return]
    if obj.get("kind") == "CronJob":
        return obj["spec"]["jobTemplate"]["spec"]["template"]  # type: ignore[no-any-return]
    return None


def _imds_workloads(objs: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Workloads whose pods say they take a managed-identity token from IMDS (the add-ons' justification
    annotation, the reason a reviewer reads for their host network): (namespace/name, pod spec)."""
    for obj in objs:
        template = _pod(obj)
        if template is None:
            continue
        why = template.get("metadata", {}).get("annotations", {}).get(JUSTIFICATION, "")
        if IMDS_WHY in why:
            yield f"{obj['metadata'].get('namespace', 'default')}/{obj['metadata']['name']}", template["spec"]


@pytest.mark.parametrize("stack", ["dev", "prod-7500"])
def test_what_needs_imds_runs_on_the_host_network_and_every_pool_cuts_pods_off(stack: str) -> None:
    prep = prepare_cluster(stack, load_stack(STACKS, stack), STACKS)
    needing = list(_imds_workloads(render_manifests(prep.addons)))
    # cloud-provider-azure's controller-manager and the XID remediation take tokens from IMDS.
    assert {"kube-system/cloud-controller-manager", "gpu-health/gpu-remediation"} <= {n for n, _ in needing}
    for name, spec in needing:
        assert spec.get("hostNetwork") is True, f"{name} needs IMDS, which pods cannot reach: run it on the host"
    for pool in prep.pools.pools.values():
        taints = [NodeTaint(t.key, t.value, t.effect) for t in pool.taints]
        landing = [name for name, spec in needing if lands_on(spec, dict(pool.labels), taints)]
        assert pool.role in POD_IMDS_BLOCKED, f"{pool.name}: its pods reach IMDS and the pool identity's token"
        if pool.role == "system-node":
            assert landing, "nothing needing IMDS lands on the system pool: check the placement"


def test_only_blocked_roles_render_the_imds_drop() -> None:
    from .conftest import context

    ctx = context("dev")
    for pool in ctx.pools:
        script = bundle(ctx, pool.role, pool.name).file("forward-pod-traffic.sh").content
        drops = f"-d {IMDS_ADDRESS}/32 -j DROP" in script
        assert drops is (pool.role in POD_IMDS_BLOCKED), pool.name
