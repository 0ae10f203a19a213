"""Node bootstrap figures for `make bench`: render time at 7,500 nodes, customData and Key Vault bundle
size per role."""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for _path in (ROOT, ROOT / "tests"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from modules.bootstrap import pki  # noqa: E402
from modules.bootstrap.context import BootstrapContext  # noqa: E402
from modules.bootstrap.delivery import PARTS, check_sizes, document, encode, standin_facts  # noqa: E402
from modules.bootstrap.host.vault import SECRET_LIMIT  # noqa: E402
from modules.bootstrap.roles import ROLES, bundle, names  # noqa: E402
from modules.bootstrap.userdata import (  # noqa: E402
    AZURE_CUSTOM_DATA_LIMIT,
    encode_custom_data,
    offline_host,
    render_user_data,
)
from modules.stackplan.config import load_stack  # noqa: E402
from modules.stackplan.prepare import prepare_cluster  # noqa: E402

RUNS = 5


def _render_all(ctx: BootstrapContext, pems: dict[str, str]) -> tuple[dict[str, int], dict[str, int]]:
    """Largest base64 customData and largest encoded bundle per role, rendering every host and pool."""
    custom: dict[str, int] = {}
    bundles: dict[str, int] = {}
    for role in ROLES:
        for name in names(ctx, role):
            node = bundle(ctx, role, name)
            encoded = encode_custom_data(render_user_data(ctx, node, offline_host(ctx, node)), where=name)
            custom[role] = max(custom.get(role, 0), len(encoded))
            parts = encode(document(node, pems, standin_facts(ctx, node)))
            bundles[role] = max(bundles.get(role, 0), sum(len(p) for p in parts))
    return custom, bundles


def rows() -> list[tuple[str, str]]:
    from bootstrap.certs import issue  # tests/bootstrap: the same PKI spec, issued with cryptography

    stacks = ROOT / "stacks"
    ctx = prepare_cluster("prod-7500", load_stack(stacks, "prod-7500"), stacks).bootstrap
    pems = issue(pki.pki_spec(ctx))
    times, custom, bundles = [], {}, {}
    for _ in range(RUNS):
        start = time.perf_counter()
        custom, bundles = _render_all(ctx, pems)
        times.append(time.perf_counter() - start)
    start = time.perf_counter()
    check_sizes(ctx)
    checked = time.perf_counter() - start
    hosts = sum(len(names(ctx, r)) for r in ROLES)
    room = PARTS * SECRET_LIMIT
    out = [
        (
            f"bootstrap: render prod-7500, all roles ({hosts} customData + bundles)",
            f"{statistics.median(times) * 1000:.0f} ms",
        ),
        ("bootstrap: plan-time bundle size check (prod-7500, stand-in PEMs)", f"{checked * 1000:.0f} ms"),
    ]
    for role in custom:
        out.append(
            (
                f"bootstrap: {role} customData (base64, host facts + stage 0)",
                f"{custom[role] / 1024:.1f} KiB of {AZURE_CUSTOM_DATA_LIMIT / 1024:.0f} KiB "
                f"({100 * custom[role] / AZURE_CUSTOM_DATA_LIMIT:.0f}%)",
            )
        )
        out.append(
            (
                f"bootstrap: {role} bundle (real ECDSA certs)",
                f"{bundles[role] / 1000:.1f} KB of {PARTS} x {SECRET_LIMIT / 1000:.0f} KB ({100 * bundles[role] / room:.0f}%)",
            )
        )
    return out


if __name__ == "__main__":
    for name, value in rows():
        print(f"{name}: {value}")
