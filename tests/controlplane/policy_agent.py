"""The NetworkPolicy engine's node agent on this machine: a node's network namespace and the agent in it.

The agent (kube-network-policies, built from the pinned module) runs with its rendered DaemonSet container's
command and arguments, as its ServiceAccount (a TokenRequest: the rendered RBAC is what lets it work), in a
memory cgroup of the container's limit (v1 memory controller, as a kubelet sets it), inside a network namespace
of its own: the node. Its nftables and nfqueue work stays there, never in this machine's namespace.

Stand-ins, for what cannot exist here:
- the node is a network namespace whose uplink (a veth to this machine) is its NIC; the API server answers at
  this machine's end of it, which a pod's in-cluster configuration would name by the ``kubernetes`` Service
  (the certificate's kubernetes.default.svc name is what the agent verifies);
- no container runtime: the agent's NRI plugin finds no socket, and it takes pod addresses from its Pod
  informer alone (its own fallback).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from modules.bootstrap import pki
from modules.cluster.manifests import render_manifests
from modules.cluster.objects import policy_engine
from modules.cluster.spec import AddonsSpec
from tests.bootstrap.conftest import tool

from .cluster import ControlPlane, kubeconfig, wait
from .containers import Running, memory_cgroup, quantity_bytes

UPLINK = ("10.250.0.1", "10.250.0.2")
"""This machine's end and the node's end of the node's uplink (a /30 no test network uses)."""


def sh(*args: str, ns: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    cmd = (["ip", "netns", "exec", ns] if ns else []) + list(args)
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if check and run.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)}: {run.stderr}")
    return run


@contextmanager
def node_netns(tag: str) -> Iterator[str]:
    """A network namespace named ``<tag>-node`` with its uplink to this machine and forwarding on."""
    netns, uplink = f"{tag}-node", f"{tag}up"
    sh("ip", "netns", "add", netns)
    try:
        sh("ip", "link", "add", uplink, "type", "veth", "peer", "name", "eth0", "netns", netns)
        sh("ip", "addr", "add", f"{UPLINK[0]}/30", "dev", uplink)
        sh("ip", "link", "set", uplink, "up")
        for cmd in (
            ("ip", "addr", "add", f"{UPLINK[1]}/30", "dev", "eth0"),
            ("ip", "link", "set", "eth0", "up"),
            ("ip", "link", "set", "lo", "up"),
            ("ip", "route", "add", "default", "via", UPLINK[0]),
            ("sysctl", "-qw", "net.ipv4.ip_forward=1"),
        ):
            sh(*cmd, ns=netns)
        yield netns
    finally:
        sh("ip", "netns", "del", netns, check=False)
        sh("ip", "link", "del", uplink, check=False)


def rendered(spec: AddonsSpec) -> dict[str, Any]:
    (obj,) = [
        o
        for o in render_manifests(spec)
        if (o["kind"], o["metadata"]["name"]) == ("DaemonSet", policy_engine.AGENT)
        and o["metadata"]["namespace"] == policy_engine.NS
    ]
    return obj


def container(spec: AddonsSpec) -> dict[str, Any]:
    (c,) = rendered(spec)["spec"]["template"]["spec"]["containers"]
    return dict(c)


def limit_bytes(spec: AddonsSpec) -> int:
    return quantity_bytes(container(spec)["resources"]["limits"]["memory"])


def _token(cp: ControlPlane) -> str:
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}}
    path = f"/api/v1/namespaces/{policy_engine.NS}/serviceaccounts/{policy_engine.AGENT}/token"
    code, got = cp.call("POST", path, body)
    assert code == 201, got
    return str(got["status"]["token"])


def argv(spec: AddonsSpec, node: str) -> list[str]:
    """The rendered container's command and arguments, the image's program in its place, $(NODE_NAME) expanded."""
    c = container(spec)
    assert c["command"] == ["/bin/netpol"], c["command"]  # the image's program: the agent built here
    return [tool("kube-network-policies"), *(a.replace("$(NODE_NAME)", node) for a in c["args"])]


def start(cp: ControlPlane, spec: AddonsSpec, netns: str, node: str, root: Path) -> Running:
    """The agent for ``node`` in ``netns``, as its rendered container runs, under its memory limit."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "ca.crt").write_text(cp.pems[f"cert:{pki.KUBERNETES_CA}"])
    port = cp.url.rsplit(":", 1)[1]
    config = kubeconfig(root / "kubeconfig", f"https://{UPLINK[0]}:{port}", root / "ca.crt", token=_token(cp))
    doc = yaml.safe_load(config.read_text())
    doc["clusters"][0]["cluster"]["tls-server-name"] = "kubernetes.default.svc"
    config.write_text(yaml.safe_dump(doc))
    limit = limit_bytes(spec)
    cgroup = memory_cgroup(f"policy-agent-{os.getpid()}", limit)
    # --v=2 (here only): the agent logs its informers' sync and each verdict, which the tests read.
    command = ["ip", "netns", "exec", netns, *argv(spec, node), f"--kubeconfig={config}", "--v=2"]
    log = root / "agent.log"
    with log.open("ab") as out:
        proc = subprocess.Popen(
            ["sh", "-ec", f'echo $$ > "{cgroup}/cgroup.procs"; exec "$@"', "agent", *command],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    return Running("kube-network-policies", proc, log, cgroup, limit)


def synced(agent: Running, timeout: float = 600) -> None:
    """Until its Pod informer has listed every Pod (client-go's reflector logs it)."""

    def done() -> bool:
        assert agent.alive(), agent.output()[-3000:]
        return 'Caches populated" type="*v1.Pod"' in agent.output()

    wait("the policy agent's Pod cache", done, [], timeout=timeout)
