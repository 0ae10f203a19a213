"""The Scheduled Events agent (modules/bootstrap/host/scheduled_events.py) against a loopback stand-in for
IMDS (Azure's endpoint cannot exist here) that speaks the documented API: ``Metadata: true`` required,
``GET /metadata/scheduledevents?api-version=2020-07-01`` and ``POST {"StartRequests": [{"EventId"}]}``
(learn.microsoft.com/azure/virtual-machines/linux/scheduled-events). Only what needs no Kubernetes is here:
the IMDS client, a node that never joined, the rendered unit. Everything the agent does to the Node and its
pods is proven on the real API server with the node's own credential in
tests/controlplane/test_scheduled_events.py."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from modules.bootstrap.host import scheduled_events as se
from tests.bootstrap.host.loopback import serve

VM = "h100-00_3"
NODE = "h100-00000003"
ANNOTATION = "gpu.example.com/drained-for"
NOW = dt.datetime(2026, 12, 2, 8, 0, tzinfo=dt.timezone.utc)  # noqa: UP017


def event(
    kind: str, *resources: str, event_id: str = "EVT-1", status: str = "Scheduled", minutes: int = 15
) -> dict[str, Any]:
    when = (NOW + dt.timedelta(minutes=minutes)).strftime("%a, %d %b %Y %H:%M:%S GMT")
    return {
        "EventId": event_id,
        "EventType": kind,
        "ResourceType": "VirtualMachine",
        "Resources": list(resources) or [VM],
        "EventStatus": status,
        "NotBefore": when if status == "Scheduled" else "",
        "Description": "test",
        "EventSource": "Platform",
        "DurationInSeconds": -1,
    }


class FakeImds:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.started: list[Any] = []
        self.bad_requests = 0

    def handle(self, method: str, path: str, query: dict[str, list[str]], headers: dict[str, str], body: bytes):  # type: ignore[no-untyped-def]
        if headers.get("Metadata") != "true":
            self.bad_requests += 1
            return 400, {}, {"error": "Metadata: true required"}
        if path == "/metadata/instance/compute":
            return 200, {}, {"name": VM}
        if path != "/metadata/scheduledevents" or query.get("api-version") != ["2020-07-01"]:
            return 404, {}, None
        if method == "POST":
            self.started.append(json.loads(body))
            return 200, {}, None
        return 200, {}, {"DocumentIncarnation": 1, "Events": self.events}


@pytest.fixture
def imds() -> Iterator[tuple[FakeImds, se.Imds]]:
    fake = FakeImds()
    with serve(fake.handle) as url:
        yield fake, se.Imds(url)


def agent(client: se.Imds, kube: se.Kube | None, clock: list[float]) -> se.Agent:
    return se.Agent(client, kube, NODE, VM, ANNOTATION, now=lambda: NOW, clock=lambda: clock[0], evict_every=5)


def test_imds_client_speaks_the_documented_api(imds: tuple[FakeImds, se.Imds]) -> None:
    fake, client = imds
    fake.events = [event("Reboot")]
    assert client.vm_name() == VM
    assert client.events()["Events"][0]["EventId"] == "EVT-1"
    client.start("EVT-1")
    assert fake.started == [{"StartRequests": [{"EventId": "EVT-1"}]}]
    assert fake.bad_requests == 0


def test_a_node_that_never_joined_acknowledges_at_once(imds: tuple[FakeImds, se.Imds]) -> None:
    fake, client = imds
    fake.events = [event("Terminate")]
    agent(client, None, [0.0]).step()
    assert fake.started == [{"StartRequests": [{"EventId": "EVT-1"}]}]


def test_not_before_parses_the_documented_format() -> None:
    got = se.not_before({"NotBefore": "Mon, 19 Sep 2016 18:29:47 GMT"})
    assert got == dt.datetime(2016, 9, 19, 18, 29, 47, tzinfo=dt.timezone.utc)  # noqa: UP017
    assert se.not_before({"NotBefore": ""}) is None


@pytest.mark.parametrize(("role", "pool"), [("gpu-node", "h100"), ("gpu-node", "a100"), ("system-node", "system")])
def test_every_pool_node_runs_the_agent_with_the_kubelets_credential(role: str, pool: str) -> None:
    from modules.bootstrap.roles import bundle
    from modules.bootstrap.roles.pool import KUBELET_CLIENT_CERT, SCHEDULED_EVENTS_UNIT
    from tests.bootstrap.conftest import context

    node = bundle(context("dev"), role, pool)  # type: ignore[arg-type]
    unit = node.file(f"systemd/{SCHEDULED_EVENTS_UNIT}").content
    (line,) = [x for x in unit.splitlines() if x.startswith("ExecStart=")]
    words = line.removeprefix("ExecStart=").split()
    assert words[:2] == ["/usr/bin/python3", "/opt/agk/lib/scheduled_events.py"]
    args = dict(zip(words[2::2], words[3::2], strict=True))
    assert args["--credential"] == KUBELET_CLIENT_CERT and args["--annotation"].endswith("/drained-for")
    assert node.file("lib/scheduled_events.py").content == Path(se.__file__).read_text()
    assert any(s.name == "scheduled-events" and SCHEDULED_EVENTS_UNIT in s.command for s in node.steps)
    # A new agent from the hourly sync is restarted (it keeps no state a restart loses: the cordon is annotated).
    assert any(r.unit == SCHEDULED_EVENTS_UNIT and r.action == "restart" for r in node.restarts)
