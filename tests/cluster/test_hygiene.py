"""Pure tier: workload hygiene (probes, requests and limits) and what the NetworkPolicies let through.

NetworkPolicy semantics are evaluated by a small model of the API's documented rules (a pod selected by a
policy of a direction is isolated in it; rules are ORed; an empty peer or port list matches all;
``ipBlock`` with ``except``); no engine enforces policies offline.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, replace
from typing import Any

import pytest

from modules.cluster.manifests import render_manifests
from modules.cluster.objects.common import BALLOON_NS, GANG_NS, HEALTH_NS
from modules.cluster.spec import AddonsSpec, NetworkSpec

# Long-running containers whose program serves no HTTP endpoint to probe.
NO_ENDPOINT = {
    "nvidia-device-plugin": "gRPC on a kubelet unix socket only",
    "rdma-shared-device-plugin": "gRPC on a kubelet unix socket only",
    "report": "reports once, then sleeps until the DaemonSet lets go of the node",
    "pause": "the pause container serves nothing",
    # A hung watch cannot outlive its server-side timeout plus the socket timeout; then it lists again.
    "approve": "the kubelet serving CSR approver only lists and watches the API server",
}


def _workloads(spec: AddonsSpec) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return [
        (o, o["spec"]["template"]["spec"])
        for o in render_manifests(spec)
        if o["kind"] in ("Deployment", "DaemonSet", "StatefulSet")
    ]


def test_every_long_running_container_has_probes_where_it_serves_one(prod_spec: AddonsSpec) -> None:
    for obj, pod in _workloads(prod_spec):
        for c in pod["containers"]:
            if c["name"] in NO_ENDPOINT:
                assert "livenessProbe" not in c, c["name"]  # keep the list honest
                continue
            for probe in ("livenessProbe", "readinessProbe"):
                assert probe in c, f"{obj['metadata']['name']}/{c['name']} has no {probe}"
                http = c[probe]["httpGet"]
                # A loopback-only health port is reachable by the kubelet only from the host's network.
                assert http.get("host") != "127.0.0.1" or pod.get("hostNetwork"), (c["name"], http)


def test_every_container_has_requests_and_limits_everywhere(prod_spec: AddonsSpec) -> None:
    for obj in render_manifests(prod_spec):
        s = obj.get("spec", {})
        template = s.get("template") or s.get("jobTemplate", {}).get("spec", {}).get("template")
        if not template:
            continue
        for c in template["spec"].get("initContainers", []) + template["spec"]["containers"]:
            r = c["resources"]
            assert {"cpu", "memory"} <= set(r["requests"]) and {"cpu", "memory"} <= set(r["limits"]), c["name"]
            assert r["limits"]["memory"] == r["requests"]["memory"], c["name"]  # no memory overcommit


# --- NetworkPolicies -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pod:
    namespace: str
    labels: dict[str, str]
    ip: str


Peer = Pod | str  # a pod, or an address outside the pod network


def _ip_in(block: dict[str, Any], ip: str) -> bool:
    addr = ipaddress.ip_address(ip)
    if addr not in ipaddress.ip_network(block["cidr"]):
        return False
    return not any(addr in ipaddress.ip_network(e) for e in block.get("except", []))


def _labels_match(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    assert set(selector) <= {"matchLabels"}, selector  # the subset these policies use
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def _peer_match(peer: dict[str, Any], other: Peer, own_ns: str) -> bool:
    if "ipBlock" in peer:
        return _ip_in(peer["ipBlock"], other.ip if isinstance(other, Pod) else other)
    if not isinstance(other, Pod):
        return False
    if "namespaceSelector" in peer:
        ns_ok = _labels_match(peer["namespaceSelector"], {"kubernetes.io/metadata.name": other.namespace})
    else:
        ns_ok = other.namespace == own_ns
    return ns_ok and _labels_match(peer.get("podSelector", {}), other.labels)


def _allowed_one_side(
    policies: list[dict[str, Any]], pod: Pod, other: Peer, port: int, proto: str, direction: str
) -> bool:
    mine = [
        p
        for p in policies
        if p["metadata"]["namespace"] == pod.namespace
        and direction in p["spec"]["policyTypes"]
        and _labels_match(p["spec"]["podSelector"], pod.labels)
    ]
    if not mine:
        return True  # not isolated in this direction
    key, peers_key = ("ingress", "from") if direction == "Ingress" else ("egress", "to")
    for policy in mine:
        for rule in policy["spec"].get(key, []):
            peers, ports = rule.get(peers_key), rule.get("ports")
            if peers and not any(_peer_match(peer, other, pod.namespace) for peer in peers):
                continue
            if ports and not any(p["port"] == port and p.get("protocol", "TCP") == proto for p in ports):
                continue
            return True
    return False


def allowed(policies: list[dict[str, Any]], src: Peer, dst: Peer, port: int, proto: str = "TCP") -> bool:
    out = not isinstance(src, Pod) or _allowed_one_side(policies, src, dst, port, proto, "Egress")
    return out and (not isinstance(dst, Pod) or _allowed_one_side(policies, dst, src, port, proto, "Ingress"))


API, MONITORING = "10.16.0.0/24", "10.16.1.0/26"
API_SERVER, PROMETHEUS, ELSEWHERE = "10.16.0.10", "10.16.1.5", "10.16.9.9"
IMDS, ARM, INTERNET_DNS = "169.254.169.254", "20.50.2.1", "8.8.8.8"


def _name(ns: str, app: str, ip: str) -> Pod:
    return Pod(ns, {"app.kubernetes.io/name": app}, ip)


REMEDIATION = _name(HEALTH_NS, "gpu-remediation", "10.16.4.10")
RETEST = _name(HEALTH_NS, "gpu-preflight-retest", "10.16.4.11")
SCHEDULER = _name(GANG_NS, "scheduler-plugins", "10.16.4.12")
BALLOON = _name(BALLOON_NS, "balloon", "10.16.6.20")
KSM = _name("kube-system", "kube-state-metrics", "10.16.4.13")
CCM = _name("kube-system", "cloud-controller-manager", "10.16.4.14")
COREDNS = Pod("kube-system", {"k8s-app": "kube-dns", "app.kubernetes.io/name": "coredns"}, "10.16.4.15")
TEAM_POD = Pod("research", {"app.kubernetes.io/name": "pretrain"}, "10.16.6.30")


@pytest.fixture(scope="module")
def policies(dev_spec: AddonsSpec) -> list[dict[str, Any]]:
    spec = replace(dev_spec, network=NetworkSpec((API,), 6443, (MONITORING,)))
    return [o for o in render_manifests(spec) if o["kind"] == "NetworkPolicy"]


@pytest.mark.parametrize(
    ("src", "dst", "port", "proto", "ok"),
    [
        (REMEDIATION, API_SERVER, 6443, "TCP", True),
        (REMEDIATION, IMDS, 80, "TCP", True),  # managed-identity token
        (REMEDIATION, ARM, 443, "TCP", True),  # management.azure.com
        (REMEDIATION, COREDNS, 53, "UDP", True),
        (REMEDIATION, API_SERVER, 2379, "TCP", False),
        (REMEDIATION, ELSEWHERE, 22, "TCP", False),
        (RETEST, API_SERVER, 6443, "TCP", True),
        (RETEST, IMDS, 80, "TCP", False),  # only remediation may ask for Azure tokens
        (RETEST, ARM, 443, "TCP", False),
        (SCHEDULER, API_SERVER, 6443, "TCP", True),
        (SCHEDULER, ARM, 443, "TCP", False),
        (BALLOON, API_SERVER, 6443, "TCP", False),
        (TEAM_POD, BALLOON, 80, "TCP", False),
        (CCM, API_SERVER, 6443, "TCP", True),
        (CCM, IMDS, 80, "TCP", True),
        (CCM, ARM, 443, "TCP", True),
        (CCM, ELSEWHERE, 443, "TCP", False),  # HTTPS outside the private ranges only
        (PROMETHEUS, KSM, 8080, "TCP", True),
        (ELSEWHERE, KSM, 8080, "TCP", False),
        (KSM, API_SERVER, 6443, "TCP", True),
        (KSM, INTERNET_DNS, 53, "UDP", False),
        (TEAM_POD, COREDNS, 53, "UDP", True),  # everyone resolves names
        (TEAM_POD, COREDNS, 9153, "TCP", False),
        (PROMETHEUS, COREDNS, 9153, "TCP", True),
        (COREDNS, "168.63.129.16", 53, "UDP", True),  # upstream: Azure DNS
        (COREDNS, API_SERVER, 6443, "TCP", True),
        (COREDNS, ARM, 443, "TCP", False),
    ],
)
def test_network_policies_allow_exactly_what_the_add_ons_need(
    policies: list[dict[str, Any]], src: Peer, dst: Peer, port: int, proto: str, ok: bool
) -> None:
    assert allowed(policies, src, dst, port, proto) is ok


def test_add_on_namespaces_deny_by_default_and_isolate_every_pod_network_workload(
    dev_spec: AddonsSpec, policies: list[dict[str, Any]]
) -> None:
    for ns in (HEALTH_NS, GANG_NS, BALLOON_NS):
        (deny,) = [p for p in policies if p["metadata"]["namespace"] == ns and p["metadata"]["name"] == "default-deny"]
        assert deny["spec"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
    ours = {"kube-system": {"coredns", "kube-state-metrics", "cloud-controller-manager"}}
    for obj in render_manifests(dev_spec):
        s = obj.get("spec", {})
        template = s.get("template") or s.get("jobTemplate", {}).get("spec", {}).get("template")
        ns = obj["metadata"].get("namespace")
        if not template or template["spec"].get("hostNetwork") or obj["kind"] == "StatefulSet":
            continue
        if ns not in (HEALTH_NS, GANG_NS, BALLOON_NS) and obj["metadata"]["name"] not in ours.get(ns or "", set()):
            continue
        pod = Pod(ns, template["metadata"]["labels"], "10.16.4.99")
        isolating = [
            p
            for p in policies
            if p["metadata"]["namespace"] == ns
            and p["spec"]["podSelector"]
            and _labels_match(p["spec"]["podSelector"], pod.labels)
        ]
        assert ns in (HEALTH_NS, GANG_NS, BALLOON_NS) or isolating, obj["metadata"]["name"]
