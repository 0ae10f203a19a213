"""Balloons: pause pods that hold whole GPU nodes as warm capacity until real work preempts them."""

from __future__ import annotations

from modules.bootstrap import versions
from modules.cluster.objects.common import BALLOON_NS, Obj, meta, namespace, pod_security, resources, restricted
from modules.cluster.objects.teams import GPU
from modules.cluster.spec import AddonsSpec, BalloonSpec

APP = "balloon"


def balloon(spec: AddonsSpec, b: BalloonSpec) -> Obj:
    pod_labels = {"app.kubernetes.io/name": APP, spec.pool_key: b.pool}
    tolerations = (
        [{"key": spec.team_key, "operator": "Equal", "value": b.team, "effect": "NoSchedule"}] if b.team else []
    )
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta(f"balloon-{b.pool}", BALLOON_NS, app=APP, extra_labels={spec.pool_key: b.pool}),
        "spec": {
            "replicas": b.replicas,
            "selector": {"matchLabels": pod_labels},
            "template": {
                "metadata": {"labels": pod_labels},
                "spec": {
                    "priorityClassName": "balloon",
                    # Preempted balloons should free the node at once.
                    "terminationGracePeriodSeconds": 0,
                    "automountServiceAccountToken": False,
                    "nodeSelector": {spec.pool_key: b.pool},
                    "tolerations": tolerations,
                    "affinity": {
                        "podAntiAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": [
                                {
                                    "labelSelector": {"matchLabels": {"app.kubernetes.io/name": APP}},
                                    "topologyKey": "kubernetes.io/hostname",
                                }
                            ]
                        }
                    },
                    "securityContext": pod_security(65535),
                    "containers": [
                        {
                            "name": "pause",
                            # The sandbox image kubeadm pins for this minor: already on every node.
                            "image": versions.release(spec.kubernetes_version).pause_image,
                            "resources": resources("10m", "16Mi", extra={GPU: str(b.gpus_per_node)}),
                            "securityContext": restricted(),
                        }
                    ],
                },
            },
        },
    }


def balloons(spec: AddonsSpec) -> list[Obj]:
    return [namespace(BALLOON_NS, app=APP, pod_security_level="restricted")] + [balloon(spec, b) for b in spec.balloons]
