"""`make bench-scale`: prod-7500 at its size on this machine, with real components, and its figures.

1. prod-7500's rendered control plane: its 5 etcd and 5 events etcd members, and the first of its 5 API
   server hosts (kube-apiserver, kube-controller-manager, kube-scheduler), its add-ons applied. One host, not
   five: each API server keeps its own watch cache of the whole cluster (about 4 GiB resident here with the
   fleet's pods), so five of them and the rest do not fit this 24 GiB machine (tried: the kernel killed one).
   Per-host figures are the same with one host or five; what one host cannot show is the load the five share.
2. kwok (the pinned build) registers and keeps Ready every node of prod-7500's plan: the Nodes are
   created as their kubelets register them (tests/controlplane/kwok.py; realistic status,
   tests/scale/load.py), initialized and released; kwok renews their leases and runs every pod bound to
   them. The DaemonSet controller creates the node agents' pods on every node, the scheduler binds them.
3. Figures: time to register all nodes and to have every agent pod Running, the API servers' and etcd
   members' resident memory, etcd's database size, the latency of a LIST of all nodes with and without
   ``resourceVersion=0`` (served from the watch cache), and the gang scheduler (its rendered pod, under
   its manifest's memory limit) placing a 99-node gang: time and peak memory.
4. `pytest -m fleet tests/scale`: the controllers at that size with every pod (kube-state-metrics, the
   re-test with the pods, the gang scheduler), under their limits.

kwok is tuned for 2 cores, and that is the only tuning: each node's lease is renewed every 45 s instead
of the kubelet's 10 s (``--node-lease-duration-seconds=180``: kwok renews at a quarter of it; the
controller-manager's 50 s node-monitor grace still holds), and node status every 10 minutes (kwok's
heartbeat stage, the kubelet's nodeStatusReportFrequency is 5 minutes). kwok also plays 32 pod and 32 node
stages at once instead of 4 each (``POD_WORKERS``, ``NODE_WORKERS``), so that every node turns Ready and every
agent pod reaches Running within the run.

Each figure is printed as it is measured, so a run that stops early still reports what it got.
``--no-fleet-tests`` leaves out step 4 (run it alone: ``pytest -s -m fleet tests/scale``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from agk.render import render_manifests_dir  # noqa: E402
from tests.bootstrap.conftest import context  # noqa: E402
from tests.controlplane.cluster import ControlPlane, build, start, wait  # noqa: E402
from tests.controlplane.conftest import prepared  # noqa: E402
from tests.controlplane.kwok import Kwok  # noqa: E402
from tests.scale.load import Loader, agent_pods, fleet, register_fleet  # noqa: E402

LEASE_SECONDS = 180
POD_WORKERS = 32
"""kwok's pod stages at once: with its default of 4, 45,000 agent pods took hours to reach Running (about 5 a
second on 2 cores, each worker waiting on the busy API server); the pods, not kwok, are what is measured."""
NODE_WORKERS = 32
"""kwok's node stages at once: with its default of 4 beside 32 pod workers, 850 of 7,510 nodes were still not
Ready after 30 minutes (2026-12-04): each worker's status patch waits on the API server as the pods' do."""


def rss_mib(pid: int, field: str = "VmRSS") -> float:
    """Resident memory now (``VmRSS``) or at its peak (``VmHWM``), MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return 0.0


def timed_list(cp: ControlPlane, query: str, runs: int = 3) -> tuple[float, int]:
    """Median seconds of GET /api/v1/nodes<query> (whole response read), and its bytes."""
    took, size = [], 0
    for _ in range(runs):
        req = urllib.request.Request(cp.url + "/api/v1/nodes" + query, headers={"Accept": "application/json"})
        began = time.perf_counter()
        with urllib.request.urlopen(req, context=cp.context(), timeout=600) as resp:
            size = len(resp.read())
        took.append(time.perf_counter() - began)
    return statistics.median(took), size


def running_pods(cp: ControlPlane) -> int:
    total, token = 0, ""
    while True:
        page = cp.get(
            "/api/v1/pods?limit=2000&fieldSelector=status.phase%3DRunning" + (f"&continue={token}" if token else "")
        )
        total += len(page["items"])
        token = page["metadata"].get("continue", "")
        if not token:
            return total


def _memory_and_lists(cp: ControlPlane) -> list[tuple[str, str]]:
    """The API servers' and etcd members' memory, etcd's database sizes, and LIST latency of all nodes."""
    figures: list[tuple[str, str]] = []
    for host in cp.hosts:
        proc = host.processes["kube-apiserver"].proc
        assert proc is not None
        figures.append(
            (
                f"{host.name} kube-apiserver RSS now / peak (MiB)",
                f"{rss_mib(proc.pid):.0f} / {rss_mib(proc.pid, 'VmHWM'):.0f}",
            )
        )
        for pod in ("kube-controller-manager", "kube-scheduler"):
            figures.append(
                (
                    f"{host.name} {pod} restarts (lost its leader lease under load)",
                    str(host.processes[pod].restarts),
                )
            )
    for etcd in cp.etcds:
        for m in etcd.members:
            assert m.proc is not None
            figures.append(
                (
                    f"{m.name} RSS now / peak (MiB)",
                    f"{rss_mib(m.proc.pid):.0f} / {rss_mib(m.proc.pid, 'VmHWM'):.0f}",
                )
            )
        status = etcd.ctl("endpoint", "status", "-w", "json")
        db = max(int(e["Status"]["dbSize"]) for e in json.loads(status.stdout))
        figures.append((f"{etcd.members[0].name.rsplit('-', 1)[0]} database size (MiB)", f"{db / 2**20:.0f}"))
    for query, label in (
        # Both from the watch cache on 1.35: a consistent LIST is served from it once the cache has caught
        # up to etcd's current revision (ConsistentListFromCache, GA in 1.34, KEP-2340); rv=0 skips the wait.
        ("", "LIST all nodes, consistent (watch cache at etcd's revision)"),
        ("?resourceVersion=0", "LIST all nodes, resourceVersion=0 (watch cache, any age)"),
    ):
        took, size = timed_list(cp, query)
        figures.append((f"{label} (s; {size / 2**20:.0f} MiB)", f"{took:.2f}"))
    return figures


class Figures(list[tuple[str, str]]):
    """The run's figures, each printed (and flushed) as it is added."""

    def append(self, figure: tuple[str, str]) -> None:
        super().append(figure)
        print(f"{figure[0]}  {figure[1]}", flush=True)

    def __iadd__(self, more: Iterable[tuple[str, str]]) -> Figures:  # type: ignore[override, misc]
        for figure in more:
            self.append(figure)
        return self


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench.scale_tier", description=__doc__.splitlines()[0])
    parser.add_argument("--no-fleet-tests", action="store_true", help="leave out step 4 (pytest -m fleet)")
    args = parser.parse_args(argv)
    figures = Figures()
    prep = prepared("prod-7500")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        cp = build(context("prod-7500"), root / "plane")
        kwok: Kwok | None = None
        try:
            began = time.perf_counter()
            start(cp, hosts=1)
            figures.append(
                (
                    "control plane to ready (5 + 5 etcd, 1 of 5 API server hosts) (s)",
                    f"{time.perf_counter() - began:.0f}",
                )
            )
            render_manifests_dir(prep.addons, root / "addons")
            applied = cp.kubectl(
                "apply", "--server-side", "--field-manager=agk", "-f", str(root / "addons" / "manifests")
            )
            assert applied.returncode == 0, applied.stderr
            kwok = Kwok(
                cp, root / "kwok", lease_seconds=LEASE_SECONDS, pod_workers=POD_WORKERS, node_workers=NODE_WORKERS
            )
            nodes = fleet(prep)
            seconds = register_fleet(cp, prep, nodes, Loader(cp))
            figures.append((f"register {len(nodes):,} nodes (s)", f"{seconds:.0f}"))
            began = time.perf_counter()
            from tests.controlplane.kwok import ready

            ready(cp, [n.name for n in nodes], timeout=1800)
            figures.append(("all nodes Ready (kwok) after registration (s)", f"{time.perf_counter() - began:.0f}"))
            wanted = sum(1 for _ in agent_pods(prep, nodes))
            began = time.perf_counter()
            wait("every agent pod Running", lambda: running_pods(cp) >= wanted, [], timeout=3600)
            figures.append(
                (
                    f"{wanted:,} agent pods Running (DaemonSet controller, scheduler, kwok) (s)",
                    f"{time.perf_counter() - began:.0f}",
                )
            )
            figures += _memory_and_lists(cp)
        finally:
            if kwok is not None:
                kwok.stop()
            cp.stop()
    if args.no_fleet_tests:
        return 0
    fleet_tests = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-s",
            "-n",
            "0",
            "-p",
            "no:cacheprovider",
            "-m",
            "fleet or not fleet",
            "tests/scale",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    width = max(len(m) for m, _ in figures)
    print("\n# the figures again\n" + "\n".join(f"{m:<{width}}  {v}" for m, v in figures))
    print("\n# pytest -m 'fleet or not fleet' tests/scale (controllers at prod-7500's size, every agent pod)")
    print(
        "\n".join(
            line for line in fleet_tests.stdout.splitlines() if "peak" in line or "passed" in line or "failed" in line
        )
    )
    return fleet_tests.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
