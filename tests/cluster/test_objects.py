"""Pure tier: what the objects promise (priorities, preflight, balloons, security, images)."""

from __future__ import annotations

from typing import Any

import pytest

from modules.cluster.manifests import render_manifests
from modules.cluster.objects import preflight
from modules.cluster.objects.common import exception_key
from modules.cluster.spec import AddonsSpec


def by_name(spec: AddonsSpec, kind: str, name: str) -> dict[str, Any]:
    return next(o for o in render_manifests(spec) if o["kind"] == kind and o["metadata"]["name"] == name)


def test_priority_class_values(dev_spec: AddonsSpec) -> None:
    classes = {o["metadata"]["name"]: o for o in render_manifests(dev_spec) if o["kind"] == "PriorityClass"}
    assert {n: c["value"] for n, c in classes.items()} == {
        "training": 100_000,
        "default": 1_000,
        "borrow": 100,
        "balloon": -1,
    }
    # > -10: cluster-autoscaler's expendable cutoff, below which a balloon would do nothing.
    assert classes["balloon"]["value"] > -10
    assert classes["balloon"]["preemptionPolicy"] == "Never"
    assert [n for n, c in classes.items() if c["globalDefault"]] == ["default"]


def test_preflight_daemonset_selects_and_tolerates_preflight(dev_spec: AddonsSpec) -> None:
    pod = by_name(dev_spec, "DaemonSet", "gpu-preflight")["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"gpu.example.com/preflight": "pending"}
    assert pod["tolerations"] == [
        {"key": "gpu.example.com/preflight", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "gpu.example.com/team", "operator": "Exists", "effect": "NoSchedule"},
    ]
    diag = pod["initContainers"][0]["command"][-1]
    assert f"dcgmi diag -r {dev_spec.preflight.level} " in diag
    assert "echo pass" in diag and "echo fail" in diag


def test_preflight_rbac_is_get_and_patch_nodes_only(dev_spec: AddonsSpec) -> None:
    role = by_name(dev_spec, "ClusterRole", "gpu-preflight")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}]


def test_retest_cronjob_schedule(dev_spec: AddonsSpec) -> None:
    job = by_name(dev_spec, "CronJob", "gpu-preflight-retest")
    assert job["spec"]["schedule"] == dev_spec.preflight.retest_schedule
    assert job["spec"]["concurrencyPolicy"] == "Forbid"


def test_preflight_configmap_ships_the_scripts(dev_spec: AddonsSpec) -> None:
    cm = by_name(dev_spec, "ConfigMap", "gpu-preflight-scripts")
    assert set(cm["data"]) == set(preflight.SCRIPTS)
    for source in cm["data"].values():
        compile(source, "script", "exec")


def test_balloons_hold_one_whole_node_each(dev_spec: AddonsSpec) -> None:
    pools = {p.name: p for p in dev_spec.pools}
    deployments = [o for o in render_manifests(dev_spec) if o["metadata"]["name"].startswith("balloon-")]
    assert {d["metadata"]["name"]: d["spec"]["replicas"] for d in deployments} == {
        "balloon-a100": 2,
        "balloon-h100": 0,
    }
    for d in deployments:
        pool = pools[d["metadata"]["name"].removeprefix("balloon-")]
        pod = d["spec"]["template"]["spec"]
        res = pod["containers"][0]["resources"]
        assert res["requests"]["nvidia.com/gpu"] == res["limits"]["nvidia.com/gpu"] == str(pool.gpus_per_node)
        assert pod["priorityClassName"] == "balloon"
        assert pod["nodeSelector"] == {"gpu.example.com/pool": pool.name}
        anti = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
        assert anti["topologyKey"] == "kubernetes.io/hostname"
    team_pool = next(d for d in deployments if d["metadata"]["name"] == "balloon-a100")
    assert team_pool["spec"]["template"]["spec"]["tolerations"] == [
        {"key": "gpu.example.com/team", "operator": "Equal", "value": "research", "effect": "NoSchedule"}
    ]


def test_team_quota(dev_spec: AddonsSpec) -> None:
    quota = by_name(dev_spec, "ResourceQuota", "gpu-quota")
    assert quota["metadata"]["namespace"] == "research"
    assert quota["spec"]["hard"] == {"requests.nvidia.com/gpu": "32"}
    ns = by_name(dev_spec, "Namespace", "research")
    assert ns["metadata"]["labels"]["gpu.example.com/team"] == "research"


def _pods(spec: AddonsSpec) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    out = []
    for obj in render_manifests(spec):
        s = obj.get("spec", {})
        template = s.get("template") or s.get("jobTemplate", {}).get("spec", {}).get("template")
        if template:
            out.append((obj, template))
    return out


def test_every_container_has_requests_and_limits(prod_spec: AddonsSpec) -> None:
    for obj, template in _pods(prod_spec):
        spec = template["spec"]
        for c in spec.get("initContainers", []) + spec["containers"]:
            for part in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(c["resources"][part]), (obj["metadata"]["name"], c["name"])


def _hardened(container: dict[str, Any], pod: dict[str, Any]) -> bool:
    sc = container.get("securityContext", {})
    non_root = sc.get("runAsNonRoot", pod.get("securityContext", {}).get("runAsNonRoot")) is True
    return (
        non_root
        and sc.get("readOnlyRootFilesystem") is True
        and sc.get("allowPrivilegeEscalation") is False
        and sc.get("capabilities", {}).get("drop") == ["ALL"]
        and not sc.get("privileged")
        and not pod.get("hostNetwork")
    )


def test_containers_are_restricted_or_the_exception_is_justified(prod_spec: AddonsSpec) -> None:
    exceptions = []
    for obj, template in _pods(prod_spec):
        pod = template["spec"]
        for c in pod.get("initContainers", []) + pod["containers"]:
            assert c["securityContext"].get("readOnlyRootFilesystem") is True or c["name"] == "dcgm-diag"
            if not _hardened(c, pod):
                why = obj["metadata"].get("annotations", {}).get(exception_key(prod_spec), "")
                assert len(why) > 40, f"{obj['metadata']['name']}/{c['name']} needs a justified exception"
                assert template["metadata"]["annotations"][exception_key(prod_spec)] == why
                exceptions.append(c["name"])
    assert sorted(exceptions) == [
        "dcgm-diag",
        "dcgm-exporter",
        "iptables-exporter",
        "node-problem-detector",
        "nvidia-device-plugin",
    ]


def test_iptables_exporter_has_net_admin_only_and_reads_mangle(prod_spec: AddonsSpec) -> None:
    pod = by_name(prod_spec, "DaemonSet", "iptables-exporter")["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert pod["hostNetwork"] is True
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["NET_ADMIN"]}
    assert c["command"][-2:] == ["--tables", "mangle"]


@pytest.mark.parametrize("name", ["dcgm-exporter", "iptables-exporter", "node-problem-detector"])
def test_exporters_carry_scrape_annotations(prod_spec: AddonsSpec, name: str) -> None:
    template = by_name(prod_spec, "DaemonSet", name)["spec"]["template"]
    annotations = template["metadata"]["annotations"]
    port = int(annotations["prometheus.io/port"])
    assert annotations["prometheus.io/scrape"] == "true"
    assert port in [p["containerPort"] for p in template["spec"]["containers"][0]["ports"]]


def test_images_are_pinned(prod_spec: AddonsSpec) -> None:
    for _, template in _pods(prod_spec):
        pod = template["spec"]
        for c in pod.get("initContainers", []) + pod["containers"]:
            name, _, tag = c["image"].split("@")[0].rpartition(":")
            assert name and tag and tag != "latest", c["image"]


def test_remediation_rule_is_config(prod_spec: AddonsSpec) -> None:
    import yaml

    rule = yaml.safe_load(by_name(prod_spec, "ConfigMap", "gpu-remediation")["data"]["remediation.yaml"])
    assert rule["fatal_xids"] == [48, 56, 57, 58, 62, 63, 64, 65, 68, 69, 73, 74, 79, 80, 81, 92, 119, 120]
    assert rule["actions"] == ["cordon", "drain", "replace"]
