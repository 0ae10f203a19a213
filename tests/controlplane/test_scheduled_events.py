"""A pool node drains itself ahead of an Azure Scheduled Event, on dev's real control plane.

The agent is the rendered pool bundle's own (modules/bootstrap/host/scheduled_events.py, its unit's
arguments), run as the unit runs it (``python3 -s``) with the node's kubelet client credential: a
certificate for ``system:node:<name>`` in ``system:nodes`` signed by the cluster CA, as the kubelet's
CSR is signed (tests/controlplane/test_node_join.py proves that signing). So the rendered API server's
Node authorizer and NodeRestriction admission decide what it may do. The node and its pods are kwok's
(no kubelet runs here); the DaemonSet's pod is made by the real DaemonSet controller, the
PodDisruptionBudget's status by the real disruption controller, and evictions are the real Eviction API.
IMDS is a loopback stand-in (tests/bootstrap/host/loopback.py: Azure's endpoint cannot exist here) that speaks the
documented Scheduled Events API (learn.microsoft.com/azure/virtual-machines/linux/scheduled-events) and
records every acknowledgement.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from modules.bootstrap import pki
from modules.bootstrap.host import scheduled_events as se
from modules.bootstrap.roles import bundle
from modules.bootstrap.roles.pool import DRAINED_FOR
from tests.bootstrap.host.loopback import serve
from tests.bootstrap.host.test_scheduled_events import NOW
from tests.bootstrap.host.test_scheduled_events import event as event_at

from .cluster import ControlPlane, wait
from .conftest import Nodes, wait_for_default_service_account
from .containers import pods_of

NS = "drain-test"


def node_credential(cp: ControlPlane, node: str, path: Path) -> Path:
    """What kubelet-client-current.pem holds once the kubelet's CSR is signed: certificate and key in one file."""
    ca_key = serialization.load_pem_private_key(cp.pems[f"key:{pki.KUBERNETES_CA}"].encode(), None)
    ca = x509.load_pem_x509_certificate(cp.pems[f"cert:{pki.KUBERNETES_CA}"].encode())
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
            x509.NameAttribute(NameOID.COMMON_NAME, f"system:node:{node}"),
        ]
    )
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + dt.timedelta(hours=2))
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
    )
    pem = cert.public_bytes(serialization.Encoding.PEM) + key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
    )
    path.write_bytes(pem)
    path.chmod(0o600)
    return path


class Imds:
    """The Scheduled Events stand-in: the events it lists, the acknowledgements it got, how often it was asked."""

    def __init__(self, vm_name: str) -> None:
        self.vm_name = vm_name
        self.events: list[dict[str, Any]] = []
        self.started: list[dict[str, Any]] = []
        self.polls = 0
        self.lock = threading.Lock()

    def handle(self, method: str, path: str, query: dict[str, list[str]], headers: dict[str, str], body: bytes):  # type: ignore[no-untyped-def]
        if headers.get("Metadata") != "true":
            return 400, {}, {"error": "Bad request: Metadata: true required"}
        if path == "/metadata/instance/compute":
            return 200, {}, {"name": self.vm_name}
        if path != "/metadata/scheduledevents" or query.get("api-version") != [se.API_VERSION]:
            return 404, {}, None
        with self.lock:
            if method == "POST":
                self.started.append(json.loads(body))
                return 200, {}, None
            self.polls += 1
            return 200, {}, {"DocumentIncarnation": self.polls, "Events": list(self.events)}

    def polls_after(self, n: int, timeout: float = 30) -> None:
        """Wait until the agent has polled ``n`` more times."""
        start = self.polls
        wait(f"{n} polls", lambda: self.polls >= start + n, [], timeout=timeout)


def scheduled(kind: str, resources: list[str], event_id: str) -> dict[str, Any]:
    when = dt.datetime.now(dt.UTC) + dt.timedelta(minutes=15)
    return {
        "EventId": event_id,
        "EventType": kind,
        "ResourceType": "VirtualMachine",
        "Resources": resources,
        "EventStatus": "Scheduled",
        "NotBefore": when.strftime("%a, %d %b %Y %H:%M:%S GMT"),
        "Description": "Virtual machine is going to be restarted as requested by authorized user.",
        "EventSource": "User",
        "DurationInSeconds": -1,
    }


NO_SCHEDULER = "bound-by-the-test"
"""No scheduler claims pods of this name: the test binds them itself, as a scheduler does."""


def bare_pod(name: str, node: str, app: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": {"app": app}},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "registry.example.com/x"}],
        },
    }


def place(cp: ControlPlane, body: dict[str, Any]) -> None:
    """Create ``body`` on the node it names as a scheduler puts it there: created unbound, then bound through
    pods/binding (team-tolerations refuses a pod created with spec.nodeName: it would skip every taint)."""
    ns, name = body["metadata"]["namespace"], body["metadata"]["name"]
    spec = dict(body["spec"])
    node = spec.pop("nodeName")
    unbound = body | {"spec": spec | {"schedulerName": NO_SCHEDULER}}
    code, out = cp.call("POST", f"/api/v1/namespaces/{ns}/pods", unbound)
    assert code == 201, out
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name},
        "target": {"kind": "Node", "name": node},
    }
    code, out = cp.call("POST", f"/api/v1/namespaces/{ns}/pods/{name}/binding", binding)
    assert code == 201, out


def agent_argv(cp: ControlPlane, nodes: Nodes, imds: str, node: str, credential: Path, ca: Path) -> list[str]:
    """The rendered unit's command line, with the API server on loopback and this test's files."""
    unit = bundle(nodes.prep.bootstrap, "system-node", "system").file("systemd/agk-scheduled-events.service").content
    (line,) = [x for x in unit.splitlines() if x.startswith("ExecStart=")]
    words = cp.loopback(line.removeprefix("ExecStart=")).split()
    args = dict(zip(words[2::2], words[3::2], strict=True))
    assert words[1] == "/opt/agk/lib/scheduled_events.py"
    args["--ca"], args["--credential"] = str(ca), str(credential)
    script = Path(se.__file__)
    flags = [x for k, v in args.items() for x in (k, v)]
    return ["/usr/bin/python3", "-s", str(script), *flags, "--imds", imds, "--node", node]


@pytest.fixture
def namespace(dev_nodes: Nodes, dev_cluster: ControlPlane) -> Iterator[str]:
    cp = dev_cluster
    assert cp.call("POST", "/api/v1/namespaces", {"metadata": {"name": NS}})[0] in (201, 409)
    wait_for_default_service_account(cp, [NS])
    yield NS
    cp.call("DELETE", f"/api/v1/namespaces/{NS}")
    wait("namespace gone", lambda: cp.call("GET", f"/api/v1/namespaces/{NS}")[0] == 404, [], timeout=120)


def test_a_reboot_event_cordons_drains_within_budgets_and_is_acknowledged(
    dev_cluster: ControlPlane, dev_nodes: Nodes, namespace: str, tmp_path: Path
) -> None:
    cp = dev_cluster
    me, other = dev_nodes.pools["system"][-1], dev_nodes.pools["system"][-2]
    vm_name = f"{me.scale_set}_{me.instance}"
    annotation = f"{dev_nodes.prep.bootstrap.label_domain}/{DRAINED_FOR}"
    # The workload: a free pod, a pod a PodDisruptionBudget protects, a DaemonSet's pod, and a pod elsewhere.
    for body in (bare_pod("free", me.name, "free"), bare_pod("guarded", me.name, "guarded")):
        place(cp, body)
    place(cp, bare_pod("elsewhere", other.name, "free"))
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "guarded", "namespace": NS},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
    }
    assert cp.call("POST", f"/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets", pdb)[0] == 201
    ds = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "node-agent", "namespace": NS},
        "spec": {
            "selector": {"matchLabels": {"app": "node-agent"}},
            "template": {
                "metadata": {"labels": {"app": "node-agent"}},
                "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": me.name},
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "c", "image": "registry.example.com/agent"}],
                },
            },
        },
    }
    assert cp.call("POST", f"/apis/apps/v1/namespaces/{NS}/daemonsets", ds)[0] == 201

    def names() -> set[str]:
        return {p["metadata"]["name"] for p in pods_of(cp, NS, "") if not p["metadata"].get("deletionTimestamp")}

    def ready(name: str) -> bool:
        pods = [p for p in pods_of(cp, NS, "") if p["metadata"]["name"].startswith(name)]
        conds = [c for p in pods for c in p.get("status", {}).get("conditions") or []]
        return bool(pods) and any(c["type"] == "Ready" and c["status"] == "True" for c in conds)

    for name in ("free", "guarded", "node-agent-"):
        wait(f"{name} Running on kwok", lambda n=name: ready(n), [], timeout=90)
    wait(
        "the disruption controller to count the budget",
        lambda: (
            cp.get(f"/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets/guarded")
            .get("status", {})
            .get("currentHealthy")
            == 1
        ),
        [],
        timeout=90,
    )
    (ds_pod,) = [n for n in names() if n.startswith("node-agent-")]

    ca = tmp_path / "ca.crt"
    ca.write_text(cp.pems[f"cert:{pki.KUBERNETES_CA}"])
    credential = node_credential(cp, me.name, tmp_path / "kubelet-client-current.pem")
    fake = Imds(vm_name)
    log = tmp_path / "agent.log"
    with serve(fake.handle) as url, log.open("w") as out:
        argv = [*agent_argv(cp, dev_nodes, url, me.name, credential, ca), "--poll", "0.2", "--evict-every", "1"]
        agent = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        try:
            # Another VM's event: this node does nothing.
            fake.events = [scheduled("Reboot", ["system-00_9"], "OTHER-VM")]
            fake.polls_after(10)
            node = cp.get(f"/api/v1/nodes/{me.name}")
            assert not node["spec"].get("unschedulable") and names() >= {"free", "guarded", ds_pod, "elsewhere"}
            assert fake.started == []

            # A Reboot of this VM: cordoned, the free pod evicted, the guarded one kept while its budget forbids.
            fake.events = [scheduled("Reboot", [vm_name], "EVT-REBOOT")]
            wait("cordon", lambda: bool(cp.get(f"/api/v1/nodes/{me.name}")["spec"].get("unschedulable")), [])
            wait("free pod evicted", lambda: "free" not in names(), [], timeout=60)
            fake.polls_after(15)  # three eviction rounds (every 1 s at 0.2 s polls)
            assert "guarded" in names() and ds_pod in names() and "elsewhere" in names()
            assert fake.started == [], "not acknowledged while a pod is left"
            assert log.read_text().count("refused for now (a PodDisruptionBudget)") >= 2, log.read_text()
            node = cp.get(f"/api/v1/nodes/{me.name}")
            assert node["metadata"]["annotations"][annotation] == "EVT-REBOOT"

            # The budget allows it now: the agent's next try evicts it, and only then acknowledges.
            assert cp.call("DELETE", f"/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets/guarded")[0] == 200
            # Bounded, not timed: on a loaded machine the eviction and kwok's removal of the pod took over 60 s (CI).
            wait("acknowledged", lambda: bool(fake.started), [], timeout=180)
            assert fake.started == [{"StartRequests": [{"EventId": "EVT-REBOOT"}]}]
            assert "guarded" not in names() and ds_pod in names() and "elsewhere" in names()

            # The event is over (the VM rebooted): the agent lifts its own cordon.
            fake.events = []
            wait("uncordon", lambda: not cp.get(f"/api/v1/nodes/{me.name}")["spec"].get("unschedulable"), [])
            assert annotation not in (cp.get(f"/api/v1/nodes/{me.name}")["metadata"].get("annotations") or {})
            assert len(fake.started) == 1
            assert agent.poll() is None, log.read_text()
        finally:
            agent.terminate()
            agent.wait(timeout=10)
            cp.call_patch(f"/api/v1/nodes/{me.name}", {"spec": {"unschedulable": False}})

    # The credential is the node's and no more: NodeRestriction refuses it another node's pod.
    kube = se.Kube(cp.url, str(ca), str(credential))
    (theirs,) = [p for p in pods_of(cp, NS, "app=free") if p["metadata"]["name"] == "elsewhere"]
    code, message = kube.evict(theirs)
    assert code == 403 and "can only evict pods with spec.nodeName set to itself" in message, (code, message)
    code, _ = kube.call(
        "PATCH", f"/api/v1/nodes/{other.name}", {"spec": {"unschedulable": True}}, "application/merge-patch+json"
    )
    assert code == 403


# ---- The agent's decisions, one poll at a time, against the real API server -----------------------------
# The agent runs in-process here (its ``step``, with the clock and NotBefore's "now" in the test's hands) with
# the node's own credential; only IMDS is the loopback stand-in. The Node, its pods, their evictions and the
# PodDisruptionBudget are the real API server's (kwok keeps the node Ready; no kubelet runs here).

CASES = "drain-cases"


class CountingKube(se.Kube):
    """The agent's own client, counting the evictions it asks the real API server for."""

    def __init__(self, server: str, ca: str, credential: str) -> None:
        super().__init__(server, ca, credential)
        self.evictions: list[str] = []

    def evict(self, pod: dict[str, Any]) -> tuple[int, str]:
        self.evictions.append(se.pod_key(pod))
        return super().evict(pod)


@dataclass
class Case:
    cp: ControlPlane
    node: str
    vm_name: str
    annotation: str
    kube: CountingKube
    imds: Imds
    client: se.Imds
    clock: list[float]

    def agent(self) -> se.Agent:
        return se.Agent(
            self.client,
            self.kube,
            self.node,
            self.vm_name,
            self.annotation,
            now=lambda: NOW,
            clock=lambda: self.clock[0],
            evict_every=5,
        )

    def pod(self, name: str, app: str = "job") -> None:
        body = bare_pod(name, self.node, app)
        body["metadata"]["namespace"] = CASES
        place(self.cp, body)

    def names(self) -> set[str]:
        """This test's pods left on the node (the node agents of dev's add-ons run there too)."""
        pods = [p for p in self.kube.pods_on(self.node) if p["metadata"]["namespace"] == CASES]
        return {p["metadata"]["name"] for p in pods if not p["metadata"].get("deletionTimestamp")}

    def spec(self) -> dict[str, Any]:
        return dict(self.cp.get(f"/api/v1/nodes/{self.node}")["spec"])

    def annotations(self) -> dict[str, str]:
        return dict(self.cp.get(f"/api/v1/nodes/{self.node}")["metadata"].get("annotations") or {})

    def until_acknowledged(self, agent: se.Agent) -> None:
        """Poll (the clock stands still) until the evicted pods are gone and the agent has acknowledged."""

        def polled() -> bool:
            agent.step()
            return bool(self.imds.started)

        wait("acknowledged", polled, [], timeout=60)


@pytest.fixture(scope="module")
def cases_namespace(dev_nodes: Nodes, dev_cluster: ControlPlane) -> Iterator[str]:
    cp = dev_cluster
    assert cp.call("POST", "/api/v1/namespaces", {"metadata": {"name": CASES}})[0] in (201, 409)
    wait_for_default_service_account(cp, [CASES])
    yield CASES
    cp.call("DELETE", f"/api/v1/namespaces/{CASES}")


@pytest.fixture
def case(dev_cluster: ControlPlane, dev_nodes: Nodes, cases_namespace: str, tmp_path: Path) -> Iterator[Case]:
    cp = dev_cluster
    # A GPU node: dev's Deployments run on the system nodes, and the agent would evict them too.
    me = next(n for n in dev_nodes.all if n.pool != "system")
    ca = tmp_path / "ca.crt"
    ca.write_text(cp.pems[f"cert:{pki.KUBERNETES_CA}"])
    credential = node_credential(cp, me.name, tmp_path / "kubelet-client-current.pem")
    fake = Imds(f"{me.scale_set}_{me.instance}")
    with serve(fake.handle) as url:
        yield Case(
            cp,
            me.name,
            fake.vm_name,
            f"{dev_nodes.prep.bootstrap.label_domain}/{DRAINED_FOR}",
            CountingKube(cp.url, str(ca), str(credential)),
            fake,
            se.Imds(url),
            [0.0],
        )
    cp.call("DELETE", f"/api/v1/namespaces/{CASES}/pods?fieldSelector=spec.nodeName%3D{me.name}")
    cp.call("DELETE", f"/apis/policy/v1/namespaces/{CASES}/poddisruptionbudgets")
    mine = {"metadata": {"annotations": {f"{dev_nodes.prep.bootstrap.label_domain}/{DRAINED_FOR}": None}}}
    cp.call_patch(f"/api/v1/nodes/{me.name}", {**mine, "spec": {"unschedulable": False}})
    wait("the node's pods gone", lambda: not [p for p in pods_of(cp, CASES, "")], [], timeout=60)


def test_a_mirror_pod_stays_like_a_daemonset_pod_and_the_event_is_acknowledged_once(case: Case) -> None:
    case.pod("job-0")
    # A static pod's mirror, created as the kubelet creates it: by the node itself, owned by its Node.
    node = case.cp.get(f"/api/v1/nodes/{case.node}")
    mirror = bare_pod("static-agent", case.node, "static")
    mirror["metadata"]["namespace"] = CASES
    mirror["metadata"]["annotations"] = {se.MIRROR: "hash"}
    mirror["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Node", "name": case.node, "uid": node["metadata"]["uid"], "controller": True}
    ]
    code, body = case.kube.call("POST", f"/api/v1/namespaces/{CASES}/pods", mirror)
    assert code == 201, body
    case.imds.events = [event_at("Reboot", case.vm_name)]
    agent = case.agent()
    agent.step()
    assert case.spec()["unschedulable"] is True and case.annotations()[case.annotation] == "EVT-1"
    assert case.kube.evictions == [f"{CASES}/job-0"] and case.imds.started == []
    case.until_acknowledged(agent)
    assert case.names() == {"static-agent"}
    agent.step()
    assert case.imds.started == [{"StartRequests": [{"EventId": "EVT-1"}]}], "acknowledged once"
    case.imds.events = []  # the reboot is over
    agent.step()
    assert not case.spec().get("unschedulable") and case.annotation not in case.annotations()


def test_a_budget_that_forbids_the_eviction_is_retried_every_5s_and_holds_the_acknowledgement(case: Case) -> None:
    case.pod("guarded", app="guarded")
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "guarded", "namespace": CASES},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
    }
    assert case.cp.call("POST", f"/apis/policy/v1/namespaces/{CASES}/poddisruptionbudgets", pdb)[0] == 201
    path = f"/apis/policy/v1/namespaces/{CASES}/poddisruptionbudgets/guarded"
    wait("the budget counted", lambda: case.cp.get(path).get("status", {}).get("currentHealthy") == 1, [], timeout=90)
    case.imds.events = [event_at("Terminate", case.vm_name)]
    agent = case.agent()
    for t in (0.0, 1.0, 2.0, 4.9):
        case.clock[0] = t
        agent.step()
    assert case.kube.evictions == [f"{CASES}/guarded"], "one try per 5 s"
    case.clock[0] = 5.0
    agent.step()
    assert case.kube.evictions == [f"{CASES}/guarded"] * 2 and case.names() == {"guarded"}
    assert case.imds.started == []
    assert case.cp.call("DELETE", path)[0] == 200
    case.clock[0] = 10.0
    case.until_acknowledged(agent)
    assert case.imds.started == [{"StartRequests": [{"EventId": "EVT-1"}]}] and case.names() == set()


def test_other_vms_events_freeze_and_started_events_change_nothing(case: Case) -> None:
    case.pod("job-0")
    case.imds.events = [
        event_at("Reboot", "other-00_99", event_id="OTHER"),
        event_at("Freeze", case.vm_name, event_id="FREEZE"),
        event_at("Redeploy", case.vm_name, event_id="STARTED", status="Started"),
    ]
    agent = case.agent()
    agent.step()
    agent.step()
    assert case.kube.evictions == [] and not case.spec().get("unschedulable") and case.names() == {"job-0"}
    assert case.imds.started == []


def test_an_event_naming_other_vms_too_is_drained_for_but_not_acknowledged(case: Case) -> None:
    case.pod("job-0")
    case.imds.events = [event_at("Reboot", case.vm_name, "other-00_99")]
    agent = case.agent()
    wait("drained", lambda: (agent.step(), case.names() == set())[1], [], timeout=60)
    for _ in range(3):
        agent.step()
    assert case.kube.evictions == [f"{CASES}/job-0"] and case.spec()["unschedulable"] is True
    assert case.imds.started == [], "acknowledging would let Azure start on other-00_99 too"


def test_past_not_before_the_agent_stops_draining(case: Case) -> None:
    case.pod("job-0")
    case.imds.events = [event_at("Reboot", case.vm_name, minutes=-1)]
    case.agent().step()
    assert case.kube.evictions == [] and case.imds.started == [] and not case.spec().get("unschedulable")


def test_a_cordon_not_ours_is_left_after_the_event(case: Case) -> None:
    # Cordoned by a person, or the XID remediation, before the event.
    case.cp.call_patch(f"/api/v1/nodes/{case.node}", {"spec": {"unschedulable": True}})
    case.imds.events = [event_at("Reboot", case.vm_name)]
    agent = case.agent()
    agent.step()
    assert case.imds.started == [{"StartRequests": [{"EventId": "EVT-1"}]}]
    assert case.annotation not in case.annotations()
    case.imds.events = []
    agent.step()
    assert case.spec()["unschedulable"] is True
