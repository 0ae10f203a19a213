"""The in-cluster scripts' API client (modules/cluster/scripts/kube.py) against a local HTTP/1.1 server: one
kept-alive connection for many requests, a 429 waited out as Retry-After says, an idle connection the server
closed replaced without the caller seeing it. The real API server's side (TLS, its own keep-alive) is the
approver's control-plane and scale tests."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
import urllib.error
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from modules.cluster.scripts import kube

BEHIND = {
    "kind": "Status",
    "apiVersion": "v1",
    "metadata": {},
    "status": "Failure",
    "message": "Timeout: Too large resource version: 143424, current: 142638",
    "reason": "Timeout",
    "details": {
        "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
        "retryAfterSeconds": 1,
    },
    "code": 504,
}


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.connections = 0
        self.requests: list[tuple[str, str]] = []
        self.throttle = 0
        """Answer this many requests with 429 first."""
        self.retry_after: str | None = "2"
        self.close_after_each = False
        """Close every connection after its response, without saying so (what an idle timeout does)."""
        self.behind = 0
        """Answer this many requests 504 with Retry-After 1, as the API server answers a page whose revision its
        watch cache has not reached (the scale tier's LIST of 7,510 nodes got it: its exact body below)."""
        self.drop = 0
        """Read this many requests, then close the connection without answering (a server that went away
        after it may have acted)."""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the API server speaks it

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as Go's server does
        server: Server = self.server  # type: ignore[assignment]
        server.connections += 1

    def _do(self) -> None:
        server: Server = self.server  # type: ignore[assignment]
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        server.requests.append((self.command, self.path))
        if server.drop:
            server.drop -= 1
            self.close_connection = True
            return
        if server.behind:
            server.behind -= 1
            code, out = 504, BEHIND
        elif server.throttle:
            server.throttle -= 1
            code, out = 429, {"kind": "Status", "code": 429, "reason": "TooManyRequests"}
        elif self.path.startswith("/api/v1/nodes/gone"):
            code, out = 404, {"kind": "Status", "code": 404}
        elif self.path.startswith("/api/v1/nodes/bad"):
            code, out = 500, {"kind": "Status", "code": 500, "message": "etcd timeout"}
        else:
            code, out = 200, {"path": self.path, "body": json.loads(body) if body else None}
        data = json.dumps(out).encode()
        self.send_response(code)
        if code == 429 and server.retry_after is not None:
            self.send_header("Retry-After", server.retry_after)
        if code == 504:
            self.send_header("Retry-After", "1")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        if server.close_after_each:
            self.close_connection = True

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _do

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[Server]:
    srv = Server()
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield srv
    srv.shutdown()
    srv.server_close()


def api(
    srv: Server,
    slept: list[float] | None = None,
    *,
    clock: Callable[[], float] = time.monotonic,
    jitter: Callable[[float, float], float] = lambda low, high: low,
) -> kube.Api:
    sleep = slept.append if slept is not None else (lambda s: None)
    return kube.Api(f"http://127.0.0.1:{srv.server_port}", "t", None, sleep=sleep, clock=clock, rand=jitter)


def test_many_requests_share_one_connection(server: Server) -> None:
    """The approver's thousands of calls cost one TCP (and, in the cluster, one TLS) handshake. urllib's
    urlopen opened one connection per request here (100)."""
    client = api(server)
    for i in range(50):
        assert client.get(f"/api/v1/nodes/n{i}")["path"] == f"/api/v1/nodes/n{i}"
        client.patch(f"/api/v1/nodes/n{i}", {"metadata": {"labels": {"a": str(i)}}})
    assert len(server.requests) == 100
    assert server.connections == 1


def test_a_429_is_waited_out_as_retry_after_says_then_retried(server: Server) -> None:
    server.throttle = 2
    slept: list[float] = []
    body = {"status": {"conditions": []}}
    assert api(server, slept).request("PUT", "/apis/x/approval", body, content_type="application/json")["body"] == body
    assert slept == [2.0, 2.0]
    assert server.requests == [("PUT", "/apis/x/approval")] * 3


@pytest.mark.parametrize(("header", "wait"), [(None, 1.0), ("Mon, 01 Jan 2035 00:00:00 GMT", 1.0), ("3600", 60.0)])
def test_a_429_without_a_usable_retry_after_waits_a_bounded_time(
    server: Server, header: str | None, wait: float
) -> None:
    server.throttle, server.retry_after = 1, header
    slept: list[float] = []
    api(server, slept).get("/api/v1/nodes/n1")
    assert slept == [wait]


def test_a_429_that_lasts_reaches_the_caller_after_the_last_try(server: Server) -> None:
    server.throttle = kube.THROTTLED_TRIES
    slept: list[float] = []
    with pytest.raises(urllib.error.HTTPError) as err:
        api(server, slept).get("/api/v1/nodes/n1")
    assert err.value.code == 429 and len(slept) == kube.THROTTLED_TRIES - 1
    assert len(server.requests) == kube.THROTTLED_TRIES


def test_errors_keep_their_types(server: Server) -> None:
    client = api(server)
    with pytest.raises(kube.NotFound):
        client.get("/api/v1/nodes/gone")
    with pytest.raises(urllib.error.HTTPError) as err:
        client.get("/api/v1/nodes/bad")
    assert err.value.code == 500 and json.loads(err.value.read())["message"] == "etcd timeout"
    assert client.get("/api/v1/nodes/n1")["path"] == "/api/v1/nodes/n1"  # the connection is still good
    assert server.connections == 1


def test_a_connection_the_server_closed_is_replaced_without_the_caller_seeing_it(server: Server) -> None:
    server.close_after_each = True
    client = api(server)
    for i in range(5):
        assert client.get(f"/api/v1/nodes/n{i}")["path"] == f"/api/v1/nodes/n{i}"
    assert server.connections == 5 and len(server.requests) == 5


def test_a_refused_connection_reaches_the_caller() -> None:
    srv = Server()
    port = srv.server_port
    srv.server_close()  # nothing listens there any more
    with pytest.raises(OSError):
        kube.Api(f"http://127.0.0.1:{port}", "t", None).get("/api/v1/nodes/n1")


def test_the_wait_is_spread_over_up_to_twice_retry_after(server: Server) -> None:
    """Reporters refused together (7,500 at a mass reboot) come back spread out, not in lockstep."""
    server.throttle = 1
    slept: list[float] = []
    api(server, slept, jitter=lambda low, high: high).get("/api/v1/nodes/n1")
    assert slept == [4.0]


def test_a_get_the_server_dropped_on_a_kept_alive_connection_is_sent_again(server: Server) -> None:
    client = api(server)
    client.get("/api/v1/nodes/n0")
    server.drop = 1
    assert client.get("/api/v1/nodes/n1")["path"] == "/api/v1/nodes/n1"
    assert server.requests == [("GET", "/api/v1/nodes/n0"), ("GET", "/api/v1/nodes/n1"), ("GET", "/api/v1/nodes/n1")]


@pytest.mark.parametrize("method", ["PATCH", "PUT", "POST", "DELETE"])
def test_a_write_the_server_may_have_applied_is_not_sent_again(server: Server, method: str) -> None:
    """The server read it, then the connection broke: it may have acted, so the caller decides (the controllers
    run again, reading first)."""
    client = api(server)
    client.get("/api/v1/nodes/n0")
    server.drop = 1
    with pytest.raises(http.client.RemoteDisconnected):
        client.request(method, "/api/v1/nodes/n1", {"metadata": {}})
    assert server.requests == [("GET", "/api/v1/nodes/n0"), (method, "/api/v1/nodes/n1")]


def test_a_connection_idle_past_the_limit_is_replaced_before_it_is_used(server: Server) -> None:
    """The API server closes connections idle for 90 s; the client does not wait to find out."""
    now = [0.0]
    client = api(server, clock=lambda: now[0])
    client.get("/api/v1/nodes/n0")
    now[0] += kube.IDLE_S - 1
    client.get("/api/v1/nodes/n1")
    assert server.connections == 1
    now[0] += kube.IDLE_S + 1
    client.get("/api/v1/nodes/n2")
    assert server.connections == 2 and len(server.requests) == 3


def test_the_client_sends_without_nagle(server: Server) -> None:
    client = api(server)
    client.get("/api/v1/nodes/n0")
    conn = client._conn
    assert conn is not None and conn.sock is not None
    assert conn.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0


def test_an_overloaded_api_server_is_not_a_disruption_budget(server: Server) -> None:
    """The eviction subresource is asked once: a budget's 429 carries a DisruptionBudget cause (the real
    one is tests/controlplane/test_roll.py's); a 429 without it is overload, raised, so the roll retries
    next run instead of reading it as a budget."""
    server.throttle = 1
    with pytest.raises(urllib.error.HTTPError) as err:
        api(server).evict("research", "p")
    assert err.value.code == 429 and len(server.requests) == 1
    assert api(server).evict("research", "p") is True
    assert server.requests[-1] == ("POST", "/api/v1/namespaces/research/pods/p/eviction")


def test_a_page_the_servers_cache_has_not_reached_is_asked_again(server: Server) -> None:
    """A 7,500-node API server under load answers a continued LIST 504 ResourceVersionTooLarge with Retry-After
    (bench-scale's node LIST, 2026-12-04): the XID remediation and the idle re-test page through every node, and
    one such answer failed the whole run before."""
    server.behind = 2
    slept: list[float] = []
    assert (
        api(server, slept).get("/api/v1/nodes", limit="250", **{"continue": "t"})["path"].startswith("/api/v1/nodes?")
    )
    assert slept == [1.0, 1.0] and len(server.requests) == 3


def test_a_write_answered_504_is_not_sent_again(server: Server) -> None:
    """A write the server timed out may still be applied: it reaches the caller, as a broken connection's does."""
    server.behind = 1
    slept: list[float] = []
    with pytest.raises(urllib.error.HTTPError) as err:
        api(server, slept).patch("/api/v1/nodes/n1", {"metadata": {"labels": {"a": "1"}}})
    assert err.value.code == 504 and slept == [] and len(server.requests) == 1
