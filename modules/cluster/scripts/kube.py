"""A minimal in-cluster Kubernetes API client (stdlib only: the pods run a plain Python image).

Requests share one kept-alive connection (HTTP/1.1), so a controller that makes thousands of calls (the
serving approver: a Node read and an approval per CSR, 7,500 of each at a mass reboot) costs the API servers
one TLS handshake, not one per call. The API server closes a connection idle for 90 s (k8s.io/apiserver
v0.35.8 pkg/server/secure_serving.go, IdleTimeout); one idle for IDLE_S is closed here first, so a request is
not sent on a connection the server is closing. Should that happen all the same (a restart), only a GET is
sent again: a write may have been applied before the connection broke. A 429 (API Priority and Fairness
rejecting the request, "Retry-After" set: kubernetes.io, API Priority and Fairness, "Protection against
overload"), and a GET answered 5xx with a Retry-After (a busy server's watch cache behind a page's revision),
are waited out for Retry-After plus up to as long again at random, so clients refused together do not return
together, a few times before it reaches the caller. Watches keep a connection of their own.
"""

from __future__ import annotations

import http.client
import io
import json
import os
import random
import socket
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

SA = "/var/run/secrets/kubernetes.io/serviceaccount"


class Conflict(Exception):
    """HTTP 409: the object changed since it was read."""


class NotFound(Exception):
    """HTTP 404: the object does not exist (any more)."""


PAGE = 250
"""Objects per LIST page. A realistic Node is ~13 KB of JSON (50 images, conditions, managed fields; the scale
tier's 7,510 are 100 MiB): 250 of them are ~3.4 MB to parse at a time, whatever the cluster's size, where one
unpaginated LIST of 7,576 nodes is ~100 MB (kubernetes.io, API concepts, "Retrieving large results sets in
chunks")."""


THROTTLED_TRIES = 5
"""Tries of a request the API server answers 429, or a GET it answers 5xx with Retry-After (the first and four
retries)."""
RETRY_AFTER_MAX_S = 60.0
"""The longest single wait a Retry-After may ask for here; a missing or malformed one waits 1 s."""
TIMEOUT_S = 30.0
IDLE_S = 60.0
"""A connection idle this long is closed before the next request (the API server's IdleTimeout is 90 s)."""
BROKEN = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)
"""How a kept-alive connection the server closed fails a request sent on it (not a timeout: the server may
still be working on it)."""


class Api:
    def __init__(
        self,
        base: str,
        token: str,
        context: ssl.SSLContext | None,
        *,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        rand: Callable[[float, float], float] = random.uniform,
    ) -> None:
        self.base, self.token, self.context = base.rstrip("/"), token, context
        url = urllib.parse.urlsplit(self.base)
        self._https, self._netloc, self._prefix = url.scheme == "https", url.netloc, url.path
        self._origin = f"{url.scheme}://{url.netloc}"
        self._sleep, self._clock, self._rand = sleep, clock, rand
        self._conn: http.client.HTTPConnection | None = None
        self._used = False
        """Whether the open connection has served a request (the server may have closed it since)."""
        self._last = 0.0
        """When the open connection last answered (``clock``)."""
        self._lock = threading.Lock()

    @classmethod
    def in_cluster(cls) -> Api:
        host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"]
        with open(f"{SA}/token") as f:
            token = f.read().strip()
        return cls(f"https://{host}:{port}", token, ssl.create_default_context(cafile=f"{SA}/ca.crt"))

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: dict[str, str] | None = None,
        *,
        content_type: str = "application/merge-patch+json",
        tries: int = THROTTLED_TRIES,
    ) -> Any:
        target = self._prefix + path + ("?" + urllib.parse.urlencode(query) if query else "")
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = content_type
        for attempt in range(1, tries + 1):
            status, reason, response_headers, payload = self._exchange(method, target, data, headers)
            if retryable(method, status, response_headers) and attempt < tries:
                wait = retry_after_s(response_headers.get("Retry-After"))
                self._sleep(wait + self._rand(0.0, wait))
                continue
            break
        if 200 <= status < 300:
            return json.loads(payload or b"{}")
        if status == 409:
            raise Conflict(path)
        if status == 404:
            raise NotFound(path)
        raise urllib.error.HTTPError(self._origin + target, status, reason, response_headers, io.BytesIO(payload))

    def _connect(self) -> http.client.HTTPConnection:
        conn = (
            http.client.HTTPSConnection(self._netloc, timeout=TIMEOUT_S, context=self.context)
            if self._https
            else http.client.HTTPConnection(self._netloc, timeout=TIMEOUT_S)
        )
        conn.connect()
        # No Nagle: a request's small writes would otherwise wait on the server's delayed ACK (40 ms each) on a
        # kept-alive connection; Go's net package sets it on every TCP connection, urllib3 too.
        if conn.sock is not None:
            conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn

    def _exchange(
        self, method: str, target: str, data: bytes | None, headers: dict[str, str]
    ) -> tuple[int, str, http.client.HTTPMessage, bytes]:
        """One request on the kept-alive connection: status, reason, headers and body. A GET that a reused
        connection broke (the server closed it) is sent once more, on a new connection; nothing else is."""
        with self._lock:
            while True:
                if self._conn is not None and self._clock() - self._last > IDLE_S:
                    self._conn.close()
                    self._conn = None
                reused = self._conn is not None and self._used
                if self._conn is None:
                    self._conn, self._used = self._connect(), False
                try:
                    self._conn.request(method, target, body=data, headers=headers)
                    response = self._conn.getresponse()
                    payload = response.read()
                except BROKEN:
                    self._conn.close()
                    self._conn = None
                    if reused and method == "GET":
                        continue
                    raise
                except (http.client.HTTPException, OSError):
                    self._conn.close()
                    self._conn = None
                    raise
                self._used, self._last = True, self._clock()
                if response.will_close:
                    self._conn.close()
                    self._conn = None
                return response.status, response.reason, response.headers, payload

    def get(self, path: str, **query: str) -> Any:
        return self.request("GET", path, query=query or None)

    def pages(self, path: str, *, limit: int = PAGE, **query: str) -> Iterator[list[dict[str, Any]]]:
        """A LIST in pages of ``limit`` (the ``continue`` token of each page asks for the next), so a client
        holds one page at a time. An expired token (410 Gone, after compaction) fails the list: the caller
        runs again later, from the start."""
        token = ""
        while True:
            page = self.get(path, **query, limit=str(limit), **({"continue": token} if token else {}))
            yield list(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue") or ""
            if not token:
                return

    def pages_with_meta(
        self, path: str, *, limit: int = PAGE, **query: str
    ) -> Iterator[tuple[list[dict[str, Any]], dict[str, Any]]]:
        """``pages`` with each page's list metadata (its ``resourceVersion`` is where a watch starts)."""
        token = ""
        while True:
            page = self.get(path, **query, limit=str(limit), **({"continue": token} if token else {}))
            meta = page.get("metadata") or {}
            yield list(page.get("items") or []), meta
            token = meta.get("continue") or ""
            if not token:
                return

    def stream(self, path: str, query: dict[str, str], *, timeout: float) -> Iterator[dict[str, Any]]:
        """A watch: one event (``type``, ``object``) per line of the response, read as it arrives."""
        url = self.base + path + "?" + urllib.parse.urlencode(query)
        req = urllib.request.Request(url, method="GET")
        req.add_header("Authorization", f"Bearer {self.token}")
        req.add_header("Accept", "application/json")
        with urllib.request.urlopen(req, context=self.context, timeout=timeout) as resp:
            for line in resp:
                if line.strip():
                    yield json.loads(line)

    def patch(self, path: str, body: Any) -> Any:
        return self.request("PATCH", path, body)

    def delete(self, path: str) -> Any:
        return self.request("DELETE", path)

    def evict(self, namespace: str, name: str) -> bool:
        """POST the pod's ``eviction`` subresource (policy/v1): True when the API server accepted it (or the pod
        is gone), False when a PodDisruptionBudget refuses it now. That refusal is a 429 with Retry-After 0 or
        10 and a ``DisruptionBudget`` cause (k8s.io/kubernetes v1.36.0 pkg/registry/core/pod/storage/eviction.go;
        k8s.io/api policy/v1 DisruptionBudgetCause): an answer, not overload, so it is asked once; the caller
        asks again on its next pass, as ``kubectl drain`` does. A 429 without that cause is the API server's
        overload protection, raised as any other error."""
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
        }
        path = f"/api/v1/namespaces/{namespace}/pods/{name}/eviction"
        try:
            self.request("POST", path, body, content_type="application/json", tries=1)
        except NotFound:
            return True
        except urllib.error.HTTPError as err:
            if err.code == 429 and _disruption_budget(err):
                return False
            raise
        return True


def retryable(method: str, status: int, headers: http.client.HTTPMessage) -> bool:
    """A 429 (nothing was done), or a GET the server answered 5xx with a Retry-After: a page whose revision its
    watch cache has not reached yet is 504 ResourceVersionTooLarge, Retry-After 1 (k8s.io/apiserver v0.36.4
    pkg/storage/errors.go NewTooLargeResourceVersionError, responsewriters/writers.go ErrorNegotiated), which a
    busy API server of a 7,500-node cluster answers (the scale tier's node LIST did). client-go retries any 5xx
    that carries Retry-After (client-go v0.35.3 rest/with_retry.go checkWait); a write is not sent again here,
    as a 504 write may still be applied."""
    return status == 429 or (method == "GET" and status >= 500 and headers.get("Retry-After") is not None)


def _disruption_budget(err: urllib.error.HTTPError) -> bool:
    try:
        status = json.loads(err.read() or b"{}")
    except ValueError:
        return False
    causes = (status.get("details") or {}).get("causes") or []
    # StatusCause.Type is serialised as "reason" (k8s.io/apimachinery pkg/apis/meta/v1/types.go).
    return any(c.get("reason") == "DisruptionBudget" for c in causes)


def retry_after_s(value: str | None) -> float:
    """The seconds a Retry-After header asks for, at most RETRY_AFTER_MAX_S; 1 s when it is absent or not a
    number of seconds (an HTTP-date is not trusted: a node's clock may be off)."""
    text = (value or "").strip()
    return min(float(text), RETRY_AFTER_MAX_S) if text.isdigit() else 1.0
