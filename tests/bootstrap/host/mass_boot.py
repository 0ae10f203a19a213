"""A mass reboot against one Key Vault, in virtual time: every host runs the real boot reads, its bundle
(``boot.fetch``: every part of the bundle secret, modules/bootstrap/delivery.py ``PARTS``) and then its pool's
bootstrap token (``node_token.refresh``, the GPU node's step before the kubelet), each through
``vault.get_secret``.

The vault stand-in answers the Get Secret calls the hosts make (``GET /secrets/<name>?api-version=7.4``
with the bearer token IMDS gave the host's identity) and enforces the documented budget: 4,000
secret transactions per vault per 10 seconds (https://learn.microsoft.com/azure/key-vault/general/service-limits,
"All other transactions"), past it 429 with Retry-After; the 429s themselves do not count against it
("Failed requests that return a 429 do not count towards the throttle limits tracked by Key Vault",
https://learn.microsoft.com/azure/key-vault/general/overview-throttling). How the service's window
moves and what Retry-After it sends are not documented; the stand-in's choice: the window slides (a
request is admitted when fewer than the limit were admitted in the 10 seconds before it) and a refused
one is told, in whole seconds, when the oldest of those leaves the window. ``send_retry_after=False``
covers a 429 without the header.

Thousands of hosts waiting out tens of seconds of backoff cannot run in real time, so time is virtual:
each host is a thread whose ``sleep`` and ``clock`` are :class:`VirtualTime`'s, and time jumps to the
next wake-up only when every host is asleep or done. A request takes no virtual time; the vault's limiter
reads the same clock. The hosts reach the vault either over a loopback HTTP server (``serve``) or, for
all 7,576 hosts within seconds, through :class:`InProcessOpener`, which hands the same request to the
same handler without a socket and raises urllib's own HTTPError, so get_secret's code path is unchanged.
"""

from __future__ import annotations

import email.message
import heapq
import io
import itertools
import json
import math
import random
import threading
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlparse

from modules.bootstrap import delivery
from modules.bootstrap.host import boot as host_boot
from modules.bootstrap.host import bundle, imds, node_token, vault

SECRET = "bundle-gpu-node"
TOKEN_SECRET = "bootstrap-token-h100-a"
TOKEN = "abcdef.0123456789abcdef"
BUNDLE = "".join(f"{n:08x}" for n in range(7_000))
"""A bundle of 56,000 characters: split into ``PARTS`` secrets as delivery.encode splits a real one."""
CLIENT = "host-identity"
VAULT_LIMIT = 4_000
VAULT_WINDOW_S = 10.0
"""Secret GETs one vault answers per 10 seconds: "All other transactions", 4,000 per vault per region
(https://learn.microsoft.com/azure/key-vault/general/service-limits)."""


class VirtualTime:
    """A clock for many threads, run one at a time: a thread runs until it sleeps or ends, then the next
    ready one runs; time jumps to the earliest wake-up only when none is ready.

    One at a time keeps thousands of threads from fighting over the GIL and makes a run repeatable (the
    same seed gives the same figures)."""

    def __init__(self) -> None:
        self.now = 0.0
        self._lock = threading.Lock()
        self._ready: deque[threading.Event] = deque()
        self._sleepers: list[tuple[float, int, threading.Event]] = []
        self._seq = itertools.count()
        self._finished = threading.Event()

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"sleep {seconds}: negative")
        wake = threading.Event()
        with self._lock:
            heapq.heappush(self._sleepers, (self.now + seconds, next(self._seq), wake))
            self._next()
        wake.wait()

    def run(self, hosts: list[Callable[[], None]]) -> None:
        """Runs every host from virtual time 0, in order, and returns when all have finished."""
        old = threading.stack_size(256 * 1024)  # thousands of threads: 8 MiB of address space each is waste
        try:
            starts = [threading.Event() for _ in hosts]
            threads = [
                threading.Thread(target=self._host, args=(h, e), daemon=True)
                for h, e in zip(hosts, starts, strict=True)
            ]
            for t in threads:
                t.start()
        finally:
            threading.stack_size(old)
        with self._lock:
            self._ready.extend(starts)
            self._next()
        self._finished.wait()
        for t in threads:
            t.join()

    def _host(self, body: Callable[[], None], start: threading.Event) -> None:
        start.wait()
        try:
            body()
        finally:
            with self._lock:
                self._next()

    def _next(self) -> None:
        """Hands the turn to the next ready thread, moving time on to the next wake-up when none is ready."""
        if not self._ready and self._sleepers:
            self.now = self._sleepers[0][0]
            while self._sleepers and self._sleepers[0][0] <= self.now:
                self._ready.append(heapq.heappop(self._sleepers)[2])
        if self._ready:
            self._ready.popleft().set()
        else:
            self._finished.set()


@dataclass
class VaultStandIn:
    """Key Vault's Get Secret as the hosts call it, with the per-10-second budget on a shared clock."""

    clock: Callable[[], float]
    limit: int = VAULT_LIMIT
    window_s: float = VAULT_WINDOW_S
    secrets: dict[str, str] = field(default_factory=lambda: vault_secrets(BUNDLE))
    """Secret name -> value: the bundle's parts and the pool's token (:func:`vault_secrets`)."""
    send_retry_after: bool = True
    """False: a 429 without Retry-After (a gateway's, or a client that cannot read it): backoff alone."""
    admitted: list[float] = field(default_factory=list)
    """Virtual time of every request answered 200, in order."""
    throttled: list[tuple[float, int]] = field(default_factory=list)
    """(virtual time, Retry-After) of every 429."""
    early: int = 0
    """Requests from a client that came back before the Retry-After it was given."""
    retries: list[float] = field(default_factory=list)
    """Virtual time of every request for a secret after the client's first for it."""
    _recent: deque[float] = field(default_factory=deque)
    _not_before: dict[tuple[str, str], float] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(
        self, method: str, path: str, query: dict[str, list[str]], headers: dict[str, str], body: bytes
    ) -> tuple[int, dict[str, str], Any]:
        auth = headers.get("Authorization", "")
        if not auth.startswith(f"Bearer tok:{imds.VAULT}:"):
            return 401, {}, _error("Unauthorized", "AKV10000: Request is missing a Bearer or PoP token.")
        if query.get("api-version") != [vault.API_VERSION]:
            return 400, {}, _error("BadParameter", "The api-version query parameter is missing or not supported")
        name = path.removeprefix("/secrets/")
        if method != "GET" or name not in self.secrets:
            return 404, {}, _error("SecretNotFound", f"{path}: no such secret")
        client = (auth.removeprefix(f"Bearer tok:{imds.VAULT}:"), name)
        with self._lock:
            now = self.clock()
            if client in self._not_before:
                self.retries.append(now)
                self.early += now < self._not_before[client]
            while self._recent and self._recent[0] <= now - self.window_s:
                self._recent.popleft()
            if len(self._recent) >= self.limit:
                after = max(1, math.ceil(self._recent[0] + self.window_s - now))
                self.throttled.append((now, after))
                self._not_before[client] = now + after if self.send_retry_after else now
                headers = {"Retry-After": str(after)} if self.send_retry_after else {}
                return 429, headers, _error("Throttled", "Request was not processed: too many requests")
            self._recent.append(now)
            self.admitted.append(now)
            self._not_before[client] = now
        return 200, {}, {"value": self.secrets[name], "id": f"https://vault/secrets/{name}/v1"}

    @property
    def gets(self) -> int:
        """Secret reads one host makes when none is refused."""
        return len(self.secrets)

    def peak_admitted(self) -> int:
        """The most 200s in any window of ``window_s`` (half-open, starting at an admitted request)."""
        times, best, j = sorted(self.admitted), 0, 0
        for i, t in enumerate(times):
            while j < len(times) and times[j] < t + self.window_s:
                j += 1
            best = max(best, j - i)
        return best

    def peak_retries(self, width_s: float = 0.1) -> int:
        """The most retries in any ``width_s`` of virtual time: how closely refused hosts come back together."""
        times, best, j = sorted(self.retries), 0, 0
        for i, t in enumerate(times):
            while j < len(times) and times[j] < t + width_s:
                j += 1
            best = max(best, j - i)
        return best


def vault_secrets(value: str) -> dict[str, str]:
    """The vault as a pool's nodes read it: the bundle ``value`` split into ``delivery.PARTS`` secrets under
    ``SECRET`` (as ``delivery.encode`` splits it) and the pool's bootstrap token under ``TOKEN_SECRET``."""
    parts = bundle.split(value, delivery.PARTS)
    return {bundle.part_name(SECRET, i + 1): part for i, part in enumerate(parts)} | {TOKEN_SECRET: TOKEN}


def _error(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}


class _Response(io.BytesIO):
    def __enter__(self) -> _Response:
        return self


class InProcessOpener:
    """Stands in for ``vault._OPENER``: the request goes to ``handle`` as the loopback server would pass it."""

    def __init__(self, handle: Callable[..., tuple[int, dict[str, str], Any]]) -> None:
        self.handle = handle

    def open(self, request: urllib.request.Request, timeout: float = 0) -> _Response:
        url = urlparse(request.full_url)
        headers = {k.title(): v for k, v in request.header_items()}
        status, extra, out = self.handle(request.get_method(), url.path, parse_qs(url.query), headers, b"")
        data = json.dumps(out).encode() if out is not None else b""
        if status < 400:
            return _Response(data)
        hdrs = email.message.Message()
        for k, v in extra.items():
            hdrs[k] = v
        raise urllib.error.HTTPError(request.full_url, status, "error", hdrs, io.BytesIO(data))


def standin_imds_token(resource: str, client_id: str, **_: Any) -> str:
    """Stand-in for ``imds.token`` in the in-process run: the token the loopback IMDS would issue."""
    return f"tok:{resource}:{client_id}"


@contextmanager
def in_process(handle: Callable[..., tuple[int, dict[str, str], Any]]) -> Iterator[None]:
    """get_secret's opener and IMDS call pointed at ``handle`` and the stand-in token, for the block."""
    saved = vault._OPENER, imds.token
    vault._OPENER = InProcessOpener(handle)  # type: ignore[assignment]
    imds.token = standin_imds_token
    try:
        yield
    finally:
        vault._OPENER, imds.token = saved


def quiet(line: str) -> None:
    """The hosts' log lines: thousands of retries would drown the run's output."""


PINS: dict[str, Callable[[float, float], float]] = {"low": lambda low, high: low, "high": lambda low, high: high}


@dataclass(frozen=True)
class Outcome:
    hosts: int
    got: int
    """Hosts that read the bundle and then the token."""
    last_bundle_s: float
    """Virtual seconds until the last host had its bundle (every part)."""
    last_s: float
    """Virtual seconds until the last host also had its bootstrap token: every host ready to join."""
    gets: int
    """Secret reads answered 200 (``hosts`` x the secrets a host reads)."""
    throttled: int
    peak_admitted: int
    """Most 200s in any 10 seconds."""
    peak_retries: int
    """Most retries in any 100 ms."""
    early: int
    """Retries sooner than the Retry-After the host was given."""


def boot(
    hosts: int,
    vault_url: str,
    handle: VaultStandIn,
    clock: VirtualTime,
    root: str,
    *,
    imds_url: str = imds.ENDPOINT,
    draw: str = "jitter",
    seed: int = 7576,
) -> Outcome:
    """``hosts`` GPU nodes booting at virtual time 0: each reads its bundle (``boot.fetch``) and then its
    pool's bootstrap token (``node_token.refresh``, written under ``root``). ``draw``: ``jitter`` (each host
    its own seeded generator), or every draw pinned to its ``low`` end (the wait is Retry-After exactly) or its
    ``high`` end (1, 2, 4 ... 30 s, after Retry-After when there is one): the deterministic schedules with
    which all hosts refused together come back together."""
    if draw not in PINS and draw != "jitter":
        raise ValueError(f"draw {draw!r}: use jitter, low or high")
    bundles: list[float] = []
    tokens: list[float] = []
    lock = threading.Lock()
    # boot.fetch and node_token.refresh take no draw of their own (the hosts' code is in their custom data:
    # changing it replaces every VM), so each host's generator reaches vault.get_secret through its thread.
    draws = threading.local()
    real_get_secret = vault.get_secret

    def get_secret(*args: Any, **kwargs: Any) -> str:
        return real_get_secret(*args, **kwargs, rand=draws.rand)

    def host(n: int) -> Callable[[], None]:
        rng = random.Random(seed * 100_003 + n)
        rand = rng.uniform if draw == "jitter" else PINS[draw]
        config = host_boot.HostConfig(
            role="gpu-node",
            name=f"node-{n}",
            cluster="prod-7500",
            vault=vault_url,
            secret=SECRET,
            client_id=f"{CLIENT}-{n}",
        )

        def body() -> None:
            draws.rand = rand
            value = host_boot.fetch(
                config, deadline_s=3600, imds_endpoint=imds_url, sleep=clock.sleep, clock=clock.clock, log=quiet
            )
            if value != BUNDLE:
                return
            with lock:
                bundles.append(clock.clock())
            node_token.refresh(
                vault_url,
                config.client_id,
                node_token.TokenConfig(secret=TOKEN_SECRET, file=f"/tokens/{n}"),
                root=root,
                deadline_s=3600,
                imds_endpoint=imds_url,
                sleep=clock.sleep,
                clock=clock.clock,
                log=quiet,
            )
            with lock:
                tokens.append(clock.clock())

        return body

    vault.get_secret = get_secret  # type: ignore[assignment]
    try:
        clock.run([host(n) for n in range(hosts)])
    finally:
        vault.get_secret = real_get_secret  # type: ignore[assignment]
    return Outcome(
        hosts=hosts,
        got=len(tokens),
        last_bundle_s=max(bundles, default=math.inf),
        last_s=max(tokens, default=math.inf),
        gets=len(handle.admitted),
        throttled=len(handle.throttled),
        peak_admitted=handle.peak_admitted(),
        peak_retries=handle.peak_retries(),
        early=handle.early,
    )
