"""Pure tier: the NetworkPolicy engine's objects (its enforcement is tests/controlplane/test_policy_engine.py)."""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from typing import Any

from modules.cluster import images
from modules.cluster.manifests import render_manifests
from modules.cluster.objects import policy_engine
from modules.cluster.spec import AddonsSpec, PolicyEngineSpec
from modules.vm_sizing import formulas


def _engine(spec: AddonsSpec) -> dict[tuple[str, str], dict[str, Any]]:
    return {
        (o["kind"], o["metadata"]["name"]): o
        for o in render_manifests(spec)
        if o["metadata"]["labels"].get("app.kubernetes.io/name") == policy_engine.AGENT
    }


def test_an_agent_runs_on_every_node_and_decides_for_its_pods(prod_spec: AddonsSpec) -> None:
    objs = _engine(prod_spec)
    assert sorted(objs) == [
        ("ClusterRole", "kube-network-policies"),
        ("ClusterRoleBinding", "kube-network-policies"),
        ("DaemonSet", "kube-network-policies"),
        ("ServiceAccount", "kube-network-policies"),
    ]
    pod = objs["DaemonSet", "kube-network-policies"]["spec"]["template"]["spec"]
    # Every node, whatever its taints (a team's, preflight's, a failed node's): a node without its agent passes
    # every packet (fail-open), so no selector and no affinity keep it off one.
    assert pod["tolerations"] == [{"operator": "Exists"}]
    assert "nodeSelector" not in pod and "affinity" not in pod
    assert pod["hostNetwork"] is True and pod["priorityClassName"] == "system-node-critical"
    (c,) = pod["containers"]
    assert (
        c["image"]
        == images.POLICY_AGENT
        == f"registry.k8s.io/networking/kube-network-policies:{images.NETWORK_POLICIES}"
    )
    assert c["command"] == ["/bin/netpol"]
    assert c["args"] == ["--hostname-override=$(NODE_NAME)", "--nfqueue-id=98", "--metrics-bind-address=:9080"]


def test_the_agent_reads_and_never_writes(prod_spec: AddonsSpec) -> None:
    rules = _engine(prod_spec)["ClusterRole", "kube-network-policies"]["rules"]
    assert {
        (g, r, v) for rule in rules for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]
    } == {
        ("", "pods", "list"),
        ("", "pods", "watch"),
        ("", "namespaces", "list"),
        ("", "namespaces", "watch"),
        ("networking.k8s.io", "networkpolicies", "list"),
        ("networking.k8s.io", "networkpolicies", "watch"),
    }


def test_the_agent_is_sized_for_the_clusters_pods(prod_spec: AddonsSpec, dev_spec: AddonsSpec) -> None:
    """Each agent holds every Pod of the cluster: its memory follows the Pods of the sizing step at maxPods."""
    for spec, mib in ((prod_spec, 2368), (dev_spec, 192)):
        (c,) = _engine(spec)["DaemonSet", "kube-network-policies"]["spec"]["template"]["spec"]["containers"]
        assert c["resources"] == {
            "requests": {"cpu": "100m", "memory": f"{mib}Mi"},
            "limits": {"cpu": "1", "memory": f"{mib}Mi"},
        }
    assert formulas.policy_agent(120_000).memory_mib == 2368  # prod-7500: 8,000 nodes x 15 pods


def test_an_older_export_has_no_engine(prod_spec: AddonsSpec) -> None:
    """A cluster stack exported before the engine existed carries no policy_engine: the add-ons deploy none
    (and nothing sized from a missing figure)."""
    exported = json.loads(json.dumps(asdict(prod_spec)))
    del exported["policy_engine"]
    older = AddonsSpec.from_json(exported)
    assert older.policy_engine == PolicyEngineSpec() and not older.policy_engine.enabled
    assert _engine(older) == {}
    assert _engine(replace(prod_spec, policy_engine=PolicyEngineSpec())) == {}
