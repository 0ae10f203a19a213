"""The preflight reporter and the re-test job against a fake API server on loopback."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from modules.cluster.scripts import preflight_report, retest_idle
from modules.cluster.scripts.kube import Api

KEY, POOL = "gpu.example.com/preflight", "gpu.example.com/pool"
TAINT = {"key": KEY, "value": "pending", "effect": "NoSchedule"}
TEAM_TAINT = {"key": "gpu.example.com/team", "value": "research", "effect": "NoSchedule"}


def merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch, as the API server applies application/merge-patch+json."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge(out.get(k), v)
    return out


class FakeApi:
    def __init__(self, nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> None:
        self.nodes = {n["metadata"]["name"]: n for n in nodes}
        self.pods = pods
        self.patches: list[str] = []
        self.bind_on_patch: dict[str, Any] | None = None

    def handle(self, method: str, path: str, query: dict[str, list[str]], body: Any) -> tuple[int, Any]:
        if path == "/api/v1/nodes":
            sel = query.get("labelSelector", [""])[0]
            return 200, {"items": [n for n in self.nodes.values() if sel in n["metadata"].get("labels", {})]}
        if path == "/api/v1/pods":
            field = query.get("fieldSelector", [""])[0]
            pods = self.pods
            if field.startswith("spec.nodeName="):
                pods = [p for p in pods if p["spec"].get("nodeName") == field.split("=", 1)[1]]
            return 200, {"items": pods}
        name = path.rsplit("/", 1)[1]
        node = self.nodes[name]
        if method == "GET":
            return 200, node
        rv = body.get("metadata", {}).pop("resourceVersion", None)
        if rv is not None and rv != node["metadata"]["resourceVersion"]:
            return 409, {"reason": "Conflict"}
        new = merge(node, body)
        new["metadata"]["resourceVersion"] = str(int(node["metadata"]["resourceVersion"]) + 1)
        self.nodes[name] = new
        self.patches.append(name)
        if self.bind_on_patch is not None:  # a job is bound between the taint and the re-check
            self.pods.append(self.bind_on_patch)
            self.bind_on_patch = None
        return 200, new


@pytest.fixture
def serve() -> Iterator[Any]:
    servers: list[HTTPServer] = []

    def start(fake: FakeApi) -> Api:
        class Handler(BaseHTTPRequestHandler):
            def _do(self) -> None:
                url = urlparse(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                assert self.headers["Authorization"] == "Bearer t"
                code, out = fake.handle(self.command, url.path, parse_qs(url.query), body)
                data = json.dumps(out).encode()
                self.send_response(code)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_PATCH = _do

            def log_message(self, *args: Any) -> None:
                pass

        server = HTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return Api(f"http://127.0.0.1:{server.server_port}", "t", None)

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def node(name: str, *, labels: dict[str, str] | None = None, taints: list[Any] | None = None, **extra: Any) -> Any:
    meta = {"name": name, "resourceVersion": "1", "labels": {POOL: "h100", **(labels or {})}, **extra}
    return {"metadata": meta, "spec": {"taints": taints or []}}


def gpu_pod(on: str, priority: str = "training") -> dict[str, Any]:
    return {
        "metadata": {"name": f"job-{on}"},
        "spec": {
            "nodeName": on,
            "priorityClassName": priority,
            "containers": [{"resources": {"requests": {"nvidia.com/gpu": "8"}}}],
        },
        "status": {"phase": "Running"},
    }


def test_pass_releases_the_node(serve: Any) -> None:
    fake = FakeApi([node("n1", labels={KEY: "pending"}, taints=[TAINT, TEAM_TAINT])], [])
    preflight_report.report(serve(fake), "n1", True, KEY)
    n1 = fake.nodes["n1"]
    assert KEY not in n1["metadata"]["labels"]
    assert n1["spec"]["taints"] == [TEAM_TAINT]
    assert n1["metadata"]["annotations"][f"{KEY}-result"] == "passed"


def test_fail_keeps_the_taint_and_marks_the_node(serve: Any) -> None:
    fake = FakeApi([node("n1", labels={KEY: "pending"}, taints=[TAINT])], [])
    preflight_report.report(serve(fake), "n1", False, KEY)
    n1 = fake.nodes["n1"]
    assert n1["metadata"]["labels"][KEY] == "failed"
    assert n1["spec"]["taints"] == [TAINT]


def test_retest_picks_idle_nodes_oldest_first(serve: Any) -> None:
    old = {"annotations": {f"{KEY}-last-run": "2024-01-01T00:00:00Z"}}
    new = {"annotations": {f"{KEY}-last-run": "2024-06-01T00:00:00Z"}}
    nodes = [
        node("busy"),
        node("balloon-only", **new),
        node("old", **old),
        node("in-preflight", labels={KEY: "pending"}),
        node("cordoned"),
    ]
    nodes[-1]["spec"]["unschedulable"] = True
    fake = FakeApi(nodes, [gpu_pod("busy"), gpu_pod("balloon-only", "balloon")])
    sent = retest_idle.run(serve(fake), pool_key=POOL, key=KEY, limit=2)
    assert sent == ["old", "balloon-only"]
    assert fake.nodes["old"]["metadata"]["labels"][KEY] == "pending"
    assert TAINT in fake.nodes["old"]["spec"]["taints"]
    assert KEY not in fake.nodes["busy"]["metadata"]["labels"]


def test_retest_backs_off_when_a_job_lands_meanwhile(serve: Any) -> None:
    fake = FakeApi([node("n1", taints=[TEAM_TAINT])], [])
    fake.bind_on_patch = gpu_pod("n1")
    assert retest_idle.run(serve(fake), pool_key=POOL, key=KEY, limit=1) == []
    assert KEY not in fake.nodes["n1"]["metadata"]["labels"]
    assert fake.nodes["n1"]["spec"]["taints"] == [TEAM_TAINT]
