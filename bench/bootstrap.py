"""Node bootstrap figures for `make bench`: render time at 7,500 nodes, user-data size per role."""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for _path in (ROOT, ROOT / "tests"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from infra.addresses import cluster_addresses, plan_stack  # noqa: E402
from infra.bootstrap import bootstrap_context  # noqa: E402
from modules.bootstrap import pki  # noqa: E402
from modules.bootstrap.context import BootstrapContext  # noqa: E402
from modules.bootstrap.roles import ROLES, bundle, names  # noqa: E402
from modules.bootstrap.userdata import AZURE_CUSTOM_DATA_LIMIT, encode_custom_data, render_user_data  # noqa: E402

RUNS = 5


def _render_all(ctx: BootstrapContext, pems: dict[str, str]) -> dict[str, int]:
    """Largest base64 customData per role, rendering every host and pool."""
    sizes: dict[str, int] = {}
    for role in ROLES:
        for name in names(ctx, role):
            encoded = encode_custom_data(render_user_data(ctx, bundle(ctx, role, name), pems), where=name)
            sizes[role] = max(sizes.get(role, 0), len(encoded))
    return sizes


def rows() -> list[tuple[str, str]]:
    from bootstrap.certs import issue  # tests/bootstrap: the same PKI spec, issued with cryptography

    plan = plan_stack(ROOT / "stacks", "prod-7500")
    ctx = bootstrap_context(plan.config, cluster_addresses(plan))
    pems = issue(pki.pki_spec(ctx))
    times, sizes = [], {}
    for _ in range(RUNS):
        start = time.perf_counter()
        sizes = _render_all(ctx, pems)
        times.append(time.perf_counter() - start)
    hosts = sum(len(names(ctx, r)) for r in ROLES)
    out = [(f"bootstrap: render prod-7500, all roles ({hosts} user-data)", f"{statistics.median(times) * 1000:.0f} ms")]
    for role, size in sizes.items():
        out.append(
            (
                f"bootstrap: {role} customData (base64, real ECDSA certs)",
                f"{size / 1024:.1f} KiB of {AZURE_CUSTOM_DATA_LIMIT / 1024:.0f} KiB "
                f"({100 * size / AZURE_CUSTOM_DATA_LIMIT:.0f}%)",
            )
        )
    return out


if __name__ == "__main__":
    for name, value in rows():
        print(f"{name}: {value}")
