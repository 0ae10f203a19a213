"""Filling a real API server with prod-7500's fleet: every node of every pool as its kubelet registers it,
and the node agents' pods as the DaemonSet controller would place them.

Objects are realistic in size, because memory is what the scale tests measure: a Node carries what a
kubelet reports (the unit's labels, registerWithTaints, capacity/allocatable, addresses, the five
conditions, nodeInfo, and up to ``nodeStatusMaxImages`` = 50 images, the kubelet's default), and an
agent pod is its DaemonSet's rendered template bound to the node (``spec.nodeName``), with the
service-account volume and status a running pod has. The writes go through keep-alive HTTPS
connections, several at a time (a pool of threads): that is the load tool here, not a component.
"""

from __future__ import annotations

import copy
import datetime as dt
import hashlib
import http.client
import json
import queue
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from modules.bootstrap import versions
from modules.cluster.manifests import render_manifests
from modules.stackplan.prepare import ClusterPrep
from tests.controlplane.cluster import ControlPlane
from tests.controlplane.kwok import UNINITIALIZED, FakeNode, pool_nodes

KUBELET = versions.release(versions.DEFAULT_MINOR).release()


def machine_id(index: int) -> str:
    """/etc/machine-id's 32 hex digits, spread as real ones are. kwok's stages write nodeInfo back through a
    YAML template, where a small counter's hex ("...0007", "...03e8") reads as a number: the node-initialize
    stage then fails and the node never turns Ready (1,024 of the 7,510 did)."""
    return hashlib.sha256(f"machine-{index}".encode()).hexdigest()[:32]


"""The release every fake node reports: the control plane the tier runs."""

IMAGES_PER_NODE = 50
"""The kubelet's nodeStatusMaxImages default: status.images lists at most this many."""


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def kubelet_status(node: FakeNode, index: int) -> dict[str, Any]:
    """What a running kubelet has written to its Node's status besides capacity (realistic size)."""
    now = _now()
    conditions = [
        ("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
        ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        ("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
    ]
    images = [
        {
            "names": [
                f"registry.example.com/research/image-{i:02d}@sha256:{uuid.UUID(int=index * 64 + i).hex * 2}",
                f"registry.example.com/research/image-{i:02d}:2026.{i % 12 + 1:02d}",
            ],
            "sizeBytes": 1_000_000_000 + i * 7_000_000,
        }
        for i in range(IMAGES_PER_NODE)
    ]
    address = f"10.{64 + index // 65536}.{index // 256 % 256}.{index % 256}"
    return {
        # Deprecated and not what the kubelet writes, but what kwok's node-initialize stage leaves and its
        # heartbeat-with-lease stage selects (``.status.phase In Running``, kwok v0.8.0 kustomize/stage/node):
        # without it kwok never renews these nodes' leases or status, and the fleet is quiet.
        "phase": "Running",
        "conditions": [
            {"type": t, "status": s, "reason": r, "message": m, "lastHeartbeatTime": now, "lastTransitionTime": now}
            for t, s, r, m in conditions
        ],
        "addresses": [{"type": "InternalIP", "address": address}, {"type": "Hostname", "address": node.name}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": {
            "machineID": machine_id(index),
            "systemUUID": str(uuid.UUID(int=index + 1)),
            "bootID": str(uuid.UUID(int=index + 2)),
            "kernelVersion": "6.8.0-1021-azure",
            "osImage": "Ubuntu 24.04.3 LTS",
            "containerRuntimeVersion": "containerd://2.3.6",
            "kubeletVersion": f"v{KUBELET}",
            "kubeProxyVersion": f"v{KUBELET}",
            "operatingSystem": "linux",
            "architecture": "amd64",
        },
        "images": images,
    }


def fleet(prep: ClusterPrep) -> list[FakeNode]:
    """Every node of every pool at its deployed capacity (prod-7500: 7,500 GPU nodes + the system pool)."""
    return [n for pool in prep.pools.pools for n in pool_nodes(prep, pool)]


def node_body(
    node: FakeNode, index: int, preflight_key: str, subscription: str = "0" * 8 + "-0000-0000-0000-" + "0" * 12
) -> dict[str, Any]:
    """A node of a running fleet: registered (kubelet status), initialized by cloud-provider-azure (its
    providerID, no uninitialized taint) and through preflight (no preflight label or taint)."""
    body = copy.deepcopy(node.body)
    body["status"] |= kubelet_status(node, index)
    body["metadata"]["labels"].pop(preflight_key, None)
    drop = (UNINITIALIZED, preflight_key)
    body["spec"]["taints"] = [t for t in body["spec"]["taints"] if t["key"] not in drop]
    body["spec"]["providerID"] = (
        f"azure:///subscriptions/{subscription}/resourceGroups/agk-prod-7500/providers/"
        f"Microsoft.Compute/virtualMachineScaleSets/{node.scale_set}/virtualMachines/{node.instance}"
    )
    return body


def agent_pods(prep: ClusterPrep, nodes: list[FakeNode]) -> Iterator[dict[str, Any]]:
    """Each node-agent DaemonSet's pod on each released node it selects (its nodeSelector; the agents
    tolerate the taints they need), as the DaemonSet controller creates them."""
    key = prep.addons.preflight_key
    for ds in (o for o in render_manifests(prep.addons) if o["kind"] == "DaemonSet"):
        template = ds["spec"]["template"]
        selector = template["spec"].get("nodeSelector") or {}
        for node in nodes:
            labels = {k: v for k, v in node.body["metadata"]["labels"].items() if k != key}
            if any(labels.get(k) != v for k, v in selector.items()):
                continue
            spec = copy.deepcopy(template["spec"])
            spec["nodeName"] = node.name
            name = f"{ds['metadata']['name']}-{node.name}"[:63].rstrip("-")
            yield {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "namespace": ds["metadata"]["namespace"],
                    "labels": dict(template["metadata"].get("labels") or {})
                    | {"controller-revision-hash": "6d4b8c9f7"},
                    "annotations": dict(template["metadata"].get("annotations") or {}),
                    "ownerReferences": [
                        {
                            "apiVersion": "apps/v1",
                            "kind": "DaemonSet",
                            "name": ds["metadata"]["name"],
                            "uid": str(uuid.uuid5(uuid.NAMESPACE_DNS, ds["metadata"]["name"])),
                            "controller": True,
                            "blockOwnerDeletion": True,
                        }
                    ],
                },
                "spec": spec,
            }


TRIES = 5
TRANSIENT = frozenset({429, 500, 502, 503, 504})


@dataclass
class Loader:
    """POSTs through ``workers`` keep-alive connections as the admin."""

    cp: ControlPlane
    workers: int = 12

    def _connection(self) -> http.client.HTTPSConnection:
        url = urlsplit(self.cp.url)
        return http.client.HTTPSConnection(url.hostname or "", url.port, context=self.cp.context(), timeout=120)

    def run(
        self,
        jobs: Iterable[tuple[str, str, dict[str, Any]]],
        as_user: Callable[[dict[str, Any]], dict[str, str]] | None = None,
    ) -> tuple[int, float]:
        """(method, path, body) jobs; returns (requests done, seconds). Any refusal but 409 fails.
        ``as_user``: body -> extra headers for its request (``Impersonate-User`` and ``-Group``: the admin acting as
        a node, as each node's kubelet would with its own credential)."""
        work: queue.Queue[tuple[str, str, dict[str, Any]] | None] = queue.Queue(maxsize=self.workers * 8)
        errors: list[str] = []
        done = [0]
        lock = threading.Lock()

        def worker() -> None:
            conn = self._connection()
            while (job := work.get()) is not None:
                method, path, body = job
                data = json.dumps(body).encode()
                headers = {"Content-Type": _ctype(method), "Accept": "application/json"}
                headers |= as_user(body) if as_user else {}
                for attempt in range(TRIES):
                    try:
                        conn.request(method, path, data, headers)
                        resp = conn.getresponse()
                        out = resp.read()
                    except (OSError, http.client.HTTPException):
                        conn.close()
                        conn = self._connection()
                        time.sleep(0.2 * (attempt + 1))
                        continue
                    # An overloaded server's answers a kubelet or a controller retries too (etcd's "request timed
                    # out" is a 500; a create that landed anyway answers the retry with 409, taken as done).
                    if resp.status not in TRANSIENT or attempt == TRIES - 1:
                        break
                    wait_s = resp.getheader("Retry-After") or ""
                    time.sleep(float(wait_s) if wait_s.isdigit() else 0.5 * (attempt + 1))
                else:
                    errors.append(f"{method} {path}: no answer in {TRIES} tries (connection failures or {TRANSIENT})")
                    continue
                if resp.status >= 300 and resp.status != 409:
                    errors.append(f"{method} {path}: {resp.status} {out[:300]!r}")
                with lock:
                    done[0] += 1
            conn.close()

        threads = [threading.Thread(target=worker, daemon=True) for _ in range(self.workers)]
        began = time.perf_counter()
        for t in threads:
            t.start()
        for job in jobs:
            work.put(job)
        for _ in threads:
            work.put(None)
        for t in threads:
            t.join()
        assert not errors, errors[:5]
        return done[0], time.perf_counter() - began


def _ctype(method: str) -> str:
    return "application/merge-patch+json" if method == "PATCH" else "application/json"


def register_fleet(cp: ControlPlane, prep: ClusterPrep, nodes: list[FakeNode], loader: Loader | None = None) -> float:
    """Every node registered (with its kubelet status, initialized and released) and, being Ready, without the
    ``node.kubernetes.io/not-ready`` taint the API server's TaintNodesByCondition admission puts on every new
    Node: what kube-controller-manager's node lifecycle controller removes (it does not run with ``fleet_api``;
    where it runs, the patch changes nothing). Seconds taken."""
    loader = loader or Loader(cp)
    key = prep.addons.preflight_key
    bodies = [node_body(n, i, key) for i, n in enumerate(nodes)]
    _, created = loader.run(("POST", "/api/v1/nodes", body) for body in bodies)
    _, untainted = loader.run(
        ("PATCH", f"/api/v1/nodes/{b['metadata']['name']}", {"spec": {"taints": b["spec"]["taints"]}}) for b in bodies
    )
    return created + untainted


def place_agents(
    cp: ControlPlane, prep: ClusterPrep, nodes: list[FakeNode], loader: Loader | None = None
) -> tuple[int, float]:
    """Every agent pod created on its node, then marked Running (kubelet's status write); (pods, seconds)."""
    loader = loader or Loader(cp)
    pods = list(agent_pods(prep, nodes))
    _, created = loader.run(("POST", f"/api/v1/namespaces/{p['metadata']['namespace']}/pods", p) for p in pods)
    status = _running_status()
    _, marked = loader.run(
        (
            "PATCH",
            f"/api/v1/namespaces/{p['metadata']['namespace']}/pods/{p['metadata']['name']}/status",
            {"status": status(p)},
        )
        for p in pods
    )
    return len(pods), created + marked


def _running_status() -> Callable[[dict[str, Any]], dict[str, Any]]:
    now = _now()

    def status(pod: dict[str, Any]) -> dict[str, Any]:
        return {
            "phase": "Running",
            "startTime": now,
            "conditions": [
                {"type": t, "status": "True", "lastTransitionTime": now}
                for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
            ],
            "containerStatuses": [
                {
                    "name": c["name"],
                    "image": c["image"],
                    "imageID": c["image"],
                    "ready": True,
                    "restartCount": 0,
                    "started": True,
                    "state": {"running": {"startedAt": now}},
                    "containerID": f"containerd://{uuid.uuid4().hex}{uuid.uuid4().hex}",
                }
                for c in pod["spec"]["containers"]
            ],
        }

    return status
