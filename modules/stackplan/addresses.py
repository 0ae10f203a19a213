"""From validated stack config to the address plan: which subnets each VNet needs, and where.

A cluster stack's plan is computed with its whole hub-and-spoke network in view (the hub it
names and every other spoke of that hub in ``stacks/``), so overlaps between peered VNets are
caught before anything is deployed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from ipaddress import IPv4Network
from pathlib import Path

from modules.address_plan.addressing import parse_cidr
from modules.address_plan.findings import Finding
from modules.address_plan.host_addresses import ClusterAddresses, host
from modules.address_plan.limits import Limits
from modules.address_plan.plan import NetworkPlan, SubnetRequest, VNetPlan, VNetSpec, plan_network
from modules.address_plan.subnet_sizes import usable
from modules.config_model import PROJECT
from modules.errors import ConfigError
from modules.stackplan.config import (
    ClusterConfig,
    ClusterStack,
    HubStack,
    NetworkedStack,
    StackConfig,
    load_stack,
    read_stack_file,
    stack_file,
    stack_names,
)
from modules.stackplan.pools import ClusterPools, plan_pools
from modules.tags import encode_limits

# Azure requires these exact names and a /26 or larger for Bastion and Firewall, whose instances
# scale out inside the subnet: the whole /26 counts as needed.
BASTION_SUBNET = "AzureBastionSubnet"
FIREWALL_SUBNET = "AzureFirewallSubnet"
# Fixed hosts get twice their count so a VM can be replaced before its predecessor is gone.
REPLACEMENT_FACTOR = 2
# Findings that mean Azure would refuse part of the deployment: the program stops on them (subnet-calc
# reports them as warnings).
HARD_LIMIT_FINDINGS = frozenset(
    {"vnet-private-ip-limit", "peered-group-ip-limit", "subnets-per-vnet-limit", "vnet-peering-limit"}
)


def limits_for(config: NetworkedStack, stack: str = "") -> Limits:
    try:
        return Limits.default().with_overrides({k: (v.value, v.reason) for k, v in config.limits.items()})
    except ConfigError as err:
        raise (err.in_stack(stack) if stack else err) from None


def vnet_name(owner: str) -> str:
    """The VNet of a hub (by its stack's name) or a cluster spoke (by the cluster's): the program creates it by
    this name and cloud-provider-azure's azure.json (the add-ons) must name the same."""
    return f"{owner}-vnet"


def nsg_name(owner: str, subnet: str) -> str:
    """The NSG of ``owner``'s subnet ``subnet`` (named once, as ``vnet_name``)."""
    return f"{owner}-{subnet}-nsg"


def limits_tag(config: NetworkedStack) -> str:
    """The quota overrides in force, as the VNet's tag that `agk plan` and the review read back."""
    return encode_limits({r.name: r.value for r in limits_for(config).overridden() if r.value is not None})


def hub_stack_name(cluster: ClusterConfig) -> str:
    """`org/project/hub` and `hub` both name the stack file Pulumi.hub.yaml."""
    return cluster.hub_stack.rsplit("/", 1)[-1]


def cluster_subnets(cluster: ClusterConfig, pools: ClusterPools) -> tuple[SubnetRequest, ...]:
    subnets = [
        # API servers plus the internal load balancer's static frontend.
        SubnetRequest("control-plane", "control-plane", REPLACEMENT_FACTOR * cluster.api_servers.count + 1),
        SubnetRequest("etcd", "etcd", REPLACEMENT_FACTOR * cluster.etcd.count),
        SubnetRequest("monitoring", "monitoring", REPLACEMENT_FACTOR * cluster.prometheus.count),
        SubnetRequest("nat", "nat", REPLACEMENT_FACTOR),
        SubnetRequest("endpoints", "private-endpoints", 2 * len(cluster.storage.containers) + 2),
    ]
    if cluster.events_etcd is not None:
        subnets.append(SubnetRequest("events-etcd", "etcd", REPLACEMENT_FACTOR * cluster.events_etcd.count))
    for pool in pools.pools.values():
        role = "system-pool" if pool.role == "system-node" else "gpu-pool"
        subnets.append(SubnetRequest(pool.subnet, role, pool.subnet_ips, where=pool.key))
    return tuple(subnets)


def hub_subnets(config: HubStack) -> tuple[SubnetRequest, ...]:
    subnets = [SubnetRequest("jump", "jump", max(REPLACEMENT_FACTOR * config.hub.jump_hosts, 3))]
    if config.hub.bastion:
        subnets.append(SubnetRequest(BASTION_SUBNET, "bastion", usable(26), longest_prefix=26))
    if config.hub.firewall:
        subnets.append(SubnetRequest(FIREWALL_SUBNET, "firewall", usable(26), longest_prefix=26))
    return tuple(subnets)


def deployed_pins(
    stack: str, subnets: tuple[SubnetRequest, ...], deployed: Mapping[str, str], declared: Mapping[str, str]
) -> dict[str, str]:
    """The subnets this stack already has, where they are (its last ``address_plan``), kept there.

    A pin the stack file declares wins. A deployed subnet the plan no longer has goes (its range stays
    taken until the update is over: ``VNetSpec.going``); one
    that no longer holds what it must is an error: moving or growing a subnet with nodes in it is not
    something to do by accident.
    """
    pins: dict[str, str] = {}
    for request in subnets:
        cidr = deployed.get(request.name)
        if cidr is None or request.name in declared:
            continue
        holds = usable(parse_cidr(cidr, f"deployed subnet {request.name}").prefixlen)
        if holds < request.ips_needed:
            raise ConfigError(
                f"{PROJECT}:{request.where or 'network'}: deployed subnet {request.name} is {cidr} "
                f"({holds:,} usable) but now needs {request.ips_needed:,}: it stays where it is unless you move it "
                f"on purpose (set network.pinned.{request.name} to a larger free CIDR and allow the move under "
                f"{PROJECT}:changes), or keep the pool's size",
                stack=stack,
            )
        pins[request.name] = cidr
    return {**pins, **declared}


def vnet_spec(
    stack: str, config: NetworkedStack, peers: tuple[str, ...], deployed: Mapping[str, str] | None = None
) -> VNetSpec:
    """The VNet ``stack`` needs; ``deployed`` is where its subnets are now (name to CIDR), kept in place."""
    limits = limits_for(config, stack)
    other: tuple[tuple[str, str], ...] = ()
    if isinstance(config, ClusterStack):
        try:
            subnets = cluster_subnets(config.cluster, plan_pools(config.cluster, limits))
        except ConfigError as err:
            raise err.in_stack(stack) from None
        other = (("cluster.service_cidr", config.cluster.service_cidr),)
    else:
        subnets = hub_subnets(config)
    return VNetSpec(
        name=stack,
        kind="hub" if config.kind == "hub" else "spoke",
        address_space=tuple(config.network.address_space),
        subnets=subnets,
        limits=limits,
        peers=peers,
        pinned=deployed_pins(stack, subnets, deployed or {}, config.network.pinned),
        going={n: c for n, c in (deployed or {}).items() if n not in {s.name for s in subnets}},
        allow_public=config.network.allow_public_ranges,
        other_ranges=other,
        key_prefix=f"{PROJECT}:",
    )


@dataclass(frozen=True)
class StackAddresses:
    """The address plan of one stack, computed with its whole hub-and-spoke network."""

    stack: str
    config: NetworkedStack
    network: NetworkPlan
    configs: dict[str, NetworkedStack]

    @property
    def vnet(self) -> VNetPlan:
        return self.network.vnets[self.stack]

    @property
    def warnings(self) -> tuple[Finding, ...]:
        """The stack's own findings, and those of every peered group it belongs to (the hub's group
        holds the hub and every spoke peered with it)."""
        peers = set(self.vnet.peers)
        return tuple(
            f
            for f in self.network.warnings
            if f.vnet == self.stack or (f.vnet in peers and f.code == "peered-group-ip-limit")
        )

    def refuse_hard_limit_breaks(self) -> None:
        """Raise for a plan Azure would refuse partway through `pulumi up` (hard limits cannot be raised)."""
        for finding in self.warnings:
            if finding.code in HARD_LIMIT_FINDINGS:
                raise ConfigError(f"{PROJECT}:network: {finding.message}", stack=self.stack)

    @property
    def limits(self) -> Limits:
        return self.vnet.limits

    @property
    def hub_space(self) -> tuple[IPv4Network, ...]:
        """The address space of the hub this spoke peers with (none for the hub itself)."""
        return self.network.vnets[self.vnet.peers[0]].address_space if self.vnet.peers else ()


def network_of(
    stacks_dir: Path, stack: str, config: StackConfig | None = None
) -> tuple[str, dict[str, NetworkedStack]]:
    """The hub's stack name and the configs of the hub and every spoke that names it.

    ``config`` is the stack's own config when the caller already has it (the Pulumi engine's
    view of it); the other stacks are read from their files.
    """
    config = config or load_stack(stacks_dir, stack)
    if config.kind == "addons":
        raise ConfigError("an addons stack has no network: plan its cluster stack instead", stack=stack)
    if config.kind == "images":
        raise ConfigError("an images stack has no network: plan a hub or cluster stack", stack=stack)
    hub = stack if isinstance(config, HubStack) else hub_stack_name(config.cluster)
    configs: dict[str, NetworkedStack] = {
        hub: config if isinstance(config, HubStack) else _load_hub(stacks_dir, hub, stack)
    }
    for name in stack_names(stacks_dir):
        if name in configs:
            continue
        if name == stack:
            configs[name] = config
        elif _spoke_of(stacks_dir, name, hub, stack):
            try:
                configs[name] = _load_spoke(stacks_dir, name)
            except ConfigError as err:
                raise ConfigError(
                    f"sibling spoke {name} of hub {hub!r} is invalid, and {stack}'s address plan checks "
                    f"every spoke of its hub: fix {stack_file(stacks_dir, name)} ({err})",
                    stack=stack,
                ) from None
    _refuse_shared_cluster_names(configs, stack)
    return hub, configs


def _spoke_of(stacks_dir: Path, name: str, hub: str, stack: str) -> bool:
    """Whether stack ``name`` is a cluster on ``hub``, read without validating the rest of its file (a
    broken addons stack or a spoke of another hub must not block this one)."""
    try:
        raw = read_stack_file(stack_file(stacks_dir, name))
    except ConfigError as err:
        raise ConfigError(
            f"cannot tell whether stack {name} is a spoke of hub {hub!r} ({err}): fix that file", stack=stack
        ) from None
    cluster = raw.get(f"{PROJECT}:cluster")
    if raw.get(f"{PROJECT}:kind") != "cluster" or not isinstance(cluster, dict):
        return False
    return str(cluster.get("hub_stack", "hub")).rsplit("/", 1)[-1] == hub


def _load_spoke(stacks_dir: Path, name: str) -> ClusterStack:
    spoke = load_stack(stacks_dir, name)
    if not isinstance(spoke, ClusterStack):  # _spoke_of read its kind from the same file
        raise ConfigError(f"a {spoke.kind} stack, not a cluster stack", stack=name)
    return spoke


def _refuse_shared_cluster_names(configs: Mapping[str, NetworkedStack], asked: str) -> None:
    """Hub-side peerings, service routes and DNS links are named after the cluster: two spokes of one hub
    with the same cluster.name would overwrite each other's on the second `pulumi up`. The stack being
    planned is the one named when it is one of the two (it is the file the user is working on)."""
    by_name: dict[str, list[str]] = {}
    for name, other in configs.items():
        if isinstance(other, ClusterStack):
            by_name.setdefault(other.cluster.name, []).append(name)
    for cluster, stacks in by_name.items():
        if len(stacks) < 2:
            continue
        blamed = asked if asked in stacks else stacks[1]
        first = next(n for n in stacks if n != blamed)
        raise ConfigError(
            f"{PROJECT}:cluster.name: {cluster!r} is already the cluster of stack {first!r} on "
            f"the same hub (its peering, route and DNS link names would collide): give each cluster its own name",
            stack=blamed,
        )


def _load_hub(stacks_dir: Path, hub: str, stack: str) -> HubStack:
    try:
        hub_config = load_stack(stacks_dir, hub)
    except ConfigError as err:
        raise ConfigError(f"{PROJECT}:cluster.hub_stack: cannot read hub stack {hub!r} ({err})", stack=stack) from None
    if not isinstance(hub_config, HubStack):
        raise ConfigError(
            f"{PROJECT}:cluster.hub_stack: {hub!r} is a {hub_config.kind} stack: name the hub stack", stack=stack
        )
    return hub_config


def plan_stack(
    stacks_dir: Path, stack: str, config: StackConfig | None = None, deployed: Mapping[str, str] | None = None
) -> StackAddresses:
    """Validate the stack and its network, and lay out every VNet; raises ConfigError or AddressError.

    ``deployed``: the stack's subnets as its last `pulumi up` left them (name to CIDR): they stay put, so
    adding, growing or removing a pool never moves another subnet, without anyone copying pins by hand.
    """
    hub, configs = network_of(stacks_dir, stack, config)
    spokes = tuple(n for n in configs if n != hub)
    own = {stack: deployed or {}}
    specs = [vnet_spec(hub, configs[hub], spokes, own.get(hub))]
    specs += [vnet_spec(n, configs[n], (hub,), own.get(n)) for n in spokes]
    return StackAddresses(stack, configs[stack], plan_network(specs), configs)


def deployed_subnets(outputs: Mapping[str, object]) -> dict[str, str]:
    """Subnet name to CIDR from a stack's last outputs (its ``address_plan``); ``{}`` before the first deploy."""
    plan = outputs.get("address_plan")
    subnets = plan.get("subnets") if isinstance(plan, Mapping) else None
    if not isinstance(subnets, list):
        return {}
    return {str(s["name"]): str(s["cidr"]) for s in subnets if isinstance(s, Mapping) and "name" in s and "cidr" in s}


DNS_SERVICE_OFFSET = 10
"""The cluster DNS Service takes the service range's tenth address (kubeadm's convention, CoreDNS's clusterIP)."""
SERVICE_RANGE_MIN_PREFIX = 12
"""kube-apiserver refuses a larger IPv4 service range: "for 32-bit addresses, the mask must be >= 12" (kubernetes
pkg/controlplane/apiserver/options/validation.go, --service-cluster-ip-range)."""


def check_service_range(service: IPv4Network) -> None:
    """ConfigError for a service range the API server refuses or that cannot hold the DNS Service's address."""
    key = f"{PROJECT}:cluster.service_cidr"
    if service.prefixlen < SERVICE_RANGE_MIN_PREFIX:
        raise ConfigError(
            f"{key}: {service} is larger than kube-apiserver accepts (/{SERVICE_RANGE_MIN_PREFIX} at most): use a"
            f" /{SERVICE_RANGE_MIN_PREFIX} to /16, e.g. {service.supernet(new_prefix=service.prefixlen).network_address}/16"
        )
    # The DNS address must be a usable host of the range (not its broadcast), and the API server's own Service
    # takes the first: a /28 is the smallest that holds both.
    if service.num_addresses < DNS_SERVICE_OFFSET + 2:
        raise ConfigError(
            f"{key}: {service} has {service.num_addresses} addresses, so the cluster DNS address"
            f" {service.network_address + DNS_SERVICE_OFFSET} is outside it: use a /28 or larger (a /16 leaves room"
            " for services)"
        )


def cluster_addresses(plan: StackAddresses) -> ClusterAddresses:
    """Every fixed host address of a cluster stack, from its laid-out subnets."""
    if not isinstance(plan.config, ClusterStack):
        raise ConfigError(f"{plan.stack}: a {plan.config.kind} stack has no cluster addresses")
    cluster = plan.config.cluster
    subnets = {name: s.cidr for name, s in plan.vnet.subnets.items()}
    service = parse_cidr(cluster.service_cidr, f"{PROJECT}:cluster.service_cidr")
    check_service_range(service)
    cp, mon = subnets["control-plane"], subnets["monitoring"]
    name = cluster.name
    internal: list[IPv4Network] = [*plan.vnet.address_space, *plan.hub_space, service]
    return ClusterAddresses(
        cluster=name,
        vnet_cidrs=plan.vnet.address_space,
        internal_cidrs=tuple(internal),
        subnets=subnets,
        service_cidr=service,
        dns_service_ip=service.network_address + DNS_SERVICE_OFFSET,
        apiserver_service_ip=service.network_address + 1,
        apiserver_vip=host(cp, 0),
        apiservers={f"{name}-apiserver-{i}": host(cp, 1 + i) for i in range(cluster.api_servers.count)},
        etcd={f"{name}-etcd-{i}": host(subnets["etcd"], i) for i in range(cluster.etcd.count)},
        events_etcd=(
            {f"{name}-events-etcd-{i}": host(subnets["events-etcd"], i) for i in range(cluster.events_etcd.count)}
            if cluster.events_etcd
            else {}
        ),
        prometheus={f"{name}-prometheus-{i}": host(mon, i) for i in range(cluster.prometheus.count)},
        nat=host(subnets["nat"], 0),
    )
