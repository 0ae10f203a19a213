"""A stand-in for Azure (which cannot be reached here): IMDS's managed-identity token endpoint and the ARM
calls the XID remediation and the pool roll make on scale sets, on loopback, speaking the documented calls."""

from __future__ import annotations

import datetime
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlparse

import pytest

from modules.cluster.scripts import remediate_xid

SUB, GROUP = "22222222-2222-2222-2222-222222222222", "agk-dev"
CLIENT_ID = "44444444-4444-4444-4444-444444444444"
ARM_TOKEN = "arm-token"
NOW = datetime.datetime(2026, 12, 1, 12, 0, tzinfo=datetime.UTC)


class FakeAzure:
    """IMDS's token endpoint and the ARM calls of Delete Instances / Update / Get, with 202 + Azure-AsyncOperation.

    Deleting an instance lowers the set's capacity (what cluster-autoscaler's Azure provider assumes when it
    decrements the set's size after the same call); an Update sets it.
    """

    def __init__(
        self,
        capacity: dict[str, int],
        instances: dict[str, set[str]],
        polls: int = 1,
        *,
        subscription: str = SUB,
        group: str = GROUP,
        sku: str = "Standard_ND96isr_H100_v5",
    ) -> None:
        self.capacity, self.instances = capacity, instances
        self.subscription, self.group, self.sku = subscription, group, sku
        self.polls = polls  # InProgress answers before an operation succeeds
        self.outdated: dict[str, set[str]] = {}
        """Scale set -> instances whose latestModelApplied is false (a new model was put on the set)."""
        self.page_size = 2  # List VMs answers in pages this small, so a client must follow nextLink
        self.refuse_upgrades = 0
        """Update Instances calls answered 409 OperationNotAllowed (another operation on the set) before one is taken."""
        self.operations: dict[str, dict[str, Any]] = {}
        self.calls: list[tuple[str, str, Any]] = []
        self.token_requests: list[dict[str, list[str]]] = []
        self.upgraded: list[tuple[str, str]] = []
        self.reimaged: list[tuple[str, str]] = []
        """Update Instances calls, in order: (scale set, instance)."""
        self.base = ""

    def finish(self) -> None:
        """Azure completes every running operation (as it does whether or not anyone polls)."""
        for op in self.operations.values():
            op["left"] = 0
            if op["apply"] is not None:
                op["apply"]()
                op["apply"] = None

    def _advance(self) -> None:
        """Time passes between reads: each GET moves every running operation one step towards done."""
        for op in self.operations.values():
            if op["apply"] is None:
                continue
            if op["left"] > 0:
                op["left"] -= 1
            if op["left"] == 0:
                op["apply"]()
                op["apply"] = None

    def _vmss(self, path: str) -> tuple[str, str]:
        prefix = (
            f"/subscriptions/{self.subscription}/resourceGroups/{self.group}"
            "/providers/Microsoft.Compute/virtualMachineScaleSets/"
        )
        assert path.startswith(prefix), path
        name, _, rest = path[len(prefix) :].partition("/")
        return name, rest

    def _accept(self, apply: Any) -> tuple[int, dict[str, str], Any]:
        op = f"op{len(self.operations)}"
        self.operations[op] = {"left": self.polls, "apply": apply}
        url = f"{self.base}/subscriptions/{self.subscription}/providers/Microsoft.Compute/locations/eastus2/operations/{op}"
        return 202, {"Azure-AsyncOperation": f"{url}?api-version=2024-07-01", "Retry-After": "0"}, None

    def handle(self, method: str, path: str, query: dict[str, list[str]], headers: Any, body: Any) -> Any:
        if path == "/metadata/identity/oauth2/token":
            assert headers["Metadata"] == "true"
            self.token_requests.append(query)
            return 200, {}, {"access_token": ARM_TOKEN, "expires_on": str(int(time.time()) + 3600)}
        assert headers["Authorization"] == f"Bearer {ARM_TOKEN}"
        assert query["api-version"] == ["2024-07-01"]
        self.calls.append((method, path, body))
        if method == "GET":
            self._advance()
        if "/operations/" in path:
            op = self.operations[path.rsplit("/", 1)[1]]
            if op["left"] > 0:
                op["left"] -= 1
                return 200, {"Retry-After": "0"}, {"status": "InProgress"}
            if op["apply"] is not None:
                op["apply"]()
                op["apply"] = None
            return 200, {}, {"status": "Succeeded"}
        vmss, rest = self._vmss(path)
        if method == "GET" and rest == "":
            return (
                200,
                {},
                {
                    "name": vmss,
                    "sku": {"name": self.sku, "tier": "Standard", "capacity": self.capacity[vmss]},
                },
            )
        if method == "GET" and rest == "virtualMachines":
            # Virtual Machine Scale Set VMs - List; $filter on latestModelApplied is one the API allows.
            wanted = {"properties/latestModelApplied eq false": False, "properties/latestModelApplied eq true": True}
            flt = query.get("$filter", [""])[0]
            assert flt in ("", *wanted), flt
            ids = sorted(self.instances[vmss], key=int)
            if flt:
                ids = [i for i in ids if (i not in self.outdated.get(vmss, set())) == wanted[flt]]
            skip = int(query.get("$skiptoken", ["0"])[0])
            page = ids[skip : skip + self.page_size]
            out: dict[str, Any] = {
                "value": [
                    {
                        "instanceId": i,
                        "properties": {"latestModelApplied": i not in self.outdated.get(vmss, set())},
                    }
                    for i in page
                ]
            }
            if skip + self.page_size < len(ids):
                q = urlencode({"api-version": "2024-07-01", "$filter": flt, "$skiptoken": skip + self.page_size})
                out["nextLink"] = f"{self.base}{path}?{q}"
            return 200, {}, out
        if method == "POST" and rest == "reimage":
            (instance,) = body["instanceIds"]
            self.reimaged.append((vmss, instance))
            return self._accept(lambda: None)
        if method == "POST" and rest == "manualupgrade":
            (instance,) = body["instanceIds"]
            if self.refuse_upgrades > 0:
                self.refuse_upgrades -= 1
                message = "Operation 'manualUpgrade' is not allowed since another operation is in progress."
                return 409, {}, {"error": {"code": "OperationNotAllowed", "message": message}}
            self.upgraded.append((vmss, instance))
            status = self._accept(lambda: self.outdated.get(vmss, set()).discard(instance))
            self.operations[f"op{len(self.operations) - 1}"]["upgrade"] = (vmss, instance)
            return status
        if method == "GET" and rest.startswith("virtualMachines/"):
            instance = rest.rsplit("/", 1)[1]
            deleting = any(
                o["apply"] is not None and o.get("instance") == (vmss, instance) for o in self.operations.values()
            )
            updating = any(
                o["apply"] is not None and o.get("upgrade") == (vmss, instance) for o in self.operations.values()
            )
            if instance not in self.instances[vmss]:
                return 404, {}, {"error": {"code": "NotFound", "message": "not found"}}
            state = "Deleting" if deleting else "Updating" if updating else "Succeeded"
            latest = instance not in self.outdated.get(vmss, set())
            return 200, {}, {"properties": {"provisioningState": state, "latestModelApplied": latest}}
        if method == "POST" and rest == "delete":
            (instance,) = body["instanceIds"]

            def apply() -> None:
                self.instances[vmss].discard(instance)
                self.capacity[vmss] -= 1

            status = self._accept(apply)
            self.operations[f"op{len(self.operations) - 1}"]["instance"] = (vmss, instance)
            return status
        if method == "PATCH" and rest == "":
            capacity = body["sku"]["capacity"]
            assert body["sku"]["name"] == self.sku
            return self._accept(lambda: self.capacity.__setitem__(vmss, capacity))
        return 400, {}, {"error": {"code": "BadRequest", "message": f"{method} {path}"}}


@pytest.fixture
def azure() -> Iterator[Any]:
    servers: list[HTTPServer] = []

    def start(fake: FakeAzure, *, poll_timeout: float = 5) -> remediate_xid.Arm:
        class Handler(BaseHTTPRequestHandler):
            def _do(self) -> None:
                url = urlparse(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                code, headers, out = fake.handle(self.command, url.path, parse_qs(url.query), self.headers, body)
                data = json.dumps(out).encode() if out is not None else b""
                self.send_response(code)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = _do

            def log_message(self, *args: Any) -> None:
                pass

        server = HTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(server)
        fake.base = f"http://127.0.0.1:{server.server_port}"
        return remediate_xid.Arm(
            client_id=CLIENT_ID,
            arm_endpoint=fake.base,
            imds_endpoint=fake.base,
            poll_timeout=poll_timeout,
            sleep=lambda _: None,
        )

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()
