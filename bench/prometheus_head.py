"""Prometheus head memory per active series, for `make bench`: the figure ``HEAD_RESIDENT_BYTES_PER_SERIES``
(modules/vm_sizing/formulas.py) sizes the Prometheus VMs with.

The pinned Prometheus (``make components`` builds the versions table's release from its Go module into
tools/bin; the version is printed) scrapes a loopback exporter serving
cAdvisor-shaped series (a kubelet's per-container series: container, id, image, name, namespace, pod, cpu
labels, values that change every scrape) at two sizes, each in a fresh TSDB. The figure is the slope between
the two runs (resident memory and Go heap in use, from Prometheus' own /metrics: the peak of a read per
scrape over six scrapes once every series is in), so the fixed cost of the process cancels out. Not a test: memory is measured, not asserted.
"""

from __future__ import annotations

import http.server
import re
import socket
import statistics
import subprocess
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

SIZES = (40_000, 120_000)
RUNS = 5
"""Pairs of runs: one pair's slope moves by a fifth either way (where the collector's cycle is at each read)."""
SCRAPE_S = 2
SCRAPES = 6
"""Samples per series while memory is read, once per scrape, keeping the peak (head chunks hold up to 120; a
few make a series' chunk real)."""


def exposition(series: int, tick: int) -> bytes:
    lines = []
    for i in range(series):
        pod, container, cpu = i // 40, (i // 8) % 5, i % 8
        lines.append(
            "container_cpu_usage_seconds_total{"
            f'container="trainer-{container}",cpu="cpu{cpu:03d}",'
            f'id="/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{pod:08x}-4c1e-4b0e-9a57-'
            f'{pod:012x}.slice/cri-containerd-{pod:056x}{container:08x}.scope",'
            f'image="registry.example.com/research/trainer@sha256:{pod:064x}",'
            f'name="{pod:056x}{container:08x}",namespace="team-{pod % 12}",pod="train-{pod:06d}-{container}"'
            f"}} {tick * 0.25 + i % 97}"
        )
    return ("\n".join(lines) + "\n").encode()


@contextmanager
def exporter(series: int) -> Iterator[int]:
    ticks = [0]

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            ticks[0] += 1
            body = exposition(series, ticks[0])
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            with suppress(BrokenPipeError, ConnectionResetError):  # Prometheus stopped mid-scrape at the end
                self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _metric(text: str, name: str) -> float:
    found = re.search(rf"^{name} (\S+)$", text, re.M)
    if not found:
        raise RuntimeError(f"Prometheus reported no {name}")
    return float(found.group(1))


def measure(prometheus: str, series: int) -> tuple[float, float, float]:
    """(head series, resident bytes, Go heap bytes in use) of a fresh Prometheus scraping ``series``."""
    with tempfile.TemporaryDirectory() as tmp, exporter(series) as port:
        config = Path(tmp) / "prometheus.yml"
        config.write_text(
            f"global: {{scrape_interval: {SCRAPE_S}s, scrape_timeout: {SCRAPE_S}s}}\n"
            f"scrape_configs:\n  - job_name: kubernetes-cadvisor\n"
            f"    static_configs: [{{targets: ['127.0.0.1:{port}']}}]\n"
        )
        web = _free_port()
        proc = subprocess.Popen(
            [
                prometheus,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp}/data",
                f"--web.listen-address=127.0.0.1:{web}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 180
            while True:
                time.sleep(SCRAPE_S)
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{web}/metrics", timeout=10) as r:
                        text = r.read().decode()
                except OSError:
                    text = ""
                if text and _metric(text, "prometheus_tsdb_head_series") >= series:
                    break
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError(f"Prometheus did not take in {series:,} series within 180 s")
            # The peak of a read per scrape: one read lands anywhere in the collector's cycle.
            series = rss = heap = 0.0
            for _ in range(SCRAPES):
                time.sleep(SCRAPE_S)
                with urllib.request.urlopen(f"http://127.0.0.1:{web}/metrics", timeout=10) as r:
                    text = r.read().decode()
                series = _metric(text, "prometheus_tsdb_head_series")
                rss = max(rss, _metric(text, "process_resident_memory_bytes"))
                heap = max(heap, _metric(text, "go_memstats_heap_inuse_bytes"))
            return series, rss, heap
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def rows() -> list[tuple[str, str]]:
    built = Path(__file__).resolve().parents[1] / "tools" / "bin" / "prometheus"
    if not built.is_file():
        raise RuntimeError(f"{built} is not built: run make components (needs Go)")
    prometheus = str(built)
    version = subprocess.run([prometheus, "--version"], capture_output=True, text=True, check=False)
    slopes = []
    for _ in range(RUNS):
        small, large = (measure(prometheus, n) for n in SIZES)
        added = large[0] - small[0]
        slopes.append(((large[1] - small[1]) / added, (large[2] - small[2]) / added))
    rss, heap = (sorted(s[i] for s in slopes) for i in (0, 1))
    return [
        ("prometheus head: version", (version.stdout or version.stderr).splitlines()[0]),
        (
            f"prometheus head: resident bytes per series ({SIZES[0]:,} -> {SIZES[1]:,} cAdvisor-shaped series; "
            f"median of {RUNS}, range)",
            f"{statistics.median(rss):,.0f} ({rss[0]:,.0f} - {rss[-1]:,.0f})",
        ),
        (
            "prometheus head: Go heap in use per series (same runs)",
            f"{statistics.median(heap):,.0f} ({heap[0]:,.0f} - {heap[-1]:,.0f})",
        ),
    ]
