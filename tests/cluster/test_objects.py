"""Pure tier: what the objects promise (priorities, preflight, balloons, security, images)."""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from modules.cluster.manifests import render_manifests
from modules.cluster.objects import health, preflight, remediation
from modules.cluster.objects.common import exception_key
from modules.cluster.spec import AddonsSpec
from modules.stackplan.config import load_stack
from modules.stackplan.prepare import prepare_cluster
from tests.cluster.conftest import STACKS


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
    # Both labels: a CPU system node is never sent through GPU diagnostics.
    assert pod["nodeSelector"] == {"gpu.example.com/preflight": "pending", "gpu.example.com/accelerator": "nvidia"}
    assert pod["tolerations"] == [
        {"key": "gpu.example.com/preflight", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "gpu.example.com/team", "operator": "Exists", "effect": "NoSchedule"},
    ]
    # The InfiniBand check first (seconds), then DCGM's diagnostics (minutes).
    assert [c["name"] for c in pod["initContainers"]] == ["ib-check", "dcgm-diag"]
    diag = pod["initContainers"][1]["command"][-1]
    # The host's engine runs the tests (one DCGM engine per node): the pod starts none of its own.
    assert f"dcgmi diag --host localhost:5555 -r {dev_spec.preflight.level} " in diag
    assert "nv-hostengine" not in diag
    assert "echo pass" in diag and "echo fail" in diag
    assert pod["hostNetwork"] is True  # nv-hostengine listens on the host's 127.0.0.1 only


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


def test_team_quota_is_its_queue(dev_spec: AddonsSpec) -> None:
    """With queues (the default) a team's GPUs are its ClusterQueue's nominal quota, and no ResourceQuota
    counts borrowed pods against them; without queues the namespace quota is back."""
    assert [o for o in render_manifests(dev_spec) if o["kind"] == "ResourceQuota"] == []
    cq = by_name(dev_spec, "ClusterQueue", "research")
    (group,) = cq["spec"]["resourceGroups"]
    assert group["flavors"] == [{"name": "a100", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 32}]}]
    ns = by_name(dev_spec, "Namespace", "research")
    assert ns["metadata"]["labels"]["gpu.example.com/team"] == "research"
    without = replace(dev_spec, queues=replace(dev_spec.queues, enabled=False))
    quota = by_name(without, "ResourceQuota", "gpu-quota")
    assert quota["metadata"]["namespace"] == "research"
    assert quota["spec"]["hard"] == {"requests.nvidia.com/gpu": "32"}
    assert [o for o in render_manifests(without) if o["apiVersion"].startswith("kueue.x-k8s.io")] == []


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
        and not sc.get("capabilities", {}).get("add")
        and not sc.get("privileged")
        and not pod.get("hostNetwork")
    )


def test_containers_are_restricted_or_the_exception_is_justified(prod_spec: AddonsSpec) -> None:
    exceptions = []
    for obj, template in _pods(prod_spec):
        pod = template["spec"]
        for c in pod.get("initContainers", []) + pod["containers"]:
            assert c["securityContext"].get("readOnlyRootFilesystem") is True, c["name"]
            if not _hardened(c, pod):
                why = obj["metadata"].get("annotations", {}).get(exception_key(prod_spec), "")
                assert len(why) > 40, f"{obj['metadata']['name']}/{c['name']} needs a justified exception"
                assert template["metadata"]["annotations"][exception_key(prod_spec)] == why
                exceptions.append(c["name"])
    assert sorted(exceptions) == [
        "cloud-controller-manager",  # restricted, host network (its identity's token from IMDS, cut off for pods)
        "cloud-node-manager",  # restricted, host network (the node's own identity, before any pod network)
        "coredns",
        "dcgm-diag",  # restricted, host network (the host's DCGM engine listens on 127.0.0.1)
        "dcgm-exporter",
        "ib-check",  # restricted, but its pod is host-network (the preflight pod's)
        "iptables-exporter",
        "kube-network-policies",  # the NetworkPolicy engine: privileged (the host's nftables, nfqueue, NRI)
        "node-problem-detector",
        "nvidia-device-plugin",
        "rdma-shared-device-plugin",
        "remediate",  # restricted, host network (the remediation identity's token from IMDS, cut off for pods)
        "report",  # the preflight reporter: restricted, but its pod is host-network (pod IPs go to workloads)
        "roll",  # the pool roll: restricted, host network (the remediation identity's token from IMDS)
    ]


def test_no_add_on_container_needs_privilege_for_gpu_telemetry_or_diagnostics(prod_spec: AddonsSpec) -> None:
    """The host's DCGM engine does the GPU work: exporter and diagnostics run without privilege or capabilities."""
    for name in ("dcgm-exporter", "gpu-preflight"):
        pod = by_name(prod_spec, "DaemonSet", name)["spec"]["template"]["spec"]
        for c in pod.get("initContainers", []) + pod["containers"]:
            sc = c["securityContext"]
            assert not sc.get("privileged") and sc["capabilities"] == {"drop": ["ALL"]}, (name, c["name"])
            assert "NVIDIA_VISIBLE_DEVICES" not in {e["name"] for e in c.get("env", [])}, (name, c["name"])


def test_one_dcgm_engine_per_node(prod_spec: AddonsSpec) -> None:
    """No add-on starts an nv-hostengine; everything that talks DCGM uses the host's (localhost:5555)."""
    for _, template in _pods(prod_spec):
        for c in template["spec"].get("initContainers", []) + template["spec"]["containers"]:
            assert "nv-hostengine" not in " ".join(c.get("command", []) + c.get("args", [])), c["name"]
    pod = by_name(prod_spec, "DaemonSet", "dcgm-exporter")["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    # A set DCGM_REMOTE_HOSTENGINE_INFO turns dcgm-exporter's remote mode on (pkg/cmd/app.go: UseRemoteHE = IsSet).
    assert env["DCGM_REMOTE_HOSTENGINE_INFO"] == "localhost:5555"
    # No GPU and no driver libraries in this pod: dcgm-exporter 4.x exits at start without NVML unless told to go on.
    assert env["DISABLE_STARTUP_VALIDATE"] == "true"
    assert pod["hostNetwork"] is True


@pytest.mark.parametrize(("code", "verdict"), [(0, "pass"), (226, "fail")])
def test_the_diagnostics_run_in_the_host_engine_with_their_own_timeout(
    tmp_path: Path, dev_spec: AddonsSpec, code: int, verdict: str
) -> None:
    """The init container's script under bash with a stand-in dcgmi (no GPU here): the engine's own timeout is
    passed (-t), the verdict recorded, the log printed, and the container exits 0 either way."""
    pod = by_name(dev_spec, "DaemonSet", "gpu-preflight")["spec"]["template"]["spec"]
    script = pod["initContainers"][1]["command"][-1].replace("/results", str(tmp_path))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "dcgmi").write_text(f'#!/bin/sh\necho "dcgmi $*"\nexit {code}\n')
    (bin_dir / "dcgmi").chmod(0o755)
    done = subprocess.run(
        ["bash", "-c", script], env={"PATH": f"{bin_dir}:/usr/bin:/bin"}, capture_output=True, text=True, check=False
    )
    seconds = dev_spec.preflight.timeout_minutes * 60
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"dcgmi diag --host localhost:5555 -r {dev_spec.preflight.level} -t {seconds}\n"
    assert (tmp_path / "status").read_text() == f"{verdict}\n"


def test_device_plugin_passes_gpus_as_mounts_not_environment(prod_spec: AddonsSpec) -> None:
    pod = by_name(prod_spec, "DaemonSet", "nvidia-device-plugin")["spec"]["template"]["spec"]
    c = pod["containers"][0]
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env["DEVICE_LIST_STRATEGY"] == "volume-mounts"
    # The runtime honours the plugin's own NVIDIA_VISIBLE_DEVICES=all only with CAP_SYS_ADMIN once the node
    # refuses the variable from unprivileged containers (nvidia-container-toolkit privileged.go).
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["SYS_ADMIN"]}
    assert not c["securityContext"].get("privileged")


def test_iptables_exporter_reads_mangle_with_a_stdlib_script(prod_spec: AddonsSpec) -> None:
    from modules.cluster import images

    pod = by_name(prod_spec, "DaemonSet", "iptables-exporter")["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert pod["hostNetwork"] is True
    assert c["image"] == images.PYTHON and c["image"].startswith("mcr.microsoft.com/")
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["NET_ADMIN", "NET_RAW"]}
    assert c["command"][:2] == ["python3", "/scripts/iptables_exporter.py"]
    assert c["command"][-2:] == ["--table", "mangle"]
    scripts = by_name(prod_spec, "ConfigMap", "iptables-exporter-scripts")["data"]
    compile(scripts["iptables_exporter.py"], "iptables_exporter.py", "exec")
    assert pod["volumes"] == [{"name": "scripts", "configMap": {"name": "iptables-exporter-scripts"}}]


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


def test_remediation_rule_is_config_the_controller_reads(prod_spec: AddonsSpec) -> None:
    import yaml

    text = by_name(prod_spec, "ConfigMap", "gpu-remediation")["data"]["remediation.json"]
    rule = json.loads(text)
    assert yaml.safe_load(text) == rule  # readers that expect YAML get the same
    assert rule["fatal_xids"] == [48, 56, 57, 58, 62, 63, 64, 65, 68, 69, 73, 74, 79, 80, 81, 92, 119, 120]
    assert rule["condition"] == health.XID_CONDITION
    assert rule["node_selector"] == "gpu.example.com/accelerator=nvidia"
    assert rule["taint"] == {"key": "gpu.example.com/gpu-fatal-xid", "value": "true", "effect": "NoExecute"}
    assert rule["actions"] == ["cordon", "evict", "replace"] and rule["replace"].startswith("automatic")
    assert rule["replace_after_minutes"] == prod_spec.health.replace_after_minutes
    assert rule["max_replaced_per_run"] == 1 and rule["max_fenced_percent"] == 10
    assert rule["azure"] == {
        "client_id": prod_spec.cloud.remediation_client_id,
        "arm_endpoint": "https://management.azure.com",
        "imds_endpoint": "http://169.254.169.254",
    }
    job = by_name(prod_spec, "CronJob", "gpu-remediation")
    pod = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert job["spec"]["schedule"] == "* * * * *" and job["spec"]["concurrencyPolicy"] == "Forbid"
    env = {e["name"]: e["value"] for e in pod["containers"][0]["env"]}
    assert (env["RULE_NAMESPACE"], env["RULE_NAME"]) == ("gpu-health", "gpu-remediation")
    assert pod["containers"][0]["command"] == ["python3", "/scripts/remediate_xid.py"]
    scripts = by_name(prod_spec, "ConfigMap", "gpu-remediation-scripts")["data"]
    assert set(scripts) == set(remediation.SCRIPTS)
    assert pod["affinity"] == system_only(prod_spec)


def test_remediation_rbac_is_minimal(prod_spec: AddonsSpec) -> None:
    # delete: the Node object of a replaced VM.
    assert by_name(prod_spec, "ClusterRole", "gpu-remediation")["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "patch", "delete"]}
    ]
    assert by_name(prod_spec, "Role", "gpu-remediation")["rules"] == [
        {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["gpu-remediation"], "verbs": ["get"]}
    ]
    binding = by_name(prod_spec, "RoleBinding", "gpu-remediation")
    assert binding["metadata"]["namespace"] == "gpu-health"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "gpu-remediation", "namespace": "gpu-health"}]


def test_without_node_problem_detector_no_controller_runs(dev_spec: AddonsSpec) -> None:
    spec = replace(dev_spec, health=replace(dev_spec.health, node_problem_detector=False))
    names = {(o["kind"], o["metadata"]["name"]) for o in render_manifests(spec)}
    assert ("ConfigMap", "gpu-remediation") in names
    assert ("CronJob", "gpu-remediation") not in names


def system_only(spec: AddonsSpec) -> dict[str, Any]:
    term = {"matchExpressions": [{"key": "gpu.example.com/accelerator", "operator": "DoesNotExist"}]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


@pytest.mark.parametrize("name", ["nvidia-device-plugin", "dcgm-exporter"])
def test_gpu_agents_run_on_gpu_nodes_only(dev_spec: AddonsSpec, name: str) -> None:
    pod = by_name(dev_spec, "DaemonSet", name)["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"gpu.example.com/accelerator": "nvidia"}
    assert "affinity" not in pod


def test_retest_job_picks_gpu_nodes_from_system_nodes(dev_spec: AddonsSpec) -> None:
    pod = by_name(dev_spec, "CronJob", "gpu-preflight-retest")["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    env = {e["name"]: e["value"] for e in pod["containers"][0]["env"]}
    assert env["NODE_SELECTOR"] == "gpu.example.com/accelerator=nvidia"
    assert pod["affinity"] == system_only(dev_spec)


def test_coredns_serves_the_kubelets_cluster_dns(dev_spec: AddonsSpec, prod_spec: AddonsSpec) -> None:
    svc = by_name(dev_spec, "Service", "kube-dns")
    assert svc["metadata"]["namespace"] == "kube-system"
    assert svc["spec"]["clusterIP"] == dev_spec.dns.service_ip == "172.20.0.10"
    assert {(p["port"], p["protocol"]) for p in svc["spec"]["ports"]} == {(53, "UDP"), (53, "TCP"), (9153, "TCP")}
    deploy = by_name(dev_spec, "Deployment", "coredns")
    pod = deploy["spec"]["template"]
    assert svc["spec"]["selector"] == deploy["spec"]["selector"]["matchLabels"] == {"k8s-app": "kube-dns"}
    assert svc["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    spec = pod["spec"]
    assert spec["dnsPolicy"] == "Default"  # upstream resolvers from the node, not itself
    assert spec["affinity"]["nodeAffinity"] == system_only(dev_spec)["nodeAffinity"]
    anti = spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti == [
        {"labelSelector": {"matchLabels": {"k8s-app": "kube-dns"}}, "topologyKey": "kubernetes.io/hostname"}
    ]
    c = spec["containers"][0]
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}
    assert c["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["runAsUser"] != 0
    # kubeadm's for 1.36 (modules/bootstrap/versions.py), by digest where the table pairs one.
    assert c["image"].startswith("registry.k8s.io/coredns/coredns:v1.14.2@sha256:")
    corefile = by_name(dev_spec, "ConfigMap", "coredns")["data"]["Corefile"]
    assert "kubernetes cluster.local in-addr.arpa ip6.arpa {" in corefile
    assert "forward . /etc/resolv.conf" in corefile and "cache 30" in corefile
    # dev: 3 system nodes, 2 replicas; prod-7500: ~7,500 nodes over 10 system nodes.
    assert (dev_spec.dns.replicas, prod_spec.dns.replicas) == (2, 8)
    assert deploy["spec"]["replicas"] == 2


def test_coredns_spreads_softly_when_the_system_pool_is_too_small(dev_spec: AddonsSpec) -> None:
    spec = replace(dev_spec, dns=replace(dev_spec.dns, spread_required=False))
    anti = by_name(spec, "Deployment", "coredns")["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    assert list(anti) == ["preferredDuringSchedulingIgnoredDuringExecution"]


def test_coredns_rbac_is_upstreams(dev_spec: AddonsSpec) -> None:
    assert by_name(dev_spec, "ClusterRole", "system:coredns")["rules"] == [
        {"apiGroups": [""], "resources": ["endpoints", "services", "pods", "namespaces"], "verbs": ["list", "watch"]},
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
    ]
    binding = by_name(dev_spec, "ClusterRoleBinding", "system:coredns")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "coredns", "namespace": "kube-system"}]


def test_kube_state_metrics_is_scraped_and_sized(prod_spec: AddonsSpec, dev_spec: AddonsSpec) -> None:
    deploy = by_name(prod_spec, "Deployment", "kube-state-metrics")
    template = deploy["spec"]["template"]
    c = template["spec"]["containers"][0]
    notes = template["metadata"]["annotations"]
    assert notes == {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": "8080",
        "prometheus.io/path": "/metrics",
        # Its `node` label names the node a series is about: scraped with honor_labels.
        "prometheus.io/honor-labels": "true",
    }
    assert {"name": "http-metrics", "containerPort": 8080} in c["ports"]
    assert c["image"].startswith("registry.k8s.io/kube-state-metrics/kube-state-metrics:v2.20.0@sha256:")  # for 1.36
    # Fitted to the scale tier (formulas.kube_state_metrics; tests/vm_sizing/test_formulas.py works the figures
    # out) for the sizing step of the most nodes the cluster holds (7,588 -> 8,000) and its Pods at maxPods, so a
    # resize inside the step does not roll it, and for the stack's 4 Prometheus hosts.
    prep = prepare_cluster("prod-7500", load_stack(STACKS, "prod-7500"), STACKS)
    assert (prep.pools.peak_nodes, prep.pools.sizing_nodes) == (7588, 8000)
    assert c["resources"]["requests"] == {"cpu": "2103m", "memory": "5376Mi"}
    assert c["resources"]["limits"] == {"cpu": "4206m", "memory": "5376Mi"}
    assert template["spec"]["affinity"] == system_only(prod_spec)
    assert _hardened(c, template["spec"])
    collected = next(a for a in c["args"] if a.startswith("--resources=")).removeprefix("--resources=").split(",")
    assert "nodes" in collected and "secrets" not in collected and "configmaps" not in collected
    rules = by_name(prod_spec, "ClusterRole", "kube-state-metrics")["rules"]
    granted = sorted(r for rule in rules for r in rule["resources"])
    assert granted == sorted(collected)  # it may read exactly what it reports on
    assert all(rule["verbs"] == ["list", "watch"] for rule in rules)
    small = by_name(dev_spec, "Deployment", "kube-state-metrics")["spec"]["template"]["spec"]["containers"][0]
    dev = prepare_cluster("dev", load_stack(STACKS, "dev"), STACKS).pools
    assert dev.peak_nodes == (3 + 1) + (4 + 1) + (4 + 1)  # every pool with its surge
    assert dev.sizing_nodes == 50  # its sizing step
    assert small["resources"]["requests"]["memory"] == "384Mi"


def test_gang_example_stays_inside_one_infiniband_island(dev_spec: AddonsSpec) -> None:
    from modules import labels
    from modules.cluster.objects import gang

    statefulset = gang.example(dev_spec, dev_spec.teams[0])[1]
    pod = statefulset["spec"]["template"]
    (term,) = pod["spec"]["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    # The node label the bootstrap sets from IMDS (vmScaleSetName): one scale set, one placement group, one fabric.
    assert term["topologyKey"] == labels.key(dev_spec.label_domain, labels.IB_ISLAND)
    # The term selects the job's own members, so the first one decides the island for the rest.
    assert term["labelSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
