"""The preflight reporter, the re-test job and the XID remediation against fake API, IMDS and ARM servers on loopback."""

from __future__ import annotations

import datetime
import json
import threading
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from modules.cluster.objects import remediation
from modules.cluster.scripts import preflight_report, remediate_xid, retest_idle
from modules.cluster.scripts.kube import Api
from modules.cluster.spec import AddonsSpec

from .fake_azure import CLIENT_ID, GROUP, NOW, SUB, FakeAzure

KEY, POOL = "gpu.example.com/preflight", "gpu.example.com/pool"
GPU = "gpu.example.com/accelerator=nvidia"
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
    def __init__(
        self,
        nodes: list[dict[str, Any]],
        pods: list[dict[str, Any]],
        configmaps: dict[str, dict[str, Any]] | None = None,
    ) -> None:
        self.nodes = {n["metadata"]["name"]: n for n in nodes}
        self.pods = pods
        self.configmaps = configmaps or {}
        self.patches: list[str] = []
        self.deleted: list[str] = []
        self.bind_on_patch: dict[str, Any] | None = None
        self.change_on_patch: dict[str, Any] | None = None

    def handle(self, method: str, path: str, query: dict[str, list[str]], body: Any) -> tuple[int, Any]:
        if path == "/api/v1/nodes":
            sel = query.get("labelSelector", [""])[0]
            return 200, {"items": [n for n in self.nodes.values() if matches(n["metadata"].get("labels", {}), sel)]}
        if "/configmaps/" in path:
            if method != "GET" or path not in self.configmaps:
                return 404, {"reason": "NotFound"}
            return 200, self.configmaps[path]
        if path == "/api/v1/pods":
            field = query.get("fieldSelector", [""])[0]
            pods = self.pods
            if field.startswith("spec.nodeName="):
                pods = [p for p in pods if p["spec"].get("nodeName") == field.split("=", 1)[1]]
            return 200, {"items": pods}
        name = path.rsplit("/", 1)[1]
        if name not in self.nodes:
            return 404, {"reason": "NotFound"}
        node = self.nodes[name]
        if method == "GET":
            return 200, node
        if method == "DELETE":
            del self.nodes[name]
            self.deleted.append(name)
            return 200, {"status": "Success"}
        if self.change_on_patch is not None:  # someone else writes the node first: the patch is stale
            self.nodes[name] = node = merge(node, self.change_on_patch)
            node["metadata"]["resourceVersion"] = str(int(node["metadata"]["resourceVersion"]) + 1)
            self.change_on_patch = None
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


def matches(labels: dict[str, str], selector: str) -> bool:
    """Equality-based label selector, as the API server evaluates ``labelSelector``."""
    for term in filter(None, selector.split(",")):
        key, eq, value = term.partition("=")
        if key not in labels or (eq and labels[key] != value):
            return False
    return True


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

            do_GET = do_PATCH = do_DELETE = _do

            def log_message(self, *args: Any) -> None:
                pass

        server = HTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(server)
        return Api(f"http://127.0.0.1:{server.server_port}", "t", None)

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def node(name: str, *, labels: dict[str, str] | None = None, taints: list[Any] | None = None, **extra: Any) -> Any:
    base = {POOL: "h100", "gpu.example.com/accelerator": "nvidia"}
    meta = {"name": name, "resourceVersion": "1", "labels": {**base, **(labels or {})}, **extra}
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
    system = node("system-0", **old)
    system["metadata"]["labels"] = {POOL: "system"}  # a CPU node: never sent to GPU diagnostics
    nodes.append(system)
    fake = FakeApi(nodes, [gpu_pod("busy"), gpu_pod("balloon-only", "balloon")])
    sent = retest_idle.run(serve(fake), selector=GPU, key=KEY, limit=3)
    assert sent == ["old", "balloon-only"]
    assert fake.nodes["old"]["metadata"]["labels"][KEY] == "pending"
    assert TAINT in fake.nodes["old"]["spec"]["taints"]
    assert KEY not in fake.nodes["busy"]["metadata"]["labels"]
    assert KEY not in fake.nodes["system-0"]["metadata"]["labels"]
    # Never tested sorts first; the system node never shows up, whatever its history.
    assert retest_idle.idle_nodes(nodes, [], selector=GPU, key=KEY, limit=9) == ["busy", "old", "balloon-only"]


def agent_pod(on: str) -> dict[str, Any]:
    owner = {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "dcgm-exporter", "controller": True}
    return {
        "metadata": {"name": f"dcgm-exporter-{on}", "ownerReferences": [owner]},
        "spec": {"nodeName": on, "containers": [{"resources": {}}]},
        "status": {"phase": "Running"},
    }


def mirror_pod(on: str) -> dict[str, Any]:
    """kube-proxy, a static pod on every pool node: its API copy is owned by the Node and annotated."""
    owner = {"apiVersion": "v1", "kind": "Node", "name": on, "controller": True}
    return {
        "metadata": {
            "name": f"kube-proxy-{on}",
            "annotations": {"kubernetes.io/config.mirror": "0f1e2d3c"},
            "ownerReferences": [owner],
        },
        "spec": {"nodeName": on, "containers": [{"resources": {}}]},
        "status": {"phase": "Running"},
    }


def cpu_pod(on: str, phase: str = "Running") -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"web-{on}",
            "ownerReferences": [{"kind": "ReplicaSet", "name": "web", "controller": True}],
        },
        "spec": {"nodeName": on, "containers": [{"resources": {"requests": {"cpu": "1"}}}]},
        "status": {"phase": phase},
    }


@pytest.mark.parametrize(
    ("pods", "busy"),
    [
        ([gpu_pod("n1")], {"n1"}),
        ([gpu_pod("n1", "balloon")], set()),
        ([agent_pod("n1")], set()),
        ([mirror_pod("n1")], set()),
        # A pod that asks for no GPU keeps the node too: on a node it fills, the preflight pod finds no slot.
        ([cpu_pod("n1")], {"n1"}),
        ([cpu_pod("n1", "Succeeded")], set()),
        ([agent_pod("n1"), cpu_pod("n2"), gpu_pod("n3", "balloon")], {"n2"}),
    ],
    ids=["gpu-job", "balloon", "node-agent", "static-pod", "cpu-pod", "finished", "mixed"],
)
def test_a_node_is_idle_with_only_its_agents_and_balloons(pods: list[dict[str, Any]], busy: set[str]) -> None:
    assert retest_idle.busy_nodes(pods) == busy


def test_retest_backs_off_when_a_job_lands_meanwhile(serve: Any) -> None:
    fake = FakeApi([node("n1", taints=[TEAM_TAINT])], [])
    fake.bind_on_patch = gpu_pod("n1")
    assert retest_idle.run(serve(fake), selector=GPU, key=KEY, limit=1) == []
    assert KEY not in fake.nodes["n1"]["metadata"]["labels"]
    assert fake.nodes["n1"]["spec"]["taints"] == [TEAM_TAINT]


RULE_PATH = "/api/v1/namespaces/gpu-health/configmaps/gpu-remediation"
XID_TAINT = "gpu.example.com/gpu-fatal-xid"


def rule_configmaps(spec: AddonsSpec) -> dict[str, dict[str, Any]]:
    """The ConfigMap exactly as the add-ons stack creates it."""
    return {RULE_PATH: remediation.rule_configmap(spec)}


def xid(n: dict[str, Any], status: str = "True") -> dict[str, Any]:
    n["status"] = {
        "conditions": [
            {"type": "Ready", "status": "True"},
            {"type": "GPUFatalXid", "status": status, "reason": "FatalXid", "message": "NVRM: Xid 79 fallen off"},
        ]
    }
    return n


def test_remediation_fences_nodes_with_a_fatal_xid(serve: Any, dev_spec: AddonsSpec) -> None:
    system = xid(node("system-0"))
    system["metadata"]["labels"] = {POOL: "system"}
    nodes = [xid(node("bad", taints=[TEAM_TAINT])), xid(node("fine"), "False"), node("quiet")] + [
        node(f"n{i}") for i in range(7)
    ]
    fake = FakeApi([*nodes, system], [], rule_configmaps(dev_spec))
    api = serve(fake)
    rule = remediate_xid.load_rule(api, "gpu-health", "gpu-remediation")
    assert rule["condition"] == "GPUFatalXid" and rule["node_selector"] == GPU
    assert remediate_xid.run(api, rule) == (["bad"], [])
    bad = fake.nodes["bad"]
    assert bad["spec"]["unschedulable"] is True
    (taint,) = [t for t in bad["spec"]["taints"] if t["key"] == XID_TAINT]
    assert (taint["value"], taint["effect"]) == ("true", "NoExecute")
    assert TEAM_TAINT in bad["spec"]["taints"]
    assert bad["metadata"]["annotations"][f"{XID_TAINT}-message"] == "NVRM: Xid 79 fallen off"
    for untouched in ("fine", "quiet", "system-0"):
        assert "unschedulable" not in fake.nodes[untouched]["spec"], untouched
    # Idempotent: the next minute's run finds it fenced and writes nothing.
    fake.patches.clear()
    assert remediate_xid.run(api, rule) == ([], [])
    assert fake.patches == []


def test_remediation_stops_at_the_cap(serve: Any, dev_spec: AddonsSpec) -> None:
    # 10 GPU nodes, 10% cap = 1 node; one is fenced already, so two new failures are held back.
    nodes = [xid(node("a")), xid(node("b")), xid(node("old", taints=[{"key": XID_TAINT, "effect": "NoExecute"}]))]
    nodes[2]["spec"]["unschedulable"] = True
    fake = FakeApi(nodes + [node(f"n{i}") for i in range(7)], [], rule_configmaps(dev_spec))
    api = serve(fake)
    rule = remediate_xid.load_rule(api, "gpu-health", "gpu-remediation")
    assert remediate_xid.run(api, rule) == ([], ["a", "b"])
    assert fake.patches == []


def test_remediation_finishes_a_half_fenced_node_within_the_cap(serve: Any, dev_spec: AddonsSpec) -> None:
    # Someone uncordoned a tainted node whose XID persists: it is cordoned again without new budget.
    half = xid(node("half", taints=[{"key": XID_TAINT, "value": "true", "effect": "NoExecute"}]))
    fake = FakeApi([half] + [node(f"n{i}") for i in range(9)], [], rule_configmaps(dev_spec))
    api = serve(fake)
    assert remediate_xid.run(api, remediate_xid.load_rule(api, "gpu-health", "gpu-remediation")) == (["half"], [])
    assert fake.nodes["half"]["spec"]["unschedulable"] is True
    assert [t["key"] for t in fake.nodes["half"]["spec"]["taints"]] == [XID_TAINT]


def test_remediation_rereads_a_node_that_changed(serve: Any, dev_spec: AddonsSpec) -> None:
    fake = FakeApi([xid(node("bad"))], [], rule_configmaps(dev_spec))
    fake.change_on_patch = {"spec": {"taints": [TEAM_TAINT]}}  # e.g. a label controller got there first
    api = serve(fake)
    assert remediate_xid.run(api, remediate_xid.load_rule(api, "gpu-health", "gpu-remediation")) == (["bad"], [])
    taints = fake.nodes["bad"]["spec"]["taints"]
    assert TEAM_TAINT in taints and any(t["key"] == XID_TAINT for t in taints)


# --- VM replacement after the grace period, against loopback IMDS + ARM speaking the documented calls ---


def provider_id(vmss: str, instance: str) -> str:
    return (
        f"azure:///subscriptions/{SUB}/resourceGroups/{GROUP}/providers/Microsoft.Compute/"
        f"virtualMachineScaleSets/{vmss}/virtualMachines/{instance}"
    )


def fenced_node(name: str, minutes_ago: int, vmss: str = "h100-0", instance: str = "3", **annotations: str) -> Any:
    n = xid(node(name, taints=[{"key": XID_TAINT, "value": "true", "effect": "NoExecute"}]))
    since = (NOW - datetime.timedelta(minutes=minutes_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")
    n["metadata"]["annotations"] = {f"{XID_TAINT}-since": since, **annotations}
    n["spec"]["unschedulable"] = True
    n["spec"]["providerID"] = provider_id(vmss, instance)
    return n


def wired_rule(serve: Any, spec: AddonsSpec, nodes: list[Any]) -> tuple[FakeApi, Any, dict[str, Any]]:
    spec = replace(spec, cloud=replace(spec.cloud, remediation_client_id=CLIENT_ID))
    fake = FakeApi(nodes, [], rule_configmaps(spec))
    api = serve(fake)
    return fake, api, remediate_xid.load_rule(api, "gpu-health", "gpu-remediation")


def test_replace_after_minutes_really_replaces_the_vm(serve: Any, azure: Any, dev_spec: AddonsSpec) -> None:
    grace = dev_spec.health.replace_after_minutes
    nodes = [fenced_node("bad", grace + 1), fenced_node("recent", grace - 1, instance="5")]
    fake, api, rule = wired_rule(serve, dev_spec, nodes + [node(f"n{i}") for i in range(8)])
    cloud = FakeAzure({"h100-0": 4}, {"h100-0": {"0", "1", "3", "5"}})
    arm = azure(cloud)
    result = remediate_xid.replace(api, arm, rule, NOW)
    assert (result.replaced, result.pending, result.held, result.failed) == (["bad"], [], [], [])
    # The managed identity named in the rule, for ARM.
    assert cloud.token_requests == [
        {"api-version": ["2018-02-01"], "resource": [f"{cloud.base}/"], "client_id": [CLIENT_ID]}
    ]
    writes = [(m, p.rsplit("/", 1)[-1], b) for m, p, b in cloud.calls if m in ("POST", "PATCH")]
    assert writes == [
        ("POST", "delete", {"instanceIds": ["3"]}),  # Delete Instances
        ("PATCH", "h100-0", {"sku": {"name": "Standard_ND96isr_H100_v5", "tier": "Standard", "capacity": 4}}),
    ]
    # The set is back at its capacity without the dead VM: the fresh one boots into preflight.
    assert cloud.capacity == {"h100-0": 4} and cloud.instances == {"h100-0": {"0", "1", "5"}}
    assert fake.deleted == ["bad"] and "recent" in fake.nodes
    assert "unschedulable" in fake.nodes["recent"]["spec"]  # still fenced, waiting for its grace period


def test_replacements_per_run_are_capped(serve: Any, azure: Any, dev_spec: AddonsSpec) -> None:
    nodes = [fenced_node(f"bad{i}", 60, instance=str(i)) for i in range(3)]
    fake, api, rule = wired_rule(serve, dev_spec, nodes + [node(f"n{i}") for i in range(27)])
    cloud = FakeAzure({"h100-0": 30}, {"h100-0": {str(i) for i in range(30)}})
    result = remediate_xid.replace(api, azure(cloud), rule, NOW)
    assert (result.replaced, result.held) == (["bad0"], ["bad1", "bad2"])
    assert fake.deleted == ["bad0"] and cloud.capacity == {"h100-0": 30}


def test_a_cleared_xid_or_an_unfenced_node_is_not_replaced(serve: Any, azure: Any, dev_spec: AddonsSpec) -> None:
    cleared = fenced_node("cleared", 60)
    cleared["status"]["conditions"][1]["status"] = "False"
    uncordoned = fenced_node("uncordoned", 60, instance="4")
    del uncordoned["spec"]["unschedulable"]
    fake, api, rule = wired_rule(serve, dev_spec, [cleared, uncordoned])
    cloud = FakeAzure({"h100-0": 4}, {"h100-0": {"3", "4"}})
    assert remediate_xid.replace(api, azure(cloud), rule, NOW).replaced == []
    assert cloud.calls == [] and fake.deleted == []


def test_a_slow_delete_is_finished_by_a_later_run(serve: Any, azure: Any, dev_spec: AddonsSpec) -> None:
    fake, api, rule = wired_rule(serve, dev_spec, [fenced_node("bad", 60)])
    cloud = FakeAzure({"h100-0": 4}, {"h100-0": {"0", "3"}}, polls=10**9)
    first = remediate_xid.replace(api, azure(cloud, poll_timeout=0.05), rule, NOW)
    assert first.pending == ["bad"] and fake.deleted == []
    # The capacity to restore was written on the node before anything changed.
    assert fake.nodes["bad"]["metadata"]["annotations"][f"{XID_TAINT}-capacity"] == "4"
    # Next minute: Azure still deleting (provisioningState Deleting): no second delete, still pending.
    posts = sum(1 for m, _, _ in cloud.calls if m == "POST")
    assert remediate_xid.replace(api, azure(cloud, poll_timeout=0.05), rule, NOW).pending == ["bad"]
    assert sum(1 for m, _, _ in cloud.calls if m == "POST") == posts == 1
    # Azure finishes (capacity down to 3); the next run restores 4 and deletes the Node.
    cloud.finish()
    cloud.polls = 1
    assert cloud.capacity == {"h100-0": 3}
    assert remediate_xid.replace(api, azure(cloud), rule, NOW).replaced == ["bad"]
    assert cloud.capacity == {"h100-0": 4} and fake.deleted == ["bad"]


def test_a_run_that_died_after_the_delete_restores_the_capacity(serve: Any, azure: Any, dev_spec: AddonsSpec) -> None:
    n = fenced_node("bad", 60, **{f"{XID_TAINT}-capacity": "4"})
    fake, api, rule = wired_rule(serve, dev_spec, [n])
    cloud = FakeAzure({"h100-0": 3}, {"h100-0": {"0", "1", "2"}})  # instance 3 already gone
    assert remediate_xid.replace(api, azure(cloud), rule, NOW).replaced == ["bad"]
    assert [m for m, _, _ in cloud.calls if m in ("POST", "PATCH")] == ["PATCH"]
    assert cloud.capacity == {"h100-0": 4} and fake.deleted == ["bad"]


def test_a_node_without_a_scale_set_provider_id_is_reported(serve: Any, azure: Any, dev_spec: AddonsSpec) -> None:
    n = fenced_node("bad", 60)
    n["spec"]["providerID"] = "rke2://bad"
    fake, api, rule = wired_rule(serve, dev_spec, [n])
    result = remediate_xid.replace(api, azure(FakeAzure({}, {})), rule, NOW)
    assert result.failed == [
        "bad: providerID 'rke2://bad' names no scale-set VM (cloud-node-manager sets it): replace the VM by hand"
    ]
    assert fake.deleted == []


@pytest.mark.parametrize(
    ("provider", "parsed"),
    [
        (provider_id("h100-0", "3"), (SUB, GROUP, "h100-0", "3")),
        # Azure may spell resourcegroups in lower case (cloud-provider-azure parses it case-insensitively).
        (provider_id("h100-0", "12").replace("resourceGroups", "resourcegroups"), (SUB, GROUP, "h100-0", "12")),
        ("azure:///subscriptions/s/resourceGroups/g/providers/Microsoft.Compute/virtualMachines/vm1", None),
        ("", None),
    ],
)
def test_provider_id_names_the_scale_set_instance(provider: str, parsed: Any) -> None:
    from modules.cluster.scripts.azure import instance_of

    vm = instance_of(provider)
    assert (vm and (vm.subscription, vm.group, vm.vmss, vm.instance)) == parsed


def test_every_arm_call_is_one_the_remediation_role_grants_on_the_scale_set(
    serve: Any, azure: Any, dev_spec: AddonsSpec
) -> None:
    """Issue 20, item 5: the role (assigned on each GPU scale set) did not let the job read its own long-running
    operations (a subscription-scope URL). Every call of a replacement is now a row of ARM_CALLS, below the set."""
    import re

    from modules.azure.identities import REPLACER_ACTIONS
    from modules.cluster.scripts.azure import ARM_CALLS, instance_of

    _, api, rule = wired_rule(serve, dev_spec, [fenced_node("bad", 60)] + [node(f"n{i}") for i in range(8)])
    cloud = FakeAzure({"h100-0": 4}, {"h100-0": {"0", "3", "4", "5"}}, polls=2)
    arm = azure(cloud)
    assert remediate_xid.replace(api, arm, rule, NOW).replaced == ["bad"]
    # The pool roll's calls, through the same identity (scripts/roll_pool.py): which instances are behind
    # (three, over two pages of List VMs), Update Instances on one, and its state.
    cloud.outdated = {"h100-0": {"0", "4", "5"}}
    vm = instance_of(provider_id("h100-0", "4"))
    assert vm is not None and arm.outdated(vm) == {"0", "4", "5"}
    arm.update_instance(vm)
    assert (arm.instance(vm) or {}).get("provisioningState") == "Updating"
    cloud.finish()
    assert (arm.instance(vm) or {}).get("latestModelApplied") is True and arm.outdated(vm) == {"0", "5"}
    arm.reimage_instance(vm)
    assert cloud.reimaged == [("h100-0", "4")]
    scale_set = (
        f"/subscriptions/{SUB}/resourceGroups/{GROUP}/providers/Microsoft.Compute/virtualMachineScaleSets/h100-0"
    )
    patterns = [
        (c.method, re.compile("^" + re.escape(c.path).replace(re.escape("{instance}"), "[0-9]+") + "$"), c.action)
        for c in ARM_CALLS
    ]
    used = set()
    for method, path, _ in cloud.calls:
        assert path == scale_set or path.startswith(scale_set + "/"), path
        below = path[len(scale_set) :].lstrip("/")
        (action,) = [a for m, p, a in patterns if m == method and p.match(below)]
        used.add(action)
    assert set(REPLACER_ACTIONS) == {c.action for c in ARM_CALLS} == used
