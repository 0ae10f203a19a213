"""Node label and taint keys this toolkit sets (``<label_domain>/<name>``), and the add-ons' names the hosts'
alert rules watch.

The node bootstrap registers nodes with them and the add-ons select and tolerate by them: both read
the names here, so they cannot drift apart.
"""

from __future__ import annotations

POOL = "pool"
"""The pool a node belongs to (the config's pool name)."""
TEAM = "team"
"""Label and NoSchedule taint of a team's pool."""
PREFLIGHT = "preflight"
"""``pending`` until the preflight diagnostics pass (label and NoSchedule taint), ``failed`` after a failure."""
ACCELERATOR = "accelerator"
ACCELERATOR_NVIDIA = "nvidia"
"""GPU nodes carry ``<domain>/accelerator=nvidia``; system (CPU) nodes lack the label."""
GPU_MODEL = "gpu-model"
IB_ISLAND = "ib-island"
"""The scale set a GPU node belongs to: one placement group, so one InfiniBand fabric. Read at boot from
the instance metadata service (``compute.vmScaleSetName``): a multi-node job that must talk over
InfiniBand keeps all its pods on one value of this label."""
FATAL_XID = "gpu-fatal-xid"
"""NoExecute taint the remediation controller puts on a node with a fatal XID."""
XID_CONDITION = "GPUFatalXid"
"""The node condition node-problem-detector sets on a fatal XID: what the remediation acts on, and what every
Prometheus host reads through kube-state-metrics (rules/islands.yml), whichever share scrapes the node."""

HEALTH_NAMESPACE = "gpu-health"
"""The add-ons' namespace of the GPU health agents and the fleet's jobs (remediation, re-test, roll)."""
ROLL = "gpu-roll"
POLICY_AGENT = "kube-network-policies"
"""The NetworkPolicy engine's DaemonSet in kube-system (modules/cluster/objects/policy_engine.py), which an alert
watches (modules/bootstrap/templates/rules/nodes.yml.j2)."""
"""The pool roll's CronJob (add-ons); Prometheus' GpuRollPaused fires while it is suspended."""


def key(domain: str, name: str) -> str:
    return f"{domain}/{name}"
