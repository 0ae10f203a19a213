"""The real control-plane tier: building its components and running it.

- Build with warm Go caches: every binary of tools/components built into an empty folder (Go's build
  cache holds the compiled packages, so this is the link step and the cache lookups: what `make test`
  costs on a machine that has built once). A cold build (empty GOCACHE and GOMODCACHE) is measured by a
  fresh clone's `make test` and recorded in docs/controlplane.md, not here: it downloads ~1 GB.
- Start: dev's and prod-7500's rendered control planes to ready (every etcd member healthy, every API
  server /readyz, a controller-manager and a scheduler leader).
- The tier: `pytest tests/controlplane` on one worker, as `make test` runs it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _timed(argv: list[str], **kw: object) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True, cwd=ROOT, **kw)  # type: ignore[call-overload]
    return time.perf_counter() - start


def rows() -> list[tuple[str, str]]:
    from tests.bootstrap.conftest import context
    from tests.controlplane.cluster import build, start

    out: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        seconds = _timed([sys.executable, "tools/components/components.py", "build", tmp])
        out.append(("components build, warm Go caches (s)", f"{seconds:.1f}"))
    for stack in ("dev", "prod-7500"):
        with tempfile.TemporaryDirectory() as tmp:
            cp = build(context(stack), Path(tmp))
            began = time.perf_counter()
            try:
                start(cp)
                elapsed = time.perf_counter() - began
            finally:
                cp.stop()
        processes = sum(len(h.processes) for h in cp.hosts) + sum(len(e.members) for e in cp.etcds)
        out.append((f"{stack} control plane to ready ({processes} processes) (s)", f"{elapsed:.1f}"))
    seconds = _timed(
        [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", "tests/controlplane"],
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    out.append(("tier: pytest tests/controlplane, one worker (s)", f"{seconds:.1f}"))
    return out
