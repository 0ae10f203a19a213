"""The NetworkPolicy engine on the real API server: the policies the project ships, enforced on real packets.

Real: dev's control plane with every add-on object of dev applied (the shipped NetworkPolicies and the engine's
objects among them); the kube-network-policies agent built from the pinned module (tools/components), started
with its rendered container's command and arguments, as its ServiceAccount (a TokenRequest: the rendered RBAC is
what lets it work); the kernel's netfilter, nfqueue and conntrack; TCP connections between network namespaces.

Stand-ins, for what cannot exist here (named where they are made):
- the node and its pods are network namespaces: each pod reaches the node through a veth named as Azure CNI's
  (``azv*``), routed by a /32 host route, its default route via 169.254.1.1 answered by proxy ARP, as Azure CNI's
  transparent mode sets them up;
- the kubelet and the scheduler: each pod is bound to the node through the binding subresource and its status
  (Running, its address) written by the test, as the kubelet reports the address the CNI gave it; no container
  runtime, so the agent's NRI plugin finds no socket and it resolves addresses from its Pod informer alone (its
  own fallback);
- the nftables rule that sends new connections to the agent's queue: this kernel is built without nftables'
  queue expression (CONFIG_NFT_QUEUE is not set), so the agent's own table fails to load and the test diverts the
  same packets (a new connection's first packet, in postrouting, bypassed when nothing reads the queue) with
  iptables' NFQUEUE target into the same kernel queue, which the agent reads and answers;
- the API server's address: the node reaches it at this machine's end of the node's uplink (its certificate's
  kubernetes.default.svc name), where a pod's in-cluster configuration would name the Service.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from modules.bootstrap import pki
from modules.cluster.manifests import render_manifests
from modules.cluster.objects import coredns, policy_engine
from modules.cluster.objects.common import HEALTH_NS, pod_security, restricted
from modules.cluster.objects.preflight import RETEST
from modules.cluster.objects.remediation import APP as REMEDIATION
from tests.bootstrap.conftest import tool

from .cluster import ControlPlane, Process, kubeconfig, wait
from .conftest import prepared, wait_for_default_service_account

UPLINK = ("10.250.0.1", "10.250.0.2")
"""This machine's end and the node's end of the node's uplink (a /30 no test network uses)."""
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
    uplink: str
    pods: dict[str, Pod]
    hosts_dir: Path
    processes: list[subprocess.Popen[str]] = field(default_factory=list)


def _sh(*args: str, ns: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    cmd = (["ip", "netns", "exec", ns] if ns else []) + list(args)
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if check and run.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)}: {run.stderr}")
    return run


def _rendered(kind: str, name: str) -> dict[str, Any]:
    (obj,) = [
        o
        for o in render_manifests(prepared("dev").addons)
        if (o["kind"], o["metadata"]["name"]) == (kind, name) and o["metadata"].get("namespace") == policy_engine.NS
    ]
    return obj


def _argv(obj: dict[str, Any], env: dict[str, str]) -> list[str]:
    """The rendered container's command and arguments, the image's program in its place, $(VAR) expanded."""
    (c,) = obj["spec"]["template"]["spec"]["containers"]
    assert c["command"] == ["/bin/netpol"], c["command"]  # the image's program: the agent built here
    out = [tool("kube-network-policies")]
    for arg in c["args"]:
        for var, value in env.items():
            arg = arg.replace(f"$({var})", value)
        out.append(arg)
    return out


def _token(cp: ControlPlane, sa: str) -> str:
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}}
    code, got = cp.call("POST", f"/api/v1/namespaces/{policy_engine.NS}/serviceaccounts/{sa}/token", body)
    assert code == 201, got
    return str(got["status"]["token"])


def _pods(team: str) -> dict[str, Pod]:
    return {
        "trainer": Pod(team, {"app": "trainer"}),
        "peer": Pod(team, {"app": "peer"}),
        "retest": Pod(HEALTH_NS, {"app.kubernetes.io/name": RETEST}),
        "remediation": Pod(HEALTH_NS, {"app.kubernetes.io/name": REMEDIATION}),
        "dns": Pod(coredns.NS, dict(coredns.K8S_APP)),
    }


@pytest.fixture
def node(dev_cluster: ControlPlane, tmp_path: Path) -> Iterator[Node]:
    """A node (network namespace) with five pods on it, each serving PORTS at its address."""
    cp = dev_cluster
    tag = f"np{os.getpid() % 100000}"
    team = prepared("dev").addons.teams[0].name
    subnet = prepared("dev").bootstrap.pool(prepared("dev").addons.pools[0].name).subnet
    made: list[str] = []
    n = Node(f"{tag}-node", f"{tag}-node", f"{tag}up", _pods(team), Path("/etc/netns") / f"{tag}-node")
    try:
        _sh("ip", "netns", "add", n.netns)
        made.append(n.netns)
        _sh("ip", "link", "add", n.uplink, "type", "veth", "peer", "name", "eth0", "netns", n.netns)
        _sh("ip", "addr", "add", f"{UPLINK[0]}/30", "dev", n.uplink)
        _sh("ip", "link", "set", n.uplink, "up")
        for cmd in (
            ("ip", "addr", "add", f"{UPLINK[1]}/30", "dev", "eth0"),
            ("ip", "link", "set", "eth0", "up"),
            ("ip", "link", "set", "lo", "up"),
            ("ip", "route", "add", "default", "via", UPLINK[0]),
            ("sysctl", "-qw", "net.ipv4.ip_forward=1"),
        ):
            _sh(*cmd, ns=n.netns)
        for i, (name, pod) in enumerate(n.pods.items()):
            pod.address, pod.netns = str(subnet.network_address + 10 + i), f"{tag}-{name}"
            _sh("ip", "netns", "add", pod.netns)
            made.append(pod.netns)
            veth = f"azv{i}"
            _sh("ip", "link", "add", veth, "netns", n.netns, "type", "veth", "peer", "name", "eth0", "netns", pod.netns)
            for cmd in (
                ("ip", "addr", "add", f"{pod.address}/32", "dev", "eth0"),
                ("ip", "link", "set", "eth0", "up"),
                ("ip", "link", "set", "lo", "up"),
                ("ip", "route", "add", GATEWAY, "dev", "eth0"),
                ("ip", "route", "add", "default", "via", GATEWAY, "dev", "eth0"),
            ):
                _sh(*cmd, ns=pod.netns)
            for cmd in (
                ("ip", "link", "set", veth, "up"),
                ("ip", "route", "add", f"{pod.address}/32", "dev", veth),
                ("sysctl", "-qw", f"net.ipv4.conf.{veth}.proxy_arp=1"),
            ):
                _sh(*cmd, ns=n.netns)
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
            _sh("ip", "netns", "del", ns, check=False)
        _sh("ip", "link", "del", n.uplink, check=False)
        if n.hosts_dir.exists():
            for f in n.hosts_dir.iterdir():
                f.unlink()
            n.hosts_dir.rmdir()
        cp.call("DELETE", f"/api/v1/nodes/{n.name}")
        for name, pod in n.pods.items():
            cp.call("DELETE", f"/api/v1/namespaces/{pod.namespace}/pods/{name}?gracePeriodSeconds=0")


def _register(cp: ControlPlane, n: Node) -> None:
    """The API server's view of the node's pods, as the kubelet reports them once the CNI gave each its address
    (the kubelet stand-in): the Node, and each pod bound to it, Running at its address."""
    wait_for_default_service_account(cp, sorted({p.namespace for p in n.pods.values()}))
    node_obj = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": n.name}}
    assert cp.call("POST", "/api/v1/nodes", node_obj)[0] == 201
    for name, pod in n.pods.items():
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": pod.labels},
            "spec": {
                # No scheduler serves this name: the test binds the pod to the node itself, through the
                # binding subresource as a scheduler does (admission refuses a pod created with nodeName).
                "schedulerName": "policy-engine-test",
                "securityContext": pod_security(),
                "containers": [{"name": "c", "image": "stand-in", "securityContext": restricted()}],
            },
        }
        code, got = cp.call("POST", f"/api/v1/namespaces/{pod.namespace}/pods", body)
        assert code == 201, got
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name},
            "target": {"apiVersion": "v1", "kind": "Node", "name": n.name},
        }
        code, got = cp.call("POST", f"/api/v1/namespaces/{pod.namespace}/pods/{name}/binding", binding)
        assert code == 201, got
        status = {"phase": "Running", "podIP": pod.address, "podIPs": [{"ip": pod.address}], "hostIP": UPLINK[1]}
        code, got = cp.call_patch(f"/api/v1/namespaces/{pod.namespace}/pods/{name}/status", {"status": status})
        assert code == 200, got


def _connect(n: Node, client: str, server: str, port: int) -> str:
    target = n.pods[server].address
    run = _sh(sys.executable, "-c", CLIENT, target, str(port), str(DROP_WAIT_S), ns=n.pods[client].netns)
    return run.stdout.strip()


def _engine(cp: ControlPlane, n: Node, root: Path) -> Process:
    """The agent on the node, as its rendered container runs."""
    agent = _rendered("DaemonSet", policy_engine.AGENT)
    # In a pod this is the in-cluster configuration: the pod's ServiceAccount token and the API server.
    home = root / "kubeconfigs"
    home.mkdir()
    (home / "ca.crt").write_text(cp.pems[f"cert:{pki.KUBERNETES_CA}"])
    port = cp.url.rsplit(":", 1)[1]
    path = kubeconfig(
        home / "agent", f"https://{UPLINK[0]}:{port}", home / "ca.crt", token=_token(cp, policy_engine.AGENT)
    )
    doc = yaml.safe_load(path.read_text())
    doc["clusters"][0]["cluster"]["tls-server-name"] = "kubernetes.default.svc"
    path.write_text(yaml.safe_dump(doc))
    # --v=2 (test only): the agent logs each verdict, which a failure prints.
    argv = [*_argv(agent, {"NODE_NAME": n.name}), f"--kubeconfig={path}", "--v=2"]
    started = Process("kube-network-policies", ["ip", "netns", "exec", n.netns, *argv], root / "agent.log")
    started.start()
    return started


def _divert(n: Node, queue: int, subnet: str) -> None:
    """The stand-in for the agent's nftables rule (this kernel has no nftables queue expression)."""
    for direction in ("-s", "-d"):
        _sh(
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


# (client pod, server pod, port, open?) under the policies dev's add-ons ship (objects/network_policies.py).
SHIPPED = [
    ("trainer", "peer", 8080, True),  # a team namespace: no policy selects its pods
    ("trainer", "dns", 53, True),  # CoreDNS takes DNS from every pod
    ("trainer", "dns", 8080, False),  # ... and nothing else but Prometheus' scrape of its metrics port
    ("trainer", "retest", 8080, False),  # gpu-health denies all ingress
    ("remediation", "dns", 53, True),  # its egress to cluster DNS (namespace and pod selectors together)
    ("remediation", "peer", 8080, False),  # ... and to the API servers, IMDS and Azure's public HTTPS only
    ("retest", "dns", 53, False),  # the idle re-test talks to the API servers and nothing else
    ("retest", "trainer", 8080, False),
]


def test_the_shipped_policies_are_enforced_on_real_packets(
    dev_cluster: ControlPlane, node: Node, tmp_path: Path
) -> None:
    cp = dev_cluster
    rendered = _rendered("DaemonSet", policy_engine.AGENT)
    queue = int(
        next(
            a for a in rendered["spec"]["template"]["spec"]["containers"][0]["args"] if a.startswith("--nfqueue-id=")
        ).split("=", 1)[1]
    )
    subnet = str(prepared("dev").bootstrap.pool(prepared("dev").addons.pools[0].name).subnet)
    # Without the engine the policies are declarations: every connection opens.
    before = {(c, s, p): _connect(node, c, s, p) for c, s, p, _ in SHIPPED}
    assert set(before.values()) == {"open"}, before
    _divert(node, queue, subnet)
    agent = _engine(cp, node, tmp_path)
    started = [agent]
    try:
        # The pods start after the agent, as new pods do: its Pod informer learns each from its status update.
        _register(cp, node)
        # Ready once it answers: the first verdict needs the agent's Pod and NetworkPolicy caches.
        wait(
            "the policy engine's first verdict", lambda: _connect(node, "trainer", "retest", 8080) == "dropped", started
        )
        got = {(c, s, p): _connect(node, c, s, p) for c, s, p, _ in SHIPPED}
        want = {(c, s, p): "open" if ok else "dropped" for c, s, p, ok in SHIPPED}
        assert got == want, "\n".join(proc.tail(40) for proc in started)
        # A policy applied while it runs: the team isolates its pods; the next connection is dropped.
        deny = {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": "isolate"},
            "spec": {"podSelector": {"matchLabels": {"app": "peer"}}, "policyTypes": ["Ingress"]},
        }
        team = node.pods["peer"].namespace
        code, body = cp.call("POST", f"/apis/networking.k8s.io/v1/namespaces/{team}/networkpolicies", deny)
        assert code == 201, body
        try:
            wait("the new policy", lambda: _connect(node, "trainer", "peer", 8080) == "dropped", started, timeout=60)
        finally:
            cp.call("DELETE", f"/apis/networking.k8s.io/v1/namespaces/{team}/networkpolicies/isolate")
        assert agent.alive(), agent.tail()
    finally:
        for proc in started:
            proc.stop()
