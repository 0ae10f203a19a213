"""A scale-set pool's bundle (GPU and system nodes): boot health, node identity from IMDS, the Scheduled
Events agent, egress accounting, Azure CNI and the kubelet, joined by a bootstrap token.
"""

from __future__ import annotations

import json

from modules import labels
from modules.bootstrap import node_tokens
from modules.bootstrap.context import (
    BOOT_HEALTH_PATH,
    IMDS_API_VERSION,
    IMDS_URL,
    PORTS,
    BootstrapContext,
    PoolBoot,
)
from modules.bootstrap.host import boot as host_boot
from modules.bootstrap.layout import PATHS
from modules.bootstrap.node_files import NodeFile, host_program
from modules.bootstrap.roles.bundle import NodeBundle, Role
from modules.bootstrap.roles.parts import (
    IMDS_RETRY_DELAY_S,
    IMDS_TRIES,
    KUBELET_ENV_VAR,
    MANGLE_JUMPS,
    NODE_IDENTITY_UNIT,
    NODE_NETWORK_UNIT,
    NODE_SECRETS,
    PLATFORM_CIDRS,
    POOL_STATIC_PODS,
    RELOAD_STEP,
    STATIC_PODS,
    UNBLOCK_STEP,
    base_files,
    containerd_file,
    kubelet_files,
    node_network_files,
    rules_service,
    script_file,
    sysctl_file,
    unit_file,
)
from modules.bootstrap.steps import Step, start
from modules.bootstrap.templating import render

BOOT_HEALTH_UNIT = "agk-boot-health.service"
SCHEDULED_EVENTS_UNIT = "agk-scheduled-events.service"
DRAINED_FOR = "drained-for"
"""The Node annotation (``<label_domain>/drained-for: <EventId>``) by which scheduled_events.py knows a cordon
is its own, to lift it once the event is over."""
NODE_IDENTITY_CACHE = "/var/lib/agk/scale-set-name"
"""The scale set name a GPU node read from IMDS on its first boot (a VM never changes scale set)."""
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


def mangle_rules(ctx: BootstrapContext, role: Role) -> str:
    """Egress accounting rules; the private ranges come from the address plan."""
    not_internet = (*ctx.internal_cidrs, *PLATFORM_CIDRS)
    return render(
        "mangle.rules.j2", role=role, cluster=ctx.cluster, internal=ctx.internal_cidrs, not_internet=not_internet
    )


# The kubelet's client certificate once its CSR is signed (certificate and key in one file, under its
# default --cert-dir). Its kubeconfig is no sign of that: with rotateCertificates and a bootstrap
# kubeconfig the kubelet writes /var/lib/kubelet/kubeconfig at startup, pointing at this file before
# it exists (pkg/kubelet/certificate/bootstrap/bootstrap.go LoadClientConfig).
KUBELET_CLIENT_CERT = "/var/lib/kubelet/pki/kubelet-client-current.pem"


def _boot_health(ctx: BootstrapContext, role: Role, steps: tuple[Step, ...]) -> tuple[NodeFile, ...]:
    script = PATHS.script("boot-health.py")
    return (
        unit_file(
            BOOT_HEALTH_UNIT,
            render("agk-boot-health.service.j2", script=script, port=PORTS.boot_health, path=BOOT_HEALTH_PATH),
        ),
        script_file(
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
        unit_file(NODE_IDENTITY_UNIT, render("agk-node-identity.service.j2", script=script)),
        script_file(
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
    return (unit_file(SCHEDULED_EVENTS_UNIT, unit), *(host_program(p) for p in POOL_PROGRAMS))


def pool_bundle(ctx: BootstrapContext, pool: PoolBoot) -> NodeBundle:
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
        *base_files(role),
        *_boot_health(ctx, role, steps),
        *_scheduled_events(ctx),
        *node_network_files(ctx, role),
        *(_node_identity(ctx) if gpu else ()),
        *kubelet_files(ctx, role, pool.name, pool, (NODE_NETWORK_UNIT,)),
        *token_files,
        containerd_file(ctx, role, pool.gpus),
        NodeFile(
            PATHS.cni_conflist,
            "cni/10-azure.conflist",
            render("10-azure.conflist.j2", dns_service_ip=ctx.dns_service_ip, cluster_domain=ctx.cluster_domain),
        ),
        NodeFile(PATHS.mangle_rules, "iptables/mangle.rules", mangle_rules(ctx, role)),
        rules_service(
            "agk-egress-accounting",
            "Egress accounting (iptables mangle) for iptables-exporter",
            PATHS.mangle_rules,
            MANGLE_JUMPS,
        ),
        sysctl_file(ctx, role, node=True, forwarding=True),
        *static_pods,
    )
    return NodeBundle(
        role=role,
        name=pool.name,
        hostname=None,
        packages=packages,
        files=files,
        secrets=NODE_SECRETS,
        facts=token_facts,
        disk=None,
        steps=steps,
        # The health endpoint starts first, so a node whose boot fails reports it.
        before_steps=(f"systemctl daemon-reload && {start(BOOT_HEALTH_UNIT)}",),
    )
