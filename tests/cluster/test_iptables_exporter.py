"""Real-tool tier: the stdlib iptables exporter reads the kernel's own counters of the bootstrap's mangle rules.

A throwaway network namespace gets a GPU node's rendered ``mangle.rules`` (iptables-legacy, the backend
the bootstrap selects) and real traffic to a stand-in internet host (203.0.113.10, a documentation
address); the exporter, run there with an isolated stdlib-only interpreter as in its pod, must report
exactly what ``iptables-legacy-save -c`` reports, in a format ``promtool check metrics`` accepts.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from modules.bootstrap.roles import bundle
from modules.bootstrap.roles.parts import MANGLE_JUMPS
from modules.cluster.scripts import iptables_exporter
from modules.stackplan.config import load_stack
from modules.stackplan.prepare import prepare_cluster
from tests.bootstrap.conftest import tool
from tests.bootstrap.test_realtool_iptables import CLIENT
from tests.bootstrap.test_realtool_iptables import SERVER as ECHO
from tests.cluster.conftest import STACKS

SCRIPT = Path(iptables_exporter.__file__)
SAVED = re.compile(r'^\[(\d+):(\d+)\] -A (\S+) .*--comment "iptables-exporter (traffic=[a-z-]+)"')
METRIC = re.compile(
    r'^iptables_exporter_(packets|bytes)_total\{table="mangle",chain="([^"]+)",traffic="([^"]+)"\} (\d+)$'
)


def _sh(*args: str, ns: str | None = None, stdin: str | None = None) -> str:
    cmd = (["ip", "netns", "exec", ns] if ns else []) + list(args)
    run = subprocess.run(cmd, capture_output=True, text=True, input=stdin, check=False)
    assert run.returncode == 0, f"{' '.join(cmd)}: {run.stderr}"
    return run.stdout


@pytest.fixture
def netns() -> Iterator[tuple[str, str]]:
    tool("ip")
    tag = f"agkx{os.getpid()}{uuid.uuid4().hex[:6]}"
    node, inet = f"{tag}-node", f"{tag}-inet"
    created = []
    try:
        for name in (node, inet):
            _sh("ip", "netns", "add", name)
            created.append(name)
        _sh("ip", "link", "add", "vi0", "netns", node, "type", "veth", "peer", "name", "vi1", "netns", inet)
        for ns, link, addr in ((node, "vi0", "203.0.113.1/24"), (inet, "vi1", "203.0.113.10/24")):
            _sh("ip", "addr", "add", addr, "dev", link, ns=ns)
            _sh("ip", "link", "set", link, "up", ns=ns)
        yield node, inet
    finally:
        for name in created:
            subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)


def _saved(ns: str) -> dict[tuple[str, str], tuple[int, int]]:
    out = _sh("iptables-legacy-save", "-c", "-t", "mangle", ns=ns)
    return {(m[3], m[4].split("=", 1)[1]): (int(m[1]), int(m[2])) for m in map(SAVED.match, out.splitlines()) if m}


def _exported(ns: str) -> tuple[str, dict[tuple[str, str], tuple[int, int]]]:
    # -I: isolated, no site-packages or toolkit on the path; the pod runs the file alone too.
    text = _sh(sys.executable, "-I", str(SCRIPT), "--once", "--table", "mangle", ns=ns)
    values: dict[tuple[str, str], dict[str, int]] = {}
    for m in map(METRIC.match, text.splitlines()):
        if m:
            values.setdefault((m[2], m[3]), {})[m[1]] = int(m[4])
    return text, {k: (v["packets"], v["bytes"]) for k, v in values.items()}


@pytest.mark.realtool
def test_exporter_reports_the_kernels_counters_of_the_rendered_rules(netns: tuple[str, str], tmp_path: Path) -> None:
    tool("iptables")
    node, inet = netns
    boot = prepare_cluster("dev", load_stack(STACKS, "dev"), STACKS).bootstrap
    rules = tmp_path / "mangle.rules"
    rules.write_text(bundle(boot, "gpu-node", "a100").file("iptables/mangle.rules").content)
    _sh("iptables-legacy-restore", "--noflush", str(rules), ns=node)
    # The file holds only our chains; agk-egress-accounting then adds the jumps into them.
    for table, builtin, chain in MANGLE_JUMPS:
        _sh("iptables-legacy", "-w", "-t", table, "-A", builtin, "-j", chain, ns=node)
    text, before = _exported(node)
    assert before == _saved(node) and len(before) == 4 and all(v == (0, 0) for v in before.values())

    # The node talks to the internet: host traffic out and back in.
    server = subprocess.Popen(
        ["ip", "netns", "exec", inet, sys.executable, "-c", ECHO, "203.0.113.10", "9999", "3"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        _sh(sys.executable, "-c", CLIENT, "203.0.113.10", "9999", "3", ns=node)
        assert server.wait(timeout=30) == 0
    finally:
        if server.poll() is None:
            server.kill()
    text, after = _exported(node)
    assert after == _saved(node)
    assert after[("AGK-HOST-OUT", "host-internet-out")][0] >= 3 and after[("AGK-HOST-IN", "host-internet-in")][0] >= 3
    assert after[("AGK-POD-OUT", "internet-out")] == (0, 0)
    subprocess.run([tool("promtool"), "check", "metrics"], input=text, text=True, check=True, capture_output=True)


def test_comment_labels() -> None:
    assert iptables_exporter.labels("iptables-exporter traffic=internet-out") == {"traffic": "internet-out"}
    assert iptables_exporter.labels("iptables-exporter a=1 bad-key=2 chain=x b") == {"a": "1"}
    assert iptables_exporter.labels("something else") is None
    rules = [
        iptables_exporter.Rule("OUT", "iptables-exporter traffic=x", 1, 10),
        iptables_exporter.Rule("OUT", "iptables-exporter traffic=x", 2, 20),
        iptables_exporter.Rule("OUT", "kube-proxy rule", 5, 50),
    ]
    text = iptables_exporter.render(rules, "mangle")
    assert 'iptables_exporter_bytes_total{table="mangle",chain="OUT",traffic="x"} 30' in text.splitlines()
    assert 'iptables_exporter_rules{table="mangle"} 1' in text.splitlines()
