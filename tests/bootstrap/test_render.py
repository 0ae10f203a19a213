"""Pure checks of what each role boots with (the real tools check the files in test_realtools_*)."""

from __future__ import annotations

import base64
import gzip
import json
import tomllib

import pytest
import yaml

from modules.bootstrap import pki
from modules.bootstrap.context import ETCD_METRICS_PORT, BootstrapContext
from modules.bootstrap.delivery import PARTS, document, encode, placeholder_facts, placeholder_pems, standin_facts
from modules.bootstrap.host import bundle as host_bundle
from modules.bootstrap.host.boot import HOST_CONFIG, LIB, STAGE0
from modules.bootstrap.host.vault import SECRET_LIMIT
from modules.bootstrap.roles import ROLES, bundle, names
from modules.bootstrap.roles.pool import mangle_rules
from modules.bootstrap.userdata import (
    AZURE_CUSTOM_DATA_LIMIT,
    PER_BOOT,
    encode_custom_data,
    offline_host,
    render_user_data,
)
from modules.errors import AgkError

from .certs import issue


def _all(ctx: BootstrapContext):  # type: ignore[no-untyped-def]
    for role in ROLES:
        for name in names(ctx, role):
            yield bundle(ctx, role, name)


def test_bundle_carries_every_file_exactly(ctx: BootstrapContext) -> None:
    for node in _all(ctx):
        secrets, facts = placeholder_pems(node), placeholder_facts(ctx, node)
        doc = host_bundle.decode(
            host_bundle.join(dict(zip(_names(), encode(document(node, secrets, facts)), strict=True)).__getitem__, "s")
        )
        written = {f["path"]: f["content"] for f in doc["files"]}
        expected = (
            {f.path: f.content for f in node.files}
            | {s.path: secrets[s.secret] for s in node.secrets}
            | {f.path: facts[f.fact] for f in node.facts}
        )
        # Static pods differ only in their files hash, which the document fills in.
        assert written.keys() == expected.keys()
        for path, text in expected.items():
            assert written[path] == text or ("files-sha256-of-the-mounted-files" in text), path
        assert {f["path"]: f["mode"] for f in doc["files"] if f["path"].endswith(".key")} == {
            s.path: "0600" for s in node.secrets if s.path.endswith(".key")
        }
        assert doc["boot"] == list(node.runcmd)


def _names() -> list[str]:
    return [host_bundle.part_name("s", i) for i in range(1, PARTS + 1)]


def test_user_data_carries_only_the_host_facts_and_stage_zero(ctx: BootstrapContext) -> None:
    for node in _all(ctx):
        doc = yaml.safe_load(render_user_data(ctx, node, offline_host(ctx, node)))
        assert [f["path"] for f in doc["write_files"]] == [HOST_CONFIG, *(f"{LIB}/{name}" for name in STAGE0), PER_BOOT]
        assert doc["write_files"][-1]["permissions"] == "0755"
        # No runcmd: a per-instance runcmd would run boot.py once, and a failed first fetch never again.
        assert "runcmd" not in doc
        assert doc.get("hostname") == node.hostname


def test_every_role_fits_azure_custom_data_and_key_vault_with_real_certificates(ctx: BootstrapContext) -> None:
    pems = issue(pki.pki_spec(ctx))
    for node in _all(ctx):
        encoded = encode_custom_data(render_user_data(ctx, node, offline_host(ctx, node)), where=node.name)
        # Plain base64 (no gzip needed): every role about 63% of the limit (make bench), which leaves room
        # for host facts that grow with a name, and gzip if stage 0 ever must grow.
        assert len(encoded) < AZURE_CUSTOM_DATA_LIMIT * 0.65, (node.role, len(encoded))
        assert base64.b64decode(encoded).startswith(b"#cloud-config")
        parts = encode(document(node, pems, standin_facts(ctx, node)))
        assert len(parts) == PARTS and max(len(p) for p in parts) < SECRET_LIMIT * 0.8, (node.name, len(parts[0]))


def test_oversized_user_data_is_gzipped_then_refused() -> None:
    big = "#cloud-config\n" + "# padding line that compresses well\n" * 3000
    packed = encode_custom_data(big, where="x")
    assert gzip.decompress(base64.b64decode(packed)).decode() == big
    noise = "#cloud-config\n" + base64.b64encode(bytes(range(256)) * 300).decode()
    import os

    noise += base64.b64encode(os.urandom(60_000)).decode()
    with pytest.raises(AgkError) as err:
        encode_custom_data(noise, where="apiserver dev-apiserver-0")
    assert str(err.value).startswith("apiserver dev-apiserver-0: user-data is ")
    assert str(err.value).endswith("over Azure's 65,535: move files out of cloud-init (e.g. into the image)")


def test_missing_secret_is_named() -> None:
    from .conftest import context

    ctx = context("dev")
    node = bundle(ctx, "etcd", "dev-etcd-0")
    with pytest.raises(AgkError) as err:
        document(node, {})
    assert str(err.value) == "etcd dev-etcd-0: no PKI secret 'cert:etcd-ca': issue it in ClusterPki"


def _node_labels(unit: str) -> dict[str, str]:
    """The labels fixed at render time; ``${VAR}`` items are read at boot (see test_realtool_boot)."""
    flag = next(a for a in unit.split() if a.startswith("--node-labels="))
    items = flag.removeprefix("--node-labels=").split(",")
    return dict(kv.split("=", 1) for kv in items if not kv.startswith("${"))


def _boot_labels(unit: str) -> list[str]:
    flag = next(a for a in unit.split() if a.startswith("--node-labels="))
    return [kv for kv in flag.removeprefix("--node-labels=").split(",") if kv.startswith("${")]


def test_kubelet_matches_pool(ctx: BootstrapContext) -> None:
    d = ctx.label_domain
    for pool in ctx.pools:
        node = bundle(ctx, pool.role, pool.name)
        config = yaml.safe_load(node.file("kubelet/config.yaml").content)
        assert config["kind"] == "KubeletConfiguration"
        assert config["maxPods"] == pool.kubelet_max_pods
        assert config["serializeImagePulls"] is False
        taints = {(t["key"], t["value"], t["effect"]) for t in config.get("registerWithTaints") or ()}
        labels = _node_labels(node.file("systemd/kubelet.service.d/10-agk.conf").content)
        expected = {f"{d}/pool": pool.name}
        expected_taints = set()
        if pool.gpus:
            expected |= {f"{d}/accelerator": "nvidia", f"{d}/gpu-model": pool.gpu_model, f"{d}/preflight": "pending"}
            expected_taints.add((f"{d}/preflight", "pending", "NoSchedule"))
        if pool.team:
            expected[f"{d}/team"] = pool.team
            expected_taints.add((f"{d}/team", pool.team, "NoSchedule"))
        assert labels == expected, pool.name
        # GPU nodes add their InfiniBand island, read from IMDS before the kubelet starts.
        unit = node.file("systemd/kubelet.service.d/10-agk.conf").content
        assert _boot_labels(unit) == (["${AGK_NODE_LABELS}"] if pool.gpus else []), pool.name
        assert ("EnvironmentFile=/run/agk/kubelet.env" in unit) is bool(pool.gpus)
        assert taints == expected_taints, pool.name
        runtime = tomllib.loads(node.file("containerd/config.toml").content)
        cri = runtime["plugins"]["io.containerd.grpc.v1.cri"]
        assert cri["containerd"]["default_runtime_name"] == ("nvidia" if pool.gpus else "runc")
        cni = json.loads(node.file("cni/10-azure.conflist").content)
        assert cni["plugins"][0]["type"] == "azure-vnet"
        assert cni["plugins"][0]["ipam"]["type"] == "azure-vnet-ipam"


def test_only_gpu_nodes_wait_for_preflight(ctx: BootstrapContext) -> None:
    # CPU system nodes have nothing for dcgmi to test: tainted, they would never take work.
    d = ctx.label_domain
    system = bundle(ctx, "system-node", "system")
    config = yaml.safe_load(system.file("kubelet/config.yaml").content)
    assert "registerWithTaints" not in config
    labels = _node_labels(system.file("systemd/kubelet.service.d/10-agk.conf").content)
    assert f"{d}/preflight" not in labels and f"{d}/accelerator" not in labels
    gpu_pools = [p for p in ctx.pools if p.role == "gpu-node"]
    assert gpu_pools and all(p.gpus > 0 for p in gpu_pools)
    for pool in gpu_pools:
        labels = _node_labels(bundle(ctx, "gpu-node", pool.name).file("systemd/kubelet.service.d/10-agk.conf").content)
        assert labels[f"{d}/accelerator"] == "nvidia"
        assert labels[f"{d}/preflight"] == "pending"


def test_every_node_and_the_nat_host_run_kube_proxy(ctx: BootstrapContext) -> None:
    """ClusterIPs are DNATed on the sending host: without kube-proxy there, Services lead nowhere."""
    hosts = [bundle(ctx, p.role, p.name) for p in ctx.pools] + [bundle(ctx, "nat", ctx.nat.name)]
    for node in hosts:
        pod = yaml.safe_load(node.file("manifests/kube-proxy.yaml").content)
        command = pod["spec"]["containers"][0]["command"]
        assert "--config=/etc/kubernetes/kube-proxy-config.yaml" in command
        # Pool nodes have no fixed name: kube-proxy takes the host name, as the kubelet does.
        assert [a for a in command if a.startswith("--hostname-override")] == (
            [f"--hostname-override={ctx.nat.name}"] if node.role == "nat" else []
        )
        kubeconfig = yaml.safe_load(node.file("kube-proxy.kubeconfig").content)
        assert kubeconfig["clusters"][0]["cluster"]["server"] == ctx.apiserver_url
        user = kubeconfig["users"][0]["user"]
        secrets = {s.path: s.secret for s in node.secrets}
        assert secrets[user["client-certificate"]] == f"cert:{pki.KUBE_PROXY}"
        assert secrets[user["client-key"]] == f"key:{pki.KUBE_PROXY}"
        assert secrets["/etc/kubernetes/pki/ca.crt"] == f"cert:{pki.KUBERNETES_CA}"
        _check_kube_proxy_config(yaml.safe_load(node.file("kube-proxy-config.yaml").content))
        if node.role != "nat":
            kubelet = yaml.safe_load(node.file("kubelet/config.yaml").content)
            assert kubelet["staticPodPath"] == "/etc/kubernetes/manifests"
    spec = {c.name: c for c in pki.pki_spec(ctx).certs}
    assert spec[pki.KUBE_PROXY].common_name == "system:kube-proxy"


def _check_kube_proxy_config(config: dict[str, object]) -> None:
    """kube-proxy's own validation (pkg/proxy/apis/config/validation) of the fields we set."""
    from ipaddress import ip_network

    assert config["kind"] == "KubeProxyConfiguration"
    assert config["mode"] == "iptables"
    mode = config.get("detectLocalMode", "ClusterCIDR")
    assert mode in ("ClusterCIDR", "NodeCIDR", "BridgeInterface", "InterfaceNamePrefix")
    if mode == "InterfaceNamePrefix":
        detect = config["detectLocal"]
        assert isinstance(detect, dict) and detect["interfaceNamePrefix"], "must not be empty"
    if config.get("clusterCIDR"):
        # One CIDR per IP family at most: kube-proxy exits on a second IPv4 range.
        families = [ip_network(c).version for c in str(config["clusterCIDR"]).split(",")]
        assert len(families) == len(set(families)), config["clusterCIDR"]


def test_kube_proxy_config_check_can_fail() -> None:
    with pytest.raises(AssertionError):
        _check_kube_proxy_config(
            {"kind": "KubeProxyConfiguration", "mode": "iptables", "clusterCIDR": "10.64.0.0/14,10.68.0.0/20"}
        )
    with pytest.raises(AssertionError):
        _check_kube_proxy_config(
            {
                "kind": "KubeProxyConfiguration",
                "mode": "iptables",
                "detectLocalMode": "InterfaceNamePrefix",
                "detectLocal": {"interfaceNamePrefix": ""},
            }
        )


def test_dev_team_pool_is_tainted_for_its_team(dev: BootstrapContext) -> None:
    config = yaml.safe_load(bundle(dev, "gpu-node", "a100").file("kubelet/config.yaml").content)
    assert {"key": "gpu.example.com/team", "value": "research", "effect": "NoSchedule"} in config["registerWithTaints"]


def _apiserver_flags(ctx: BootstrapContext) -> list[str]:
    node = bundle(ctx, "apiserver", names(ctx, "apiserver")[0])
    pod = yaml.safe_load(node.file("manifests/kube-apiserver.yaml").content)
    return list(pod["spec"]["containers"][0]["command"])


def test_apiserver_flags_at_7500_nodes(prod: BootstrapContext) -> None:
    flags = _apiserver_flags(prod)
    events = ";".join(f"https://{m.ip}:2379" for m in prod.events_etcd.members)  # type: ignore[union-attr]
    assert f"--etcd-servers-overrides=/events#{events}" in flags
    assert "--goaway-chance=0.001" in flags
    assert "--endpoint-reconciler-type=lease" in flags
    assert "--enable-priority-and-fairness=true" in flags
    # No kube-proxy on the API server hosts: webhooks and aggregated APIs by endpoint address.
    assert "--enable-aggregator-routing=true" in flags
    # Above 3,000 nodes: kube-up's large-cluster limits, on every server.
    assert "--max-requests-inflight=3000" in flags
    assert "--max-mutating-requests-inflight=1000" in flags
    assert not [f for f in flags if "watch-cache" in f]


def test_apiserver_flags_small_cluster(dev: BootstrapContext) -> None:
    flags = _apiserver_flags(dev)
    assert "--max-requests-inflight=400" in flags
    assert not [f for f in flags if f.startswith("--etcd-servers-overrides")]
    assert "--etcd-servers=" + ",".join(f"https://{m.ip}:2379" for m in dev.etcd.members) in flags


def test_single_apiserver_has_no_goaway() -> None:
    from dataclasses import replace

    from .conftest import context

    ctx = context("dev")
    one = replace(
        ctx, control_plane=replace(ctx.control_plane, apiservers=ctx.control_plane.apiservers[:1], goaway_chance=None)
    )
    flags = _apiserver_flags(one)
    assert not [f for f in flags if f.startswith("--goaway-chance")]


def test_scheduler_and_controller_manager_rates_scale(prod: BootstrapContext, dev: BootstrapContext) -> None:
    for ctx, qps in ((prod, 200), (dev, 20)):
        node = bundle(ctx, "apiserver", names(ctx, "apiserver")[0])
        sched = yaml.safe_load(node.file("scheduler-config.yaml").content)
        assert sched["clientConnection"] == {
            "kubeconfig": "/etc/kubernetes/scheduler.kubeconfig",
            "qps": qps,
            "burst": 2 * qps,
        }
        cm = yaml.safe_load(node.file("manifests/kube-controller-manager.yaml").content)
        assert f"--kube-api-qps={qps}" in cm["spec"]["containers"][0]["command"]


def test_etcd_timing_from_rtt(dev: BootstrapContext) -> None:
    conf = yaml.safe_load(bundle(dev, "etcd", "dev-etcd-1").file("etcd.conf.yml").content)
    assert (conf["heartbeat-interval"], conf["election-timeout"]) == (100, 1000)
    assert conf["quota-backend-bytes"] == 8 * 1024**3
    assert conf["initial-cluster"] == ",".join(f"{m.name}=https://{m.ip}:2380" for m in dev.etcd.members)
    assert conf["client-transport-security"]["client-cert-auth"] is True
    assert conf["peer-transport-security"]["client-cert-auth"] is True
    member = next(m for m in dev.etcd.members if m.name == "dev-etcd-1")
    assert conf["listen-metrics-urls"].startswith(f"http://{member.ip}:{ETCD_METRICS_PORT}")


def test_mangle_rules_use_the_address_plan(ctx: BootstrapContext) -> None:
    rules = mangle_rules(ctx, "gpu-node")
    for net in ctx.internal_cidrs:
        assert f"-A AGK-POD-OUT -d {net} -j RETURN" in rules
    assert "10.0.0.0/8" not in rules or any(str(n) == "10.0.0.0/8" for n in ctx.internal_cidrs)
    assert rules.count("iptables-exporter traffic=") == 4


def test_nodes_get_arp_cache_sysctls(ctx: BootstrapContext) -> None:
    for pool in ctx.pools:
        text = bundle(ctx, pool.role, pool.name).file("sysctl.d/999-agk.conf").content
        assert "net.ipv4.neigh.default.gc_thresh3 = 100000" in text


def test_unknown_host_is_refused(dev: BootstrapContext) -> None:
    with pytest.raises(KeyError, match="use one of dev-etcd-0, dev-etcd-1, dev-etcd-2"):
        bundle(dev, "etcd", "dev-etcd-9")


def test_static_pods_validate_against_the_kubernetes_schema(ctx: BootstrapContext) -> None:
    import kubernetes_validate

    for role, rels in (
        ("apiserver", ("kube-apiserver", "kube-controller-manager", "kube-scheduler")),
        ("nat", ("kube-proxy",)),
        ("gpu-node", ("kube-proxy",)),
        ("system-node", ("kube-proxy",)),
    ):
        node = bundle(ctx, role, names(ctx, role)[0])
        for rel in rels:
            pod = yaml.safe_load(node.file(f"manifests/{rel}.yaml").content)
            kubernetes_validate.validate(pod, ctx.kubernetes_minor, strict=True)
