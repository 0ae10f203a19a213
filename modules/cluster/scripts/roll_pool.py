"""CronJob: roll the GPU pools' nodes onto their scale set's latest model (a new image, a Kubernetes patch), a
few nodes at a time, each drained first.

Why a small orchestrator rather than the scale sets' Rolling upgrade policy: Azure's rolling upgrade takes
batches by percentage and a health probe but knows nothing of Kubernetes. It neither cordons nor drains
(PodDisruptionBudgets are not asked), cannot tell which InfiniBand island runs a gang, and a reimaged VM
whose Node object was kept comes back without the preflight taint (the kubelet applies ``registerWithTaints``
only when it creates its Node). So the scale sets keep upgrade policy Manual and this job brings one instance
at a time to the model with Update Instances (``manualupgrade``) once its node is drained.

A node in the roll (the state ConfigMap ``gpu-roll-state``) goes through:

- ``draining``: cordoned; its pods are evicted through the Eviction API (DaemonSet and mirror pods stay), so
  a PodDisruptionBudget holds the drain back rather than being broken;
- ``upgrading``: drained; the Node is deleted and the instance gets Update Instances;
- ``booting``: a new Node of that name registered (another uid), in preflight;
- done when preflight releases it. A failed preflight, a drain past ``drain_timeout_minutes`` or no new Node
  within ``node_timeout_minutes`` fails the node: it stays out of service for a person (and the preflight
  alerts), and ``pause_after_failed`` failures suspend this CronJob (``spec.suspend``; alert GpuRollPaused).
  Resuming it (``spec.suspend: false``) acknowledges those failures: the roll goes on and skips those nodes.

New nodes join while there is room: at most ``max_unavailable_percent`` of a pool's nodes out of service at
once (at least one), counting every node out for any reason (cordoned, in preflight, fenced, in the roll),
and at most ``island_max_unavailable_percent`` of an InfiniBand island (at least one) where admitted training
work runs (a coscheduled gang member or a Kueue workload's pod). Nodes running no such work go first. Which
nodes are behind is Azure's answer: the instances whose ``latestModelApplied`` is false. Nodes that
remediation fenced (the fatal-XID taint) or that failed preflight are left to remediation and people.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import time
import urllib.error
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

if __package__:  # imported as part of the toolkit (tests, type checking)
    from modules.cluster.scripts.azure import Arm, AzureError, Instance, instance_of
    from modules.cluster.scripts.kube import Api, Conflict, NotFound
else:  # run from the ConfigMap mount, next to kube.py and azure.py
    from azure import Arm, AzureError, Instance, instance_of  # type: ignore[import-not-found,no-redef]
    from kube import Api, Conflict, NotFound  # type: ignore[import-not-found,no-redef]

RULE_KEY = "roll.json"
STATE_KEY = "state.json"
STAMP = "%Y-%m-%dT%H:%M:%SZ"
GAP_RUNS = 3
"""A run that finds no run for this many intervals moves the in-flight timers on by the gap."""
DRAIN_WAIT_S = 0.0
"""How long one run waits for evicted pods to go. None: a run evicts and moves on (it may start dozens of
nodes), and the next run finds the node empty."""


def stamp(when: datetime.datetime) -> str:
    return when.strftime(STAMP)


def parse(text: str) -> datetime.datetime:
    return datetime.datetime.strptime(text, STAMP).replace(tzinfo=datetime.UTC)


@dataclass(frozen=True)
class Node:
    """The fields of a Node the roll reads: a whole Node is ~20 KB of JSON, and a run lists every GPU node."""

    name: str
    uid: str
    pool: str
    island: str | None
    provider_id: str
    preflight: str | None
    fenced: bool
    unschedulable: bool
    ready: bool = True

    @property
    def out(self) -> bool:
        """Out of service for any reason: cordoned, in or failed preflight, fenced by remediation, not Ready (its
        kubelet is gone: a drain there would wait on pods that never finish terminating)."""
        return self.unschedulable or self.preflight is not None or self.fenced or not self.ready


def slim(node: dict[str, Any], rule: dict[str, Any]) -> Node:
    meta, spec = node.get("metadata") or {}, node.get("spec") or {}
    labels = meta.get("labels") or {}
    return Node(
        name=meta["name"],
        uid=meta.get("uid", ""),
        pool=labels.get(rule["pool_key"], ""),
        island=labels.get(rule["island_key"]),
        provider_id=spec.get("providerID", ""),
        preflight=labels.get(rule["preflight_key"]),
        fenced=any(t.get("key") == rule["fence_key"] for t in spec.get("taints") or []),
        unschedulable=bool(spec.get("unschedulable")),
        ready=any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in (node.get("status") or {}).get("conditions") or []
        ),
    )


def scan(api: Api, rule: dict[str, Any]) -> dict[str, Node]:
    """Every GPU node, page by page (a few hundred bytes each kept, whatever the fleet's size)."""
    return {
        n.name: n
        for page in api.pages("/api/v1/nodes", labelSelector=rule["node_selector"])
        for n in (slim(node, rule) for node in page)
    }


def running_work(api: Api, rule: dict[str, Any]) -> set[str]:
    """Nodes running admitted training work: a running pod with one of ``work_labels`` (each its own LIST: a
    label selector's terms are ANDed)."""
    busy: set[str] = set()
    for label in rule["work_labels"]:
        for page in api.pages("/api/v1/pods", labelSelector=label, fieldSelector="status.phase=Running"):
            busy.update(p["spec"]["nodeName"] for p in page if (p.get("spec") or {}).get("nodeName"))
    return busy


def evictable(pod: dict[str, Any]) -> bool:
    """What ``kubectl drain --ignore-daemonsets --delete-emptydir-data`` evicts: not a DaemonSet's pod (its
    controller would put it back at once), not a static pod's mirror, not finished."""
    meta = pod.get("metadata") or {}
    if any(o.get("kind") == "DaemonSet" for o in meta.get("ownerReferences") or []):
        return False
    if "kubernetes.io/config.mirror" in (meta.get("annotations") or {}):
        return False
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def unmanaged(pod: dict[str, Any]) -> bool:
    """No controller would bring it back: ``kubectl drain`` refuses such a pod without ``--force``
    (k8s.io/kubectl pkg/drain/filters.go, unreplicatedFilter), and so does the roll: the drain waits, then
    fails the node for a person."""
    return not any(o.get("controller") for o in (pod.get("metadata") or {}).get("ownerReferences") or [])


@dataclass
class Drain:
    left: list[str] = field(default_factory=list)
    """``namespace/name`` of the pods still on the node."""
    refused: int = 0
    """Of those, how many a PodDisruptionBudget kept this time."""
    unmanaged: int = 0
    """Of those, how many no controller owns (not evicted: they would be lost)."""
    errors: list[str] = field(default_factory=list)
    """Evictions the API server refused for another reason (counted in ``refused`` too)."""

    def why(self) -> str:
        more = f"; {self.errors[0]}" if self.errors else ""
        return f"{self.refused} refused by a disruption budget, {self.unmanaged} without a controller{more}"


def drain(api: Api, node: str, *, wait_s: float = DRAIN_WAIT_S, sleep: Any = time.sleep) -> Drain:
    """Evict the node's pods, then wait up to ``wait_s`` for them to go; what is left is tried next run."""
    deadline = time.monotonic() + wait_s
    while True:
        out = Drain()
        pods = [p for page in api.pages("/api/v1/pods", fieldSelector=f"spec.nodeName={node}") for p in page]
        for pod in filter(evictable, pods):
            meta = pod["metadata"]
            out.left.append(f"{meta['namespace']}/{meta['name']}")
            if meta.get("deletionTimestamp"):
                continue  # evicted already, terminating
            if unmanaged(pod):
                out.unmanaged += 1
                continue
            try:
                if not api.evict(meta["namespace"], meta["name"]):
                    out.refused += 1
            except (urllib.error.HTTPError, OSError) as err:
                # A pod two budgets select (500), a webhook's refusal, a timeout: held like a budget's refusal,
                # so the drain's timeout still ends it.
                out.refused += 1
                out.errors.append(f"{meta['namespace']}/{meta['name']}: {err}")
        if not out.left or out.refused + out.unmanaged == len(out.left) or time.monotonic() >= deadline:
            return out
        sleep(2)


@dataclass
class Report:
    lines: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    """Nodes an error stopped in this run (tried again next run)."""
    paused: str | None = None

    def say(self, line: str) -> None:
        self.lines.append(line)


def load_state(api: Api, rule: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The roll's state and its resourceVersion (None: the ConfigMap does not exist yet)."""
    try:
        cm = api.get(f"/api/v1/namespaces/{rule['namespace']}/configmaps/{rule['state_configmap']}")
    except NotFound:
        return {"nodes": {}, "failed": {}, "acknowledged": {}, "paused_at": None}, None
    state: dict[str, Any] = json.loads((cm.get("data") or {}).get(STATE_KEY) or "{}")
    for key in ("nodes", "failed", "acknowledged"):
        state.setdefault(key, {})
    state.setdefault("paused_at", None)
    return state, cm["metadata"]["resourceVersion"]


def save_state(api: Api, rule: dict[str, Any], state: dict[str, Any], version: str | None) -> str:
    """Written with the resourceVersion it was read at: a concurrent writer makes this run fail (409), not lose
    the other's changes. Returns the new resourceVersion."""
    ns, name = rule["namespace"], rule["state_configmap"]
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns, "labels": {"app.kubernetes.io/name": rule["app"]}},
        "data": {STATE_KEY: json.dumps(state, indent=1, sort_keys=True)},
    }
    if version is None:
        made = api.request("POST", f"/api/v1/namespaces/{ns}/configmaps", body, content_type="application/json")
    else:
        body["metadata"]["resourceVersion"] = version
        made = api.request("PUT", f"/api/v1/namespaces/{ns}/configmaps/{name}", body, content_type="application/json")
    return str(made["metadata"]["resourceVersion"])


class Store:
    """The roll's state, saved before each step that cannot be undone (a cordon, a Node's deletion, an update):
    a run killed half way (its deadline, an error) leaves a record the next run finishes from."""

    def __init__(self, api: Api, rule: dict[str, Any]) -> None:
        self.api, self.rule = api, rule
        self.state, self.version = load_state(api, rule)

    def save(self) -> None:
        self.version = save_state(self.api, self.rule, self.state, self.version)


def _vm(provider_id: str) -> Instance:
    vm = instance_of(provider_id)
    if vm is None:
        raise AzureError(f"providerID {provider_id!r} names no scale-set VM (cloud-node-manager sets it)")
    return vm


def _fail(state: dict[str, Any], report: Report, name: str, uid: str, why: str) -> None:
    entry = state["nodes"].pop(name, None) or {}
    # Its pool and island: a failed VM with no Node (it never came back) is still out of that pool.
    state["failed"][name] = {"uid": uid, "why": why, "pool": entry.get("pool"), "island": entry.get("island")}
    report.failed.append(name)
    report.say(f"FAILED {name}: {why}")


def advance(
    api: Api,
    arm: Arm,
    rule: dict[str, Any],
    store: Store,
    fleet: dict[str, Node],
    now: datetime.datetime,
    report: Report,
    name: str,
    *,
    wait_s: float = DRAIN_WAIT_S,
) -> None:
    """Move one node of the roll on as far as it goes in this run."""
    state = store.state
    entry = state["nodes"][name]
    node = fleet.get(name)
    minutes = (now - parse(entry["since"])).total_seconds() / 60
    if entry["step"] == "draining":
        if node is None or node.uid != entry["uid"]:
            state["nodes"].pop(name)
            report.say(f"{name}: left the roll (its Node went away while draining: replaced elsewhere)")
            return
        if node.fenced:
            # A fatal XID meanwhile: the VM is remediation's to replace (it reads the fence on the Node).
            state["nodes"].pop(name)
            report.say(f"{name}: left the roll (fenced for a fatal XID: remediation replaces it)")
            return
        if not node.unschedulable:  # recorded, then cordoned: a run that died between, or an uncordon since
            cordon = {
                "metadata": {"annotations": {rule["annotation"]: entry["since"]}},
                "spec": {"unschedulable": True},
            }
            api.patch(f"/api/v1/nodes/{name}", cordon)
        drained = drain(api, name, wait_s=wait_s)
        if drained.left:
            if minutes > rule["drain_timeout_minutes"]:
                pods = ", ".join(drained.left[:5])
                _fail(
                    state,
                    report,
                    name,
                    entry["uid"],
                    f"drain timed out after {rule['drain_timeout_minutes']} minutes ({pods}"
                    f"{' ...' if len(drained.left) > 5 else ''}; {drained.why()})",
                )
            else:
                report.say(f"{name}: draining, {len(drained.left)} pods left ({drained.why()})")
            return
        # Recorded before the Node goes: a run that dies between the two is finished by the next one.
        entry.update(step="upgrading", since=stamp(now), requested=False)
        store.save()
        _upgrade(api, arm, store, name, now)
        report.say(f"{name}: drained; Node deleted, instance brought to the scale set's model (Update Instances)")
        return
    if entry["step"] == "upgrading":
        if node is not None and node.uid != entry["uid"]:
            entry.update(step="booting")
            report.say(f"{name}: registered again, in preflight")
        else:
            if not entry.get("requested"):  # Azure refused it, or the last run died before it took it: again
                if minutes > rule["node_timeout_minutes"]:
                    _fail(
                        state,
                        report,
                        name,
                        entry["uid"],
                        f"Azure did not take Update Instances within {rule['node_timeout_minutes']} minutes",
                    )
                    return
                _upgrade(api, arm, store, name, now)
                minutes = 0.0
            props = arm.instance(_vm(entry["provider_id"]))
            if props is None:
                state["nodes"].pop(name)
                report.say(f"{name}: left the roll (its instance is gone: deleted elsewhere)")
            elif props.get("provisioningState") == "Failed":
                _fail(state, report, name, entry["uid"], "the instance's update failed (provisioningState Failed)")
            elif minutes > rule["node_timeout_minutes"]:
                _fail(
                    state,
                    report,
                    name,
                    entry["uid"],
                    f"no new Node within {rule['node_timeout_minutes']} minutes of the update",
                )
            elif (
                props.get("latestModelApplied")
                and props.get("provisioningState") == "Succeeded"
                and minutes > rule["reimage_after_minutes"]
                and not entry.get("reimaged")
            ):
                # Applied, yet no new Node: a model change Azure applied without restarting the VM, whose
                # kubelet (its Node deleted) never registers again. A reimage boots it afresh, once.
                entry["reimaged"] = True
                store.save()
                arm.reimage_instance(_vm(entry["provider_id"]))
                report.say(f"{name}: no new Node {minutes:.0f} minutes after an update Azure reports applied: reimaged")
            else:
                report.say(f"{name}: updating (provisioningState {props.get('provisioningState')})")
            return
    if entry["step"] == "booting":
        if node is None:  # gone again (deleted by hand, replaced): it has until the timeout to come back
            if minutes > rule["node_timeout_minutes"]:
                _fail(
                    state,
                    report,
                    name,
                    entry["uid"],
                    f"no Node {rule['node_timeout_minutes']} minutes after the update",
                )
            return
        if node.preflight is None:
            state["nodes"].pop(name)
            report.say(f"{name}: rolled (passed preflight)")
        elif node.preflight == rule["preflight_failed"]:
            _fail(state, report, name, node.uid, "failed preflight on the new model")
        elif minutes > rule["node_timeout_minutes"]:
            _fail(
                state,
                report,
                name,
                node.uid,
                f"still in preflight {rule['node_timeout_minutes']} minutes after the update",
            )


def _upgrade(api: Api, arm: Arm, store: Store, name: str, now: datetime.datetime) -> None:
    """Delete the (drained, old) Node, then Update Instances unless Azure has it already (a run that died after
    asking); each is safe to repeat. The node's timeout starts when Azure takes the update."""
    entry = store.state["nodes"][name]
    # Only the Node the roll drained: a new Node of that name (the VM back already) has another uid (409).
    options = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": entry["uid"]}}
    with contextlib.suppress(NotFound, Conflict):
        api.request("DELETE", f"/api/v1/nodes/{name}", options, content_type="application/json")
    vm = _vm(entry["provider_id"])
    props = arm.instance(vm) or {}
    if props.get("provisioningState") != "Updating" and not props.get("latestModelApplied"):
        arm.update_instance(vm)
    entry.update(requested=True, since=stamp(now))
    store.save()


def cap(size: int, percent: int) -> int:
    """At most ``percent`` of ``size`` nodes, at least one (a roll that can take none never ends)."""
    return max(1, size * percent // 100)


@dataclass
class Pick:
    nodes: list[Node] = field(default_factory=list)
    """The nodes that join the roll now, in order."""
    held: Counter[str] = field(default_factory=Counter)
    """Island -> nodes behind the model kept waiting by the island's share (training work runs there)."""


def pick(
    fleet: dict[str, Node],
    state: dict[str, Any],
    busy: set[str],
    rule: dict[str, Any],
    behind: Callable[[Instance], bool],
) -> Pick:
    """Which nodes start now (pure but for ``behind``, asked only of nodes that fit): behind the model, in
    service, not a failure of this roll, within the pool's and the island's room; nodes without training work
    first."""
    rolling = state["nodes"]
    skip = {**state["acknowledged"], **state["failed"]}
    pool_size, pool_out = Counter[str](), Counter[str]()
    island_size, island_out = Counter[str](), Counter[str]()
    work_islands = {fleet[n].island for n in busy if n in fleet and fleet[n].island}
    for node in fleet.values():
        gone = node.out or node.name in rolling
        pool_size[node.pool] += 1
        pool_out[node.pool] += gone
        if node.island:
            island_size[node.island] += 1
            island_out[node.island] += gone
    failures = {**state["acknowledged"], **state["failed"]}
    absent = {**{n: e for n, e in failures.items() if e.get("pool")}, **rolling}
    for name, entry in absent.items():
        # In the roll between its deletion and its new Node, or failed without one: a VM of the pool, out.
        if name not in fleet:
            pool_size[entry["pool"]] += 1
            pool_out[entry["pool"]] += 1
            if entry.get("island"):
                island_size[entry["island"]] += 1
                island_out[entry["island"]] += 1
    out = Pick()
    candidates = (
        n
        for n in fleet.values()
        if n.pool and not n.out and n.name not in rolling and skip.get(n.name, {}).get("uid") != n.uid
    )
    for node in sorted(candidates, key=lambda n: (n.name in busy, n.pool, n.name)):
        if pool_out[node.pool] >= cap(pool_size[node.pool], rule["max_unavailable_percent"]):
            continue
        island = node.island or ""
        island_full = island in work_islands and island_out[island] >= cap(
            island_size[island], rule["island_max_unavailable_percent"]
        )
        vm = instance_of(node.provider_id)
        if vm is None or not behind(vm):
            continue
        if island_full:
            out.held[island] += 1
            continue
        out.nodes.append(node)
        pool_out[node.pool] += 1
        if node.island:
            island_out[node.island] += 1
    return out


def start(
    api: Api,
    arm: Arm,
    rule: dict[str, Any],
    store: Store,
    fleet: dict[str, Node],
    busy: set[str],
    now: datetime.datetime,
    report: Report,
    *,
    wait_s: float = DRAIN_WAIT_S,
) -> None:
    """Record, cordon and start draining the nodes :func:`pick` chose (at most ``max_starts_per_run``)."""
    outdated: dict[str, set[str]] = {}  # scale set -> instance ids behind its model, asked once per set

    def behind(vm: Instance) -> bool:
        if vm.vmss not in outdated:
            outdated[vm.vmss] = arm.outdated(vm)
        return vm.instance in outdated[vm.vmss]

    chosen = pick(fleet, store.state, busy, rule, behind)
    for node in chosen.nodes[: rule["max_starts_per_run"]]:
        store.state["nodes"][node.name] = {
            "step": "draining",
            "since": stamp(now),
            "uid": node.uid,
            "pool": node.pool,
            "island": node.island,
            "provider_id": node.provider_id,
        }
        store.save()
        patch = {"metadata": {"annotations": {rule["annotation"]: stamp(now)}}, "spec": {"unschedulable": True}}
        api.patch(f"/api/v1/nodes/{node.name}", patch)
        where = f"{node.pool}, island {node.island}" if node.island else node.pool
        report.say(f"{node.name}: cordoned, joins the roll ({where})")
        step(
            api,
            arm,
            rule,
            store,
            {**fleet, node.name: replace(node, unschedulable=True)},
            now,
            report,
            node.name,
            wait_s=wait_s,
        )
    if len(chosen.nodes) > rule["max_starts_per_run"]:
        report.say(f"{len(chosen.nodes) - rule['max_starts_per_run']} more nodes fit: the next runs start them")
    for island, count in sorted(chosen.held.items()):
        report.say(f"island {island}: {count} nodes behind the model wait (training work runs there, its share is out)")


def step(
    api: Api,
    arm: Arm,
    rule: dict[str, Any],
    store: Store,
    fleet: dict[str, Node],
    now: datetime.datetime,
    report: Report,
    name: str,
    *,
    wait_s: float = DRAIN_WAIT_S,
) -> None:
    """:func:`advance`, where an error (ARM, the API server) is this node's alone: said, and tried again next run."""
    try:
        advance(api, arm, rule, store, fleet, now, report, name, wait_s=wait_s)
    except (AzureError, Conflict, NotFound, urllib.error.HTTPError, OSError) as err:
        report.errors.append(name)
        report.say(f"{name}: {type(err).__name__}: {str(err)[:300]} (the next run tries again)")


def run(
    api: Api, arm: Arm, rule: dict[str, Any], now: datetime.datetime | None = None, *, wait_s: float = DRAIN_WAIT_S
) -> Report:
    now = now or datetime.datetime.now(datetime.UTC)
    report = Report()
    store = Store(api, rule)
    state = store.state
    fleet = scan(api, rule)
    last = state.get("last_run")
    gap = (now - parse(last)).total_seconds() / 60 if last else 0.0
    if gap > GAP_RUNS * rule["every_minutes"]:
        # Nobody ran the roll for a while (paused by hand, the control plane away): that time was not the
        # nodes', so each in-flight timer moves on by it.
        for entry in state["nodes"].values():
            entry["since"] = stamp(parse(entry["since"]) + datetime.timedelta(minutes=gap))
        report.say(f"{gap:.0f} minutes since the last run: the in-flight timers move on by that much")
    state["last_run"] = stamp(now)
    if state["paused_at"]:
        # Running again after a pause means a person resumed the CronJob: the failures are seen.
        state["acknowledged"].update(state["failed"])
        state["failed"], state["paused_at"] = {}, None
        report.say(f"resumed: {len(state['acknowledged'])} failed nodes are left out of the roll")
    # A failure acknowledged once is a new Node now (replaced, re-imaged by hand): it may roll again.
    for name, failure in list(state["acknowledged"].items()):
        if name in fleet and fleet[name].uid != failure.get("uid"):
            del state["acknowledged"][name]
    for name in sorted(state["nodes"]):
        step(api, arm, rule, store, fleet, now, report, name, wait_s=wait_s)
    if len(state["failed"]) >= rule["pause_after_failed"]:
        report.paused = (
            f"{len(state['failed'])} nodes failed the roll ({', '.join(sorted(state['failed']))}), "
            f"pause_after_failed is {rule['pause_after_failed']}"
        )
        # Suspended first: a pause recorded but not in force would read as a person's resume next run.
        api.patch(
            f"/apis/batch/v1/namespaces/{rule['namespace']}/cronjobs/{rule['cronjob']}", {"spec": {"suspend": True}}
        )
        state["paused_at"] = stamp(now)
    else:
        start(api, arm, rule, store, fleet, running_work(api, rule), now, report, wait_s=wait_s)
    store.save()
    return report


def main() -> None:
    api = Api.in_cluster()
    ns, name = os.environ["RULE_NAMESPACE"], os.environ["RULE_NAME"]
    rule = json.loads(api.get(f"/api/v1/namespaces/{ns}/configmaps/{name}")["data"][RULE_KEY])
    azure = rule["azure"]
    arm = Arm(client_id=azure["client_id"], arm_endpoint=azure["arm_endpoint"], imds_endpoint=azure["imds_endpoint"])
    report = run(api, arm, rule)
    when = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    for line in report.lines or ["nothing to roll"]:
        print(f"{when} {line}", flush=True)
    if (report.errors or report.failed) and not report.paused:
        # A failed Job is what GpuRollRunFailed sees: a node failing the roll below the pause is told too.
        raise SystemExit(
            f"roll run: failed {', '.join(report.failed) or 'none'}; errors on {', '.join(report.errors) or 'none'} "
            "(errors are tried again next run; failed nodes wait for a person)"
        )
    if report.paused:
        # Not a failed Job: GpuRollPaused says it, and a failed Job would page again (GpuRollRunFailed) for an
        # hour after a person resumes.
        print(
            f"roll paused: {report.paused}: look at those nodes, then resume with "
            f'kubectl -n {rule["namespace"]} patch cronjob {rule["cronjob"]} -p \'{{"spec":{{"suspend":false}}}}\'',
            flush=True,
        )


if __name__ == "__main__":
    main()
