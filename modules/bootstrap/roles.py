"""What each node role boots with: files, data disk, boot steps, restart map (pure; no secrets inside).

A ``NodeBundle`` names the secrets it needs (``SecretFile``); ``delivery.document`` fills them in
and the result is the host's Key Vault secret (``agk render`` writes the same files for
inspection). Every path comes from ``layout.PATHS`` and every port from ``context.PORTS``, passed to
the templates.

Boot order on every host: cloud-init writes the small stable bootstrap from customData (userdata.py)
and runs it; it fetches the bundle, writes every file, formats and mounts the data disk (cloud-init,
before that), then runs the boot steps through ``agk-step``. Package postinst scripts start no
service while ``policy-rc.d`` denies it: the steps install every package first, then lift the
denial and start the units in dependency order. Units carry their own ordering
(``Before=``/``After=``), so later boots keep the same order without cloud-init. The last step
starts ``agk-sync.timer``: from then on the host re-reads its bundle every hour and restarts what
reads a changed file (``restart_map``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Literal, get_args

from modules import labels
from modules.bootstrap import alerting, dashboards, encryption, etcd_backup, monitoring, node_tokens, pki, versions
from modules.bootstrap.context import (
    ALERTMANAGER_CLUSTER_PORT,
    ALERTMANAGER_PORT,
    BOOT_HEALTH_PATH,
    ETCD_CLIENT_PORT,
    ETCD_METRICS_PORT,
    ETCD_PEER_PORT,
    IMDS_API_VERSION,
    IMDS_URL,
    NODE_EXPORTER_PORT,
    PORTS,
    PROMETHEUS_PORT,
    BootstrapContext,
    EtcdCluster,
    Host,
    PoolBoot,
    PoolRole,
)
from modules.bootstrap.host import boot as host_boot
from modules.bootstrap.layout import PATHS
from modules.bootstrap.monitoring import (
    API_AVAILABILITY_SLO,
    API_THROTTLE_RATIO,
    DROP_RULES,
    ETCD_FSYNC_P99_SECONDS,
    ETCD_QUOTA_RATIO,
    ksm_node_label,
)
from modules.bootstrap.node_files import FactFile, NodeFile, SecretFile, host_program
from modules.bootstrap.steps import STEP_SCRIPT, Step, start
from modules.bootstrap.templating import render
from modules.netplan import addressing
from modules.vm_sizing.formulas import SCORED_NODES, scheduler_score_percent

Role = Literal["etcd", "events-etcd", "apiserver", "gpu-node", "system-node", "prometheus", "nat"]
ROLES: tuple[Role, ...] = ("etcd", "events-etcd", "apiserver", "gpu-node", "system-node", "prometheus", "nat")
POOL_ROLES: frozenset[Role] = frozenset(get_args(PoolRole))
"""The roles that boot as scale-set pools (one bundle per pool, not per host)."""

# Azure CNI (transparent mode) names every pod's host-side veth azv<hash>: kube-proxy tells pod
# traffic apart by it (see kube-proxy-config.yaml.j2) and the host forwards it (forward-pod-traffic).
POD_INTERFACE_PREFIX = "azv"
FORWARD_CHAIN = "AGK-FORWARD"
# Azure's platform addresses (wire server, IMDS, link-local) and loopback are not internet traffic.
PLATFORM_CIDRS = addressing.PLATFORM
IMDS_ADDRESS = str(addressing.IMDS)
NODE_NETWORK_UNIT = "agk-node-network.service"
NODE_IDENTITY_UNIT = "agk-node-identity.service"
BOOT_HEALTH_UNIT = "agk-boot-health.service"
SCHEDULED_EVENTS_UNIT = "agk-scheduled-events.service"
DRAINED_FOR = "drained-for"
"""The Node annotation (``<label_domain>/drained-for: <EventId>``) by which scheduled_events.py knows a cordon
is its own, to lift it once the event is over."""
KUBELET_ENV_VAR = "AGK_NODE_LABELS"
# One run of a boot unit asks IMDS at most this often, this far apart (about a minute and a half with
# the 5 s timeout), then fails and systemd restarts it (Restart=on-failure in the units).
IMDS_TRIES = 10
IMDS_RETRY_DELAY_S = 5
NODE_IDENTITY_CACHE = "/var/lib/agk/scale-set-name"
"""The scale set name a GPU node read from IMDS on its first boot (a VM never changes scale set)."""


@dataclass(frozen=True)
class DataDisk:
    device: str
    label: str
    mount: str


Action = Literal["restart", "reload", "command", "static-pod"]
GateKind = Literal["etcd", "apiserver"]


@dataclass(frozen=True)
class Restart:
    """What a running host does when one of ``paths`` changed in its bundle (``sync.py run``)."""

    unit: str
    """systemd unit (static pods: the pod's name)."""
    action: Action
    """``restart``/``reload`` the unit, run ``command``, or ``static-pod``: nothing, the manifest's
    files hash changed with its files and the kubelet recreates the pod."""
    paths: tuple[str, ...]
    gate: Literal["", "etcd", "apiserver"] = ""
    """Only while the rest of the group can spare this host (modules/bootstrap/host/gates.py)."""
    command: str = ""


@dataclass(frozen=True)
class Gate:
    """The group a gated restart asks first: this host and every member's health URL."""

    kind: GateKind
    self_name: str
    members: tuple[tuple[str, str], ...]
    """(host, URL): etcd's metrics listener (/health), the API server's secure port (/readyz)."""
    ca: str = ""
    """The CA file that verifies the API servers' certificates."""


@dataclass(frozen=True)
class NodeBundle:
    role: Role
    name: str
    """Host name (fixed hosts) or pool name (scale sets)."""
    hostname: str | None
    packages: tuple[str, ...]
    """Installed by the first boot step (the list is also the step's command)."""
    files: tuple[NodeFile, ...]
    secrets: tuple[SecretFile, ...]
    disk: DataDisk | None
    steps: tuple[Step, ...]
    """The boot steps, in order (runcmd)."""
    before_steps: tuple[str, ...] = ()
    """Plain runcmd lines ahead of the steps (starting the boot health endpoint that reports them)."""
    restarts: tuple[Restart, ...] = ()
    """The restart map: what a running host restarts when a file changes (``restart_map``)."""
    gates: tuple[Gate, ...] = ()
    facts: tuple[FactFile, ...] = ()
    """Files of deploy-time values (FactFile)."""

    @property
    def runcmd(self) -> tuple[str, ...]:
        return (*self.before_steps, *(s.runcmd for s in self.steps))

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


def _unit(name: str, text: str) -> NodeFile:
    return NodeFile(PATHS.unit(name), f"systemd/{name}", text)


def _script(name: str, text: str) -> NodeFile:
    return NodeFile(PATHS.script(name), name, text, "0755")


def _common(role: Role) -> tuple[NodeFile, ...]:
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
        _script(STEP_SCRIPT.rsplit("/", 1)[1], render("agk-step.sh.j2", role=role, state=PATHS.boot_state)),
    )


def _sysctl(ctx: BootstrapContext, role: Role, *, node: bool, forwarding: bool) -> NodeFile:
    text = render("sysctl.conf.j2", role=role, cluster=ctx.cluster, node=node, forwarding=forwarding)
    return NodeFile(PATHS.sysctl, "sysctl.d/" + PATHS.sysctl.rsplit("/", 1)[1], text)


SYSCTL_STEP = Step("sysctl", f"sysctl -q -p {PATHS.sysctl}")
UNBLOCK_STEP = Step("allow-service-starts", f"rm -f {PATHS.policy_rc}", tries=1)
RELOAD_STEP = Step("daemon-reload", "systemctl daemon-reload")
NODE_EXPORTER_STEP = Step("node-exporter", start("prometheus-node-exporter"))


def _containerd(ctx: BootstrapContext, role: Role, gpus: int) -> NodeFile:
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


def _kubelet(
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


def _kubeconfig(ctx: BootstrapContext, path: str, user: str, cert: str, server: str) -> NodeFile:
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


def _kube_proxy(ctx: BootstrapContext, host_name: str | None) -> tuple[NodeFile, ...]:
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
        _kubeconfig(ctx, PATHS.kube_proxy_kubeconfig, "system:kube-proxy", pki.KUBE_PROXY, ctx.apiserver_url),
    )


STATIC_PODS = {"kube-system/kube-proxy": _kube_proxy}
# The HPC image makes nvidia containerd's default runtime, which by default hands a container every
# GPU its NVIDIA_VISIBLE_DEVICES names, requested or not. Only the device plugin's volume mounts
# (DEVICE_LIST_STRATEGY=volume-mounts) may select GPUs (NVIDIA's "Preventing unprivileged access to
# GPUs", nvidia-container-toolkit docs). The edit persists in config.toml; it runs before containerd
# first starts so no container ever starts under the permissive default.
GPU_ISOLATION_STEP = Step(
    "gpu-isolation",
    "nvidia-ctk config --in-place --set accept-nvidia-visible-devices-envvar-when-unprivileged=false "
    "--set accept-nvidia-visible-devices-as-volume-mounts=true",
)

POOL_STATIC_PODS: tuple[str, ...] = ("kube-system/kube-proxy",)
"""Static pods on every pool node (all host-network); the kubelet's maxPods counts them. ``_pool``
renders exactly these (from ``STATIC_PODS``), so the count cannot drift from what the nodes run."""

KUBE_PROXY_SECRETS = (
    SecretFile(f"{PATHS.pki}/{pki.KUBE_PROXY}.crt", f"cert:{pki.KUBE_PROXY}"),
    SecretFile(f"{PATHS.pki}/{pki.KUBE_PROXY}.key", f"key:{pki.KUBE_PROXY}"),
)


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


def _rules_service(name: str, description: str, rules_file: str, jumps: tuple[tuple[str, str, str], ...]) -> NodeFile:
    text = render("iptables-rules.service.j2", description=description, rules_file=rules_file, jumps=jumps)
    return _unit(f"{name}.service", text)


# Roles whose pods may not reach IMDS (forward-pod-traffic.sh.j2 says why): every pool. IMDS hands a
# token for any of the node's identities to whoever names it, and a pool identity reads the pool's Key
# Vault bundle. What needs IMDS in the cluster (cloud-provider-azure's controller-manager, the XID
# remediation) runs on the host network, where the node's own traffic keeps IMDS;
# tests/bootstrap/test_pod_imds.py keeps the two in step.
POD_IMDS_BLOCKED: frozenset[Role] = POOL_ROLES


def _node_network(ctx: BootstrapContext, role: Role) -> tuple[NodeFile, ...]:
    """The unit that settles the host network before containerd, the kubelet and the CNI (hosts
    running kube-proxy: pool nodes and the NAT host), with the scripts it runs."""
    pod_ips = PATHS.script("pod-ips-off-host.py")
    forward = PATHS.script("forward-pod-traffic.sh")
    return (
        _unit(
            NODE_NETWORK_UNIT,
            render("agk-node-network.service.j2", paths=PATHS, pod_ips_script=pod_ips, forward_script=forward),
        ),
        _script(
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
        _script(
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


def mangle_rules(ctx: BootstrapContext, role: Role) -> str:
    """Egress accounting rules; the private ranges come from the address plan."""
    not_internet = (*ctx.internal_cidrs, *PLATFORM_CIDRS)
    return render(
        "mangle.rules.j2", role=role, cluster=ctx.cluster, internal=ctx.internal_cidrs, not_internet=not_internet
    )


ETCD_JOIN_WAIT_S = 600
"""How long the first boot waits to see its etcd member in a quorum before going on without it."""


def _etcd_joined(member: Host, endpoint: str) -> NodeFile:
    text = render(
        "etcd-joined.sh.j2",
        name=member.name,
        endpoint=endpoint,
        pki=PATHS.etcd_pki,
        wait_s=ETCD_JOIN_WAIT_S,
        etcdctl=PATHS.etcd_program("etcdctl"),
    )
    return _script("etcd-joined.sh", text)


ETCD_UNIT = PATHS.unit("etcd.service")
ETCD_USER_STEP = Step(
    "etcd-user",
    # etcd.service runs as etcd. The image may carry the user, or only its group (useradd --user-group
    # refuses a name whose group exists): create what is missing, once; a later boot finds the user.
    "id -u etcd >/dev/null 2>&1 || useradd --system --no-create-home --home-dir "
    f"{PATHS.etcd_mount} --shell /usr/sbin/nologin "
    "$(getent group etcd >/dev/null && echo --gid etcd || echo --user-group) etcd",
)


def _etcd_release(role: Role) -> tuple[NodeFile, ...]:
    """The member's own unit for the image's upstream etcd, and the step script that checks its release."""
    unit = render(
        "etcd.service.j2",
        role=role,
        bin=PATHS.etcd_bin,
        etcd=PATHS.etcd_program("etcd"),
        data_mount=PATHS.etcd_mount,
        config_file=PATHS.etcd_config,
    )
    check = render("etcd-version.sh.j2", bin=PATHS.etcd_bin, version=versions.ETCD)
    return _unit("etcd.service", unit), _script("etcd-version.sh", check)


def _etcd_member(ctx: BootstrapContext, etcd: EtcdCluster, name: str) -> NodeBundle:
    member = etcd.member(name)
    config = render(
        "etcd.conf.yml.j2",
        etcd=etcd,
        member=member,
        cluster=ctx.cluster,
        data_dir=f"{PATHS.etcd_mount}/data",
        pki_dir=PATHS.etcd_pki,
        client_port=ETCD_CLIENT_PORT,
        peer_port=ETCD_PEER_PORT,
        metrics_port=ETCD_METRICS_PORT,
    )
    d = PATHS.etcd_pki
    secrets = (
        SecretFile(f"{d}/ca.crt", f"cert:{pki.ETCD_CA}"),
        SecretFile(f"{d}/server.crt", f"cert:{pki.etcd_server_cert(name)}"),
        SecretFile(f"{d}/server.key", f"key:{pki.etcd_server_cert(name)}"),
        SecretFile(f"{d}/peer.crt", f"cert:{pki.etcd_peer_cert(name)}"),
        SecretFile(f"{d}/peer.key", f"key:{pki.etcd_peer_cert(name)}"),
        SecretFile(f"{d}/healthcheck-client.crt", f"cert:{pki.ETCD_HEALTHCHECK}"),
        SecretFile(f"{d}/healthcheck-client.key", f"key:{pki.ETCD_HEALTHCHECK}"),
    )
    device = PATHS.local_nvme if etcd.storage == "local-nvme" else PATHS.azure_data_disk
    # etcd itself is the image's (PATHS.etcd_bin, the versions table's release), never a distribution package;
    # node-exporter too (modules/images/recipe.py ROLE_IMAGES): the boot installs nothing.
    packages: tuple[str, ...] = ()
    # Scheduled snapshots to blob storage: the main etcd only, when enabled (etcd_backup.py says why).
    backup = etcd_backup.member_files(ctx, etcd, name)
    return NodeBundle(
        role=etcd.role,
        name=name,
        hostname=name,
        packages=packages,
        files=(
            *_common(etcd.role),
            NodeFile(PATHS.etcd_config, "etcd.conf.yml", config),
            *_etcd_release(etcd.role),
            _etcd_joined(member, f"https://{member.ip}:{ETCD_CLIENT_PORT}"),
            _sysctl(ctx, etcd.role, node=False, forwarding=False),
            *backup.files,
        ),
        secrets=secrets,
        facts=backup.facts,
        disk=DataDisk(device, "etcd", PATHS.etcd_mount),
        steps=(
            Step("etcd-version", f"sh {PATHS.script('etcd-version.sh')}", tries=1),
            UNBLOCK_STEP,
            SYSCTL_STEP,
            ETCD_USER_STEP,
            Step("etcd-data", f"install -d -o etcd -g etcd -m 0700 {PATHS.etcd_mount}/data"),
            Step("etcd-pki", f"chown -R etcd:etcd {PATHS.etcd_pki}"),
            RELOAD_STEP,
            # Not blocking: etcd is started once it joins a quorum, whenever its peers boot (M9).
            Step("etcd", "systemctl enable etcd && systemctl restart --no-block etcd"),
            Step("etcd-joined", f"sh {PATHS.script('etcd-joined.sh')}", tries=1),
            NODE_EXPORTER_STEP,
            *backup.steps,
        ),
    )


def _apiserver(ctx: BootstrapContext, name: str) -> NodeBundle:
    host = next(h for h in ctx.control_plane.apiservers if h.name == name)
    common = {
        "host": host,
        "paths": PATHS,
        "ports": PORTS,
        "cp": ctx.control_plane,
        "service_cidr": ctx.service_cidr,
        "files_hash": files_hash_slot(ctx),
    }
    apiserver = render(
        "kube-apiserver.yaml.j2",
        **common,
        image=ctx.images.apiserver,
        etcd=ctx.etcd,
        events_etcd=ctx.events_etcd,
        apiservers=len(ctx.control_plane.apiservers),
        cluster_domain=ctx.cluster_domain,
        identity=ctx.identity,
        kubelet_serving_ca=pki.KUBELET_SERVING_CA,
    )
    # The internal load balancer does not hairpin: components talk to their own host's server.
    local = f"https://127.0.0.1:{PORTS.apiserver}"
    score = scheduler_score_percent(ctx.total_nodes)
    files = (
        *_common("apiserver"),
        NodeFile(f"{PATHS.manifests}/kube-apiserver.yaml", "manifests/kube-apiserver.yaml", apiserver),
        NodeFile(
            f"{PATHS.manifests}/kube-controller-manager.yaml",
            "manifests/kube-controller-manager.yaml",
            render(
                "kube-controller-manager.yaml.j2",
                **common,
                image=ctx.images.controller_manager,
                kubelet_serving_ca=pki.KUBELET_SERVING_CA,
            ),
        ),
        NodeFile(
            f"{PATHS.manifests}/kube-scheduler.yaml",
            "manifests/kube-scheduler.yaml",
            render("kube-scheduler.yaml.j2", **common, image=ctx.images.scheduler),
        ),
        NodeFile(
            PATHS.scheduler_config,
            "scheduler-config.yaml",
            render(
                "scheduler-config.yaml.j2",
                cp=ctx.control_plane,
                paths=PATHS,
                score_percent=score,
                scored_nodes=SCORED_NODES,
            ),
        ),
        NodeFile(PATHS.audit_policy, "audit-policy.yaml", render("audit-policy.yaml.j2")),
        *(
            (NodeFile(PATHS.authentication_config, "authentication-config.yaml", ctx.identity.authentication_config),)
            if ctx.identity
            else ()
        ),
        _kubeconfig(
            ctx,
            PATHS.controller_manager_kubeconfig,
            "system:kube-controller-manager",
            pki.CONTROLLER_MANAGER,
            local,
        ),
        _kubeconfig(ctx, PATHS.scheduler_kubeconfig, "system:kube-scheduler", pki.SCHEDULER, local),
        *_kubelet(ctx, "apiserver", name, None, ()),
        _containerd(ctx, "apiserver", 0),
        _sysctl(ctx, "apiserver", node=False, forwarding=False),
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
        # kube-controller-manager's kubelet-serving signer (pki.KUBELET_SERVING_CA): its key on these hosts only.
        f"{pki.KUBELET_SERVING_CA}.crt": f"cert:{pki.KUBELET_SERVING_CA}",
        f"{pki.KUBELET_SERVING_CA}.key": f"key:{pki.KUBELET_SERVING_CA}",
        "front-proxy-client.crt": f"cert:{pki.FRONT_PROXY_CLIENT}",
        "front-proxy-client.key": f"key:{pki.FRONT_PROXY_CLIENT}",
        "sa.key": f"key:{pki.signing_key(ctx)}",
        "sa.pub": f"pub:{pki.signing_key(ctx)}",
        # With workload identity the ECDSA key that signed before the RSA one still verifies (pki.SERVICE_ACCOUNT_RSA).
        **({"sa-legacy.pub": f"pub:{pki.SERVICE_ACCOUNT}"} if ctx.identity else {}),
        f"{pki.CONTROLLER_MANAGER}.crt": f"cert:{pki.CONTROLLER_MANAGER}",
        f"{pki.CONTROLLER_MANAGER}.key": f"key:{pki.CONTROLLER_MANAGER}",
        f"{pki.SCHEDULER}.crt": f"cert:{pki.SCHEDULER}",
        f"{pki.SCHEDULER}.key": f"key:{pki.SCHEDULER}",
    }
    packages: tuple[str, ...] = ()  # containerd, the kubelet and node-exporter are the image's
    issuer_files, issuer_secrets, issuer_facts, issuer_steps = node_tokens.apiserver_part(ctx)
    return NodeBundle(
        role="apiserver",
        name=name,
        hostname=name,
        packages=packages,
        files=(*files, *issuer_files),
        secrets=(
            *(SecretFile(f"{PATHS.pki}/{f}", s) for f, s in secret_map.items()),
            *issuer_secrets,
            # The Secret encryption keys: on API server hosts only (no other role encrypts or decrypts).
            SecretFile(PATHS.encryption_config, encryption.CONFIG_SECRET),
        ),
        facts=issuer_facts,
        disk=None,
        steps=(
            UNBLOCK_STEP,
            SYSCTL_STEP,
            RELOAD_STEP,
            Step("containerd", start("containerd")),
            Step("kubelet", start("kubelet")),
            *issuer_steps,
            NODE_EXPORTER_STEP,
        ),
    )


# The kubelet's client certificate once its CSR is signed (certificate and key in one file, under its
# default --cert-dir). Its kubeconfig is no sign of that: with rotateCertificates and a bootstrap
# kubeconfig the kubelet writes /var/lib/kubelet/kubeconfig at startup, pointing at this file before
# it exists (pkg/kubelet/certificate/bootstrap/bootstrap.go LoadClientConfig).
KUBELET_CLIENT_CERT = "/var/lib/kubelet/pki/kubelet-client-current.pem"


def _boot_health(ctx: BootstrapContext, role: Role, steps: tuple[Step, ...]) -> tuple[NodeFile, ...]:
    script = PATHS.script("boot-health.py")
    return (
        _unit(
            BOOT_HEALTH_UNIT,
            render("agk-boot-health.service.j2", script=script, port=PORTS.boot_health, path=BOOT_HEALTH_PATH),
        ),
        _script(
            "boot-health.py",
            render(
                "boot-health.py.j2",
                role=role,
                port=PORTS.boot_health,
                path=BOOT_HEALTH_PATH,
                steps_json=json.dumps([s.name for s in steps]),
                state=PATHS.boot_state,
                joined=f"{PATHS.boot_state}/joined",
                client_cert=KUBELET_CLIENT_CERT,
                ca=f"{PATHS.pki}/ca.crt",
                apiserver=ctx.apiserver_url,
                healthz_port=PORTS.kubelet_healthz,
            ),
        ),
    )


def _node_identity(ctx: BootstrapContext) -> tuple[NodeFile, ...]:
    script = PATHS.script("node-identity.sh")
    return (
        _unit(NODE_IDENTITY_UNIT, render("agk-node-identity.service.j2", script=script)),
        _script(
            "node-identity.sh",
            render(
                "node-identity.sh.j2",
                imds=IMDS_URL,
                api_version=IMDS_API_VERSION,
                label_key=labels.key(ctx.label_domain, labels.IB_ISLAND),
                run_dir=PATHS.run,
                env_file=PATHS.kubelet_env,
                env_var=KUBELET_ENV_VAR,
                cache=NODE_IDENTITY_CACHE,
                tries=IMDS_TRIES,
                delay=IMDS_RETRY_DELAY_S,
            ),
        ),
    )


POOL_PROGRAMS = ("scheduled_events.py",)
"""modules/bootstrap/host programs only the pool nodes run (the others: ``HOST_PROGRAMS``)."""


def _scheduled_events(ctx: BootstrapContext) -> tuple[NodeFile, ...]:
    """The Scheduled Events agent (host/scheduled_events.py): drains the node before Azure reboots, redeploys
    or deletes its VM, acting with the kubelet's own credential (the module docstring says why that suffices)."""
    unit = render(
        "agk-scheduled-events.service.j2",
        lib=host_boot.LIB,
        apiserver=ctx.apiserver_url,
        ca=f"{PATHS.pki}/ca.crt",
        credential=KUBELET_CLIENT_CERT,
        annotation=labels.key(ctx.label_domain, DRAINED_FOR),
    )
    return (_unit(SCHEDULED_EVENTS_UNIT, unit), *(host_program(p) for p in POOL_PROGRAMS))


def _pool(ctx: BootstrapContext, pool: PoolBoot) -> NodeBundle:
    role: Role = pool.role
    gpu = pool.gpus > 0
    static_pods = tuple(f for ref in POOL_STATIC_PODS for f in STATIC_PODS[ref](ctx, None))
    # The pool's image (modules/images: the GPU one is built on the Azure HPC image, which brings the NVIDIA
    # driver, DCGM, OFED and the container toolkit) carries containerd, runc, the kubelet, Azure CNI and the CNI
    # plugins from the versions table, and iptables: the boot installs nothing.
    packages: tuple[str, ...] = ()
    token_files, token_facts, token_step = node_tokens.pool_part(ctx)
    steps = (
        UNBLOCK_STEP,
        RELOAD_STEP,
        Step("host-network", start(NODE_NETWORK_UNIT)),
        *((Step("node-identity", start(NODE_IDENTITY_UNIT)),) if gpu else ()),
        *((GPU_ISOLATION_STEP,) if gpu else ()),
        Step("egress-accounting", start("agk-egress-accounting.service")),
        Step("containerd", start("containerd")),
        token_step,
        Step("kubelet", start("kubelet")),
        Step("scheduled-events", start(SCHEDULED_EVENTS_UNIT)),
    )
    files = (
        *_common(role),
        *_boot_health(ctx, role, steps),
        *_scheduled_events(ctx),
        *_node_network(ctx, role),
        *(_node_identity(ctx) if gpu else ()),
        *_kubelet(ctx, role, pool.name, pool, (NODE_NETWORK_UNIT,)),
        *token_files,
        _containerd(ctx, role, pool.gpus),
        NodeFile(
            PATHS.cni_conflist,
            "cni/10-azure.conflist",
            render("10-azure.conflist.j2", dns_service_ip=ctx.dns_service_ip, cluster_domain=ctx.cluster_domain),
        ),
        NodeFile(PATHS.mangle_rules, "iptables/mangle.rules", mangle_rules(ctx, role)),
        _rules_service(
            "agk-egress-accounting",
            "Egress accounting (iptables mangle) for iptables-exporter",
            PATHS.mangle_rules,
            MANGLE_JUMPS,
        ),
        _sysctl(ctx, role, node=True, forwarding=True),
        *static_pods,
    )
    return NodeBundle(
        role=role,
        name=pool.name,
        hostname=None,
        packages=packages,
        files=files,
        secrets=(
            SecretFile(f"{PATHS.pki}/ca.crt", f"cert:{pki.KUBERNETES_CA}"),
            *KUBE_PROXY_SECRETS,
        ),
        facts=token_facts,
        disk=None,
        steps=steps,
        # The health endpoint starts first, so a node whose boot fails reports it.
        before_steps=(f"systemctl daemon-reload && {start(BOOT_HEALTH_UNIT)}",),
    )


def prometheus_shard(ctx: BootstrapContext, host: Host) -> int:
    """The share of the kubelet targets ``host`` scrapes: its position among the Prometheus hosts modulo the
    shard count, so hosts i and i + shards (the share's replicas) scrape the same nodes."""
    return ctx.prometheus.hosts.index(host) % ctx.prometheus.shards


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
        rules_dir=PATHS.prom_rules,
        apiserver_url=ctx.apiserver_url,
        shard=prometheus_shard(ctx, host),
        pki=PATHS.prom_pki,
        kubelet_ca=f"{PATHS.prom_pki}/{pki.KUBELET_SERVING_CA}.crt",
        prometheus_port=PROMETHEUS_PORT,
        drop_rules=DROP_RULES,
        etcd_jobs=etcd_jobs,
        etcd_metrics_port=ETCD_METRICS_PORT,
        fixed_hosts=fixed,
        node_exporter_port=NODE_EXPORTER_PORT,
        alertmanagers=ctx.prometheus.hosts,
        alertmanager_port=ALERTMANAGER_PORT,
    )


def island_join(expr: str) -> str:
    """``expr`` (one series per node, a ``node`` label) with the node's InfiniBand island as label
    ``island``; nodes without one (system nodes) keep their series without it."""
    return f"({expr}) * on(node) group_left(island) agk:node_island or ({expr}) unless on(node) agk:node_island"


def alert_rules(ctx: BootstrapContext) -> dict[str, str]:
    """rules/<group>.yml -> content."""
    jobs = "etcd|events-etcd" if ctx.events_etcd else "etcd"
    xid_expr = " or ".join(f"DCGM_FI_DEV_XID_ERRORS == {x}" for x in ctx.fatal_xids)
    common = {
        "severity": monitoring.severity,
        "runbook": lambda name: alerting.runbook_url(ctx.alerting, monitoring.runbook_anchor(name)),
        "island": island_join,
    }
    preflight_label = ksm_node_label(ctx.preflight_taint_key)
    return {
        "apiserver.yml": render(
            "rules/apiserver.yml.j2",
            throttle_ratio=API_THROTTLE_RATIO,
            slo=API_AVAILABILITY_SLO,
            budget=round(1 - API_AVAILABILITY_SLO, 6),
            **common,
        ),
        "certs.yml": render(
            "rules/certs.yml.j2",
            warn_days=monitoring.CERT_WARN_DAYS,
            critical_days=monitoring.CERT_CRITICAL_DAYS,
            **common,
        ),
        "etcd.yml": render(
            "rules/etcd.yml.j2",
            jobs=jobs,
            quota_ratio=ETCD_QUOTA_RATIO,
            fsync_seconds=ETCD_FSYNC_P99_SECONDS,
            **common,
        ),
        "gpu.yml": render("rules/gpu.yml.j2", xids=ctx.fatal_xids, xid_expr=xid_expr, **common),
        "islands.yml": render(
            "rules/islands.yml.j2",
            island_key=labels.key(ctx.label_domain, labels.IB_ISLAND),
            island_label=ksm_node_label(labels.key(ctx.label_domain, labels.IB_ISLAND)),
            preflight_label=preflight_label,
            xid_expr=xid_expr,
            island_alert=monitoring.ISLAND_ALERT,
            min_nodes=monitoring.ISLAND_UNHEALTHY_MIN_NODES,
            ratio=monitoring.ISLAND_UNHEALTHY_RATIO,
            **common,
        ),
        "nodes.yml": render(
            "rules/nodes.yml.j2",
            preflight_key=ctx.preflight_taint_key,
            preflight_label=preflight_label,
            preflight_timeout=ctx.preflight_timeout,
            **common,
        ),
        **etcd_backup.alert_rules(ctx, **common),
    }


def _alertmanager(ctx: BootstrapContext, host: Host) -> tuple[NodeFile, ...]:
    """Alertmanager beside Prometheus: its release, configuration and unit, peering with the other hosts."""
    unit = render(
        "alertmanager.service.j2",
        cluster=ctx.cluster,
        host=host,
        peers=[h for h in ctx.prometheus.hosts if h != host],
        data_mount=PATHS.prom_mount,
        data_dir=alerting.DATA_DIR,
        config_file=alerting.CONFIG_FILE,
        port=ALERTMANAGER_PORT,
        cluster_port=ALERTMANAGER_CLUSTER_PORT,
    )
    files: tuple[NodeFile, ...] = (
        NodeFile(
            alerting.CONFIG_FILE, "alertmanager/alertmanager.yml", alerting.render_config(ctx.alerting, ctx.cluster)
        ),
        _unit("alertmanager.service", unit),
    )
    if prometheus_secrets(ctx):
        lib = host_boot.LIB
        files += (
            _unit(alerting.SECRETS_UNIT, render("agk-alert-secrets.service.j2", lib=lib, config=ALERT_SECRETS_CONFIG)),
            _unit(alerting.SECRETS_TIMER, render("agk-alert-secrets.timer.j2")),
            host_program("alert_secrets.py"),
        )
    return files


ALERT_SECRETS_CONFIG = "/etc/agk/alert-secrets.json"


def prometheus_secrets(ctx: BootstrapContext) -> tuple[str, ...]:
    """The Key Vault secrets every Prometheus host copies (alert_secrets.py): the receivers', and Grafana's
    admin password when Grafana runs."""
    grafana = (dashboards.ADMIN_SECRET,) if ctx.prometheus.grafana_version else ()
    return (*ctx.alerting.secrets, *grafana)


def _grafana(ctx: BootstrapContext, host: Host) -> tuple[NodeFile, ...]:
    """Grafana's release script, configuration, provisioning and dashboards (modules/bootstrap/dashboards.py)."""
    if not ctx.prometheus.grafana_version:
        return ()
    made: list[NodeFile] = []
    for path, text in dashboards.files(ctx, host).items():
        rel = "grafana/" + path.removeprefix("/etc/grafana/").removeprefix("/var/lib/grafana/")
        made.append(NodeFile(path, rel, text, "0644"))
    return tuple(made)


PROMETHEUS_USER_STEP = Step(
    "prometheus-user",
    f"id prometheus >/dev/null 2>&1 || useradd --system --home-dir {PATHS.prom_mount} --shell /usr/sbin/nologin "
    "prometheus",
)
"""The user Prometheus and Alertmanager run as (the image's prometheus-node-exporter package usually made it)."""


def _alert_secret_steps(ctx: BootstrapContext) -> tuple[Step, ...]:
    """Copy the receivers' secrets before Alertmanager first starts (never failing the boot: a secret not
    set yet is the operator's to set, and the timer copies it when it is), then keep them current."""
    if not prometheus_secrets(ctx):
        return ()
    once = Step("alert-secrets", f"python3 {host_boot.LIB}/alert_secrets.py || true", tries=1)
    return (once, Step("alert-secrets-timer", start(alerting.SECRETS_TIMER)))


def _prometheus(ctx: BootstrapContext, name: str) -> NodeBundle:
    host = next(h for h in ctx.prometheus.hosts if h.name == name)
    unit = render(
        "prometheus.service.j2",
        cluster=ctx.cluster,
        p=ctx.prometheus,
        data_mount=PATHS.prom_mount,
        data_dir=f"{PATHS.prom_mount}/metrics2",
        config_file=PATHS.prom_config,
        prometheus_port=PROMETHEUS_PORT,
    )
    rules = tuple(
        NodeFile(f"{PATHS.prom_rules}/{file}", f"rules/{file}", text) for file, text in alert_rules(ctx).items()
    )
    packages: tuple[str, ...] = ()  # Prometheus, Alertmanager, Grafana and node-exporter are the image's
    return NodeBundle(
        role="prometheus",
        name=name,
        hostname=name,
        packages=packages,
        files=(
            *_common("prometheus"),
            NodeFile(PATHS.prom_config, "prometheus.yml", prometheus_config(ctx, host)),
            *rules,
            _unit("prometheus.service", unit),
            *_alertmanager(ctx, host),
            *_grafana(ctx, host),
            _sysctl(ctx, "prometheus", node=False, forwarding=False),
        ),
        secrets=(
            SecretFile(f"{PATHS.prom_pki}/ca.crt", f"cert:{pki.KUBERNETES_CA}"),
            # What the kubelet and cAdvisor jobs verify kubelets' serving certificates against.
            SecretFile(f"{PATHS.prom_pki}/{pki.KUBELET_SERVING_CA}.crt", f"cert:{pki.KUBELET_SERVING_CA}"),
            SecretFile(f"{PATHS.prom_pki}/prometheus.crt", f"cert:{pki.PROMETHEUS}"),
            SecretFile(f"{PATHS.prom_pki}/prometheus.key", f"key:{pki.PROMETHEUS}"),
        ),
        facts=(FactFile(ALERT_SECRETS_CONFIG, alerting.ALERT_FACT),) if prometheus_secrets(ctx) else (),
        disk=DataDisk(PATHS.azure_data_disk, "prometheus", PATHS.prom_mount),
        steps=(
            PROMETHEUS_USER_STEP,
            Step(
                "alertmanager-dirs",
                f"install -d -o prometheus -g prometheus -m 0750 {alerting.DATA_DIR}"
                f" && install -d -o root -g prometheus -m 0750 {alerting.SECRETS_DIR}",
            ),
            # Grafana reads its admin password from the receivers' secrets folder (root:prometheus 0640).
            *((Step("grafana-group", "usermod -aG prometheus grafana"),) if ctx.prometheus.grafana_version else ()),
            UNBLOCK_STEP,
            SYSCTL_STEP,
            Step("prometheus-data", f"install -d -o prometheus -g prometheus -m 0755 {PATHS.prom_mount}/metrics2"),
            Step("prometheus-pki", f"chown -R prometheus:prometheus {PATHS.prom_pki}"),
            RELOAD_STEP,
            Step("prometheus", start("prometheus")),
            *_alert_secret_steps(ctx),
            Step("alertmanager", start("alertmanager")),
            *((Step("grafana", start("grafana-server")),) if ctx.prometheus.grafana_version else ()),
            NODE_EXPORTER_STEP,
        ),
    )


def _nat(ctx: BootstrapContext) -> NodeBundle:
    name = ctx.nat.name
    vnet = tuple(n for n in ctx.internal_cidrs if n != ctx.service_cidr)
    files = (
        *_common("nat"),
        NodeFile(
            PATHS.nat_rules,
            "iptables/nat.rules",
            render("nat.rules.j2", cluster=ctx.cluster, vnet_cidrs=vnet, service_cidr=ctx.service_cidr),
        ),
        _rules_service(
            "agk-service-nat", "Masquerade DNATed service traffic into the spoke", PATHS.nat_rules, SERVICE_NAT_JUMPS
        ),
        *_node_network(ctx, "nat"),
        *_kube_proxy(ctx, name),
        *_kubelet(ctx, "nat", name, None, (NODE_NETWORK_UNIT,)),
        _containerd(ctx, "nat", 0),
        _sysctl(ctx, "nat", node=False, forwarding=True),
    )
    packages: tuple[str, ...] = ()  # containerd, the kubelet, iptables, conntrack, node-exporter: the image's
    return NodeBundle(
        role="nat",
        name=name,
        hostname=name,
        packages=packages,
        files=files,
        secrets=(
            SecretFile(f"{PATHS.pki}/ca.crt", f"cert:{pki.KUBERNETES_CA}"),
            *KUBE_PROXY_SECRETS,
        ),
        disk=None,
        steps=(
            UNBLOCK_STEP,
            RELOAD_STEP,
            Step("host-network", start(NODE_NETWORK_UNIT)),
            Step("service-nat", start("agk-service-nat.service")),
            Step("containerd", start("containerd")),
            Step("kubelet", start("kubelet")),
            NODE_EXPORTER_STEP,
        ),
    )


# ---- delivery: what every host also gets so its bundle keeps reaching it after the first boot ----

HOST_PROGRAMS = (
    "boot.py",
    "bundle.py",
    "files.py",
    "gates.py",
    "image.py",
    "imds.py",
    "node_token.py",
    "sync.py",
    "vault.py",
)
"""modules/bootstrap/host, shipped verbatim to /opt/agk/lib (the first five also in customData:
``host_boot.STAGE0``); the bundle always brings the current copies."""
SYNC_SERVICE = "agk-sync.service"
SYNC_TIMER = "agk-sync.timer"
SYNC_TIMEOUT_S = 30 * 60
SYNC_TIMER_STEP = Step("sync-timer", start(SYNC_TIMER))
SYNC_MINUTE = {"etcd": 0, "events-etcd": 4, "apiserver": 8, "prometheus": 12, "nat": 16}
"""Minute of the hour a role's first host syncs; the others follow at 60/count minutes apart, so two
hosts of one role never act together, and the roles are 4 minutes apart from each other."""
FILES_HASH = "files-sha256"
FILES_HASH_SLOT = "files-sha256-of-the-mounted-files"
"""Stands in the static pods' hash annotation until ``delivery.document`` knows the files' contents."""


@dataclass(frozen=True)
class FilesHash:
    key: str
    value: str


def files_hash_slot(ctx: BootstrapContext) -> FilesHash:
    return FilesHash(labels.key(ctx.label_domain, FILES_HASH), FILES_HASH_SLOT)


def sync_minute(ctx: BootstrapContext, role: Role, name: str) -> int | None:
    """The minute of the hour a fixed host's sync runs; None for pools (spread at random)."""
    if role not in SYNC_MINUTE:
        return None
    hosts = names(ctx, role)
    return (SYNC_MINUTE[role] + hosts.index(name) * (60 // len(hosts))) % 60


def _sync(ctx: BootstrapContext, role: Role, name: str) -> tuple[NodeFile, ...]:
    minute = sync_minute(ctx, role, name)
    spacing = 60 // len(names(ctx, role))
    service = render(
        "agk-sync.service.j2", role=role, name=name, sync=f"{host_boot.LIB}/sync.py", timeout_s=SYNC_TIMEOUT_S
    )
    timer = render("agk-sync.timer.j2", name=name, minute=minute, spacing=spacing)
    return (_unit(SYNC_SERVICE, service), _unit(SYNC_TIMER, timer), *(host_program(p) for p in HOST_PROGRAMS))


def _gates(ctx: BootstrapContext, role: Role, name: str) -> tuple[Gate, ...]:
    if role in ("etcd", "events-etcd"):
        etcd = ctx.etcd if role == "etcd" else ctx.events_etcd
        assert etcd is not None
        members = tuple((m.name, f"http://{m.ip}:{ETCD_METRICS_PORT}") for m in etcd.members)
        return (Gate("etcd", name, members),)
    if role == "apiserver":
        members = tuple((h.name, f"https://{h.ip}:{PORTS.apiserver}") for h in ctx.control_plane.apiservers)
        return (Gate("apiserver", name, members, ca=f"{PATHS.pki}/ca.crt"),)
    return ()


POOL_RUNTIME_FILES = frozenset(
    {PATHS.kubelet_config, PATHS.kubelet_dropin, PATHS.containerd_config, PATHS.containerd_dropin}
)
"""A pool's kubelet and containerd settings: its nodes take them when booted or reimaged, a few at a time
after a drain (README "Rolling a scale set"), never from the hourly sync (boot-only). Written or restarted
from the sync, they would roll the whole pool within the hour under running jobs, or load at the next
unplanned restart of an undrained node; and some changes (the CPU manager policy, the reserved CPUs) keep a
kubelet with CPU manager state from starting at all (kubernetes.io, "Control CPU Management Policies on
the Node": drain, remove cpu_manager_state, restart)."""


def _restart_for(path: str) -> Restart | None:
    """What reads ``path`` on a running host (None: only a boot step or the next boot reads it)."""
    if path.startswith(PATHS.manifests + "/"):
        pod = path.rsplit("/", 1)[1].removesuffix(".yaml")
        return Restart(pod, "static-pod", (path,), "apiserver" if pod == "kube-apiserver" else "")
    if path in (PATHS.etcd_config, ETCD_UNIT) or path.startswith(PATHS.etcd_pki + "/"):
        return Restart("etcd.service", "restart", (path,), "etcd")
    if path in (PATHS.kubelet_config, PATHS.kubelet_dropin):
        return Restart("kubelet.service", "restart", (path,))
    if path in (PATHS.containerd_config, PATHS.containerd_dropin):
        return Restart("containerd.service", "restart", (path,))
    if path == PATHS.unit("prometheus.service"):
        return Restart("prometheus.service", "restart", (path,))
    if path == PATHS.unit("alertmanager.service"):
        return Restart("alertmanager.service", "restart", (path,))
    # Grafana reads its settings and data sources at start; the dashboards' provider re-reads its folder.
    if path.startswith(("/etc/grafana/",)):
        return Restart("grafana-server.service", "restart", (path,))
    # SIGHUP re-reads alertmanager.yml; the receivers' secret files are read at each notification.
    if path == alerting.CONFIG_FILE:
        return Restart("alertmanager.service", "reload", (path,))
    # SIGHUP re-reads the configuration and rules; the scrape clients read their certificate and key
    # on every handshake (prometheus/common config.TLSConfig.getClientCertificate).
    if path == PATHS.prom_config or path.startswith((PATHS.prom_rules + "/", PATHS.prom_pki + "/")):
        return Restart("prometheus.service", "reload", (path,))
    if path in (PATHS.unit(BOOT_HEALTH_UNIT), PATHS.script("boot-health.py")):
        return Restart(BOOT_HEALTH_UNIT, "restart", (path,))
    if path in (PATHS.unit(SCHEDULED_EVENTS_UNIT), *(f"{host_boot.LIB}/{p}" for p in POOL_PROGRAMS)):
        return Restart(SCHEDULED_EVENTS_UNIT, "restart", (path,))
    if path == PATHS.sysctl:
        return Restart("sysctl", "command", (path,), command=SYSCTL_STEP.command)
    if path == PATHS.unit(SYNC_TIMER):
        return Restart(SYNC_TIMER, "restart", (path,))
    if path == PATHS.unit(alerting.SECRETS_TIMER):
        return Restart(alerting.SECRETS_TIMER, "restart", (path,))
    if path == PATHS.unit(CERT_EXPIRY_TIMER):
        return Restart(CERT_EXPIRY_TIMER, "restart", (path,))
    # The issuer's service, program, configuration and certificate are read afresh by each run.
    if path == PATHS.unit(node_tokens.ISSUER_TIMER):
        return Restart(node_tokens.ISSUER_TIMER, "restart", (path,))
    return None


# Order of a run's actions: settings first, the runtime before what runs on it, etcd last (it waits).
_ACTION_ORDER = ("command", "containerd.service", "kubelet.service", "static-pod", "reload", "restart", "etcd.service")


def restart_map(node: NodeBundle) -> tuple[Restart, ...]:
    """One entry per unit and action, listing every path of the bundle that it reads."""
    merged: dict[tuple[str, str], Restart] = {}
    read_again = [f.path for f in node.files if not f.boot_only] + [s.path for s in node.secrets]
    for path in read_again:
        found = _restart_for(path)
        if found is None:
            continue
        key = (found.unit, found.action)
        have = merged.get(key)
        merged[key] = replace(have, paths=(*have.paths, path)) if have else found

    def order(r: Restart) -> tuple[int, str]:
        slot = r.unit if r.unit in _ACTION_ORDER else r.action
        return _ACTION_ORDER.index(slot), r.unit

    return tuple(sorted(merged.values(), key=order))


CERT_EXPIRY_SERVICE = "agk-cert-expiry.service"
CERT_EXPIRY_TIMER = "agk-cert-expiry.timer"
CERT_EXPIRY_TEXTFILE = f"{PATHS.node_exporter_textfiles}/agk_certificates.prom"
CERT_DIRS = (PATHS.pki, PATHS.etcd_pki, PATHS.prom_pki)
"""Every directory a fixed host keeps certificates in (those a role lacks are simply empty)."""
CERT_EXPIRY_STEP = Step("cert-expiry-timer", start(CERT_EXPIRY_TIMER))


def _cert_expiry() -> tuple[NodeFile, ...]:
    """The certificate expiry report of a fixed host (host/cert_expiry.py). Pool nodes need none: their
    kubelets report their own client certificate (kubelet_certificate_manager_client_ttl_seconds) and the
    kube-proxy certificate and CA they carry are the same certificates the NAT host reports."""
    lib = host_boot.LIB
    service = render(
        "agk-cert-expiry.service.j2",
        lib=lib,
        textfile=CERT_EXPIRY_TEXTFILE,
        textfile_dir=PATHS.node_exporter_textfiles,
        dirs=CERT_DIRS,
    )
    return (
        _unit(CERT_EXPIRY_SERVICE, service),
        _unit(CERT_EXPIRY_TIMER, render("agk-cert-expiry.timer.j2")),
        host_program("cert_expiry.py"),
    )


IMAGE_EXPECTED = "/etc/agk/image-expected.json"
"""The node image a host's bundle was made for (``image.py`` compares the image's manifest with it)."""


def image_check(ctx: BootstrapContext, role: Role) -> tuple[NodeFile, Step]:
    """The expectation file and the first boot step of every role: the host booted its role's node image, of the
    cluster's release, with the versions table's rows (host/image.py). Not retried: a wrong image stays wrong."""
    expected = ctx.node_images.get(role)
    if expected is None:
        raise KeyError(
            f"no node image for role {role}: the context names one per role (modules/stackplan/boot_context.py)"
        )
    text = json.dumps(expected.to_json(), indent=2, sort_keys=True) + "\n"
    return (
        NodeFile(IMAGE_EXPECTED, "image-expected.json", text),
        Step("image", f"python3 {host_boot.LIB}/image.py {IMAGE_EXPECTED}", tries=1),
    )


def _delivered(ctx: BootstrapContext, node: NodeBundle) -> NodeBundle:
    """``node`` with what keeps its bundle reaching it: the image check first, the sync units, the host programs,
    the timer's boot step, the restart map and the gates; fixed hosts also report their certificates' expiry."""
    expected, check = image_check(ctx, node.role)
    files = (expected, *node.files)
    steps = (check, *node.steps)
    if node.role in POOL_ROLES:
        files = tuple(replace(f, boot_only=True) if f.path in POOL_RUNTIME_FILES else f for f in files)
    else:
        files = (*files, *_cert_expiry())
        steps = (*steps, CERT_EXPIRY_STEP)
    withsync = replace(
        node,
        files=(*files, *_sync(ctx, node.role, node.name)),
        steps=(*steps, SYNC_TIMER_STEP),
        gates=_gates(ctx, node.role, node.name),
    )
    return replace(withsync, restarts=restart_map(withsync))


def bundle(ctx: BootstrapContext, role: Role, name: str) -> NodeBundle:
    """Everything host (or pool) ``name`` of ``role`` boots with."""
    if name not in names(ctx, role):
        raise KeyError(f"{role} {name!r} is not in cluster {ctx.cluster}: use one of {', '.join(names(ctx, role))}")
    return _delivered(ctx, _role_bundle(ctx, role, name))


def _role_bundle(ctx: BootstrapContext, role: Role, name: str) -> NodeBundle:
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
