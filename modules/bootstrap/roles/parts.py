"""Files and steps several roles share: the step runner and the service-start denial, sysctl, containerd,
the kubelet, kubeconfigs, kube-proxy, the host network unit with its iptables services, and the files hash
the static pods carry.
"""

from __future__ import annotations

from dataclasses import dataclass

from modules import labels
from modules.address_plan import addressing
from modules.bootstrap import pki
from modules.bootstrap.context import (
    IMDS_API_VERSION,
    IMDS_URL,
    PORTS,
    BootstrapContext,
    PoolBoot,
)
from modules.bootstrap.layout import PATHS
from modules.bootstrap.node_files import NodeFile, SecretFile
from modules.bootstrap.roles.bundle import POOL_ROLES, Role
from modules.bootstrap.steps import STEP_SCRIPT, Step, start
from modules.bootstrap.templating import render

# Azure CNI (transparent mode) names every pod's host-side veth azv<hash>: kube-proxy tells pod
# traffic apart by it (see kube-proxy-config.yaml.j2) and the host forwards it (forward-pod-traffic).
POD_INTERFACE_PREFIX = "azv"
FORWARD_CHAIN = "AGK-FORWARD"
# Azure's platform addresses (wire server, IMDS, link-local) and loopback are not internet traffic.
PLATFORM_CIDRS = addressing.PLATFORM
IMDS_ADDRESS = str(addressing.IMDS)
NODE_NETWORK_UNIT = "agk-node-network.service"
NODE_IDENTITY_UNIT = "agk-node-identity.service"
KUBELET_ENV_VAR = "AGK_NODE_LABELS"
# One run of a boot unit asks IMDS at most this often, this far apart (about a minute and a half with
# the 5 s timeout), then fails and systemd restarts it (Restart=on-failure in the units).
IMDS_TRIES = 10
IMDS_RETRY_DELAY_S = 5


def unit_file(name: str, text: str) -> NodeFile:
    return NodeFile(PATHS.unit(name), f"systemd/{name}", text)


def script_file(name: str, text: str) -> NodeFile:
    return NodeFile(PATHS.script(name), name, text, "0755")


def base_files(role: Role) -> tuple[NodeFile, ...]:
    """Every host: the step runner and the service-start denial until the steps allow them."""
    return (
        NodeFile(
            PATHS.policy_rc,
            "policy-rc.d",
            "#!/bin/sh\n# Deny service starts while the boot steps install packages.\nexit 101\n",
            "0755",
            # allow-service-starts removes it; were the hourly sync to restore it, no package upgrade
            # would restart its service again (invoke-rc.d honours exit 101 as "action forbidden").
            boot_only=True,
        ),
        script_file(STEP_SCRIPT.rsplit("/", 1)[1], render("agk-step.sh.j2", role=role, state=PATHS.boot_state)),
    )


def sysctl_file(ctx: BootstrapContext, role: Role, *, node: bool, forwarding: bool) -> NodeFile:
    text = render("sysctl.conf.j2", role=role, cluster=ctx.cluster, node=node, forwarding=forwarding)
    return NodeFile(PATHS.sysctl, "sysctl.d/" + PATHS.sysctl.rsplit("/", 1)[1], text)


SYSCTL_STEP = Step("sysctl", f"sysctl -q -p {PATHS.sysctl}")
UNBLOCK_STEP = Step("allow-service-starts", f"rm -f {PATHS.policy_rc}", tries=1)
RELOAD_STEP = Step("daemon-reload", "systemctl daemon-reload")
NODE_EXPORTER_STEP = Step("node-exporter", start("prometheus-node-exporter"))


def containerd_file(ctx: BootstrapContext, role: Role, gpus: int) -> NodeFile:
    text = render(
        "containerd-config.toml.j2",
        role=role,
        cluster=ctx.cluster,
        node=ctx.node,
        gpus=gpus,
        paths=PATHS,
        pause_image=ctx.images.pause,
    )
    return NodeFile(PATHS.containerd_config, "containerd/config.toml", text)


def kubelet_files(
    ctx: BootstrapContext, role: Role, host_name: str, pool: PoolBoot | None, after: tuple[str, ...]
) -> tuple[NodeFile, ...]:
    config = render(
        "kubelet-config.yaml.j2",
        pool=pool,
        role=role,
        host_name=host_name,
        cluster=ctx.cluster,
        dns_service_ip=ctx.dns_service_ip,
        cluster_domain=ctx.cluster_domain,
        node=ctx.node,
        paths=PATHS,
        ports=PORTS,
    )
    gpu = pool is not None and pool.gpus > 0
    node_labels = [f"{k}={v}" for k, v in pool.labels] if pool else []
    if gpu:
        # The InfiniBand island, read from IMDS at boot by agk-node-identity (systemd expands ${VAR}).
        node_labels.append("${" + KUBELET_ENV_VAR + "}")
    unit = render(
        "kubelet-service-override.conf.j2",
        pool=pool,
        labels=",".join(node_labels),
        after=("containerd.service", *after, *((NODE_IDENTITY_UNIT,) if gpu else ())),
        env_file=PATHS.kubelet_env if gpu else None,
        paths=PATHS,
    )
    return (
        NodeFile(PATHS.kubelet_config, "kubelet/config.yaml", config),
        NodeFile(PATHS.kubelet_dropin, "systemd/kubelet.service.d/10-agk.conf", unit),
    )


def kubeconfig_file(ctx: BootstrapContext, path: str, user: str, cert: str, server: str) -> NodeFile:
    text = render(
        "kubeconfig.j2",
        cluster=ctx.cluster,
        server=server,
        user=user,
        ca_file=f"{PATHS.pki}/ca.crt",
        cert_file=f"{PATHS.pki}/{cert}.crt",
        key_file=f"{PATHS.pki}/{cert}.key",
    )
    return NodeFile(path, path.removeprefix(PATHS.k8s + "/"), text, "0600")


def kube_proxy_files(ctx: BootstrapContext, host_name: str | None) -> tuple[NodeFile, ...]:
    """The kube-proxy static pod: every host that reaches ClusterIP services needs one (no DaemonSet:
    Services must work before anything in the cluster is scheduled)."""
    return (
        NodeFile(
            f"{PATHS.manifests}/kube-proxy.yaml",
            "manifests/kube-proxy.yaml",
            render(
                "kube-proxy.yaml.j2",
                host_name=host_name,
                image=ctx.images.proxy,
                paths=PATHS,
                files_hash=files_hash_slot(ctx),
            ),
        ),
        NodeFile(
            PATHS.kube_proxy_config,
            PATHS.kube_proxy_config.removeprefix(PATHS.k8s + "/"),
            render("kube-proxy-config.yaml.j2", pod_interface_prefix=POD_INTERFACE_PREFIX, paths=PATHS, ports=PORTS),
        ),
        kubeconfig_file(ctx, PATHS.kube_proxy_kubeconfig, "system:kube-proxy", pki.KUBE_PROXY, ctx.apiserver_url),
    )


STATIC_PODS = {"kube-system/kube-proxy": kube_proxy_files}

POOL_STATIC_PODS: tuple[str, ...] = ("kube-system/kube-proxy",)
"""Static pods on every pool node (all host-network); the kubelet's maxPods counts them. ``pool_bundle``
renders exactly these (from ``STATIC_PODS``), so the count cannot drift from what the nodes run."""

KUBE_PROXY_SECRETS = (
    SecretFile(f"{PATHS.pki}/{pki.KUBE_PROXY}.crt", f"cert:{pki.KUBE_PROXY}"),
    SecretFile(f"{PATHS.pki}/{pki.KUBE_PROXY}.key", f"key:{pki.KUBE_PROXY}"),
)
NODE_SECRETS = (SecretFile(f"{PATHS.pki}/ca.crt", f"cert:{pki.KUBERNETES_CA}"), *KUBE_PROXY_SECRETS)
"""What a host with a kubelet and kube-proxy (the pools' nodes, the NAT host) gets from the PKI."""


# Jumps from the built-in chains into ours, per rules file. The files hold only our own chains
# (iptables-restore --noflush flushes and refills a chain it declares); a jump appended from the file
# would be appended again on every restart of its unit, doubling the counters (review-boot m1), so the
# unit adds each jump only where it is missing.
MANGLE_JUMPS = (
    ("mangle", "INPUT", "AGK-HOST-IN"),
    ("mangle", "OUTPUT", "AGK-HOST-OUT"),
    ("mangle", "FORWARD", "AGK-POD-IN"),
    ("mangle", "FORWARD", "AGK-POD-OUT"),
)
SERVICE_NAT_JUMPS = (("nat", "POSTROUTING", "AGK-SERVICE-SNAT"),)


def rules_service(name: str, description: str, rules_file: str, jumps: tuple[tuple[str, str, str], ...]) -> NodeFile:
    text = render("iptables-rules.service.j2", description=description, rules_file=rules_file, jumps=jumps)
    return unit_file(f"{name}.service", text)


# Roles whose pods may not reach IMDS (forward-pod-traffic.sh.j2 says why): every pool. IMDS hands a
# token for any of the node's identities to whoever names it, and a pool identity reads the pool's Key
# Vault bundle. What needs IMDS in the cluster (cloud-provider-azure's controller-manager, the XID
# remediation) runs on the host network, where the node's own traffic keeps IMDS;
# tests/bootstrap/test_pod_imds.py keeps the two in step.
POD_IMDS_BLOCKED: frozenset[Role] = POOL_ROLES


def node_network_files(ctx: BootstrapContext, role: Role) -> tuple[NodeFile, ...]:
    """The unit that settles the host network before containerd, the kubelet and the CNI (hosts
    running kube-proxy: pool nodes and the NAT host), with the scripts it runs."""
    pod_ips = PATHS.script("pod-ips-off-host.py")
    forward = PATHS.script("forward-pod-traffic.sh")
    return (
        unit_file(
            NODE_NETWORK_UNIT,
            render("agk-node-network.service.j2", paths=PATHS, pod_ips_script=pod_ips, forward_script=forward),
        ),
        script_file(
            "pod-ips-off-host.py",
            render(
                "pod-ips-off-host.py.j2",
                imds=IMDS_URL,
                api_version=IMDS_API_VERSION,
                cloud_cfg=PATHS.cloud_cfg,
                tries=IMDS_TRIES,
                delay=IMDS_RETRY_DELAY_S,
            ),
        ),
        script_file(
            "forward-pod-traffic.sh",
            render(
                "forward-pod-traffic.sh.j2",
                chain=FORWARD_CHAIN,
                prefix=POD_INTERFACE_PREFIX,
                block_imds=role in POD_IMDS_BLOCKED,
                imds=IMDS_ADDRESS,
            ),
        ),
        NodeFile(PATHS.cloud_cfg, "cloud/" + PATHS.cloud_cfg.rsplit("/", 1)[1], render("azure-vnet.cfg.j2")),
        NodeFile(
            PATHS.containerd_dropin,
            "systemd/containerd.service.d/10-agk.conf",
            render("containerd-service-override.conf.j2"),
        ),
    )


FILES_HASH = "files-sha256"
FILES_HASH_SLOT = "files-sha256-of-the-mounted-files"
"""Stands in the static pods' hash annotation until ``delivery.document`` knows the files' contents."""


@dataclass(frozen=True)
class FilesHash:
    key: str
    value: str


def files_hash_slot(ctx: BootstrapContext) -> FilesHash:
    return FilesHash(labels.key(ctx.label_domain, FILES_HASH), FILES_HASH_SLOT)
