"""The inverse of sizing: how many pod IPs per node (or how many nodes) fit under the limits in force.

With Azure CNI every pod is an IP configuration in the VNet, and Azure caps a VNet at 65,536 private
IPs and a group of peered VNets at 128,000, neither of which a support request raises. So at scale
the pod IPs per node are a budget: ``fit`` answers it before anything is planned.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from modules.address_plan.limits import Limits
from modules.address_plan.subnet_sizes import POD_BATCH, parse_surge
from modules.errors import AgkError

FIT_PLUGINS = ("azure-cni", "azure-cni-pod-subnet")


class Budget(NamedTuple):
    """Addresses left under one limit for the pool(s) the question is about."""

    name: str
    """The limit (``vnet-private-ips``, ``peered-group-private-ips``)."""
    value: int
    """Its value in force."""
    used: int
    """What the rest of the network already takes under it."""
    scope: str = "one VNet"
    """What the limit counts (``VNet prod-7500``, ``peered group of hub``)."""

    @property
    def left(self) -> int:
        return max(self.value - self.used, 0)


class Fit(NamedTuple):
    plugin: str
    nodes: int
    surge_nodes: int
    pod_ips_per_node: int
    vnet_ips_needed: int
    binding_limit: tuple[str, int]
    max_nodes: int | None = None
    scale_sets: int = 1
    budgets: tuple[Budget, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "plugin": self.plugin,
            "nodes": self.nodes,
            "surge_nodes": self.surge_nodes,
            "pod_ips_per_node": self.pod_ips_per_node,
            "vnet_ips_needed": self.vnet_ips_needed,
            "binding_limit": {"name": self.binding_limit[0], "value": self.binding_limit[1]},
            "scale_sets": self.scale_sets,
            "budgets": [
                {"name": b.name, "scope": b.scope, "value": b.value, "used": b.used, "left": b.left}
                for b in self.budgets
            ],
        }
        if self.max_nodes is not None:
            out["max_nodes"] = self.max_nodes
        return out


def default_budgets(limits: Limits) -> tuple[Budget, ...]:
    """One VNet with nothing else in it (and a peered group no larger than that VNet)."""
    return (Budget("vnet-private-ips", limits["vnet-private-ips"], 0),)


def _ips(plugin: str, total: int, pod_ips: int) -> int:
    """Addresses ``total`` nodes take from the VNet with ``pod_ips`` each."""
    if plugin == "azure-cni":
        return total * (1 + pod_ips)
    # Pod subnet, dynamic mode: addresses go to nodes in batches of 16.
    return total + total * max(POD_BATCH, math.ceil(pod_ips / POD_BATCH) * POD_BATCH)


def _per_node_cap(plugin: str, limits: Limits) -> tuple[str, int]:
    if plugin == "azure-cni":
        return "nic-private-ips", limits["nic-private-ips"] - 1
    return "max-pods-max", limits["max-pods-max"]


def _scale_sets(total: int, infiniband: bool, limits: Limits) -> int:
    cap = limits["vmss-instances-spg"] if infiniband else limits["vmss-instances-large"]
    return math.ceil(total / cap)


def most_pod_ips(
    plugin: str,
    nodes: int,
    surge: int | str,
    limits: Limits,
    *,
    infiniband: bool = False,
    budgets: tuple[Budget, ...] | None = None,
) -> Fit:
    """The most pod IPs per node that ``nodes`` (+ surge) nodes can have under every budget."""
    if plugin not in FIT_PLUGINS:
        raise AgkError(f"--plugin {plugin}: fit answers for {' and '.join(FIT_PLUGINS)}: use one of them")
    surge_nodes = parse_surge(surge, nodes, where="--surge")
    total = nodes + surge_nodes
    chosen = budgets or default_budgets(limits)
    cap_name, cap = _per_node_cap(plugin, limits)
    best, binding = cap, (cap_name, limits[cap_name])
    for budget in chosen:
        if plugin == "azure-cni":
            fits = budget.left // total - 1
        else:
            fits = (budget.left - total) // (total * POD_BATCH) * POD_BATCH if budget.left > total else 0
        if fits < best:
            best, binding = max(fits, 0), (budget.name, budget.value)
    return Fit(
        plugin,
        nodes,
        surge_nodes,
        best,
        _ips(plugin, total, best) if best > 0 else total,
        binding,
        scale_sets=_scale_sets(total, infiniband, limits),
        budgets=chosen,
    )


def most_nodes(
    pod_ips: int,
    surge: int | str,
    limits: Limits,
    *,
    infiniband: bool = False,
    budgets: tuple[Budget, ...] | None = None,
) -> Fit:
    """The most Azure CNI nodes (surge included in the count) that fit with ``pod_ips`` each."""
    nic = limits["nic-private-ips"]
    if pod_ips + 1 > nic:
        raise AgkError(
            f"--pod-ips: 1 + {pod_ips} IP configurations exceed the {nic} a NIC holds: use {nic - 1} or fewer"
        )
    chosen = budgets or default_budgets(limits)
    tightest = min(chosen, key=lambda b: b.left // (1 + pod_ips))
    total = tightest.left // (1 + pod_ips)
    nodes = total
    while nodes > 0 and nodes + parse_surge(surge, nodes, where="--surge") > total:
        nodes -= 1
    surge_nodes = parse_surge(surge, nodes, where="--surge") if nodes else 0
    return Fit(
        "azure-cni",
        nodes,
        surge_nodes,
        pod_ips,
        (nodes + surge_nodes) * (1 + pod_ips),
        (tightest.name, tightest.value),
        max_nodes=nodes,
        scale_sets=_scale_sets(max(nodes + surge_nodes, 1), infiniband, limits),
        budgets=chosen,
    )
