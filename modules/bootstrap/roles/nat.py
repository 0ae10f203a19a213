"""The NAT host's bundle: service traffic masqueraded into the spoke, with kube-proxy and a kubelet."""

from __future__ import annotations

from modules.bootstrap.context import (
    BootstrapContext,
)
from modules.bootstrap.layout import PATHS
from modules.bootstrap.node_files import NodeFile
from modules.bootstrap.roles.bundle import NodeBundle
from modules.bootstrap.roles.parts import (
    NODE_EXPORTER_STEP,
    NODE_NETWORK_UNIT,
    NODE_SECRETS,
    RELOAD_STEP,
    SERVICE_NAT_JUMPS,
    UNBLOCK_STEP,
    base_files,
    containerd_file,
    kube_proxy_files,
    kubelet_files,
    node_network_files,
    rules_service,
    sysctl_file,
)
from modules.bootstrap.steps import Step, start
from modules.bootstrap.templating import render


def nat_bundle(ctx: BootstrapContext) -> NodeBundle:
    name = ctx.nat.name
    vnet = tuple(n for n in ctx.internal_cidrs if n != ctx.service_cidr)
    files = (
        *base_files("nat"),
        NodeFile(
            PATHS.nat_rules,
            "iptables/nat.rules",
            render("nat.rules.j2", cluster=ctx.cluster, vnet_cidrs=vnet, service_cidr=ctx.service_cidr),
        ),
        rules_service(
            "agk-service-nat", "Masquerade DNATed service traffic into the spoke", PATHS.nat_rules, SERVICE_NAT_JUMPS
        ),
        *node_network_files(ctx, "nat"),
        *kube_proxy_files(ctx, name),
        *kubelet_files(ctx, "nat", name, None, (NODE_NETWORK_UNIT,)),
        containerd_file(ctx, "nat", 0),
        sysctl_file(ctx, "nat", node=False, forwarding=True),
    )
    packages: tuple[str, ...] = ()  # containerd, the kubelet, iptables, conntrack, node-exporter: the image's
    return NodeBundle(
        role="nat",
        name=name,
        hostname=name,
        packages=packages,
        files=files,
        secrets=NODE_SECRETS,
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
