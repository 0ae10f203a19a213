"""The rendered mangle rules, applied for real in throwaway network namespaces, count exactly the
internet traffic: a pod (private address from the pool's subnet) and the node talking to a
stand-in internet host (203.0.113.10, a documentation address). No packet leaves the namespaces.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from modules.bootstrap.context import BootstrapContext
from modules.bootstrap.layout import PATHS
from modules.bootstrap.roles import bundle

from .hostsim import in_private_host, private_host

INTERNET = "203.0.113.10"
INTERNET_GW = "203.0.113.1"
PACKETS = 3
COUNTER = re.compile(r'^\[(\d+):(\d+)\] .*--comment "iptables-exporter (traffic=[a-z-]+)"')

SERVER = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], int(sys.argv[2])))
s.settimeout(30)
print("ready", flush=True)
for _ in range(int(sys.argv[3])):
    data, peer = s.recvfrom(100)
    s.sendto(data, peer)
"""
CLIENT = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(10)
for i in range(int(sys.argv[3])):
    s.sendto(b"ping", (sys.argv[1], int(sys.argv[2])))
    assert s.recvfrom(100)[0] == b"ping"
"""


def unit_commands(unit: str) -> list[str]:
    """A oneshot unit's ExecStart command lines, in order (systemd's quoting is the shell's here)."""
    return [
        line.split("=", 1)[1] for line in unit.splitlines() if line.startswith("ExecStart=") and line != "ExecStart="
    ]


def _sh(*args: str, ns: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    cmd = (["ip", "netns", "exec", ns] if ns else []) + list(args)
    run = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if check and run.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)}: {run.stderr}")
    return run


@pytest.fixture
def namespaces(require: Callable[[str], str]) -> Iterator[dict[str, str]]:
    require("ip")
    tag = f"agk{os.getpid()}{uuid.uuid4().hex[:6]}"
    ns = {role: f"{tag}-{role}" for role in ("node", "pod", "inet")}
    created = []
    try:
        for name in ns.values():
            _sh("ip", "netns", "add", name)
            created.append(name)
        yield ns
    finally:
        for name in created:
            _sh("ip", "netns", "del", name, check=False)


def _wire(ctx: BootstrapContext, ns: dict[str, str]) -> tuple[str, str]:
    """node <-> pod on the pool's subnet, node <-> internet on 203.0.113.0/24; returns (node, pod) IPs."""
    subnet = ctx.pool("a100").subnet
    node_ip, pod_ip = str(subnet.network_address + 4), str(subnet.network_address + 10)
    node, pod, inet = ns["node"], ns["pod"], ns["inet"]
    _sh("ip", "link", "add", "vp0", "netns", node, "type", "veth", "peer", "name", "vp1", "netns", pod)
    _sh("ip", "link", "add", "vi0", "netns", node, "type", "veth", "peer", "name", "vi1", "netns", inet)
    for name, link, addr in (
        (node, "vp0", f"{node_ip}/{subnet.prefixlen}"),
        (pod, "vp1", f"{pod_ip}/{subnet.prefixlen}"),
        (node, "vi0", f"{INTERNET_GW}/24"),
        (inet, "vi1", f"{INTERNET}/24"),
    ):
        _sh("ip", "addr", "add", addr, "dev", link, ns=name)
        _sh("ip", "link", "set", link, "up", ns=name)
        _sh("ip", "link", "set", "lo", "up", ns=name)
    _sh("ip", "route", "add", "default", "via", node_ip, ns=pod)
    _sh("ip", "route", "add", "default", "via", INTERNET_GW, ns=inet)
    _sh("sysctl", "-qw", "net.ipv4.ip_forward=1", ns=node)
    return node_ip, pod_ip


def _echo(server_ns: str, client_ns: str, address: str, port: int = 9999) -> None:
    server = subprocess.Popen(
        ["ip", "netns", "exec", server_ns, sys.executable, "-c", SERVER, address, str(port), str(PACKETS)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        _sh(sys.executable, "-c", CLIENT, address, str(port), str(PACKETS), ns=client_ns)
        assert server.wait(timeout=30) == 0
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def _counters(ns: str) -> dict[str, int]:
    out = _sh("iptables-save", "-c", "-t", "mangle", ns=ns).stdout
    return {m.group(3): int(m.group(1)) for m in map(COUNTER.match, out.splitlines()) if m}


@pytest.mark.realtool
def test_mangle_rules_count_only_internet_traffic(
    dev: BootstrapContext, namespaces: dict[str, str], require: Callable[[str], str], tmp_path: Path
) -> None:
    require("iptables")
    require("iptables-save")
    node_ip, _ = _wire(dev, namespaces)
    node = bundle(dev, "gpu-node", "a100")
    rules = tmp_path / "mangle.rules"
    rules.write_text(node.file("iptables/mangle.rules").content)
    # What agk-egress-accounting runs: the restore, then the jumps into its chains.
    for line in unit_commands(node.file("systemd/agk-egress-accounting.service").content):
        _sh("sh", "-c", line.replace(PATHS.mangle_rules, str(rules)), ns=namespaces["node"])
    zero = {
        "traffic=host-internet-in": 0,
        "traffic=host-internet-out": 0,
        "traffic=internet-in": 0,
        "traffic=internet-out": 0,
    }
    assert _counters(namespaces["node"]) == zero

    # A pod talks to the node: private both ways, nothing counted.
    _echo(namespaces["node"], namespaces["pod"], node_ip)
    assert _counters(namespaces["node"]) == zero

    # A pod talks to the internet: forwarded, counted as pod traffic only.
    _echo(namespaces["inet"], namespaces["pod"], INTERNET)
    after_pod = _counters(namespaces["node"])
    assert after_pod == zero | {"traffic=internet-in": PACKETS, "traffic=internet-out": PACKETS}

    # The internet talks to the node itself: host counters only.
    _echo(namespaces["node"], namespaces["inet"], INTERNET_GW)
    assert _counters(namespaces["node"]) == after_pod | {
        "traffic=host-internet-in": PACKETS,
        "traffic=host-internet-out": PACKETS,
    }


@pytest.mark.realtool
def test_broken_rules_are_refused_for_real(
    namespaces: dict[str, str], require: Callable[[str], str], tmp_path: Path
) -> None:
    # Applied (not --test): a jump to a chain that does not exist fails.
    require("iptables")
    rules = tmp_path / "bad.rules"
    rules.write_text("*mangle\n-A INPUT -j AGK-NO-SUCH-CHAIN\nCOMMIT\n")
    run = _sh("iptables-restore", "--noflush", str(rules), ns=namespaces["node"], check=False)
    assert run.returncode != 0


def _rules_without_counters(save: str) -> list[str]:
    return [line for line in save.splitlines() if not line.startswith("#")]


@pytest.mark.realtool
@pytest.mark.parametrize(
    ("role", "unit", "table"),
    [("gpu-node", "agk-egress-accounting", "mangle"), ("nat", "agk-service-nat", "nat")],
)
def test_restarting_a_rules_unit_leaves_the_same_rules(
    dev: BootstrapContext,
    namespaces: dict[str, str],
    require: Callable[[str], str],
    tmp_path: Path,
    role: str,
    unit: str,
    table: str,
) -> None:
    # Applied twice with the legacy backend, as agk-node-network leaves the host: a restart of the
    # unit (or of agk-node-network, which it Requires=) must not add a second jump, which would
    # count every packet twice.
    require("iptables")
    require("iptables-save")
    require("unshare")
    node = bundle(dev, role, "a100" if role == "gpu-node" else dev.nat.name)
    commands = unit_commands(node.file(f"systemd/{unit}.service").content)
    save = f"iptables-legacy-save -t {table}"
    lines = [
        *private_host(tmp_path, node),
        "update-alternatives --quiet --set iptables /usr/sbin/iptables-legacy",
        *commands,
        f"{save} > /run/first",
        *commands,
        f"{save} > /run/second",
        "cat /run/first; echo ---; cat /run/second",
    ]
    out = in_private_host(namespaces["node"], lines).stdout
    first, second = (_rules_without_counters(part) for part in out.split("---\n"))
    assert first == second
    jumps = [line for line in first if line.startswith("-A ") and " -j AGK-" in line and "-A AGK-" not in line]
    assert len(jumps) == len(set(jumps)) and jumps, first
