"""Network rules: hub-and-spoke isolation, address space that holds what the stack puts in it,
no administrative port open to the internet, no public address on a cluster host."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pulumi_policy import ReportViolation, ResourceValidationArgs, StackValidationArgs

from modules.address_plan.addressing import NSG_EXEMPT_SUBNETS
from modules.address_plan.subnet_sizes import AZURE_RESERVED_PER_SUBNET as RESERVED_PER_SUBNET
from modules.address_plan.subnet_sizes import prefix_for
from modules.bootstrap.context import APISERVER_PORT, ETCD_CLIENT_PORT, ETCD_PEER_PORT, KUBELET_PORT
from policies.rules import fields, limits
from policies.rules.graph import Graph, Vnet

PROTECTED_PORTS = ("22", "3389", f"{ETCD_CLIENT_PORT}-{ETCD_PEER_PORT}", str(APISERVER_PORT), str(KUBELET_PORT))
OPEN_SOURCES = frozenset({"*", "internet", "any", "0.0.0.0/0", "::/0"})
_NON_TCP = frozenset({"icmp", "udp", "esp", "ah"})


PRIVATE_ROLES = frozenset({"apiserver", "etcd", "events-etcd", "prometheus", "gpu-node", "system-node"})
PUBLIC_HOST_ROLES = frozenset({"nat", "jump"})
"""Hosts that may face outside the VNet. Every other host, an untagged one too, must stay private:
leaving the role tag off must not be a way around this rule."""


def _private_host(role: str | None) -> bool:
    return role not in PUBLIC_HOST_ROLES


def no_spoke_to_spoke_peering(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    graph = Graph(args.resources)
    for peering, local, remote in graph.peerings:
        a, b = graph.vnets.get(local or ""), graph.vnets.get(remote or "")
        if a and b and a.kind == "spoke" and b.kind == "spoke":
            report_violation(
                f"peering {peering.name} joins spoke VNet {a.name} to spoke VNet {b.name}: "
                "peer each spoke only with the hub",
                peering.urn,
            )
    for vnet in graph.vnets.values():
        if vnet.kind == "spoke" and len(vnet.peers) > 1:
            report_violation(
                f"spoke VNet {vnet.name} is peered with {len(vnet.peers)} VNets "
                f"({', '.join(sorted(_short(p) for p in vnet.peers))}): peer each spoke only with the hub",
                vnet.urn,
            )


def peered_vnets_do_not_overlap(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    graph = Graph(args.resources)
    for peering, local, remote in graph.peerings:
        a, b = graph.vnets.get(local or ""), graph.vnets.get(remote or "")
        if not a or not b:
            continue
        clashes = [(x, y) for x in a.prefixes for y in b.prefixes if x.version == y.version and x.overlaps(y)]
        if clashes:
            x, y = clashes[0]
            report_violation(
                f"peering {peering.name}: VNet {a.name} ({x}) overlaps VNet {b.name} ({y}): "
                "give peered VNets disjoint address spaces",
                peering.urn,
            )


def subnet_holds_its_pools(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    graph = Graph(args.resources)
    for sub in graph.subnets.values():
        if not sub.prefixes or not sub.demand:
            continue
        needed = sub.ip_configurations + RESERVED_PER_SUBNET
        if needed <= sub.capacity:
            continue
        fits = prefix_for(sub.ip_configurations) if sub.prefixes[0].version == 4 else None
        who = ", ".join(f"{name} {count}" for name, count in sub.demand)
        report_violation(
            f"subnet {sub.name} ({', '.join(map(str, sub.prefixes))}) has {sub.capacity} addresses but needs "
            f"{needed} ({who}, + {RESERVED_PER_SUBNET} reserved; pools count "
            f"(instances + surge) x (1 + pod IPs)): widen it" + (f" to /{fits} or shorter" if fits is not None else ""),
            sub.urn,
        )


def _group_total(group: list[Vnet]) -> int:
    return sum(s.ip_configurations for v in group for s in v.subnets)


def _outside(group: list[Vnet]) -> int:
    keys = {v.key for v in group}
    return len({p for v in group for p in v.peers} - keys)


def _group_limits(group: list[Vnet]) -> dict[str, int]:
    declared: dict[str, int] = {}
    for vnet in group:
        for name, value in vnet.limits.items():
            declared[name] = max(value, declared.get(name, 0))
    return declared


def _usage(graph: Graph) -> Iterable[tuple[str, str, int, str, dict[str, int], int]]:
    """(what, urn, IP configurations, limit name, declared limits, VNets outside the stack)."""
    for vnet in graph.vnets.values():
        yield f"VNet {vnet.name}", vnet.urn, _group_total([vnet]), "vnet-private-ips", vnet.limits, 0
    for group in graph.peered_groups():
        if len(group) > 1 or any(v.peers for v in group):
            names = "+".join(sorted(v.name for v in group))
            yield (
                f"peered group {names}",
                group[0].urn,
                _group_total(group),
                "peered-group-private-ips",
                _group_limits(group),
                _outside(group),
            )


def ip_configurations_within_limits(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    graph = Graph(args.resources)
    for what, urn, total, name, declared, outside in _usage(graph):
        limit = limits.in_force(name, declared)
        if total > limit:
            note = f" (not counting {outside} peered VNet(s) outside this stack)" if outside else ""
            report_violation(
                f"{what} has {total} IP configurations{note}, over the {name} limit of {limit}, a hard Azure "
                f"limit no support request raises: {limits.fix(name)}",
                urn,
            )


def no_hard_limit_override(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    graph = Graph(args.resources)
    for vnet in graph.vnets.values():
        for name in limits.hard_overrides(vnet.limits):
            report_violation(
                f"VNet {vnet.name} declares {name}={vnet.limits[name]}, but {limits.describe(name)} cannot be "
                f"raised: remove the override and {limits.fix(name)}",
                vnet.urn,
            )


def _port_ranges(values: Iterable[str]) -> list[tuple[int, int]]:
    out = []
    for value in values:
        for part in str(value).split(","):
            part = part.strip()
            if part in ("*", "any", "Any"):
                out.append((0, 65535))
            elif "-" in part:
                low, _, high = part.partition("-")
                if low.strip().isdigit() and high.strip().isdigit():
                    out.append((int(low), int(high)))
            elif part.isdigit():
                out.append((int(part), int(part)))
    return out


def _rule_violation(rule: Any, ports: list[tuple[int, int]]) -> str | None:
    if str(fields.get(rule, "direction", "")).lower() != "inbound":
        return None
    if str(fields.get(rule, "access", "")).lower() != "allow":
        return None
    if str(fields.get(rule, "protocol", "*")).lower() in _NON_TCP:
        return None
    sources = [s for s in fields.texts(rule, "sourceAddressPrefix", "sourceAddressPrefixes")]
    open_sources = [s for s in sources if s.strip().lower() in OPEN_SOURCES]
    if not open_sources:
        return None
    opened = _port_ranges(fields.texts(rule, "destinationPortRange", "destinationPortRanges"))
    hit = sorted({f"{lo}" if lo == hi else f"{lo}-{hi}" for lo, hi in ports for a, b in opened if a <= hi and lo <= b})
    if not hit:
        return None
    return f"allows inbound from {open_sources[0]} to port(s) {', '.join(hit)}"


def nsg_no_admin_ports_from_internet(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    config = args.get_config()
    ports = _port_ranges(config.get("ports", PROTECTED_PORTS))
    if args.resource_type == fields.NSG:
        for rule in fields.items(args.props, "securityRules"):
            problem = _rule_violation(rule, ports)
            if problem:
                name = fields.get(rule, "name", "?")
                report_violation(f"NSG {args.name} rule {name} {problem}: allow only the hub or VNet ranges", None)
    elif args.resource_type == fields.SECURITY_RULE:
        problem = _rule_violation(args.props, ports)
        if problem:
            report_violation(f"security rule {args.name} {problem}: allow only the hub or VNet ranges", None)


PROBE_SOURCES = frozenset({"azureloadbalancer", "168.63.129.16", "168.63.129.16/32"})
"""Where Azure's load-balancer health probes come from (load-balancer-custom-probe-overview)."""


def _inbound(rule: Any, access: str) -> bool:
    return (
        str(fields.get(rule, "direction", "")).lower() == "inbound"
        and str(fields.get(rule, "access", "")).lower() == access
    )


def _priority(rule: Any) -> float:
    value = fields.get(rule, "priority", 65000)
    return float(value) if isinstance(value, int | float) else 65000.0


def nsg_lets_load_balancer_probes_in(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    if args.resource_type != fields.NSG:
        return
    rules = list(fields.items(args.props, "securityRules"))
    allows = [
        _priority(r)
        for r in rules
        if _inbound(r, "allow")
        and any(
            s.strip().lower() in PROBE_SOURCES for s in fields.texts(r, "sourceAddressPrefix", "sourceAddressPrefixes")
        )
    ]
    for rule in rules:
        sources = list(fields.texts(rule, "sourceAddressPrefix", "sourceAddressPrefixes"))
        if not _inbound(rule, "deny") or not any(s.strip().lower() in OPEN_SOURCES for s in sources):
            continue
        priority = _priority(rule)
        if not any(p < priority for p in allows):
            report_violation(
                f"NSG {args.name} rule {fields.get(rule, 'name', '?')} (priority {priority:.0f}) denies inbound from "
                f"{sources[0]} ahead of Azure's load-balancer probes (168.63.129.16, allowed by default only at "
                f"65001): add an inbound allow from AzureLoadBalancer with a priority below {priority:.0f}",
                None,
            )


def subnet_has_nsg(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    if args.resource_type == fields.SUBNET:
        name = fields.get(args.props, "subnetName") or fields.get(args.props, "name") or args.name
        _check_nsg(str(name), args.props, report_violation)
    elif args.resource_type == fields.VNET:
        for inline in fields.items(args.props, "subnets"):
            _check_nsg(str(fields.get(inline, "name", "?")), inline, report_violation)


def _check_nsg(name: str, subnet: Any, report_violation: ReportViolation) -> None:
    if name.lower() in NSG_EXEMPT_SUBNETS:
        return
    if not fields.ref_id(subnet, "networkSecurityGroup"):
        report_violation(f"subnet {name} has no network security group: set networkSecurityGroup.id", None)


def no_public_ip_on_cluster_hosts(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    graph = Graph(args.resources)
    vm_role_of_nic: dict[str, str] = {}
    for vm in graph.of_type(fields.VM):
        vm_role = fields.role(vm.props)
        for ref in fields.items(vm.props, "networkProfile.networkInterfaces"):
            key = fields.ref_id(ref, "id")
            if key and vm_role:
                vm_role_of_nic[key] = vm_role
        for nic in fields.items(vm.props, "networkProfile.networkInterfaceConfigurations"):
            if _private_host(vm_role) and _has_public(nic, "publicIPAddressConfiguration"):
                report_violation(_public_msg(f"VM {vm.name}", vm_role), vm.urn)
    for nic in graph.of_type(fields.NIC):
        key = fields.resource_key(nic.resource_type, nic.props)
        nic_role = fields.role(nic.props) or vm_role_of_nic.get(key or "")
        if _private_host(nic_role) and _has_public(nic.props, "publicIPAddress"):
            report_violation(_public_msg(f"NIC {nic.name}", nic_role), nic.urn)
    for vmss in graph.of_type(fields.VMSS):
        vmss_role = fields.role(vmss.props)
        nics = fields.items(vmss.props, "virtualMachineProfile.networkProfile.networkInterfaceConfigurations")
        if _private_host(vmss_role) and any(_has_public(n, "publicIPAddressConfiguration") for n in nics):
            report_violation(_public_msg(f"scale set {vmss.name}", vmss_role), vmss.urn)
    for pip in graph.of_type(fields.PUBLIC_IP):
        pip_role = fields.role(pip.props)
        if pip_role in PRIVATE_ROLES:
            report_violation(_public_msg(f"public IP {pip.name}", pip_role), pip.urn)


def _has_public(nic: Any, field: str) -> bool:
    return any(fields.get(ipc, field) is not None for ipc in fields.items(nic, "ipConfigurations"))


def _public_msg(what: str, host_role: str | None) -> str:
    return (
        f"{what} gives a public IP address to a host with role {host_role or '(untagged)'}: reach it through the hub "
        "(Bastion, jump host) or the NAT host instead"
    )


def _short(key: str) -> str:
    return key.rsplit("/", 1)[-1]
