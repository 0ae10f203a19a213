"""The Scheduled Events agent (modules/bootstrap/host/scheduled_events.py) against a loopback stand-in for
IMDS (Azure's endpoint cannot exist here) that speaks the documented API: ``Metadata: true`` required,
``GET /metadata/scheduledevents?api-version=2020-07-01`` and ``POST {"StartRequests": [{"EventId"}]}``
(learn.microsoft.com/azure/virtual-machines/linux/scheduled-events). The Kubernetes side here is an
in-memory stand-in recording what the agent asks; tests/controlplane/test_scheduled_events.py proves the
drain itself on the real API server with the node's own credential."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from modules.bootstrap.host import scheduled_events as se
from tests.host.loopback import serve

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


class FakeKube:
    """Stand-in for the API server: one Node, its pods, evictions answered from ``refuse``."""

    def __init__(self, pods: list[dict[str, Any]]) -> None:
        self.node_obj: dict[str, Any] = {"metadata": {"name": NODE, "annotations": {}}, "spec": {}}
        self.pods = pods
        self.refuse: set[str] = set()
        self.evictions: list[str] = []

    def node(self, name: str) -> dict[str, Any]:
        assert name == NODE
        return json.loads(json.dumps(self.node_obj))

    def patch_node(self, name: str, patch: dict[str, Any]) -> None:
        for k, v in patch.get("metadata", {}).get("annotations", {}).items():
            if v is None:
                self.node_obj["metadata"]["annotations"].pop(k, None)
            else:
                self.node_obj["metadata"]["annotations"][k] = v
        self.node_obj["spec"].update(patch.get("spec", {}))

    def pods_on(self, name: str) -> list[dict[str, Any]]:
        return list(self.pods)

    def evict(self, pod: dict[str, Any]) -> tuple[int, str]:
        key = se.pod_key(pod)
        self.evictions.append(key)
        if key in self.refuse:
            return 429, "Cannot evict pod as it would violate the pod's disruption budget."
        self.pods = [p for p in self.pods if se.pod_key(p) != key]
        return 201, ""


def pod(name: str, owner: str = "ReplicaSet", mirror: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "team-a", "uid": name + "-uid"}
    meta["ownerReferences"] = [{"kind": owner, "name": "o", "controller": True}]
    if mirror:
        meta["annotations"] = {se.MIRROR: "x"}
    return {"metadata": meta}


@pytest.fixture
def imds() -> Iterator[tuple[FakeImds, se.Imds]]:
    fake = FakeImds()
    with serve(fake.handle) as url:
        yield fake, se.Imds(url)


def agent(client: se.Imds, kube: FakeKube | None, clock: list[float]) -> se.Agent:
    return se.Agent(client, kube, NODE, VM, ANNOTATION, now=lambda: NOW, clock=lambda: clock[0], evict_every=5)  # type: ignore[arg-type]


def test_imds_client_speaks_the_documented_api(imds: tuple[FakeImds, se.Imds]) -> None:
    fake, client = imds
    fake.events = [event("Reboot")]
    assert client.vm_name() == VM
    assert client.events()["Events"][0]["EventId"] == "EVT-1"
    client.start("EVT-1")
    assert fake.started == [{"StartRequests": [{"EventId": "EVT-1"}]}]
    assert fake.bad_requests == 0


def test_reboot_cordons_drains_skipping_daemonset_and_mirror_pods_then_acknowledges(
    imds: tuple[FakeImds, se.Imds],
) -> None:
    fake, client = imds
    kube = FakeKube([pod("job-0"), pod("agent", owner="DaemonSet"), pod("kube-proxy", owner="Node", mirror=True)])
    fake.events = [event("Reboot")]
    clock = [0.0]
    a = agent(client, kube, clock)
    a.step()  # cordon + evict
    assert kube.node_obj["spec"]["unschedulable"] is True
    assert kube.node_obj["metadata"]["annotations"] == {ANNOTATION: "EVT-1"}
    assert kube.evictions == ["team-a/job-0"]
    assert fake.started == []
    a.step()  # drained: acknowledge
    assert fake.started == [{"StartRequests": [{"EventId": "EVT-1"}]}]
    assert [se.pod_key(p) for p in kube.pods] == ["team-a/agent", "team-a/kube-proxy"]
    a.step()
    assert len(fake.started) == 1, "acknowledged once"
    fake.events = []  # the reboot is over
    a.step()
    assert kube.node_obj["spec"]["unschedulable"] is False
    assert kube.node_obj["metadata"]["annotations"] == {}


def test_a_budget_that_forbids_the_eviction_holds_the_acknowledgement_and_is_retried_every_5s(
    imds: tuple[FakeImds, se.Imds],
) -> None:
    fake, client = imds
    kube = FakeKube([pod("guarded")])
    kube.refuse.add("team-a/guarded")
    fake.events = [event("Terminate")]
    clock = [0.0]
    a = agent(client, kube, clock)
    for t in (0.0, 1.0, 2.0, 4.9):
        clock[0] = t
        a.step()
    assert kube.evictions == ["team-a/guarded"], "one try per 5 s"
    clock[0] = 5.0
    a.step()
    assert kube.evictions == ["team-a/guarded"] * 2
    assert fake.started == []
    kube.refuse.clear()
    clock[0] = 10.0
    a.step()
    a.step()
    assert fake.started == [{"StartRequests": [{"EventId": "EVT-1"}]}]


def test_other_vms_events_freeze_and_started_events_change_nothing(imds: tuple[FakeImds, se.Imds]) -> None:
    fake, client = imds
    kube = FakeKube([pod("job-0")])
    fake.events = [
        event("Reboot", "h100-00_4", event_id="OTHER"),
        event("Freeze", event_id="FREEZE"),
        event("Redeploy", event_id="STARTED", status="Started"),
    ]
    a = agent(client, kube, [0.0])
    a.step()
    a.step()
    assert kube.evictions == [] and "unschedulable" not in kube.node_obj["spec"]
    assert fake.started == []


def test_an_event_naming_other_vms_too_is_drained_for_but_not_acknowledged(imds: tuple[FakeImds, se.Imds]) -> None:
    fake, client = imds
    kube = FakeKube([pod("job-0")])
    fake.events = [event("Reboot", VM, "h100-00_4")]
    a = agent(client, kube, [0.0])
    a.step()
    a.step()
    assert kube.evictions == ["team-a/job-0"] and kube.node_obj["spec"]["unschedulable"] is True
    assert fake.started == [], "acknowledging would let Azure start on h100-00_4 too"


def test_a_node_that_never_joined_acknowledges_at_once(imds: tuple[FakeImds, se.Imds]) -> None:
    fake, client = imds
    fake.events = [event("Terminate")]
    agent(client, None, [0.0]).step()
    assert fake.started == [{"StartRequests": [{"EventId": "EVT-1"}]}]


def test_past_not_before_the_agent_stops_draining(imds: tuple[FakeImds, se.Imds]) -> None:
    fake, client = imds
    kube = FakeKube([pod("job-0")])
    fake.events = [event("Reboot", minutes=-1)]
    agent(client, kube, [0.0]).step()
    assert kube.evictions == [] and fake.started == []


def test_a_cordon_not_ours_is_left_after_the_event(imds: tuple[FakeImds, se.Imds]) -> None:
    fake, client = imds
    kube = FakeKube([])
    kube.node_obj["spec"]["unschedulable"] = True  # cordoned by a person, or the XID remediation
    fake.events = [event("Reboot")]
    a = agent(client, kube, [0.0])
    a.step()
    assert fake.started == [{"StartRequests": [{"EventId": "EVT-1"}]}]
    fake.events = []
    a.step()
    assert kube.node_obj["spec"]["unschedulable"] is True


def test_not_before_parses_the_documented_format() -> None:
    got = se.not_before({"NotBefore": "Mon, 19 Sep 2016 18:29:47 GMT"})
    assert got == dt.datetime(2016, 9, 19, 18, 29, 47, tzinfo=dt.timezone.utc)  # noqa: UP017
    assert se.not_before({"NotBefore": ""}) is None


@pytest.mark.parametrize(("role", "pool"), [("gpu-node", "h100"), ("gpu-node", "a100"), ("system-node", "system")])
def test_every_pool_node_runs_the_agent_with_the_kubelets_credential(role: str, pool: str) -> None:
    from modules.bootstrap.roles import KUBELET_CLIENT_CERT, SCHEDULED_EVENTS_UNIT, bundle
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
