"""What each node role boots with: packages, files, data disk, commands (pure; no secrets inside).

A ``NodeBundle`` names the secrets it needs (``SecretFile``); ``userdata.render_user_data``
fills them in. ``agk render`` writes the same bundle's files for inspection.
"""

from __future__ import annotations

from dataclasses import dataclass
from ipaddress import IPv4Network
from typing import Literal

from modules.bootstrap import pki
from modules.bootstrap.context import (
    APISERVER_PORT,
    ETCD_CLIENT_PORT,
    ETCD_METRICS_PORT,
    ETCD_PEER_PORT,
    NODE_EXPORTER_PORT,
    PROMETHEUS_PORT,
    BootstrapContext,
    EtcdCluster,
    Host,
    NodePool,
)
from modules.bootstrap.monitoring import (
    API_AVAILABILITY_SLO,
    API_THROTTLE_RATIO,
    DROP_RULES,
    ETCD_FSYNC_P99_SECONDS,
    ETCD_QUOTA_RATIO,
)
from modules.bootstrap.templating import render

Role = Literal["etcd", "events-etcd", "apiserver", "gpu-node", "system-node", "prometheus", "nat"]
ROLES: tuple[Role, ...] = ("etcd", "events-etcd", "apiserver", "gpu-node", "system-node", "prometheus", "nat")

ETCD_PKI = "/etc/etcd/pki"
ETCD_CONFIG = "/etc/etcd/etcd.conf.yml"
ETCD_MOUNT = "/var/lib/etcd"
K8S_PKI = "/etc/kubernetes/pki"
PROM_PKI = "/etc/prometheus/pki"
PROM_CONFIG = "/etc/prometheus/prometheus.yml"
PROM_RULES = "/etc/prometheus/rules"
PROM_MOUNT = "/var/lib/prometheus"
MANGLE_RULES = "/etc/agk/iptables/mangle.rules"
NAT_RULES = "/etc/agk/iptables/nat.rules"
AZURE_DATA_DISK = "/dev/disk/azure/scsi1/lun0"
LOCAL_NVME = "/dev/nvme0n1"
# Package postinst scripts must not start etcd or Prometheus before their certificates and data
# disk are in place; runcmd removes this and starts the services itself.
POLICY_RC = "/usr/sbin/policy-rc.d"
# Azure CNI (transparent mode) names every pod's host-side veth azv<hash>: kube-proxy tells pod
# traffic apart by it (see kube-proxy-config.yaml.j2).
POD_INTERFACE_PREFIX = "azv"
# Azure's platform addresses (wire server, IMDS, link-local) and loopback are not internet traffic.
PLATFORM_CIDRS = tuple(IPv4Network(n) for n in ("127.0.0.0/8", "168.63.129.16/32", "169.254.0.0/16"))


@dataclass(frozen=True)
class NodeFile:
    path: str
    """Absolute path on the node."""
    rel: str
    """Where ``agk render`` writes it, under ``DIR/nodes/<role>/``."""
    content: str
    mode: str = "0644"


@dataclass(frozen=True)
class SecretFile:
    path: str
    secret: str
    """PKI secret name (``cert:<name>``, ``key:<name>``, ``pub:<name>``)."""

    @property
    def mode(self) -> str:
        return "0600" if self.secret.startswith("key:") else "0644"


@dataclass(frozen=True)
class DataDisk:
    device: str
    label: str
    mount: str


@dataclass(frozen=True)
class NodeBundle:
    role: Role
    name: str
    """Host name (fixed hosts) or pool name (scale sets)."""
    hostname: str | None
    packages: tuple[str, ...]
    files: tuple[NodeFile, ...]
    secrets: tuple[SecretFile, ...]
    disk: DataDisk | None
    runcmd: tuple[str, ...]

    def file(self, rel: str) -> NodeFile:
        for f in self.files:
            if f.rel == rel:
                return f
        raise KeyError(rel)


def names(ctx: BootstrapContext, role: Role) -> tuple[str, ...]:
    """Hosts (or pools) that boot as ``role``; empty when the cluster has none."""
    if role == "etcd":
        return tuple(m.name for m in ctx.etcd.members)
    if role == "events-etcd":
        return tuple(m.name for m in ctx.events_etcd.members) if ctx.events_etcd else ()
    if role == "apiserver":
        return tuple(h.name for h in ctx.control_plane.apiservers)
    if role == "prometheus":
        return tuple(h.name for h in ctx.prometheus.hosts)
    if role == "nat":
        return (ctx.nat.name,)
    return tuple(p.name for p in ctx.pools if p.role == role)


def _policy_rc() -> NodeFile:
    return NodeFile(
        POLICY_RC,
        "policy-rc.d",
        "#!/bin/sh\n# Deny service starts during cloud-init's package install.\nexit 101\n",
        "0755",
    )


def _sysctl(ctx: BootstrapContext, role: Role, *, node: bool, forwarding: bool) -> NodeFile:
    text = render("sysctl.conf.j2", role=role, cluster=ctx.cluster, node=node, forwarding=forwarding)
    return NodeFile("/etc/sysctl.d/90-agk.conf", "sysctl.d/90-agk.conf", text)


def _install_kubernetes(ctx: BootstrapContext) -> NodeFile:
    text = render("install-kubernetes.sh.j2", version=ctx.kubernetes_version, minor=ctx.kubernetes_minor)
    return NodeFile("/opt/agk/install-kubernetes.sh", "install-kubernetes.sh", text, "0755")


CONTAINERD_IF_MISSING = "command -v containerd >/dev/null || (apt-get update -q && apt-get install -y -q containerd)"


def _containerd(ctx: BootstrapContext, role: Role, gpus: int) -> NodeFile:
    text = render("containerd-config.toml.j2", role=role, cluster=ctx.cluster, node=ctx.node, gpus=gpus)
    return NodeFile("/etc/containerd/config.toml", "containerd/config.toml", text)


def _kubelet(ctx: BootstrapContext, role: Role, host_name: str, pool: NodePool | None) -> tuple[NodeFile, ...]:
    config = render(
        "kubelet-config.yaml.j2",
        pool=pool,
        role=role,
        host_name=host_name,
        cluster=ctx.cluster,
        dns_service_ip=ctx.dns_service_ip,
        cluster_domain=ctx.cluster_domain,
        node=ctx.node,
    )
    labels = ",".join(f"{k}={v}" for k, v in pool.labels) if pool else ""
    unit = render("kubelet-service-override.conf.j2", pool=pool, labels=labels)
    return (
        NodeFile("/var/lib/kubelet/config.yaml", "kubelet/config.yaml", config),
        NodeFile("/etc/systemd/system/kubelet.service.d/10-agk.conf", "systemd/kubelet.service.d/10-agk.conf", unit),
    )


def _kubeconfig(ctx: BootstrapContext, path: str, user: str, cert: str, server: str) -> NodeFile:
    text = render(
        "kubeconfig.j2",
        cluster=ctx.cluster,
        server=server,
        user=user,
        ca_file=f"{K8S_PKI}/ca.crt",
        cert_file=f"{K8S_PKI}/{cert}.crt",
        key_file=f"{K8S_PKI}/{cert}.key",
    )
    return NodeFile(path, path.removeprefix("/etc/kubernetes/"), text, "0600")


def _kube_proxy(ctx: BootstrapContext, host_name: str | None) -> tuple[NodeFile, ...]:
    """The kube-proxy static pod: every host that reaches ClusterIP services needs one (no DaemonSet:
    Services must work before anything in the cluster is scheduled)."""
    return (
        NodeFile(
            "/etc/kubernetes/manifests/kube-proxy.yaml",
            "manifests/kube-proxy.yaml",
            render("kube-proxy.yaml.j2", host_name=host_name, version=ctx.kubernetes_version),
        ),
        NodeFile(
            "/etc/kubernetes/kube-proxy-config.yaml",
            "kube-proxy-config.yaml",
            render("kube-proxy-config.yaml.j2", pod_interface_prefix=POD_INTERFACE_PREFIX),
        ),
        _kubeconfig(
            ctx, "/etc/kubernetes/kube-proxy.kubeconfig", "system:kube-proxy", pki.KUBE_PROXY, ctx.apiserver_url
        ),
    )


POOL_STATIC_PODS: tuple[str, ...] = ("kube-system/kube-proxy",)
"""Static pods on every pool node (all host-network); the kubelet's maxPods counts them."""

KUBE_PROXY_SECRETS = (
    SecretFile(f"{K8S_PKI}/{pki.KUBE_PROXY}.crt", f"cert:{pki.KUBE_PROXY}"),
    SecretFile(f"{K8S_PKI}/{pki.KUBE_PROXY}.key", f"key:{pki.KUBE_PROXY}"),
)


def _rules_service(name: str, description: str, rules_file: str) -> NodeFile:
    text = render("iptables-rules.service.j2", description=description, rules_file=rules_file)
    return NodeFile(f"/etc/systemd/system/{name}.service", f"systemd/{name}.service", text)


def mangle_rules(ctx: BootstrapContext, role: Role) -> str:
    """Egress accounting rules; the private ranges come from the address plan."""
    not_internet = (*ctx.internal_cidrs, *PLATFORM_CIDRS)
    return render(
        "mangle.rules.j2", role=role, cluster=ctx.cluster, internal=ctx.internal_cidrs, not_internet=not_internet
    )


def _etcd_member(ctx: BootstrapContext, etcd: EtcdCluster, name: str) -> NodeBundle:
    member = etcd.member(name)
    config = render(
        "etcd.conf.yml.j2",
        etcd=etcd,
        member=member,
        cluster=ctx.cluster,
        data_dir=f"{ETCD_MOUNT}/data",
        pki_dir=ETCD_PKI,
        client_port=ETCD_CLIENT_PORT,
        peer_port=ETCD_PEER_PORT,
        metrics_port=ETCD_METRICS_PORT,
    )
    unit = render("etcd-service-override.conf.j2", data_mount=ETCD_MOUNT, config_file=ETCD_CONFIG)
    secrets = (
        SecretFile(f"{ETCD_PKI}/ca.crt", f"cert:{pki.ETCD_CA}"),
        SecretFile(f"{ETCD_PKI}/server.crt", f"cert:{pki.etcd_server_cert(name)}"),
        SecretFile(f"{ETCD_PKI}/server.key", f"key:{pki.etcd_server_cert(name)}"),
        SecretFile(f"{ETCD_PKI}/peer.crt", f"cert:{pki.etcd_peer_cert(name)}"),
        SecretFile(f"{ETCD_PKI}/peer.key", f"key:{pki.etcd_peer_cert(name)}"),
        SecretFile(f"{ETCD_PKI}/healthcheck-client.crt", f"cert:{pki.ETCD_HEALTHCHECK}"),
        SecretFile(f"{ETCD_PKI}/healthcheck-client.key", f"key:{pki.ETCD_HEALTHCHECK}"),
    )
    device = LOCAL_NVME if etcd.storage == "local-nvme" else AZURE_DATA_DISK
    return NodeBundle(
        role=etcd.role,
        name=name,
        hostname=name,
        packages=("etcd-server", "etcd-client", "prometheus-node-exporter"),
        files=(
            _policy_rc(),
            NodeFile(ETCD_CONFIG, "etcd.conf.yml", config),
            NodeFile("/etc/systemd/system/etcd.service.d/10-agk.conf", "systemd/etcd.service.d/10-agk.conf", unit),
            _sysctl(ctx, etcd.role, node=False, forwarding=False),
        ),
        secrets=secrets,
        disk=DataDisk(device, "etcd", ETCD_MOUNT),
        runcmd=(
            f"rm -f {POLICY_RC}",
            "sysctl --system",
            f"install -d -o etcd -g etcd -m 0700 {ETCD_MOUNT}/data",
            f"chown -R etcd:etcd {ETCD_PKI}",
            "systemctl daemon-reload",
            "systemctl enable etcd",
            "systemctl restart etcd",
        ),
    )


def _apiserver(ctx: BootstrapContext, name: str) -> NodeBundle:
    host = next(h for h in ctx.control_plane.apiservers if h.name == name)
    common = {
        "host": host,
        "version": ctx.kubernetes_version,
        "pki": K8S_PKI,
        "cp": ctx.control_plane,
        "total_nodes": ctx.total_nodes,
        "service_cidr": ctx.service_cidr,
    }
    apiserver = render(
        "kube-apiserver.yaml.j2",
        **common,
        port=APISERVER_PORT,
        etcd=ctx.etcd,
        events_etcd=ctx.events_etcd,
        apiservers=len(ctx.control_plane.apiservers),
        cluster_domain=ctx.cluster_domain,
    )
    # The internal load balancer does not hairpin: components talk to their own host's server.
    local = f"https://127.0.0.1:{APISERVER_PORT}"
    files = (
        _policy_rc(),
        NodeFile("/etc/kubernetes/manifests/kube-apiserver.yaml", "manifests/kube-apiserver.yaml", apiserver),
        NodeFile(
            "/etc/kubernetes/manifests/kube-controller-manager.yaml",
            "manifests/kube-controller-manager.yaml",
            render("kube-controller-manager.yaml.j2", **common),
        ),
        NodeFile(
            "/etc/kubernetes/manifests/kube-scheduler.yaml",
            "manifests/kube-scheduler.yaml",
            render("kube-scheduler.yaml.j2", **common),
        ),
        NodeFile(
            "/etc/kubernetes/scheduler-config.yaml",
            "scheduler-config.yaml",
            render("scheduler-config.yaml.j2", cp=ctx.control_plane, total_nodes=ctx.total_nodes),
        ),
        NodeFile(
            "/etc/kubernetes/audit-policy.yaml",
            "audit-policy.yaml",
            render("audit-policy.yaml.j2", total_nodes=ctx.total_nodes),
        ),
        _kubeconfig(
            ctx,
            "/etc/kubernetes/controller-manager.kubeconfig",
            "system:kube-controller-manager",
            pki.CONTROLLER_MANAGER,
            local,
        ),
        _kubeconfig(ctx, "/etc/kubernetes/scheduler.kubeconfig", "system:kube-scheduler", pki.SCHEDULER, local),
        *_kubelet(ctx, "apiserver", name, None),
        _containerd(ctx, "apiserver", 0),
        _sysctl(ctx, "apiserver", node=False, forwarding=False),
        _install_kubernetes(ctx),
    )
    secret_map = {
        "ca.crt": f"cert:{pki.KUBERNETES_CA}",
        "ca.key": f"key:{pki.KUBERNETES_CA}",
        "apiserver.crt": f"cert:{pki.apiserver_cert(name)}",
        "apiserver.key": f"key:{pki.apiserver_cert(name)}",
        "etcd-ca.crt": f"cert:{pki.ETCD_CA}",
        "apiserver-etcd-client.crt": f"cert:{pki.APISERVER_ETCD_CLIENT}",
        "apiserver-etcd-client.key": f"key:{pki.APISERVER_ETCD_CLIENT}",
        "apiserver-kubelet-client.crt": f"cert:{pki.APISERVER_KUBELET_CLIENT}",
        "apiserver-kubelet-client.key": f"key:{pki.APISERVER_KUBELET_CLIENT}",
        "front-proxy-ca.crt": f"cert:{pki.FRONT_PROXY_CA}",
        "front-proxy-client.crt": f"cert:{pki.FRONT_PROXY_CLIENT}",
        "front-proxy-client.key": f"key:{pki.FRONT_PROXY_CLIENT}",
        "sa.key": f"key:{pki.SERVICE_ACCOUNT}",
        "sa.pub": f"pub:{pki.SERVICE_ACCOUNT}",
        f"{pki.CONTROLLER_MANAGER}.crt": f"cert:{pki.CONTROLLER_MANAGER}",
        f"{pki.CONTROLLER_MANAGER}.key": f"key:{pki.CONTROLLER_MANAGER}",
        f"{pki.SCHEDULER}.crt": f"cert:{pki.SCHEDULER}",
        f"{pki.SCHEDULER}.key": f"key:{pki.SCHEDULER}",
    }
    return NodeBundle(
        role="apiserver",
        name=name,
        hostname=name,
        packages=("containerd", "curl", "gpg", "prometheus-node-exporter"),
        files=files,
        secrets=tuple(SecretFile(f"{K8S_PKI}/{f}", s) for f, s in secret_map.items()),
        disk=None,
        runcmd=(
            f"rm -f {POLICY_RC}",
            "sysctl --system",
            "sh /opt/agk/install-kubernetes.sh",
            "systemctl daemon-reload",
            "systemctl restart containerd",
            "systemctl enable --now kubelet",
        ),
    )


def _pool(ctx: BootstrapContext, pool: NodePool) -> NodeBundle:
    role: Role = pool.role
    files = (
        _policy_rc(),
        *_kubelet(ctx, role, pool.name, pool),
        _kubeconfig(
            ctx,
            "/etc/kubernetes/bootstrap-kubelet.kubeconfig",
            f"system:bootstrap:{pool.name}",
            "bootstrap",
            ctx.apiserver_url,
        ),
        _containerd(ctx, role, pool.gpus),
        NodeFile(
            "/etc/cni/net.d/10-azure.conflist",
            "cni/10-azure.conflist",
            render("10-azure.conflist.j2", dns_service_ip=ctx.dns_service_ip, cluster_domain=ctx.cluster_domain),
        ),
        NodeFile(
            "/opt/agk/install-azure-cni.sh",
            "install-azure-cni.sh",
            render("install-azure-cni.sh.j2", version=ctx.node.azure_cni_version),
            "0755",
        ),
        _install_kubernetes(ctx),
        NodeFile(MANGLE_RULES, "iptables/mangle.rules", mangle_rules(ctx, role)),
        _rules_service(
            "agk-egress-accounting", "Egress accounting (iptables mangle) for iptables-exporter", MANGLE_RULES
        ),
        _sysctl(ctx, role, node=True, forwarding=True),
        *_kube_proxy(ctx, None),
    )
    cert = pki.kubelet_bootstrap_cert(pool.name)
    return NodeBundle(
        role=role,
        name=pool.name,
        hostname=None,
        # GPU pools boot the Azure HPC image: NVIDIA driver, DCGM, OFED, nvidia-container-toolkit and
        # its own containerd; installing Ubuntu's containerd over it could replace that runtime, so
        # GPU nodes install containerd only where the image has none (first runcmd below).
        packages=("curl", "gpg", "iptables") if pool.gpus else ("containerd", "curl", "gpg", "iptables"),
        files=files,
        secrets=(
            SecretFile(f"{K8S_PKI}/ca.crt", f"cert:{pki.KUBERNETES_CA}"),
            SecretFile(f"{K8S_PKI}/bootstrap.crt", f"cert:{cert}"),
            SecretFile(f"{K8S_PKI}/bootstrap.key", f"key:{cert}"),
            *KUBE_PROXY_SECRETS,
        ),
        disk=None,
        runcmd=(
            *((CONTAINERD_IF_MISSING,) if pool.gpus else ()),
            f"rm -f {POLICY_RC}",
            "sysctl --system",
            "sh /opt/agk/install-azure-cni.sh",
            "sh /opt/agk/install-kubernetes.sh",
            "systemctl daemon-reload",
            "systemctl enable --now agk-egress-accounting",
            "systemctl restart containerd",
            "systemctl enable --now kubelet",
        ),
    )


def prometheus_config(ctx: BootstrapContext, host: Host) -> str:
    etcd_jobs = [("etcd", ctx.etcd.members)]
    if ctx.events_etcd is not None:
        etcd_jobs.append(("events-etcd", ctx.events_etcd.members))
    fixed = (
        *ctx.control_plane.apiservers,
        *ctx.etcd.members,
        *(ctx.events_etcd.members if ctx.events_etcd else ()),
        *ctx.prometheus.hosts,
        ctx.nat,
    )
    return render(
        "prometheus.yml.j2",
        host=host,
        cluster=ctx.cluster,
        p=ctx.prometheus,
        rules_dir=PROM_RULES,
        apiserver_url=ctx.apiserver_url,
        apiserver_address=f"{ctx.apiserver_vip}:{APISERVER_PORT}",
        pki=PROM_PKI,
        prometheus_port=PROMETHEUS_PORT,
        drop_rules=DROP_RULES,
        etcd_jobs=etcd_jobs,
        etcd_metrics_port=ETCD_METRICS_PORT,
        fixed_hosts=fixed,
        node_exporter_port=NODE_EXPORTER_PORT,
    )


def alert_rules(ctx: BootstrapContext) -> dict[str, str]:
    """rules/<group>.yml -> content."""
    jobs = "etcd|events-etcd" if ctx.events_etcd else "etcd"
    return {
        "apiserver.yml": render(
            "rules/apiserver.yml.j2",
            throttle_ratio=API_THROTTLE_RATIO,
            slo=API_AVAILABILITY_SLO,
            budget=round(1 - API_AVAILABILITY_SLO, 6),
        ),
        "etcd.yml": render(
            "rules/etcd.yml.j2", jobs=jobs, quota_ratio=ETCD_QUOTA_RATIO, fsync_seconds=ETCD_FSYNC_P99_SECONDS
        ),
        "gpu.yml": render(
            "rules/gpu.yml.j2",
            xids=ctx.fatal_xids,
            xid_expr=" or ".join(f"DCGM_FI_DEV_XID_ERRORS == {x}" for x in ctx.fatal_xids),
        ),
        "nodes.yml": render(
            "rules/nodes.yml.j2", preflight_key=ctx.preflight_taint_key, preflight_timeout=ctx.preflight_timeout
        ),
    }


def _prometheus(ctx: BootstrapContext, name: str) -> NodeBundle:
    host = next(h for h in ctx.prometheus.hosts if h.name == name)
    unit = render(
        "prometheus.service.j2",
        cluster=ctx.cluster,
        p=ctx.prometheus,
        data_mount=PROM_MOUNT,
        data_dir=f"{PROM_MOUNT}/metrics2",
        config_file=PROM_CONFIG,
        prometheus_port=PROMETHEUS_PORT,
    )
    rules = tuple(NodeFile(f"{PROM_RULES}/{file}", f"rules/{file}", text) for file, text in alert_rules(ctx).items())
    return NodeBundle(
        role="prometheus",
        name=name,
        hostname=name,
        packages=("curl", "prometheus-node-exporter"),
        files=(
            _policy_rc(),
            NodeFile(
                "/opt/agk/install-prometheus.sh",
                "install-prometheus.sh",
                render("install-prometheus.sh.j2", version=ctx.prometheus.version, data_mount=PROM_MOUNT),
                "0755",
            ),
            NodeFile(PROM_CONFIG, "prometheus.yml", prometheus_config(ctx, host)),
            *rules,
            NodeFile("/etc/systemd/system/prometheus.service", "systemd/prometheus.service", unit),
            _sysctl(ctx, "prometheus", node=False, forwarding=False),
        ),
        secrets=(
            SecretFile(f"{PROM_PKI}/ca.crt", f"cert:{pki.KUBERNETES_CA}"),
            SecretFile(f"{PROM_PKI}/prometheus.crt", f"cert:{pki.PROMETHEUS}"),
            SecretFile(f"{PROM_PKI}/prometheus.key", f"key:{pki.PROMETHEUS}"),
        ),
        disk=DataDisk(AZURE_DATA_DISK, "prometheus", PROM_MOUNT),
        runcmd=(
            f"rm -f {POLICY_RC}",
            "sysctl --system",
            "sh /opt/agk/install-prometheus.sh",
            f"install -d -o prometheus -g prometheus -m 0755 {PROM_MOUNT}/metrics2",
            f"chown -R prometheus:prometheus {PROM_PKI}",
            "systemctl daemon-reload",
            "systemctl enable prometheus",
            "systemctl restart prometheus",
        ),
    )


def _nat(ctx: BootstrapContext) -> NodeBundle:
    name = ctx.nat.name
    vnet = tuple(n for n in ctx.internal_cidrs if n != ctx.service_cidr)
    files = (
        _policy_rc(),
        NodeFile(
            NAT_RULES,
            "iptables/nat.rules",
            render("nat.rules.j2", cluster=ctx.cluster, vnet_cidrs=vnet, service_cidr=ctx.service_cidr),
        ),
        _rules_service("agk-service-nat", "Masquerade DNATed service traffic into the spoke", NAT_RULES),
        *_kube_proxy(ctx, name),
        *_kubelet(ctx, "nat", name, None),
        _containerd(ctx, "nat", 0),
        _sysctl(ctx, "nat", node=False, forwarding=True),
        _install_kubernetes(ctx),
    )
    return NodeBundle(
        role="nat",
        name=name,
        hostname=name,
        packages=("containerd", "curl", "gpg", "iptables", "conntrack", "prometheus-node-exporter"),
        files=files,
        secrets=(
            SecretFile(f"{K8S_PKI}/ca.crt", f"cert:{pki.KUBERNETES_CA}"),
            *KUBE_PROXY_SECRETS,
        ),
        disk=None,
        runcmd=(
            f"rm -f {POLICY_RC}",
            "sysctl --system",
            "sh /opt/agk/install-kubernetes.sh",
            "systemctl daemon-reload",
            "systemctl enable --now agk-service-nat",
            "systemctl restart containerd",
            "systemctl enable --now kubelet",
        ),
    )


def bundle(ctx: BootstrapContext, role: Role, name: str) -> NodeBundle:
    """Everything host (or pool) ``name`` of ``role`` boots with."""
    if name not in names(ctx, role):
        raise KeyError(f"{role} {name!r} is not in cluster {ctx.cluster}: use one of {', '.join(names(ctx, role))}")
    if role == "etcd":
        return _etcd_member(ctx, ctx.etcd, name)
    if role == "events-etcd":
        assert ctx.events_etcd is not None
        return _etcd_member(ctx, ctx.events_etcd, name)
    if role == "apiserver":
        return _apiserver(ctx, name)
    if role == "prometheus":
        return _prometheus(ctx, name)
    if role == "nat":
        return _nat(ctx)
    return _pool(ctx, ctx.pool(name))
