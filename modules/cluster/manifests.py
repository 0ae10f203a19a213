"""Every Kubernetes object the cluster gets, in apply order (namespaces and CRDs first)."""

from __future__ import annotations

from modules.cluster.objects import (
    access,
    admission,
    balloons,
    cloud_provider,
    coredns,
    gang,
    health,
    network_policies,
    policy_engine,
    preflight,
    priorities,
    queues,
    rdma,
    remediation,
    researchers,
    roll,
    service_exposure,
    serving_certs,
    state_metrics,
    teams,
    tenancy,
    workload_identity,
)
from modules.cluster.objects.common import Obj
from modules.cluster.scan_exceptions import annotate
from modules.cluster.spec import AddonsSpec

# Objects others depend on come first: a namespaced object after its Namespace, a CR after its CRD.
_FIRST = ("Namespace", "CustomResourceDefinition", "PriorityClass")


def render_manifests(spec: AddonsSpec) -> list[Obj]:
    objs = (
        priorities.priority_classes()
        + teams.teams(spec)
        + admission.admission(spec)
        + coredns.dns(spec)
        + state_metrics.state_metrics(spec)
        + serving_certs.serving_certs(spec)
        + cloud_provider.cloud_provider(spec)
        + health.health(spec)
        + rdma.rdma(spec)
        + remediation.remediation(spec)
        + preflight.preflight(spec)
        + balloons.balloons(spec)
        + gang.gang(spec)
        + access.access(spec)
        + researchers.researchers(spec)
        + workload_identity.workload_identity(spec)
        + network_policies.network_policies(spec)
        + queues.queues(spec)
        # Appended last: files keep the numbers `agk render` gave them before (the README names some).
        + admission.pod_security()
        + tenancy.tenancy(spec)
        + service_exposure.service_exposure()
        + roll.roll(spec)
        + policy_engine.policy_engine(spec)
    )
    rank = {kind: i for i, kind in enumerate(_FIRST)}
    return annotate(sorted(objs, key=lambda o: rank.get(o["kind"], len(_FIRST))))


def render_examples(spec: AddonsSpec) -> list[Obj]:
    """Documented examples (not deployed): for the first team, a queued job (docs/queues.md) and a
    gang-scheduled one."""
    if not spec.teams:
        return []
    out = [queues.example_job(spec, spec.teams[0])] if spec.queues.enabled else []
    return out + (gang.example(spec, spec.teams[0]) if spec.gang.enabled else [])
