"""Queues instead of quotas: Kueue with a ClusterQueue per team and Topology Aware Scheduling.

Why not a ResourceQuota per team namespace: a quota counts every pod in the namespace, borrowed ones
included, so a team that borrows an idle team's GPUs runs into its own quota and borrowing adds nothing.
Kueue admits whole jobs instead (all pods or none) against a ClusterQueue per team:

- nominal quota: the team's GPUs, per GPU pool (a ResourceFlavor per pool, selecting the pool's label);
- one cohort: a team's idle GPUs are lent to the others (``lendingLimit`` caps the share) and a team may
  borrow (``borrowingLimit``); null limits lend and borrow everything idle;
- preemption of borrowed work: ``reclaimWithinCohort: Any`` gives a lender its nominal quota back by
  evicting borrowers, ``borrowWithinCohort: LowerPriority`` lets a borrower displace lower-priority
  borrowers only (Kueue docs, concepts/cluster_queue "Preemption");
- a Topology with the InfiniBand island label and the hostname: a job that asks for
  ``kueue.x-k8s.io/podset-required-topology: <island label>`` is admitted only where all its pods fit
  one island, and is not admitted at all (the reason in its Workload's status) when no island can hold
  it (Kueue docs, concepts/topology_aware_scheduling).

Kueue's own install (CRDs, RBAC rules, webhooks) is vendored from the release the tests build
(``kueue/``: sigs.k8s.io/kueue config/components at that tag, the CRDs without their descriptions;
tests/controlplane/test_queues.py checks them against the built module). Only GPUs are counted (``quotaCheckStrategy: IgnoreUndeclared``): CPU and
memory follow from whole-node pods, and Topology Aware Scheduling still fits every requested resource
on the nodes. The visibility API (an aggregated API server) is turned off: nothing here registers it.
"""

from __future__ import annotations

import functools
import gzip
import json
from pathlib import Path
from typing import Any

import yaml

from modules.cluster.objects.common import (
    Obj,
    cluster_role,
    cluster_role_binding,
    meta,
    namespace,
    pod_security,
    restricted,
    role,
    role_binding,
    service_account,
    system_nodes,
)
from modules.cluster.objects.teams import GPU
from modules.cluster.spec import AddonsSpec, PoolFacts, TeamSpec

APP = "kueue"
NS = "kueue-system"
"""Kueue's namespace (its default, apis/config/v1beta2 defaults.go DefaultNamespace)."""
API = "kueue.x-k8s.io/v1beta2"
"""The storage version of every Kueue API at the pinned release (its CRDs)."""
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
"""A job's LocalQueue (on the Job, the StatefulSet or the pod template)."""
REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
"""Pod template annotation: every pod of the job within one domain of this level (apis topology_types.go)."""
PREFERRED_TOPOLOGY = "kueue.x-k8s.io/podset-preferred-topology"
HOSTNAME = "kubernetes.io/hostname"
TOPOLOGY = "ib-islands"
MANAGER = "kueue-controller-manager"
WEBHOOK_SERVICE = "kueue-webhook-service"
"""The names Kueue's internal certificate management expects (defaults.go DefaultWebhookServiceName): it
derives the webhook configurations' names from it (pkg/util/cert: ``kueue-{mutating,validating}-...``)."""
WEBHOOK_SECRET = "kueue-webhook-server-cert"
WEBHOOK_PORT = 9443
HEALTH_PORT = 8081
FRAMEWORKS = ("batch/job", "pod", "statefulset", "jobset.x-k8s.io/jobset")
"""What researchers submit here: Jobs (indexed, one pod per node), plain pods, StatefulSets, JobSets."""
# The webhooks of those frameworks and of Kueue's own APIs; the release lists every integration's.
_WEBHOOKS = ("job", "pod", "statefulset", "jobset", "clusterqueue", "cohort", "localqueue", "resourceflavor")
_WEBHOOK_NAMES = {f"{kind}{w}.kb.io" for w in _WEBHOOKS for kind in ("m", "v")} | {"vworkload.kb.io", "mworkload.kb.io"}
_CONVERTED = ("localqueues", "clusterqueues", "cohorts", "workloads", "multikueueclusters")
"""CRDs the release serves through its conversion webhook (config/components/crd/kustomization.yaml)."""
VENDORED = Path(__file__).resolve().parent / "kueue"


@functools.cache
def _vendored(name: str) -> str:
    """The file's JSON (read once: every render copies it, json is fast where YAML is not)."""
    path = VENDORED / name
    if name.endswith(".json.gz"):
        return gzip.decompress(path.read_bytes()).decode()
    return json.dumps([d for d in yaml.safe_load_all(path.read_text()) if d])


def _load(name: str) -> list[Obj]:
    return list(json.loads(_vendored(name)))


def strip_descriptions(value: Any) -> Any:
    """A schema without its documentation strings (a property called ``description`` stays: its value is a
    schema). What ``crds.json.gz`` holds: the release's CRDs are 830 KB with them, 210 KB without, and every
    plan and apply carries them; ``kubectl explain`` on Kueue's kinds loses its text, nothing else."""
    if isinstance(value, dict):
        return {k: strip_descriptions(v) for k, v in value.items() if not (k == "description" and isinstance(v, str))}
    if isinstance(value, list):
        return [strip_descriptions(v) for v in value]
    return value


def crds() -> list[Obj]:
    """Kueue's CRDs as its release installs them (less their descriptions): the conversion webhook on the
    multi-version APIs."""
    out = []
    for crd in _load("crds.json.gz"):
        crd["metadata"].setdefault("labels", {})["app.kubernetes.io/name"] = APP
        if crd["spec"]["names"]["plural"] in _CONVERTED:
            crd["spec"]["conversion"] = {
                "strategy": "Webhook",
                "webhook": {
                    "clientConfig": {"service": {"namespace": NS, "name": WEBHOOK_SERVICE, "path": "/convert"}},
                    "conversionReviewVersions": ["v1"],
                },
            }
        out.append(crd)
    return out


def webhooks(spec: AddonsSpec) -> list[Obj]:
    """The release's webhook configurations for the frameworks enabled here, on the webhook Service; the
    caBundle is left to Kueue's internal certificate management, which writes it (pkg/util/cert)."""
    out = []
    for doc in _load("webhooks.yaml"):
        kind = doc["kind"].removesuffix("WebhookConfiguration").lower()
        hooks = []
        for hook in doc["webhooks"]:
            if hook["name"] not in _WEBHOOK_NAMES:
                continue
            hook["clientConfig"]["service"] = {
                **hook["clientConfig"]["service"],
                "name": WEBHOOK_SERVICE,
                "namespace": NS,
            }
            if hook["name"][1:] in {f"{w}.kb.io" for w in ("job", "pod", "statefulset", "jobset")}:
                # Team namespaces only (the release: every namespace but kube-system and Kueue's). These
                # webhooks fail closed, so elsewhere (preflight, balloons, the agents) a Kueue outage
                # would stop every new pod; only team work is queued.
                hook["namespaceSelector"] = team_namespaces(spec)
            hooks.append(hook)
        out.append(
            {
                "apiVersion": doc["apiVersion"],
                "kind": doc["kind"],
                "metadata": meta(f"kueue-{kind}-webhook-configuration", app=APP),
                "webhooks": hooks,
            }
        )
    return out


def team_namespaces(spec: AddonsSpec) -> Obj:
    return {"matchExpressions": [{"key": spec.team_key, "operator": "Exists"}]}


def configuration(spec: AddonsSpec) -> Obj:
    """Kueue's Configuration (config.kueue.x-k8s.io/v1beta2, as config/components/manager has it)."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": NS,
        "health": {"healthProbeBindAddress": f":{HEALTH_PORT}"},
        "metrics": {"bindAddress": ":8443"},
        "webhook": {"port": WEBHOOK_PORT},
        # The namespace is explicit: controller-runtime infers it only inside a pod (and Kueue's defaults
        # leave it empty), so Kueue run outside one (the tests) would refuse to start without it.
        "leaderElection": {
            "leaderElect": True,
            "resourceName": "c1f6bfd2.kueue.x-k8s.io",
            "resourceNamespace": NS,
        },
        "internalCertManagement": {
            "enable": True,
            "webhookServiceName": WEBHOOK_SERVICE,
            "webhookSecretName": WEBHOOK_SECRET,
        },
        # Only jobs that name a queue are Kueue's; anything else runs as before (system pods, balloons).
        "manageJobsWithoutQueueName": False,
        "managedJobsNamespaceSelector": team_namespaces(spec),
        "integrations": {"frameworks": list(FRAMEWORKS)},
        # Quota is GPUs (a team's share of the fleet); the other resources of a whole-node pod follow.
        "resources": {"quotaCheckStrategy": "IgnoreUndeclared"},
        "clientConnection": {"qps": 300, "burst": 500},
    }


FEATURE_GATES = "VisibilityOnDemand=false"
"""The visibility API needs an APIService for Kueue's aggregated server, which is not rendered here."""


def install(spec: AddonsSpec) -> list[Obj]:
    """Kueue's controller as its release deploys it (names from config/default: ``kueue-`` prefix)."""
    rules = _load("role.yaml")[0]["rules"]
    leader_rules = [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
        },
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
        },
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
    ]
    config = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta("kueue-manager-config", NS, app=APP),
        "data": {"controller_manager_config.yaml": yaml.safe_dump(configuration(spec), sort_keys=False)},
    }
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": meta(WEBHOOK_SECRET, NS, app=APP),
        "type": "Opaque",
        # Kueue's certificate rotator fills it (it must exist: the rotator updates, never creates it).
        "stringData": {},
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta(WEBHOOK_SERVICE, NS, app=APP),
        "spec": {
            "selector": {"app.kubernetes.io/name": APP, "control-plane": "controller-manager"},
            "ports": [{"port": 443, "protocol": "TCP", "targetPort": WEBHOOK_PORT}],
        },
    }
    deployment = _manager(spec)
    return [
        namespace(NS, app=APP, pod_security_level="restricted"),
        *crds(),
        service_account(MANAGER, NS, app=APP),
        cluster_role("kueue-manager-role", rules, app=APP),
        cluster_role_binding("kueue-manager-rolebinding", "kueue-manager-role", MANAGER, NS, app=APP),
        role("kueue-leader-election-role", NS, leader_rules, app=APP),
        # Its certificates' Secret (config/components/rbac/manager_secrets_role.yaml): its own namespace only.
        role(
            "kueue-manager-secrets-role",
            NS,
            [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "update", "watch"]}],
            app=APP,
        ),
        role_binding("kueue-manager-secrets-rolebinding", NS, "kueue-manager-secrets-role", MANAGER, app=APP),
        role_binding("kueue-leader-election-rolebinding", NS, "kueue-leader-election-role", MANAGER, app=APP),
        config,
        secret,
        service,
        deployment,
        *webhooks(spec),
    ]


def _manager(spec: AddonsSpec) -> Obj:
    """Kueue's controller-manager Deployment (config/manager/manager.yaml), on the system nodes."""
    q = spec.queues
    pod_labels = {"app.kubernetes.io/name": APP, "control-plane": "controller-manager"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta(MANAGER, NS, app=APP, component="controller-manager"),
        "spec": {
            "replicas": q.replicas,
            "selector": {"matchLabels": pod_labels},
            "template": {
                "metadata": {"labels": pod_labels},
                "spec": {
                    "serviceAccountName": MANAGER,
                    "priorityClassName": "system-cluster-critical",
                    # A cluster service: never on a node bought for its GPUs.
                    "affinity": system_nodes(spec),
                    "securityContext": pod_security(),
                    "terminationGracePeriodSeconds": 10,
                    "containers": [
                        {
                            "name": "manager",
                            "image": q.image,
                            "command": ["/manager"],
                            "args": [
                                "--config=/controller_manager_config.yaml",
                                "--zap-log-level=2",
                                f"--feature-gates={FEATURE_GATES}",
                            ],
                            "ports": [{"containerPort": WEBHOOK_PORT, "name": "webhook-server", "protocol": "TCP"}],
                            "livenessProbe": {
                                "httpGet": {"path": "/healthz", "port": HEALTH_PORT},
                                "initialDelaySeconds": 15,
                            },
                            "readinessProbe": {
                                "httpGet": {"path": "/readyz", "port": HEALTH_PORT},
                                "initialDelaySeconds": 5,
                            },
                            # The release's sizes are for small clusters (500m / 512Mi); Kueue caches every
                            # Node, and every Pod for Topology Aware Scheduling. Not measured at 7,500 nodes.
                            # Memory request = limit, as every add-on here (no overcommit).
                            "resources": {
                                "requests": {"cpu": "1", "memory": "4Gi"},
                                "limits": {"cpu": "4", "memory": "4Gi"},
                            },
                            "securityContext": restricted(),
                            "volumeMounts": [
                                {
                                    "name": "cert",
                                    "mountPath": "/tmp/k8s-webhook-server/serving-certs",
                                    "readOnly": True,
                                },
                                {
                                    "name": "config",
                                    "mountPath": "/controller_manager_config.yaml",
                                    "subPath": "controller_manager_config.yaml",
                                },
                            ],
                        }
                    ],
                    "volumes": [
                        {"name": "cert", "secret": {"secretName": WEBHOOK_SECRET, "defaultMode": 420}},
                        {"name": "config", "configMap": {"name": "kueue-manager-config"}},
                    ],
                },
            },
        },
    }


def topology(spec: AddonsSpec) -> Obj:
    """Island, then node: a job that requires the island level lands on one InfiniBand fabric."""
    return {
        "apiVersion": API,
        "kind": "Topology",
        "metadata": meta(TOPOLOGY, app=APP),
        "spec": {"levels": [{"nodeLabel": spec.ib_island_key}, {"nodeLabel": HOSTNAME}]},
    }


def owners(spec: AddonsSpec) -> dict[str, str]:
    """GPU pool -> the team that owns it (pools without a team are not in any queue)."""
    return {p: t.name for t in spec.teams for p in t.pools}


def queued_pools(spec: AddonsSpec) -> list[PoolFacts]:
    owned = owners(spec)
    return [p for p in spec.pools if p.name in owned]


def flavor(spec: AddonsSpec, pool: PoolFacts) -> Obj:
    """The pool's nodes, by its label. Its owner's taint is tolerated by whatever Kueue admits here (the
    taint keeps pods that bypass the queues off the pool; the cohort's quota decides who runs on it)."""
    owner = owners(spec)[pool.name]
    return {
        "apiVersion": API,
        "kind": "ResourceFlavor",
        "metadata": meta(pool.name, app=APP),
        "spec": {
            "nodeLabels": {spec.pool_key: pool.name},
            "tolerations": [{"key": spec.team_key, "operator": "Equal", "value": owner, "effect": "NoSchedule"}],
            "topologyName": TOPOLOGY,
        },
    }


def nominal(spec: AddonsSpec, team: TeamSpec) -> dict[str, int]:
    """Pool -> the team's nominal GPUs there: its quota, filling its own pools in name order (by default
    the quota is exactly its pools' GPUs, so each pool counts whole)."""
    left = team.gpu_quota
    out = {}
    for pool in queued_pools(spec):
        if pool.name in team.pools:
            take = min(left, pool.gpus_per_node * pool.nodes)
            out[pool.name] = take
            left -= take
    return out


def cluster_queue(spec: AddonsSpec, team: TeamSpec) -> Obj:
    q = spec.queues
    own = nominal(spec, team)
    flavors = []
    for pool in queued_pools(spec):
        gpus = own.get(pool.name, 0)
        resource: dict[str, Any] = {"name": GPU, "nominalQuota": gpus}
        if q.borrowing_limit_percent is not None:
            resource["borrowingLimit"] = q.borrowing_limit_percent * team.gpu_quota // 100
        if q.lending_limit_percent is not None:
            resource["lendingLimit"] = q.lending_limit_percent * gpus // 100
        flavors.append({"name": pool.name, "resources": [resource]})
    return {
        "apiVersion": API,
        "kind": "ClusterQueue",
        "metadata": meta(team.name, app=APP),
        "spec": {
            "cohortName": q.cohort,
            # Every team's namespace only: a LocalQueue elsewhere cannot point here.
            "namespaceSelector": {"matchLabels": {spec.team_key: team.name}},
            # Own pools first: a job borrows another team's pool only when its own is full.
            "resourceGroups": [
                {
                    "coveredResources": [GPU],
                    "flavors": sorted(flavors, key=lambda f: (f["name"] not in own, f["name"])),
                }
            ],
            "queueingStrategy": "BestEffortFIFO",
            "preemption": {
                "reclaimWithinCohort": "Any",
                "borrowWithinCohort": {"policy": "LowerPriority"},
                "withinClusterQueue": "LowerPriority",
            },
            # A lender reclaims on its own pool rather than moving on to borrow another (measured: with
            # TryNextFlavor Kueue settled on the other pool, found nothing to preempt there, and left the
            # lender's job pending: "no candidate workloads allowed for preemption").
            "flavorFungibility": {"whenCanBorrow": "MayStopSearch", "whenCanPreempt": "MayStopSearch"},
        },
    }


def local_queue(team: TeamSpec) -> Obj:
    return {
        "apiVersion": API,
        "kind": "LocalQueue",
        "metadata": meta(team.name, team.name, app=APP),
        "spec": {"clusterQueue": team.name},
    }


def cohort(spec: AddonsSpec) -> Obj:
    return {"apiVersion": API, "kind": "Cohort", "metadata": meta(spec.queues.cohort, app=APP), "spec": {}}


def team_queues(spec: AddonsSpec) -> list[Obj]:
    """The queue objects (no controller): topology, flavors, cohort, a ClusterQueue and LocalQueue per team."""
    if not spec.queues.enabled or not spec.teams:
        return []
    out = [topology(spec), cohort(spec)]
    out += [flavor(spec, p) for p in queued_pools(spec)]
    for team in spec.teams:
        out += [cluster_queue(spec, team), local_queue(team)]
    return out


def queues(spec: AddonsSpec) -> list[Obj]:
    if not spec.queues.enabled:
        return []
    return install(spec) + team_queues(spec)


def example_job(spec: AddonsSpec, team: TeamSpec, *, name: str = "pretrain", nodes: int = 64) -> Obj:
    """A documented multi-node job (docs/queues.md): the gang example's pods (a whole node each, NCCL over
    InfiniBand) as an indexed Job in the team's queue, required to fit one island. No PodGroup, no second
    scheduler, no pod affinity: Kueue admits all of it or none, and picks the island for all of it."""
    from modules.cluster.objects import gang

    template = json.loads(json.dumps(gang.example(spec, team, name=name, nodes=nodes)[1]["spec"]["template"]))
    pod = template["spec"]
    pod.pop("schedulerName")
    pod.pop("affinity")
    pod["restartPolicy"] = "Never"
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": team.name, "labels": {QUEUE_LABEL: team.name}},
        "spec": {
            "parallelism": nodes,
            "completions": nodes,
            # Each pod's rank is its JOB_COMPLETION_INDEX.
            "completionMode": "Indexed",
            "template": {
                "metadata": {"annotations": {REQUIRED_TOPOLOGY: spec.ib_island_key}},
                "spec": pod,
            },
        },
    }
