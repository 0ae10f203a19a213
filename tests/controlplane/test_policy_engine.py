"""The NetworkPolicy engine on the real API server: the policies the project ships, enforced on real packets.

Real: dev's control plane with every add-on object of dev applied (the shipped NetworkPolicies and the engine's
objects among them); the kube-network-policies agent as its rendered DaemonSet runs it (tests/controlplane/
policy_agent.py: the pinned build, its ServiceAccount, its memory limit, a node's network namespace); the
kernel's netfilter, nfqueue and conntrack; TCP connections between network namespaces.

Stand-ins, for what cannot exist here (besides policy_agent.py's node and runtime):
- the pods are network namespaces: each reaches the node through a veth named as Azure CNI's (``azv*``), routed
  by a /32 host route, its default route via 169.254.1.1 answered by proxy ARP, as Azure CNI's transparent mode
  sets them up;
- the kubelet and the scheduler: each pod is bound to the node through the binding subresource and its status
  (Running, its address) written by the test, as the kubelet reports the address the CNI gave it;
- the nftables rule that sends new connections to the agent's queue: this kernel is built without nftables'
  queue expression (CONFIG_NFT_QUEUE is not set), so the agent's own table fails to load and the test diverts the
  same packets (a new connection's first packet to or from a pod address, in postrouting, bypassed when nothing
  reads the queue) with iptables' NFQUEUE target into the same kernel queue, which the agent reads and answers.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from modules.cluster.objects import coredns, state_metrics
from modules.cluster.objects.common import HEALTH_NS, pod_security, restricted
from modules.cluster.objects.preflight import RETEST

from . import policy_agent
from .cluster import ControlPlane, wait
from .conftest import prepared, wait_for_default_service_account
from .policy_agent import sh
from .test_scheduled_events import place

GATEWAY = "169.254.1.1"
"""The pods' default gateway, as Azure CNI's transparent mode sets it (answered by the node's proxy ARP)."""
SERVER = (
    "import socket, sys, threading\n"
    "def serve(port):\n"
    "    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
    "    s.bind((sys.argv[1], port)); s.listen(16)\n"
    "    while True:\n"
    "        c, _ = s.accept(); c.sendall(b'hello'); c.close()\n"
    "for p in sys.argv[2:]:\n"
    "    threading.Thread(target=serve, args=(int(p),), daemon=True).start()\n"
    "print('ready', flush=True)\n"
    "threading.Event().wait()\n"
)
CLIENT = (
    "import socket, sys\n"
    "try:\n"
    "    s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3]))\n"
    "    print('open' if s.recv(5) == b'hello' else 'odd')\n"
    "except TimeoutError:\n"
    "    print('dropped')\n"
    "except ConnectionRefusedError:\n"
    "    print('refused')\n"
)
PORTS = (53, 8080)
DROP_WAIT_S = 3.0
"""How long a client waits for an answer to its SYN: the agent answers a queued packet in well under a
millisecond (its log's "Finished syncing packet"); a dropped SYN is never answered."""


@dataclass
class Pod:
    namespace: str
    labels: dict[str, str]
    address: str = ""
    netns: str = ""


@dataclass
class Node:
    name: str
    netns: str
    pods: dict[str, Pod]
    processes: list[subprocess.Popen[str]] = field(default_factory=list)


def _pods(team: str) -> dict[str, Pod]:
    return {
        "trainer": Pod(team, {"app": "trainer"}),
        "peer": Pod(team, {"app": "peer"}),
        "retest": Pod(HEALTH_NS, {"app.kubernetes.io/name": RETEST}),
        "other": Pod(team, {"app": "other"}),
        "metrics": Pod(state_metrics.NS, {"app.kubernetes.io/name": state_metrics.APP}),
        "dns": Pod(coredns.NS, dict(coredns.K8S_APP)),
    }


@pytest.fixture
def node(dev_cluster: ControlPlane) -> Iterator[Node]:
    """A node (network namespace) with five pods on it, each serving PORTS at its address."""
    cp = dev_cluster
    tag = f"np{os.getpid() % 100000}"
    team = prepared("dev").addons.teams[0].name
    subnet = prepared("dev").bootstrap.pool(prepared("dev").addons.pools[0].name).subnet
    made: list[str] = []
    with policy_agent.node_netns(tag) as netns:
        n = Node(netns, netns, _pods(team))
        try:
            for i, (name, pod) in enumerate(n.pods.items()):
                pod.address, pod.netns = str(subnet.network_address + 10 + i), f"{tag}-{name}"
                sh("ip", "netns", "add", pod.netns)
                made.append(pod.netns)
                veth = f"azv{i}"
                sh(
                    "ip",
                    "link",
                    "add",
                    veth,
                    "netns",
                    netns,
                    "type",
                    "veth",
                    "peer",
                    "name",
                    "eth0",
                    "netns",
                    pod.netns,
                )
                for cmd in (
                    ("ip", "addr", "add", f"{pod.address}/32", "dev", "eth0"),
                    ("ip", "link", "set", "eth0", "up"),
                    ("ip", "link", "set", "lo", "up"),
                    ("ip", "route", "add", GATEWAY, "dev", "eth0"),
                    ("ip", "route", "add", "default", "via", GATEWAY, "dev", "eth0"),
                ):
                    sh(*cmd, ns=pod.netns)
                for cmd in (
                    ("ip", "link", "set", veth, "up"),
                    ("ip", "route", "add", f"{pod.address}/32", "dev", veth),
                    ("sysctl", "-qw", f"net.ipv4.conf.{veth}.proxy_arp=1"),
                ):
                    sh(*cmd, ns=netns)
                server = subprocess.Popen(
                    ["ip", "netns", "exec", pod.netns, sys.executable, "-c", SERVER, pod.address, *map(str, PORTS)],
                    stdout=subprocess.PIPE,
                    text=True,
                )
                n.processes.append(server)
                assert server.stdout is not None and server.stdout.readline().strip() == "ready"
            yield n
        finally:
            for proc in n.processes:
                proc.kill()
                proc.wait()
            for ns in reversed(made):
                sh("ip", "netns", "del", ns, check=False)
            cp.call("DELETE", f"/api/v1/nodes/{n.name}")
            for name, pod in n.pods.items():
                cp.call("DELETE", f"/api/v1/namespaces/{pod.namespace}/pods/{name}?gracePeriodSeconds=0")


def _register(cp: ControlPlane, n: Node) -> None:
    """The API server's view of the node's pods, as the kubelet reports them once the CNI gave each its address
    (the kubelet stand-in): the Node, and each pod placed on it as a scheduler binds it, Running at its address."""
    wait_for_default_service_account(cp, sorted({p.namespace for p in n.pods.values()}))
    node_obj = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": n.name}}
    assert cp.call("POST", "/api/v1/nodes", node_obj)[0] == 201
    for name, pod in n.pods.items():
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": pod.namespace, "labels": pod.labels},
            "spec": {
                "nodeName": n.name,
                "securityContext": pod_security(),
                "containers": [{"name": "c", "image": "stand-in", "securityContext": restricted()}],
            },
        }
        place(cp, body)
        status = {
            "phase": "Running",
            "podIP": pod.address,
            "podIPs": [{"ip": pod.address}],
            "hostIP": policy_agent.UPLINK[1],
        }
        code, got = cp.call_patch(f"/api/v1/namespaces/{pod.namespace}/pods/{name}/status", {"status": status})
        assert code == 200, got


def _connect(n: Node, client: str, server: str, port: int) -> str:
    target = n.pods[server].address
    run = sh(sys.executable, "-c", CLIENT, target, str(port), str(DROP_WAIT_S), ns=n.pods[client].netns)
    return run.stdout.strip()


def _divert(n: Node, queue: int, subnet: str) -> None:
    """The stand-in for the agent's nftables rule (this kernel has no nftables queue expression)."""
    for direction in ("-s", "-d"):
        sh(
            "iptables",
            "-w",
            "-t",
            "mangle",
            "-A",
            "POSTROUTING",
            direction,
            subnet,
            "-m",
            "conntrack",
            "--ctstate",
            "NEW",
            "-j",
            "NFQUEUE",
            "--queue-num",
            str(queue),
            "--queue-bypass",
            ns=n.netns,
        )


# (client pod, server pod, port, open?) under the policies dev's add-ons ship (objects/network_policies.py), for
# the pod-network workloads they select (the host-network ones, such as the XID remediation, are outside every
# policy: the agent diverts no host-network pod's address, which is the node's).
SHIPPED = [
    ("trainer", "peer", 8080, True),  # a team namespace: no policy selects its pods
    ("trainer", "dns", 53, True),  # CoreDNS takes DNS from every pod
    ("trainer", "dns", 8080, False),  # ... and nothing else but Prometheus' scrape of its metrics port
    ("trainer", "retest", 8080, False),  # gpu-health denies all ingress
    ("trainer", "metrics", 8080, False),  # kube-state-metrics is scraped from the Prometheus subnet only
    ("metrics", "dns", 53, False),  # ... and talks to the API servers only
    ("retest", "dns", 53, False),  # the idle re-test talks to the API servers and nothing else
    ("retest", "trainer", 8080, False),
]


def test_the_shipped_policies_are_enforced_on_real_packets(
    dev_cluster: ControlPlane, node: Node, tmp_path: Path
) -> None:
    cp, spec = dev_cluster, prepared("dev").addons
    queue = int(next(a for a in policy_agent.container(spec)["args"] if a.startswith("--nfqueue-id=")).split("=")[1])
    subnet = str(prepared("dev").bootstrap.pool(spec.pools[0].name).subnet)
    # Without the engine the policies are declarations: every connection opens.
    before = {(c, s, p): _connect(node, c, s, p) for c, s, p, _ in SHIPPED}
    assert set(before.values()) == {"open"}, before
    _divert(node, queue, subnet)
    agent = policy_agent.start(cp, spec, node.netns, node.name, tmp_path / "agent")
    try:
        # The pods start after the agent, as new pods do: its Pod informer learns each from its status update.
        _register(cp, node)
        # Ready once it answers: the first verdict needs the agent's Pod and NetworkPolicy caches.
        wait("the policy engine's first verdict", lambda: _connect(node, "trainer", "retest", 8080) == "dropped", [])
        got = {(c, s, p): _connect(node, c, s, p) for c, s, p, _ in SHIPPED}
        want = {(c, s, p): "open" if ok else "dropped" for c, s, p, ok in SHIPPED}
        assert got == want, agent.output()[-6000:]
        # A team's own policy, applied while it runs: its peer pod takes connections only from its trainer pods in
        # its own namespace (a namespace selector and a pod selector in one rule, as the shipped cluster_dns() rule).
        team = node.pods["peer"].namespace
        isolate = {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": "isolate"},
            "spec": {
                "podSelector": {"matchLabels": {"app": "peer"}},
                "policyTypes": ["Ingress"],
                "ingress": [
                    {
                        "from": [
                            {
                                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": team}},
                                "podSelector": {"matchLabels": {"app": "trainer"}},
                            }
                        ]
                    }
                ],
            },
        }
        assert _connect(node, "other", "peer", 8080) == "open"
        code, body = cp.call("POST", f"/apis/networking.k8s.io/v1/namespaces/{team}/networkpolicies", isolate)
        assert code == 201, body
        try:
            wait("the team's policy", lambda: _connect(node, "other", "peer", 8080) == "dropped", [], timeout=60)
            assert _connect(node, "trainer", "peer", 8080) == "open"
        finally:
            cp.call("DELETE", f"/apis/networking.k8s.io/v1/namespaces/{team}/networkpolicies/isolate")
        # All of that within its DaemonSet's memory limit (dev's Pods, Namespaces and NetworkPolicies cached).
        assert agent.alive() and not agent.oom_killed(), agent.output()[-3000:]
        peak, limit = agent.peak_bytes(), policy_agent.limit_bytes(spec)
        print(f"\nkube-network-policies on dev: peak {peak / 2**20:.0f} MiB of {limit / 2**20:.0f} MiB")
        assert peak < limit, (peak, limit)
    finally:
        agent.remove()
