"""Drain this node ahead of Azure's Scheduled Events, then let Azure go ahead (every pool node runs it).

IMDS lists the maintenance Azure has planned for the VM (learn.microsoft.com/azure/virtual-machines/linux/
scheduled-events): ``GET /metadata/scheduledevents?api-version=2020-07-01`` with ``Metadata: true``
answers ``{"DocumentIncarnation": n, "Events": [{"EventId", "EventType", "Resources", "EventStatus",
"NotBefore", ...}]}``. ``Resources`` names the VMs an event affects (a scale-set VM as its IMDS
``compute.name``, ``<scale set>_<instance id>``); an event in state ``Scheduled`` starts at ``NotBefore``
or once acknowledged (``POST {"StartRequests": [{"EventId": ...}]}``). The page asks for a poll a
second: some events come 30 seconds ahead.

For a Reboot, Redeploy, Preempt or Terminate of this VM the agent does what ``kubectl drain`` does:
cordons the Node (``spec.unschedulable``), evicts every pod bound to it through the Eviction API (the
API server refuses an eviction a PodDisruptionBudget forbids with 429; the agent retries until
``NotBefore``), leaving DaemonSet pods (their controller would put them back, and the node agents must
run to the end) and mirror pods (static pods: the kubelet owns them), waits for the evicted pods to be
gone, and only then acknowledges, so Azure starts early on a drained node and never before its
``NotBefore`` on one that is not. A Freeze (a pause of a few seconds for a memory-preserving live
migration: "no impact on memory or open files") is only logged: a drain would stop the node's jobs for
longer than the freeze does. An event that also names other VMs is not acknowledged: acknowledging lets
it proceed for every VM it names, drained or not (same page, "Start an event").

Credentials: the kubelet's own client certificate (``system:node:<name>``). The Node authorizer grants
the node role ``patch nodes`` and ``create pods/eviction`` (kubernetes.io/docs/reference/access-authn-authz/
node/; k8s.io/kubernetes plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go NodeRules), and the
NodeRestriction admission plugin narrows both to this node: it may modify only its own Node (and not its
taints or node-restriction labels) and evict only pods bound to itself (plugin/pkg/admission/
noderestriction/admission.go admitNode, admitPodEviction). That is exactly a self-drain: no new identity
to issue and rotate, and no in-cluster credential that could cordon or drain every node.

After the event (the VM rebooted or the event was cancelled) the agent uncordons the Node, but only if it
cordoned it itself (the annotation ``ANNOTATION`` says so): a node cordoned by a person or by the XID
remediation stays cordoned.
"""

from __future__ import annotations

import argparse
import datetime as dt
import email.utils
import json
import os
import socket
import ssl
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

IMDS = "http://169.254.169.254"
API_VERSION = "2020-07-01"
"""The Scheduled Events API version (the page's current one)."""
COMPUTE_API_VERSION = "2021-02-01"
DRAIN_TYPES = frozenset({"Reboot", "Redeploy", "Preempt", "Terminate"})
LOG_ONLY_TYPES = frozenset({"Freeze"})
MIRROR = "kubernetes.io/config.mirror"
"""The annotation of a static pod's mirror (k8s.io/api core/v1 MirrorPodAnnotationKey)."""
POLL_S = 1.0
EVICT_EVERY_S = 5.0
"""How often a blocked eviction is asked again (kubectl drain retries every 5 s)."""
UTC = dt.timezone.utc  # noqa: UP017  (not dt.UTC: the hosts run Python 3.10)
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # IMDS is link-local: never proxied


class ApiError(Exception):
    """The API server answered an unexpected status; the message says to what."""


def log(message: str) -> None:
    print(f"agk-scheduled-events: {message}", flush=True)


# ---- IMDS -------------------------------------------------------------------------------------------


class Imds:
    def __init__(self, endpoint: str = IMDS) -> None:
        self.base = endpoint.rstrip("/") + "/metadata"

    def _call(self, path: str, query: dict[str, str], body: Any = None) -> Any:
        url = f"{self.base}/{path}?{urllib.parse.urlencode(query)}"
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(url, data=data, method="POST" if data else "GET")
        request.add_header("Metadata", "true")
        if data:
            request.add_header("Content-Type", "application/json")
        # The first request of a VM switches Scheduled Events on and may take up to two minutes (the page).
        with NO_PROXY.open(request, timeout=150) as response:
            text = response.read()
        return json.loads(text) if text.strip() else {}

    def vm_name(self) -> str:
        """This VM's name as ``Resources`` spells it (``compute.name``)."""
        return str(self._call("instance/compute", {"api-version": COMPUTE_API_VERSION, "format": "json"})["name"])

    def events(self) -> dict[str, Any]:
        return dict(self._call("scheduledevents", {"api-version": API_VERSION}))

    def start(self, event_id: str) -> None:
        self._call("scheduledevents", {"api-version": API_VERSION}, {"StartRequests": [{"EventId": event_id}]})


# ---- Kubernetes, as the kubelet's own credential ----------------------------------------------------


class Kube:
    def __init__(self, server: str, ca: str, credential: str) -> None:
        self.server, self.ca, self.credential = server.rstrip("/"), ca, credential

    def _context(self) -> ssl.SSLContext:
        # Loaded per request: the kubelet rotates its certificate (kubelet-client-current.pem is a link).
        context = ssl.create_default_context(cafile=self.ca)
        context.load_cert_chain(self.credential)
        return context

    def call(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.server + path, data=data, method=method)
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(request, context=self._context(), timeout=30) as response:
                return response.status, json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as err:
            text = err.read()
            try:
                return err.code, json.loads(text or b"{}")
            except ValueError:
                return err.code, {"message": text.decode(errors="replace")}

    def node(self, name: str) -> dict[str, Any]:
        code, body = self.call("GET", f"/api/v1/nodes/{name}")
        if code != 200:
            raise ApiError(f"GET node {name}: HTTP {code} {body.get('message', '')}")
        return dict(body)

    def patch_node(self, name: str, patch: dict[str, Any]) -> None:
        code, body = self.call("PATCH", f"/api/v1/nodes/{name}", patch, "application/merge-patch+json")
        if code != 200:
            raise ApiError(f"PATCH node {name}: HTTP {code} {body.get('message', '')}")

    def pods_on(self, name: str) -> list[dict[str, Any]]:
        # The Node authorizer lets a node list pods only with its own spec.nodeName field selector.
        query = urllib.parse.urlencode({"fieldSelector": f"spec.nodeName={name}"})
        code, body = self.call("GET", f"/api/v1/pods?{query}")
        if code != 200:
            raise ApiError(f"list pods on {name}: HTTP {code} {body.get('message', '')}")
        return list(body.get("items") or [])

    def evict(self, pod: dict[str, Any]) -> tuple[int, str]:
        meta = pod["metadata"]
        eviction = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
        }
        code, body = self.call("POST", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/eviction", eviction)
        return code, str(body.get("message", ""))


# ---- what to do (pure) ------------------------------------------------------------------------------


def for_me(document: dict[str, Any], vm_name: str) -> list[dict[str, Any]]:
    """The events that name this VM (names compared without case: Azure's resource names are case-insensitive)."""
    me = vm_name.lower()
    return [e for e in document.get("Events") or [] if me in {str(r).lower() for r in e.get("Resources") or []}]


def not_before(event: dict[str, Any]) -> dt.datetime | None:
    """``NotBefore`` (RFC 1123, e.g. ``Mon, 19 Sep 2016 18:29:47 GMT``); None when blank (the event started)."""
    text = str(event.get("NotBefore") or "").strip()
    if not text:
        return None
    return email.utils.parsedate_to_datetime(text).astimezone(UTC)


def to_drain(pods: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pods ``kubectl drain`` moves off a node: every pod but DaemonSet pods and mirror pods. The node
    is drained once none is left (those already terminating included: drain waits for them too)."""
    out = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        if MIRROR in (meta.get("annotations") or {}):
            continue
        if any(ref.get("kind") == "DaemonSet" and ref.get("controller") for ref in meta.get("ownerReferences") or []):
            continue
        out.append(pod)
    return out


def pod_key(pod: dict[str, Any]) -> str:
    meta = pod["metadata"]
    return f"{meta['namespace']}/{meta['name']}"


# ---- the agent ---------------------------------------------------------------------------------------


@dataclass
class Drain:
    """An event this node is draining for."""

    event_id: str
    deadline: dt.datetime
    last_try: float = -1e9
    done: bool = False


class Agent:
    def __init__(
        self,
        imds: Imds,
        kube: Kube | None,
        node: str,
        vm_name: str,
        annotation: str,
        *,
        now: Callable[[], dt.datetime] = lambda: dt.datetime.now(UTC),
        clock: Callable[[], float] = time.monotonic,
        evict_every: float = EVICT_EVERY_S,
    ) -> None:
        self.imds, self.kube, self.node, self.vm_name, self.annotation = imds, kube, node, vm_name, annotation
        self.now, self.clock, self.evict_every = now, clock, evict_every
        self.drains: dict[str, Drain] = {}
        self.seen: set[str] = set()
        self.acknowledged: set[str] = set()
        self.check_cordon = True
        """Ask the Node once at start whether it is still cordoned for an event that is over (a reboot)."""

    def step(self) -> None:
        """One poll: act on this VM's events, then uncordon when the event we drained for is gone."""
        events = for_me(self.imds.events(), self.vm_name)
        current = {str(e.get("EventId")) for e in events}
        impending = any(e.get("EventType") in DRAIN_TYPES for e in events)
        for event in events:
            self._handle(event)
        for event_id in [k for k in self.drains if k not in current]:
            log(f"event {event_id} is over (done or cancelled)")
            del self.drains[event_id]
            self.check_cordon = True
        if self.check_cordon and not impending:
            self._uncordon_if_ours()

    def _handle(self, event: dict[str, Any]) -> None:
        event_id, kind, status = str(event.get("EventId")), str(event.get("EventType")), event.get("EventStatus")
        first = event_id not in self.seen
        self.seen.add(event_id)
        if first:
            log(
                f"event {event_id}: {kind} {status}, NotBefore {event.get('NotBefore') or '-'}, "
                f"resources {', '.join(event.get('Resources') or [])}: {event.get('Description', '')}"
            )
        if kind in LOG_ONLY_TYPES or kind not in DRAIN_TYPES or status != "Scheduled" or event_id in self.acknowledged:
            # A Started event is already under way: nothing left to prepare.
            return
        deadline = not_before(event)
        if deadline is None:
            return
        drain = self.drains.get(event_id)
        if drain is None:
            drain = self.drains[event_id] = Drain(event_id, deadline)
        if self.kube is None:
            # No kubelet credential: the node never joined, so no pod can be bound to it.
            log(f"event {event_id}: this node has not joined (no kubelet credential): nothing to drain")
            drain.done = True
        elif not drain.done:
            if self.now() >= drain.deadline:
                return  # Azure goes ahead at NotBefore whatever we do
            drain.done = self._drain(drain)
        if drain.done:
            self._acknowledge(event)

    def _drain(self, drain: Drain) -> bool:
        """One round: cordon, evict what is left (every ``evict_every`` s), True once the evicted pods are gone."""
        assert self.kube is not None
        node = self.kube.node(self.node)
        meta, spec = node.get("metadata") or {}, node.get("spec") or {}
        if not spec.get("unschedulable"):
            self.kube.patch_node(
                self.node,
                {"metadata": {"annotations": {self.annotation: drain.event_id}}, "spec": {"unschedulable": True}},
            )
            log(f"cordoned {self.node} for event {drain.event_id}")
        elif self.annotation not in (meta.get("annotations") or {}):
            log(f"{self.node} was already cordoned (not by this agent): it stays cordoned after the event")
        left = to_drain(self.kube.pods_on(self.node))
        if not left:
            return True
        if self.clock() - drain.last_try >= self.evict_every:
            drain.last_try = self.clock()
            for pod in left:
                if (pod.get("metadata") or {}).get("deletionTimestamp"):
                    continue  # evicted (by us or anyone): waiting for it to be gone
                code, message = self.kube.evict(pod)
                if code in (200, 201):
                    log(f"evicted {pod_key(pod)}")
                elif code == 429:
                    log(f"eviction of {pod_key(pod)} refused for now (a PodDisruptionBudget): {message}")
                elif code != 404:
                    log(f"eviction of {pod_key(pod)}: HTTP {code} {message}")
        return False

    def _acknowledge(self, event: dict[str, Any]) -> None:
        event_id = str(event.get("EventId"))
        if event_id in self.acknowledged:
            return
        others = [r for r in event.get("Resources") or [] if str(r).lower() != self.vm_name.lower()]
        self.acknowledged.add(event_id)
        if others:
            log(f"event {event_id}: drained; not acknowledged, it also names {', '.join(others)}")
            return
        self.imds.start(event_id)
        log(f"event {event_id}: drained, acknowledged (Azure may start it now)")

    def _uncordon_if_ours(self) -> None:
        if self.kube is None:
            return
        node = self.kube.node(self.node)
        self.check_cordon = False
        if self.annotation in ((node.get("metadata") or {}).get("annotations") or {}):
            self.kube.patch_node(
                self.node, {"metadata": {"annotations": {self.annotation: None}}, "spec": {"unschedulable": False}}
            )
            log(f"uncordoned {self.node}: the event it was drained for is over")


def run(
    agent: Agent, *, poll: float = POLL_S, sleep: Callable[[float], None] = time.sleep, rounds: int | None = None
) -> None:
    done = 0
    while rounds is None or done < rounds:
        try:
            agent.step()
        except (OSError, ValueError, KeyError, ApiError) as err:
            # IMDS or the API server unreachable for a moment: the next poll tries again.
            log(f"poll failed: {type(err).__name__}: {err}")
        done += 1
        sleep(poll)


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="scheduled_events.py", description=__doc__.splitlines()[0])
    parser.add_argument("--apiserver", required=True)
    parser.add_argument("--ca", required=True)
    parser.add_argument("--credential", required=True, help="the kubelet's client certificate and key (one PEM)")
    parser.add_argument("--annotation", required=True, help="the Node annotation that marks our cordon")
    parser.add_argument("--imds", default=IMDS)
    parser.add_argument("--node", default="", help="the Node's name (default: the host name, as the kubelet's)")
    parser.add_argument("--vm-name", default="", help="this VM's name in Resources (default: IMDS compute.name)")
    parser.add_argument("--poll", type=float, default=POLL_S)
    parser.add_argument("--evict-every", type=float, default=EVICT_EVERY_S)
    args = parser.parse_args(argv)
    imds = Imds(args.imds)
    node = args.node or socket.gethostname().strip().lower()
    vm_name = args.vm_name
    while not vm_name:
        try:
            vm_name = imds.vm_name()
        except (OSError, ValueError, KeyError) as err:
            log(f"IMDS compute.name: {err}; trying again")
            time.sleep(5)
    kube = Kube(args.apiserver, args.ca, args.credential) if os.path.exists(args.credential) else None
    log(f"watching Scheduled Events for VM {vm_name} (Node {node}){'' if kube else '; no kubelet credential yet'}")
    agent = Agent(imds, kube, node, vm_name, args.annotation, evict_every=args.evict_every)
    while agent.kube is None:
        # Until the kubelet's CSR is signed: events are acknowledged at once (nothing can run here yet).
        run(agent, poll=args.poll, rounds=1)
        if os.path.exists(args.credential):
            agent.kube = Kube(args.apiserver, args.ca, args.credential)
    run(agent, poll=args.poll)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
