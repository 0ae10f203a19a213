"""Host tier: reading a bundle from Key Vault as a just-booted host meets it (loopback Key Vault and IMDS)."""

from __future__ import annotations

import pytest

from modules.bootstrap.host import boot, bundle, vault
from tests.bootstrap.host.fakes import FakeVault, Imds, azure
from tests.bootstrap.host.loopback import serve


class Clock:
    """Time that moves only when the program sleeps: retries are counted, not waited for."""

    def __init__(self) -> None:
        self.now, self.waits = 0.0, []  # type: ignore[var-annotated]

    def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.now += seconds

    def __call__(self) -> float:
        return self.now


def widest(low: float, high: float) -> float:
    """The jitter's upper end: each wait is the most full jitter may draw, so the schedule is exact."""
    return high


def _get(vault_url: str, imds_url: str, clock: Clock, name: str = "s", client: str = "c", deadline: float = 600) -> str:
    return vault.get_secret(
        vault_url,
        name,
        client,
        deadline_s=deadline,
        imds_endpoint=imds_url,
        sleep=clock.sleep,
        clock=clock,
        rand=widest,
    )


def test_reads_the_current_value_with_the_identitys_token() -> None:
    kv = FakeVault()
    kv.put("s", "hello", "c")
    with azure(kv) as (url, imds_url):
        assert _get(url, imds_url, Clock()) == "hello"
    assert kv.requests == ["/secrets/s"]


def test_a_grant_that_has_not_propagated_is_waited_for() -> None:
    # Azure RBAC may take minutes to apply a new role assignment: 403 until then.
    kv, clock = FakeVault(), Clock()
    kv.put("s", "hello")
    with azure(kv) as (url, imds_url):

        def sleep(seconds: float) -> None:
            clock.sleep(seconds)
            if clock.now > 100:
                kv.readers["s"].add("c")

        got = vault.get_secret(
            url, "s", "c", deadline_s=600, imds_endpoint=imds_url, sleep=sleep, clock=clock, rand=widest
        )
    assert got == "hello"
    assert clock.waits[:6] == [1, 2, 4, 8, 16, 30] and all(w == 30 for w in clock.waits[5:])


def test_throttling_waits_as_long_as_retry_after_says() -> None:
    kv, clock = FakeVault(fail=[(429, {"Retry-After": "7"}), (503, {})]), Clock()
    kv.put("s", "v", "c")
    with azure(kv) as (url, imds_url):
        assert _get(url, imds_url, clock) == "v"
    # Retry-After is the floor and the first retry's jitter (up to 1 s) goes on top; the 503 has none.
    assert clock.waits == [7 + 1, 2]


def test_a_name_that_does_not_resolve_yet_is_retried() -> None:
    # Before the zone group's record exists the vault's name does not resolve (urllib: URLError, an OSError).
    clock = Clock()
    with serve(Imds()) as imds_url, pytest.raises(vault.VaultError) as err:
        _get("https://agkdev-0000.invalid/", imds_url, clock, deadline=20)
    assert str(err.value).startswith("secret s of https://agkdev-0000.invalid/: URLError: ")
    assert str(err.value).endswith("(gave up after 5 tries)") and clock.waits == [1, 2, 4, 8]


def test_gives_up_at_its_deadline_naming_the_secret_and_the_answer() -> None:
    kv, clock = FakeVault(), Clock()
    kv.put("s", "v")  # nobody may read it
    with azure(kv) as (url, imds_url), pytest.raises(vault.VaultError) as err:
        _get(url, imds_url, clock, deadline=60)
    assert str(err.value) == (
        f"secret s of {url}: HTTP 403 Forbidden: Caller is not authorized to perform action on resource. Action: "
        "'Microsoft.KeyVault/vaults/secrets/getSecret/action' secret s (gave up after 6 tries)"
    )
    assert sum(clock.waits) <= 60


def test_a_bad_request_is_not_retried() -> None:
    clock = Clock()
    with azure(FakeVault(fail=[(400, {})])) as (url, imds_url), pytest.raises(vault.VaultError, match="after 1 tries"):
        _get(url, imds_url, clock)
    assert clock.waits == []


def _host(url: str, secret: str = "h-1") -> boot.HostConfig:
    return boot.HostConfig("etcd", "h", "c", url, secret, "c")


def test_a_bundle_is_read_from_all_its_parts() -> None:
    value = bundle.encode({"format": 1, "x": "y" * 5000})
    kv = FakeVault()
    for i, part in enumerate(bundle.split(value, 3), start=1):
        kv.put(bundle.part_name("h-1", i), part, "c")
    with azure(kv) as (url, imds_url):
        assert boot.fetch(_host(url), deadline_s=60, imds_endpoint=imds_url) == value
    assert kv.requests == ["/secrets/h-1", "/secrets/h-1-2", "/secrets/h-1-3"]


def test_parts_of_two_versions_are_read_again() -> None:
    # `pulumi up` writes a host's secrets one after the other: a read in between sees two versions.
    value = bundle.encode({"format": 1, "v": "new"})
    old, new = bundle.split(bundle.encode({"format": 1, "v": "old"}), 2), bundle.split(value, 2)
    kv, clock = FakeVault(), Clock()
    kv.put("h-1", new[0], "c")
    kv.put("h-1-2", old[1], "c")

    def sleep(seconds: float) -> None:
        clock.sleep(seconds)
        kv.put("h-1-2", new[1])

    with azure(kv) as (url, imds_url):
        got = boot.fetch(_host(url), deadline_s=300, imds_endpoint=imds_url, sleep=sleep, clock=clock, log=print)
    assert got == value
    assert clock.waits == [boot.PARTS_RETRY_S]
