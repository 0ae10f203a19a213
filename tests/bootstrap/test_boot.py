"""Pure checks of each role's boot: what the next step needs from the previous one.

The real programs replay these in test_realtool_boot.py (steps, units, network namespaces),
test_realtool_static_pods.py (kubectl in each pod's mount namespace) and test_realtool_units.py.
"""

from __future__ import annotations

import configparser
import json
import re

import pytest
import yaml

from modules import labels
from modules.bootstrap.context import BootstrapContext
from modules.bootstrap.layout import PATHS
from modules.bootstrap.roles import ROLES, NodeBundle, bundle, names
from modules.bootstrap.roles.parts import POOL_STATIC_PODS
from modules.bootstrap.steps import STEP_SCRIPT
from modules.stackplan.config import load_stack
from modules.stackplan.prepare import prepare_cluster

from .conftest import STACKS
from .staticpods import static_pods, under

# Kubernetes' label value and qualified-name syntax (apimachinery validation.IsValidLabelValue).
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _all(ctx: BootstrapContext) -> list[NodeBundle]:
    return [bundle(ctx, role, name) for role in ROLES for name in names(ctx, role)]


def _unit(node: NodeBundle, path: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    text = next(f.content for f in node.files if f.path == path)
    parser.read_string(text)
    return parser


def _words(parser: configparser.ConfigParser, section: str, key: str) -> set[str]:
    return set(parser.get(section, key, fallback="").split())


def test_static_pods_mount_every_path_they_name(ctx: BootstrapContext) -> None:
    pods = static_pods(ctx)
    assert {p.pod["metadata"]["name"] for p in pods} == {
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kube-proxy",
    }
    for sp in pods:
        mounts = sp.volumes
        # Same path inside and outside: the flags name host paths.
        assert all(v.mount_path == v.host_path for v in mounts), sp.name
        have = {f.path for f in sp.node.files} | {s.path for s in sp.node.secrets}
        created = [v.mount_path for v in mounts if v.type in ("DirectoryOrCreate", "FileOrCreate")]
        referenced = sp.referenced()
        assert referenced, sp.name
        for path, why in referenced.items():
            assert any(under(path, v.mount_path) for v in mounts), f"{sp.name}: {path} ({why}) is not mounted"
            assert path in have or any(under(path, c) for c in created), f"{sp.name}: {path} ({why}) is not on the host"


def test_every_static_pod_kubeconfig_is_checked(ctx: BootstrapContext) -> None:
    # The mount-namespace test loads these with kubectl: make sure it has something to load.
    by_name = {sp.pod["metadata"]["name"]: sp.kubeconfigs() for sp in static_pods(ctx)}
    assert by_name["kube-scheduler"] == (PATHS.scheduler_kubeconfig,)
    assert by_name["kube-controller-manager"] == (PATHS.controller_manager_kubeconfig,)
    assert by_name["kube-proxy"] == (PATHS.kube_proxy_kubeconfig,)


def test_pool_static_pods_are_what_pools_render(ctx: BootstrapContext) -> None:
    for pool in ctx.pools:
        node = bundle(ctx, pool.role, pool.name)
        pods = [yaml.safe_load(f.content) for f in node.files if f.path.startswith(PATHS.manifests + "/")]
        refs = tuple(f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in pods)
        assert refs == POOL_STATIC_PODS
        assert all(p["spec"]["hostNetwork"] for p in pods), "maxPods counts them as host-network"


def test_every_kubelet_hands_pods_the_upstream_resolv_conf(ctx: BootstrapContext) -> None:
    # dnsPolicy Default copies the kubelet's resolvConf: never the systemd-resolved stub.
    for node in _all(ctx):
        for f in node.files:
            if f.path == PATHS.kubelet_config:
                assert yaml.safe_load(f.content)["resolvConf"] == "/run/systemd/resolve/resolv.conf", node.name


def test_scheduler_scores_a_sample_at_7500_nodes(prod: BootstrapContext, dev: BootstrapContext) -> None:
    def percent(ctx: BootstrapContext) -> int:
        node = bundle(ctx, "apiserver", names(ctx, "apiserver")[0])
        return int(yaml.safe_load(node.file("scheduler-config.yaml").content)["percentageOfNodesToScore"])

    assert prod.sizing_nodes > 7500
    assert percent(prod) == 7  # 7% of 7,5xx nodes: ~525 feasible nodes per pod, not all of them
    assert percent(dev) == 100  # small clusters: every node


def test_boot_steps_go_through_the_step_runner(ctx: BootstrapContext) -> None:
    for node in _all(ctx):
        assert node.steps, node.name
        lines = node.runcmd[len(node.before_steps) :]
        assert all(line.startswith(f"{STEP_SCRIPT} ") for line in lines), node.name
        assert len({s.name for s in node.steps}) == len(node.steps), node.name
        paths = {f.path for f in node.files}
        assert STEP_SCRIPT in paths
        for step in node.steps:
            # The image carries every package (the boot installs none); no sysctl --system (the image's
            # /etc/sysctl.conf would be applied last and win).
            assert "apt-get" not in step.command and not re.search(r"sysctl[^;&|]*--system", step.command), step
        assert "packages:" not in node.runcmd


def test_the_image_is_checked_before_anything_else(ctx: BootstrapContext) -> None:
    """The first step of every role compares the image's manifest with the bundle's expectation, not retried;
    nothing is installed afterwards (the boot only configures), and services start only once allowed."""
    for node in _all(ctx):
        order = [s.name for s in node.steps]
        assert order[0] == "image" and node.steps[0].tries == 1, (node.name, order)
        assert "/opt/agk/lib/image.py /etc/agk/image-expected.json" in node.steps[0].command
        expected = json.loads(node.file("image-expected.json").content)
        assert expected["release"] == ctx.kubernetes_version and expected["version"] == "36.4.1"
        allow = order.index("allow-service-starts")
        starts = [i for i, s in enumerate(node.steps) if "systemctl restart" in s.command]
        assert allow < min(starts), (node.name, order)
        assert not [s.name for s in node.steps if "install-" in s.command or "curl " in s.command], node.name


def test_node_exporter_runs_from_the_first_boot(ctx: BootstrapContext) -> None:
    # policy-rc.d keeps the package's postinst from starting it: a step must.
    with_exporter = [n for n in _all(ctx) if any(s.name == "node-exporter" for s in n.steps)]
    assert {n.role for n in with_exporter} >= {"etcd", "apiserver", "prometheus", "nat"}
    for node in with_exporter:
        step = next(s for s in node.steps if s.name == "node-exporter")
        assert "systemctl restart prometheus-node-exporter" in step.command


def test_host_network_is_settled_before_containerd_the_kubelet_and_the_cni(ctx: BootstrapContext) -> None:
    hosts = [bundle(ctx, p.role, p.name) for p in ctx.pools] + [bundle(ctx, "nat", ctx.nat.name)]
    for node in hosts:
        order = [s.name for s in node.steps]
        assert order.index("host-network") < order.index("containerd") < order.index("kubelet"), order
        network = _unit(node, PATHS.unit("agk-node-network.service"))
        assert {"containerd.service", "kubelet.service", "docker.service"} <= _words(network, "Unit", "Before")
        execs = [v for k, v in network.items("Service") if k == "ExecStart"]
        assert execs, node.name
        kubelet = _unit(node, PATHS.kubelet_dropin)
        assert "agk-node-network.service" in _words(kubelet, "Unit", "After")
        assert "agk-node-network.service" in _words(kubelet, "Unit", "Requires")
        containerd = _unit(node, PATHS.containerd_dropin)
        assert "agk-node-network.service" in _words(containerd, "Unit", "After")
        for f in node.files:
            # Only the network unit switches the iptables backend, before anything writes a rule.
            if f.path.endswith(".service") and "update-alternatives" in f.content:
                assert f.path == PATHS.unit("agk-node-network.service"), f.path
            if f.path.endswith(".service") and "iptables-restore" in f.content:
                rules = _unit(node, f.path)
                assert "agk-node-network.service" in _words(rules, "Unit", "After"), f.path


def test_gpu_nodes_learn_their_infiniband_island_before_the_kubelet(ctx: BootstrapContext) -> None:
    for pool in ctx.pools:
        node = bundle(ctx, pool.role, pool.name)
        has = any(f.path == PATHS.unit("agk-node-identity.service") for f in node.files)
        assert has is (pool.gpus > 0), pool.name
        if not has:
            continue
        identity = _unit(node, PATHS.unit("agk-node-identity.service"))
        assert "kubelet.service" in _words(identity, "Unit", "Before")
        kubelet = _unit(node, PATHS.kubelet_dropin)
        assert "agk-node-identity.service" in _words(kubelet, "Unit", "Requires")
        assert kubelet.get("Service", "EnvironmentFile") == PATHS.kubelet_env


@pytest.mark.parametrize("stack", ["dev", "prod-7500"])
def test_the_island_label_is_a_valid_label(stack: str) -> None:
    prep = prepare_cluster(stack, load_stack(STACKS, stack), STACKS)
    key = labels.key(prep.bootstrap.label_domain, labels.IB_ISLAND)
    prefix, _, name = key.partition("/")
    assert DNS_SUBDOMAIN.match(prefix) and len(prefix) <= 253 and LABEL_NAME.match(name) and len(name) <= 63
    sets = [s.name for p in prep.pools.gpu for s in p.scale_sets]
    assert sets
    # The value is the scale set's name, as IMDS reports it (modules/azure/node_pool.py names them so).
    for value in sets:
        assert LABEL_VALUE.match(value) and len(value) <= 63, value


def test_no_boot_script_downloads_anything(ctx: BootstrapContext) -> None:
    """Every download is checked when the image is built (modules/images); the boot has none left
    (tests/bootstrap/test_boot_offline.py walks every URL of every stack)."""
    scripts = {f.path: f.content for n in _all(ctx) for f in n.files if f.path.endswith(".sh")}
    assert scripts
    assert [p for p, t in scripts.items() if "curl " in t and "--noproxy" not in t] == []


def test_sysctls_sort_after_the_images_sysctl_conf() -> None:
    # Debian and Ubuntu link /etc/sysctl.d/99-sysctl.conf to /etc/sysctl.conf; systemd-sysctl
    # applies files in name order, so ours must come after it (test_realtool_boot runs it).
    assert PATHS.sysctl.rsplit("/", 1)[1] > "99-sysctl.conf"


def test_images_come_from_the_versions_table(ctx: BootstrapContext) -> None:
    from modules.bootstrap import versions

    release = versions.release(ctx.kubernetes_minor)
    pods = {sp.pod["metadata"]["name"]: sp.pod for sp in static_pods(ctx)}
    for name, pod in pods.items():
        assert pod["spec"]["containers"][0]["image"] == release.image(name), name
    node = bundle(ctx, "system-node", "system")
    assert f'sandbox_image = "{release.pause_image}"' in node.file("containerd/config.toml").content
    # The kubelet is the image's, of the same release (the image check compares it).
    assert ("kubelet", release.release()) in [(n, v) for n, v, _ in ctx.node_images["system-node"].artifacts]
    assert f"ExecStart={PATHS.kubelet_bin} --config=" in node.file("systemd/kubelet.service.d/10-agk.conf").content


def test_only_allocated_gpus_are_visible_before_containerd_starts(dev: BootstrapContext) -> None:
    """nvidia is the HPC image's default runtime: without these two settings any pod naming
    NVIDIA_VISIBLE_DEVICES=all sees every GPU of the node, whatever its quota (issue 11)."""
    for pool in dev.pools:
        node = bundle(dev, pool.role, pool.name)
        runcmd = "\n".join(node.runcmd)
        if not pool.gpus:
            assert "nvidia-ctk" not in runcmd
            continue
        step = next(line for line in node.runcmd if " gpu-isolation " in line)
        assert "accept-nvidia-visible-devices-envvar-when-unprivileged=false" in step
        assert "accept-nvidia-visible-devices-as-volume-mounts=true" in step
        assert runcmd.index("agk-step gpu-isolation ") < runcmd.index("agk-step containerd ")


def test_cluster_nodes_leave_azure_to_the_cloud_controller(dev: BootstrapContext) -> None:
    for pool in dev.pools:
        unit = bundle(dev, pool.role, pool.name).file("systemd/kubelet.service.d/10-agk.conf").content
        assert "--cloud-provider=external" in unit
    api = bundle(dev, "apiserver", next(h.name for h in dev.control_plane.apiservers))
    assert "--cloud-provider=external" in api.file("manifests/kube-controller-manager.yaml").content
    assert "--cloud-provider" not in api.file("manifests/kube-apiserver.yaml").content
