"""Gang scheduling: scheduler-plugins' Coscheduling plugin as a second scheduler.

A pod opts in with ``schedulerName: <gang.scheduler_name>`` and the label
``scheduling.x-k8s.io/pod-group: <PodGroup>``; Coscheduling holds every member in Permit until
``minMember`` of them fit, so a 64-node job never sits on 63 nodes waiting for the last one.
The scheduler-plugins controller (which only keeps PodGroup ``status`` up to date) is not
deployed: Coscheduling counts members itself, and the controller would also need the
ElasticQuota CRD that nothing here uses.
"""

from __future__ import annotations

from typing import Any

import yaml

from modules.cluster.objects import tenancy
from modules.cluster.objects.common import (
    GANG_NS,
    Obj,
    cluster_role,
    cluster_role_binding,
    meta,
    namespace,
    pod_security,
    restricted,
    service_account,
    sized,
    system_nodes,
)
from modules.cluster.objects.rdma import RESOURCE as RDMA
from modules.cluster.objects.teams import GPU
from modules.cluster.spec import AddonsSpec, TeamSpec
from modules.vm_sizing.formulas import Resources
from modules.vm_sizing.skus import sku

APP = "scheduler-plugins"
GROUP = "scheduling.x-k8s.io"
POD_GROUP_LABEL = f"{GROUP}/pod-group"
CONFIG_PATH = "/etc/kubernetes/scheduler-config.yaml"

_INT32: Obj = {"type": "integer", "format": "int32"}

# NCCL topology files by VM family: the Ubuntu-HPC image's paths (Azure/azhpc-images
# components/setup_sku_customizations.sh; customizations/ndv5.sh also writes /etc/nccl.conf, which a container
# does not see: hence the env below), filled from the team's ConfigMap, not the host (objects/tenancy.py).
TOPO_FILES = {suffix: f"{tenancy.MOUNT}/{fam}/topo.xml" for suffix, fam in tenancy.FAMILIES.items()}


def nccl_env(vm_size: str) -> list[Obj]:
    """NCCL over InfiniBand on Azure ND (the HPC image's /etc/nccl.conf, as environment variables).

    NCCL_IB_HCA=mlx5_ib: the image names the InfiniBand HCAs mlx5_ib<N> and the Ethernet VF mlx5_an0
    (install_azure_persistent_rdma_naming.sh); NCCL matches the value as a prefix (NCCL docs, Environment
    Variables). NCCL_SOCKET_IFNAME=eth0: bootstrap traffic over the pod's interface.
    """
    env = [
        {"name": "NCCL_IB_HCA", "value": "mlx5_ib"},
        {"name": "NCCL_SOCKET_IFNAME", "value": "eth0"},
        {"name": "NCCL_IB_PCI_RELAXED_ORDERING", "value": "1"},
        {"name": "NCCL_IGNORE_CPU_AFFINITY", "value": "1"},
        {"name": "NCCL_DEBUG", "value": "WARN"},
    ]
    family = vm_size.lower().rsplit("_", 1)[-1]
    if family in TOPO_FILES:
        env.append({"name": "NCCL_TOPO_FILE", "value": TOPO_FILES[family]})
    return env


def podgroup_schema() -> Obj:
    """openAPIV3Schema of PodGroup v1alpha1 (as in scheduler-plugins' manifests/crds)."""
    return {
        "type": "object",
        "description": "A collection of pods scheduled all together or not at all.",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": {
                "type": "object",
                "properties": {
                    "minMember": {**_INT32, "minimum": 1, "description": "Pods that must fit together."},
                    "minResources": {
                        "type": "object",
                        "description": "Resources the whole group needs before any member is bound.",
                        "additionalProperties": {
                            "anyOf": [{"type": "integer"}, {"type": "string"}],
                            "pattern": r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|"
                            r"([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$",
                            "x-kubernetes-int-or-string": True,
                        },
                    },
                    "scheduleTimeoutSeconds": {**_INT32, "description": "Wait for the gang before retrying."},
                },
            },
            "status": {
                "type": "object",
                "properties": {
                    "failed": _INT32,
                    "occupiedBy": {"type": "string"},
                    "phase": {"type": "string"},
                    "running": _INT32,
                    "scheduleStartTime": {"type": "string", "format": "date-time"},
                    "succeeded": _INT32,
                },
            },
        },
    }


def podgroup_crd() -> Obj:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": meta(
            f"podgroups.{GROUP}",
            app=APP,
            annotations={"api-approved.kubernetes.io": "https://github.com/kubernetes-sigs/scheduler-plugins/pull/50"},
        ),
        "spec": {
            "group": GROUP,
            "names": {
                "kind": "PodGroup",
                "listKind": "PodGroupList",
                "plural": "podgroups",
                "singular": "podgroup",
                "shortNames": ["pg", "pgs"],
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1alpha1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": podgroup_schema()},
                    "subresources": {"status": {}},
                }
            ],
        },
    }


def scheduler_config(spec: AddonsSpec) -> dict[str, Any]:
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "leaderElection": {
            "leaderElect": True,
            "resourceNamespace": GANG_NS,
            "resourceName": spec.gang.scheduler_name,
        },
        "profiles": [
            {
                "schedulerName": spec.gang.scheduler_name,
                "plugins": {
                    # Coscheduling brings its own queue sort (keeps a gang's members together).
                    "multiPoint": {"enabled": [{"name": "Coscheduling"}], "disabled": [{"name": "PrioritySort"}]},
                },
                "pluginConfig": [
                    {
                        "name": "Coscheduling",
                        "args": {"permitWaitingTimeSeconds": spec.gang.permit_waiting_seconds},
                    }
                ],
            }
        ],
    }


def _rules() -> list[Obj]:
    def rule(groups: list[str], res: list[str], verbs: list[str]) -> Obj:
        return {"apiGroups": groups, "resources": res, "verbs": verbs}

    read = ["get", "list", "watch"]
    return [
        rule([""], ["namespaces", "replicationcontrollers", "services"], read),
        rule(["", "events.k8s.io"], ["events"], ["create", "patch", "update"]),
        rule([""], ["nodes"], read),
        rule([""], ["pods"], [*read, "delete", "update"]),
        rule([""], ["bindings", "pods/binding"], ["create"]),
        rule([""], ["pods/status"], ["patch", "update"]),
        rule(["apps"], ["replicasets", "statefulsets"], read),
        rule(["policy"], ["poddisruptionbudgets"], read),
        rule([""], ["persistentvolumeclaims", "persistentvolumes"], [*read, "patch", "update"]),
        rule(["authentication.k8s.io"], ["tokenreviews"], ["create"]),
        rule(["authorization.k8s.io"], ["subjectaccessreviews"], ["create"]),
        rule(
            ["storage.k8s.io"],
            ["csinodes", "storageclasses", "csidrivers", "csistoragecapacities", "volumeattachments"],
            read,
        ),
        rule(["resource.k8s.io"], ["resourceclaims", "resourceslices", "deviceclasses"], read),
        rule([GROUP], ["podgroups", "podgroups/status"], [*read, "update", "patch"]),
    ]


def gang(spec: AddonsSpec) -> list[Obj]:
    if not spec.gang.enabled:
        return []
    name = spec.gang.scheduler_name
    config = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta(f"{name}-config", GANG_NS, app=APP),
        "data": {"scheduler-config.yaml": yaml.safe_dump(scheduler_config(spec), sort_keys=False)},
    }
    lease_role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": meta(f"{name}-leader-election", GANG_NS, app=APP),
        "rules": [
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create", "get", "update"]}
        ],
    }
    lease_binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": meta(f"{name}-leader-election", GANG_NS, app=APP),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": f"{name}-leader-election"},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": GANG_NS}],
    }
    auth_reader = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": meta(f"{name}-authentication-reader", "kube-system", app=APP),
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": "extension-apiserver-authentication-reader",
        },
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": GANG_NS}],
    }
    probe = {"httpGet": {"path": "/healthz", "port": 10259, "scheme": "HTTPS"}, "initialDelaySeconds": 15}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta(name, GANG_NS, app=APP, component="scheduler"),
        "spec": {
            "replicas": spec.gang.replicas,
            "selector": {"matchLabels": {"app.kubernetes.io/name": APP}},
            "template": {
                "metadata": {"labels": {"app.kubernetes.io/name": APP}},
                "spec": {
                    "serviceAccountName": name,
                    "priorityClassName": "system-cluster-critical",
                    # A scheduler is a cluster service: never on a node bought for its GPUs.
                    "affinity": system_nodes(spec),
                    "securityContext": pod_security(),
                    "containers": [
                        {
                            "name": "kube-scheduler",
                            "image": spec.gang.scheduler_image,
                            "command": ["/bin/kube-scheduler", f"--config={CONFIG_PATH}", "--v=2"],
                            "livenessProbe": probe,
                            "readinessProbe": {"httpGet": probe["httpGet"]},
                            # It caches every Node and Pod: sized for the cluster (formulas.gang_scheduler).
                            "resources": sized(
                                Resources(spec.gang.cpu_millis, spec.gang.cpu_limit_millis, spec.gang.memory_mib)
                            ),
                            "securityContext": restricted(),
                            "volumeMounts": [
                                {"name": "config", "mountPath": "/etc/kubernetes", "readOnly": True},
                                {"name": "tmp", "mountPath": "/tmp"},
                            ],
                        }
                    ],
                    "volumes": [
                        {"name": "config", "configMap": {"name": f"{name}-config"}},
                        {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}},
                    ],
                },
            },
        },
    }
    return [
        namespace(GANG_NS, app=APP, pod_security_level="restricted"),
        podgroup_crd(),
        service_account(name, GANG_NS, app=APP),
        cluster_role(name, _rules(), app=APP),
        cluster_role_binding(name, name, name, GANG_NS, app=APP),
        lease_role,
        lease_binding,
        auth_reader,
        config,
        deployment,
    ]


def example(spec: AddonsSpec, team: TeamSpec, *, name: str = "pretrain", nodes: int = 4) -> list[Obj]:
    """A documented gang job: a PodGroup and a StatefulSet whose pods all start or none do.

    Each member takes a whole node (all its GPUs and, through ``rdma/ib``, all its InfiniBand HCAs),
    and all members share one InfiniBand island (the scale set: one placement group, one fabric).
    """
    pool = next((p for p in spec.pools if p.name in team.pools), None)
    gpus = pool.gpus_per_node if pool else 8
    vm_size = pool.vm_size if pool else "Standard_ND96isr_H100_v5"
    vm = sku(vm_size)
    # Most of the node, sized from its VM: what is left covers the kubelet's reservations (kube- and
    # system-reserved, the eviction threshold) and the node agents. A fixed figure did not fit: 1500Gi
    # never fits a 900 GiB ND96asr_v4, and the real scheduler left such a gang pending for ever.
    cpu, cpu_limit, memory = str(vm.vcpus * 8 // 10), str(vm.vcpus * 9 // 10), f"{vm.memory_gib * 8 // 10}Gi"
    group = {
        "apiVersion": f"{GROUP}/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": team.name},
        "spec": {
            "minMember": nodes,
            "minResources": {GPU: str(nodes * gpus)},
            "scheduleTimeoutSeconds": 600,
        },
    }
    pod_labels = {"app.kubernetes.io/name": name, POD_GROUP_LABEL: name}
    statefulset = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": team.name},
        "spec": {
            "serviceName": name,
            "replicas": nodes,
            # All members are created at once; Coscheduling binds them together.
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": pod_labels},
            "template": {
                "metadata": {"labels": pod_labels},
                "spec": {
                    "schedulerName": spec.gang.scheduler_name,
                    "priorityClassName": "training",
                    # One InfiniBand island: every member on nodes of the same scale set (one placement
                    # group, one IB fabric). The first member may go anywhere; the rest follow it.
                    "affinity": {
                        "podAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": [
                                {
                                    "labelSelector": {"matchLabels": {POD_GROUP_LABEL: name}},
                                    "topologyKey": spec.ib_island_key,
                                }
                            ]
                        }
                    },
                    "tolerations": [
                        {"key": spec.team_key, "operator": "Equal", "value": team.name, "effect": "NoSchedule"}
                    ],
                    "containers": [
                        {
                            "name": "trainer",
                            "image": "registry.example.com/research/trainer:2024.06",
                            "command": ["torchrun", f"--nnodes={nodes}", f"--nproc-per-node={gpus}", "train.py"],
                            "env": nccl_env(vm_size),
                            "resources": {
                                "requests": {GPU: str(gpus), RDMA: "1", "cpu": cpu, "memory": memory},
                                "limits": {GPU: str(gpus), RDMA: "1", "cpu": cpu_limit, "memory": memory},
                            },
                            # InfiniBand registers (pins) memory: IPC_LOCK lifts the memlock limit
                            # (Mellanox's example RDMA pod adds exactly this).
                            "securityContext": {"capabilities": {"add": ["IPC_LOCK"]}},
                            "volumeMounts": [
                                {"name": "dshm", "mountPath": "/dev/shm"},
                                *tenancy.topology_mount(vm_size),
                            ],
                        }
                    ],
                    "volumes": [
                        # NCCL's intra-node transport and the data loaders use /dev/shm; the runtime's is 64 MiB.
                        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}},
                        # No hostPath (team namespaces refuse it): the topology file is the team's ConfigMap.
                        *tenancy.topology_volume(vm_size),
                    ],
                },
            },
        },
    }
    return [group, statefulset]
