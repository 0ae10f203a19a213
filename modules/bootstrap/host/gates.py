"""Whether the rest of a fixed host's group can spare it for a restart, asked of the members themselves.

- etcd: every member's ``/health`` on its metrics listener answers ``{"health": "true"}`` (etcd serves
  /health and /metrics on ``listen-metrics-urls``, plain HTTP; a member reports healthy only when it has
  a leader and can serve a quorum read). A member restarts only when all of them do, and then waits
  until it reports healthy itself, so at most one member of a cluster is ever out and quorum holds.
- kube-apiserver: every other API server's ``/readyz`` answers 200 (readable without credentials: the
  default ``system:public-info-viewer`` binding). A server is recreated only then, so the load
  balancer always has the others.
"""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def etcd_healthy(url: str, timeout: float = 5.0) -> bool:
    try:
        with _DIRECT.open(f"{url.rstrip('/')}/health", timeout=timeout) as response:
            return bool(json.loads(response.read()).get("health") == "true")
    except (OSError, ValueError):
        return False


def apiserver_ready(url: str, ca_file: str, timeout: float = 5.0) -> bool:
    context = ssl.create_default_context(cafile=ca_file)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context))
    try:
        with opener.open(f"{url.rstrip('/')}/readyz", timeout=timeout) as response:
            return int(response.status) == 200
    except (OSError, ValueError):
        return False


def others_unready(gate: Mapping[str, Any], check: Callable[[str], bool]) -> list[str]:
    """The members of ``gate`` (``{"self": name, "members": {name: url}}``) other than this host that
    fail ``check``; for etcd the host itself counts too (its own restart must not cost a second member)."""
    return [name for name, url in sorted(gate["members"].items()) if not check(url)]


def wait_until(
    check: Callable[[], bool],
    timeout_s: float,
    *,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    every_s: float = 2.0,
) -> bool:
    end = clock() + timeout_s
    while True:
        if check():
            return True
        if clock() >= end:
            return False
        sleep(every_s)
