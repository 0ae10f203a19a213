"""Key Vault at a mass reboot for `make bench`: 7,576 hosts (prod-7500 at peak) read their bundles (every
part, ``boot.fetch``) and then their pool's bootstrap token (``node_token.refresh``) from one vault at once,
with the real boot code, against a stand-in that holds Key Vault's
documented 4,000 secret transactions per 10 seconds (429 with Retry-After past it). Virtual time
(tests/bootstrap/host/mass_boot.py): the figures are virtual seconds, the same on any machine for the same seed."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.bootstrap.host.mass_boot import (  # noqa: E402
    BUNDLE,
    VAULT_LIMIT,
    VAULT_WINDOW_S,
    Outcome,
    VaultStandIn,
    VirtualTime,
    boot,
    in_process,
    vault_secrets,
)

HOSTS = 7_576
RUNS = (
    # (label, the vault sends Retry-After, draw): "high" is a deterministic exponential schedule (1, 2, 4 ... s,
    # on top of Retry-After), "low" the wait Retry-After alone gives; both send every refused host back together.
    ("full jitter, Retry-After", True, "jitter"),
    ("no jitter (Retry-After exactly)", True, "low"),
    ("full jitter, no Retry-After", False, "jitter"),
    ("no jitter (1, 2, 4 ... s), no Retry-After", False, "high"),
)


def run(send_retry_after: bool, draw: str, hosts: int = HOSTS) -> Outcome:
    clock = VirtualTime()
    kv = VaultStandIn(clock.clock, send_retry_after=send_retry_after)
    # The token files on tmpfs where there is one: the hosts' atomic writes fsync each.
    shm = Path("/dev/shm")
    with in_process(kv), tempfile.TemporaryDirectory(dir=shm if shm.is_dir() else None) as root:
        return boot(hosts, "https://agk-prod.vault.azure.net/", kv, clock, root, draw=draw)


def rows(runs: tuple[tuple[str, bool, str], ...] = RUNS, hosts: int = HOSTS) -> list[tuple[str, str]]:
    out = [
        (f"vault boot: {hosts} hosts at once, limit", f"{VAULT_LIMIT} GETs / {VAULT_WINDOW_S:.0f} s"),
        ("vault boot: reads a host (bundle parts + bootstrap token)", str(len(vault_secrets(BUNDLE)))),
    ]
    for label, send, draw in runs:
        o = run(send, draw, hosts)
        if o.got != o.hosts:
            raise RuntimeError(f"{label}: {o.hosts - o.got} of {o.hosts} hosts got no bundle")
        out += [
            (f"vault boot ({label}): last bundle", f"{o.last_bundle_s:.1f} s virtual"),
            (f"vault boot ({label}): last token (every host ready to join)", f"{o.last_s:.1f} s virtual"),
            (f"vault boot ({label}): 429s", str(o.throttled)),
            (f"vault boot ({label}): peak 200s per 10 s", str(o.peak_admitted)),
            (f"vault boot ({label}): peak retries per 100 ms", str(o.peak_retries)),
        ]
    return out
