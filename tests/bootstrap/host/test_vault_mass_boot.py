"""Host tier: a mass reboot of 7,576 hosts reading their bundles from one Key Vault (issue 22, item 6).

Every host runs the real boot reads: ``boot.fetch`` (every part of its bundle) and then
``node_token.refresh`` (its pool's bootstrap token), each through ``vault.get_secret`` (its retry loop and
:func:`vault.backoff`), 4 secret reads a host, against a stand-in that enforces Key Vault's documented 4,000 secret transactions per 10 seconds with 429 and
Retry-After (tests/bootstrap/host/mass_boot.py), in virtual time so that minutes of backoff take seconds.

Why full jitter on top of Retry-After: the hosts of a mass reboot are refused in the same instant and
told the same Retry-After; a wait of Retry-After alone (or any wait that depends only on the attempt)
sends all of them back in one instant again, a lock-step storm. Retry-After stays a floor because the
vault asked for it; the jitter (uniform(0, min(cap, 1 s x 2^(n-1))), "full jitter" of the AWS
Architecture Blog's "Exponential Backoff And Jitter") spreads them over the second after it.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from modules.bootstrap.host import vault
from tests.bootstrap.host.loopback import serve
from tests.bootstrap.host.mass_boot import (
    SECRET,
    TOKEN,
    TOKEN_SECRET,
    VAULT_LIMIT,
    VAULT_WINDOW_S,
    VaultStandIn,
    VirtualTime,
    boot,
    in_process,
)
from tests.bootstrap.host.test_imds import FakeImds

HOSTS = 7_576
"""prod-7500 at peak: 7,500 GPU nodes plus 1% surge (76)."""


@pytest.mark.parametrize(
    ("attempt", "retry_after", "cap", "low", "high"),
    [
        (1, None, 30.0, 0.0, 1.0),
        (3, None, 30.0, 0.0, 4.0),
        (6, None, 30.0, 0.0, 30.0),  # 32 capped
        (40, None, 30.0, 0.0, 30.0),
        (1, 10.0, 30.0, 10.0, 11.0),  # Retry-After is the floor, the jitter goes on top
        (5, 3.0, 60.0, 3.0, 19.0),
    ],
)
def test_backoff_is_full_jitter_above_retry_after(
    attempt: int, retry_after: float | None, cap: float, low: float, high: float
) -> None:
    assert vault.backoff(attempt, retry_after, cap=cap, rand=lambda a, b: a) == low
    assert vault.backoff(attempt, retry_after, cap=cap, rand=lambda a, b: b) == high
    draws = [vault.backoff(attempt, retry_after, cap=cap) for _ in range(200)]
    assert all(low <= d <= high for d in draws) and len(set(draws)) > 100


def test_backoff_counts_attempts_from_one() -> None:
    with pytest.raises(ValueError, match=r"^retry attempt 0: counts from 1$"):
        vault.backoff(0)


def fastest_s(hosts: int, gets: int, limit: int) -> float:
    """The earliest the last read can be answered: the budget admits ``limit`` reads per window, the first
    window's at time 0."""
    return (math.ceil(hosts * gets / limit) - 1) * VAULT_WINDOW_S


def test_every_host_of_a_mass_reboot_gets_its_bundle_without_a_lock_step_storm(tmp_path: Path) -> None:
    clock = VirtualTime()
    kv = VaultStandIn(clock.clock)
    with in_process(kv):
        out = boot(HOSTS, "https://agk-prod.vault.azure.net/", kv, clock, str(tmp_path))
    assert kv.gets == 4 and out.got == HOSTS and out.gets == HOSTS * kv.gets
    assert (tmp_path / "tokens" / str(HOSTS - 1)).read_text() == TOKEN + "\n"
    # The vault's budget holds: 429s are the only way past it, and no host retried before Retry-After.
    # The first 1,000 hosts read all 4 secrets in the first window; every other host is refused at least once.
    assert out.peak_admitted <= VAULT_LIMIT
    refused = HOSTS - VAULT_LIMIT // kv.gets
    assert out.throttled >= refused and out.early == 0
    # The refused hosts come back spread out: no 100 ms holds a fifth of them. With a backoff that
    # depends only on the attempt and Retry-After, all 6,576 return in the same instant.
    assert out.peak_retries <= refused // 5, (out.peak_retries, refused)
    # No sooner than the budget allows (30,304 reads at 4,000 per 10 s: 70 s), and the jitter costs at most four
    # windows more (virtual time, seeded: `make bench` prints 101.2 s); a backoff that idles the budget fails.
    fastest = fastest_s(HOSTS, kv.gets, VAULT_LIMIT)
    assert fastest <= out.last_s <= fastest + 4 * VAULT_WINDOW_S, out.last_s


def test_over_loopback_http_with_the_identitys_token(tmp_path: Path) -> None:
    # The same boot over real HTTP (urllib to a loopback server, the token from a loopback IMDS),
    # scaled down: 300 hosts against a budget of 150 per 10 s.
    clock = VirtualTime()
    kv = VaultStandIn(clock.clock, limit=150)
    with serve(kv) as url, serve(FakeImds()) as imds_url:
        out = boot(300, url + "/", kv, clock, str(tmp_path), imds_url=imds_url)
    assert out.got == 300 and out.early == 0 and out.gets == 300 * kv.gets
    refused = 300 - 150 // kv.gets
    assert out.peak_admitted <= 150 and out.throttled >= refused
    assert out.peak_retries <= refused // 5, out.peak_retries


def test_the_harness_sees_lock_step_when_waits_are_not_spread(tmp_path: Path) -> None:
    # Every jitter draw pinned to its low end: the retries are Retry-After exactly, so the refused hosts
    # return in the same instant, which the assertion above would reject.
    clock = VirtualTime()
    kv = VaultStandIn(clock.clock, limit=150)
    with in_process(kv):
        out = boot(300, "https://agk-prod.vault.azure.net/", kv, clock, str(tmp_path), draw="low")
    assert out.got == 300 and out.peak_retries > (300 - 150 // kv.gets) // 5, out.peak_retries


def test_without_retry_after_every_host_still_gets_its_bundle(tmp_path: Path) -> None:
    # A 429 without Retry-After (backoff alone): slower than with it, but nobody is left out.
    clock = VirtualTime()
    kv = VaultStandIn(clock.clock, limit=150, send_retry_after=False)
    with in_process(kv):
        out = boot(300, "https://agk-prod.vault.azure.net/", kv, clock, str(tmp_path))
    assert out.got == 300 and out.peak_admitted <= 150
    assert out.peak_retries <= (300 - 150 // kv.gets) // 5, out.peak_retries


def test_a_host_reads_every_part_of_its_bundle_and_its_token(tmp_path: Path) -> None:
    # One host, no throttling: the reads the boot makes, in order (what the figures above multiply).
    clock = VirtualTime()
    kv = VaultStandIn(clock.clock)
    seen: list[str] = []

    def record(method: str, path: str, *rest: Any) -> tuple[int, dict[str, str], Any]:
        seen.append(path)
        return kv(method, path, *rest)

    with in_process(record):
        out = boot(1, "https://agk-prod.vault.azure.net/", kv, clock, str(tmp_path))
    assert out.got == 1
    assert seen == [f"/secrets/{SECRET}", f"/secrets/{SECRET}-2", f"/secrets/{SECRET}-3", f"/secrets/{TOKEN_SECRET}"]
