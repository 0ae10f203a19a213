"""Pure tier: the queue objects (modules/cluster/objects/queues.py) say what docs/queues.md promises.

Behaviour (admission, borrowing, preemption, islands) is proven against Kueue and the real API server in
tests/controlplane/test_queues.py; here, the shape each stack renders and the config's effect on it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from modules.cluster.config import AddonsConfig, QueuesConfig, TeamConfig
from modules.cluster.manifests import render_manifests
from modules.cluster.objects import queues
from modules.cluster.spec import AddonsSpec, PoolFacts, TeamSpec
from modules.errors import ConfigError
from tests.cluster.conftest import spec_of


def kueue(spec: AddonsSpec, kind: str) -> dict[str, dict[str, Any]]:
    # Kueue's own objects only: other components (azure-workload-identity's pod webhook) render the same kinds.
    return {
        o["metadata"]["name"]: o
        for o in render_manifests(spec)
        if o["kind"] == kind and o["metadata"].get("labels", {}).get("app.kubernetes.io/name") == "kueue"
    }


def two_teams(dev_spec: AddonsSpec, **queue_changes: Any) -> AddonsSpec:
    """dev with its h100 pool given to a second team."""
    pools = tuple(replace(p, team="vision") if p.name == "h100" else p for p in dev_spec.pools)
    teams = (*dev_spec.teams, TeamSpec("vision", 32, ("h100",)))
    return replace(dev_spec, pools=pools, teams=teams, queues=replace(dev_spec.queues, **queue_changes))


def test_a_queue_per_team_in_one_cohort_with_reclaim(dev_spec: AddonsSpec) -> None:
    spec = two_teams(dev_spec)
    cqs = kueue(spec, "ClusterQueue")
    assert sorted(cqs) == ["research", "vision"]
    for name, cq in cqs.items():
        s = cq["spec"]
        assert s["cohortName"] == "gpus"
        assert s["namespaceSelector"] == {"matchLabels": {"gpu.example.com/team": name}}
        assert s["preemption"] == {
            "reclaimWithinCohort": "Any",
            "borrowWithinCohort": {"policy": "LowerPriority"},
            "withinClusterQueue": "LowerPriority",
        }
        (group,) = s["resourceGroups"]
        assert group["coveredResources"] == ["nvidia.com/gpu"]
        # Its own pool first (nominal: the pool's GPUs), then the other team's (nothing own: borrow only).
        own = next(p for p in spec.pools if p.team == name)
        assert group["flavors"][0] == {"name": own.name, "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 32}]}
        assert [r["nominalQuota"] for f in group["flavors"][1:] for r in f["resources"]] == [0]
    locals_ = kueue(spec, "LocalQueue")
    assert {n: (q["metadata"]["namespace"], q["spec"]["clusterQueue"]) for n, q in locals_.items()} == {
        "research": ("research", "research"),
        "vision": ("vision", "vision"),
    }
    assert list(kueue(spec, "Cohort")) == ["gpus"]


def test_a_flavor_per_owned_pool_on_the_island_topology(dev_spec: AddonsSpec) -> None:
    spec = two_teams(dev_spec)
    (topology,) = kueue(spec, "Topology").values()
    assert topology["spec"]["levels"] == [
        {"nodeLabel": "gpu.example.com/ib-island"},
        {"nodeLabel": "kubernetes.io/hostname"},
    ]
    flavors = kueue(spec, "ResourceFlavor")
    assert sorted(flavors) == ["a100", "h100"]
    a100 = flavors["a100"]["spec"]
    assert a100["nodeLabels"] == {"gpu.example.com/pool": "a100"}
    assert a100["topologyName"] == topology["metadata"]["name"]
    # Whatever Kueue admits to the pool may land on it: the owner's taint is tolerated for it.
    assert a100["tolerations"] == [
        {"key": "gpu.example.com/team", "operator": "Equal", "value": "research", "effect": "NoSchedule"}
    ]
    # dev as shipped: h100 has no team, so it is in no queue.
    assert sorted(kueue(dev_spec, "ResourceFlavor")) == ["a100"]


def test_limits_are_percentages_of_the_team_quota(dev_spec: AddonsSpec) -> None:
    spec = two_teams(dev_spec, borrowing_limit_percent=50, lending_limit_percent=75)
    (group,) = kueue(spec, "ClusterQueue")["research"]["spec"]["resourceGroups"]
    own, other = (f["resources"][0] for f in group["flavors"])
    assert own == {"name": "nvidia.com/gpu", "nominalQuota": 32, "borrowingLimit": 16, "lendingLimit": 24}
    assert other == {"name": "nvidia.com/gpu", "nominalQuota": 0, "borrowingLimit": 16, "lendingLimit": 0}
    # The defaults (null): lend and borrow every idle GPU; preemption gives them back.
    (group,) = kueue(two_teams(dev_spec), "ClusterQueue")["research"]["spec"]["resourceGroups"]
    assert all(set(r) == {"name", "nominalQuota"} for f in group["flavors"] for r in f["resources"])


def test_a_quota_smaller_than_the_pools_fills_them_in_order(dev_spec: AddonsSpec) -> None:
    pools = (
        PoolFacts("a", "Standard_ND96isr_H100_v5", 8, 10, "t"),
        PoolFacts("b", "Standard_ND96isr_H100_v5", 8, 10, "t"),
    )
    spec = replace(dev_spec, pools=pools, teams=(TeamSpec("t", 100, ("a", "b")),))
    assert queues.nominal(spec, spec.teams[0]) == {"a": 80, "b": 20}


def test_kueue_only_queues_team_namespaces(dev_spec: AddonsSpec) -> None:
    """Its pod and job webhooks fail closed: bound to team namespaces, a Kueue outage never stops the
    cluster's own pods (preflight, balloons, agents)."""
    hooks = [
        h
        for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
        for o in kueue(dev_spec, kind).values()
        for h in o["webhooks"]
    ]
    workload_hooks = [
        h for h in hooks if h["name"][1:] in ("pod.kb.io", "job.kb.io", "statefulset.kb.io", "jobset.kb.io")
    ]
    assert len(workload_hooks) == 8
    for h in workload_hooks:
        assert h["namespaceSelector"] == {"matchExpressions": [{"key": "gpu.example.com/team", "operator": "Exists"}]}
    assert all(
        h["clientConfig"]["service"]
        == {**h["clientConfig"]["service"], "name": "kueue-webhook-service", "namespace": "kueue-system"}
        for h in hooks
    )
    config = queues.configuration(dev_spec)
    assert config["manageJobsWithoutQueueName"] is False
    assert config["managedJobsNamespaceSelector"] == queues.team_namespaces(dev_spec)


def test_kueue_image_is_pinned_by_digest(dev_spec: AddonsSpec) -> None:
    (deployment,) = (
        o for o in render_manifests(dev_spec) if o["kind"] == "Deployment" and o["metadata"]["name"] == queues.MANAGER
    )
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"].startswith("registry.k8s.io/kueue/kueue:v0.19.5@sha256:")
    assert f"--feature-gates={queues.FEATURE_GATES}" in container["args"]


def test_queues_config_reaches_the_spec() -> None:
    spec = spec_of("dev", addons=AddonsConfig(queues=QueuesConfig(cohort="research-gpus", lending_limit_percent=50)))
    assert spec.queues.cohort == "research-gpus"
    assert spec.queues.lending_limit_percent == 50
    assert AddonsSpec.from_json(spec.to_json()) == spec
    with pytest.raises(ConfigError, match=r"addons\.queues\.cohort: 'Bad_Name' is not a valid cohort name"):
        spec_of("dev", addons=AddonsConfig(queues=QueuesConfig(cohort="Bad_Name")))
    off = spec_of("dev", addons=AddonsConfig(queues=QueuesConfig(enabled=False), teams={"research": TeamConfig()}))
    assert not [o for o in render_manifests(off) if o["apiVersion"].startswith("kueue.x-k8s.io")]


def test_an_older_exported_spec_reads_without_queues(dev_spec: AddonsSpec) -> None:
    raw = dev_spec.to_json()
    del raw["queues"]
    assert AddonsSpec.from_json(raw).queues.enabled is False
