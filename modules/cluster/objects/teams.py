"""Team namespaces and, without queues (addons.queues.enabled: false), their GPU quotas."""

from __future__ import annotations

from modules.cluster.objects.common import Obj, meta, namespace, pod_security_labels
from modules.cluster.spec import AddonsSpec, TeamSpec

GPU = "nvidia.com/gpu"


def team_objects(spec: AddonsSpec, team: TeamSpec) -> list[Obj]:
    # Pod Security labels: InfiniBand jobs need IPC_LOCK (pinned memory), which 'baseline' refuses, so the
    # labels cannot enforce baseline; the ValidatingAdmissionPolicy tenant-pod-security enforces baseline plus
    # IPC_LOCK instead (objects/admission.py). 'enforce: privileged' is written out so a cluster-wide default
    # does not refuse training; 'restricted' warns the submitter and audits (docs/tenancy.md).
    levels = {"enforce": "privileged", "warn": "restricted", "audit": "restricted"}
    ns = namespace(
        team.name,
        app="teams",
        pod_security_level=None,
        extra_labels={**pod_security_labels(levels, spec.minor), spec.team_key: team.name},
    )
    if spec.queues.enabled:
        # Kueue's ClusterQueue is the team's quota (objects/queues.py): a ResourceQuota here would count
        # the pods a team runs on borrowed GPUs against its own GPUs, and borrowing would add nothing.
        return [ns]
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": meta("gpu-quota", team.name, app="teams"),
        "spec": {"hard": {f"requests.{GPU}": str(team.gpu_quota)}},
    }
    return [ns, quota]


def teams(spec: AddonsSpec) -> list[Obj]:
    return [obj for team in spec.teams for obj in team_objects(spec, team)]
