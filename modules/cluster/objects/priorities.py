"""PriorityClasses: who preempts whom on the GPU nodes."""

from __future__ import annotations

from modules.cluster.objects.common import Obj, meta

TRAINING = 100_000
DEFAULT = 1_000
# Above the balloons (a borrower displaces a balloon), below every team's own work (a team's
# job preempts borrowers on its nodes).
BORROW = 100
# -1, not the widely copied -1000: cluster-autoscaler treats pods below -10 as expendable, so
# they neither trigger a scale-up nor keep a node from being scaled down; a balloon must do
# both (hold warm capacity). -1 is still lower than anything real, so every pod preempts it.
BALLOON = -1

CLASSES: dict[str, tuple[int, str, str]] = {
    # name: (value, preemptionPolicy, description)
    "training": (TRAINING, "PreemptLowerPriority", "Research training jobs on the team's own nodes."),
    "default": (DEFAULT, "PreemptLowerPriority", "Everything that names no priority class."),
    "borrow": (BORROW, "PreemptLowerPriority", "Low priority: may use other teams' idle nodes."),
    "balloon": (BALLOON, "Never", "Pause pods holding warm capacity; every real pod preempts them."),
}


def priority_classes() -> list[Obj]:
    return [
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": meta(name, app="priorities"),
            "value": value,
            "globalDefault": name == "default",
            "preemptionPolicy": policy,
            "description": description,
        }
        for name, (value, policy, description) in CLASSES.items()
    ]
