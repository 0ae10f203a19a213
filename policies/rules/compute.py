"""Compute rules: NICs that carry their pods' IPs, scale sets within one placement group's cap,
hardened VMs, a control plane of a quorum-friendly size on fast storage and enough memory."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from pulumi_policy import ReportViolation, ResourceValidationArgs, StackValidationArgs

from modules import tags as tagnames
from modules.vm_sizing import formulas
from modules.vm_sizing.skus import SKUS
from policies.rules import fields, limits
from policies.rules.graph import Graph

_VMSS_NICS = "virtualMachineProfile.networkProfile.networkInterfaceConfigurations"
_IB_NAME = re.compile(r"^Standard_(ND|NC|HB|HC|HX)\d+[a-z]*r[a-z]*(_|$)")
"""Azure's size names mark RDMA (InfiniBand) with an 'r' among the feature letters."""

CONTROL_PLANE_ROLES = ("apiserver", "etcd", "events-etcd")
QUORUM_SIZES = frozenset({1, 3, 5})
FAST_DISK_SKUS = frozenset({"PremiumV2_LRS", "UltraSSD_LRS"})

# The sizing rules (GCE's vCPU table, OpenAI's 70 GB heap at 7,500 nodes) live in one place (modules/vm_sizing/formulas.py).
apiserver_min_vcpus = formulas.apiserver_min_vcpus
apiserver_min_memory_gib = formulas.apiserver_min_memory_gib


def is_infiniband(vm_size: str) -> bool:
    known = SKUS.get(vm_size)
    return known.infiniband if known else bool(_IB_NAME.match(vm_size))


def _nic_configs(args: ResourceValidationArgs) -> list[tuple[str, Any]]:
    if args.resource_type == fields.NIC:
        return [(f"NIC {args.name}", args.props)]
    if args.resource_type == fields.VMSS:
        return [
            (f"scale set {args.name} NIC {fields.get(nic, 'name', '?')}", nic)
            for nic in fields.items(args.props, _VMSS_NICS)
        ]
    return []


def nic_ip_configurations(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    cap = limits.in_force("nic-private-ips", {})
    pod_ips = fields.int_tag(args.props, tagnames.POD_IPS)
    for what, nic in _nic_configs(args):
        count = len(fields.items(nic, "ipConfigurations"))
        if count > cap:
            report_violation(
                f"{what} has {count} IP configurations, over Azure's {cap} per NIC: lower pod_ips to {cap - 1} "
                "or fewer",
                None,
            )
        if pod_ips is not None and count != 1 + pod_ips:
            report_violation(
                f"{what} has {count} IP configurations but its pool declares {pod_ips} pod IPs: "
                f"give it 1 + pod IPs = {1 + pod_ips} (the node, then one per pod)",
                None,
            )


def _single_placement_group(props: Any) -> bool:
    value = fields.get(props, "singlePlacementGroup")
    if value is None:
        # Uniform scale sets default to one placement group; Flexible ones never use one.
        return str(fields.get(props, "orchestrationMode", "Uniform")).lower() != "flexible"
    return bool(value)


def scale_set_capacity_within_cap(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    if args.resource_type != fields.VMSS:
        return
    capacity = fields.number(fields.get(args.props, "sku.capacity")) or 0
    if _single_placement_group(args.props):
        name, mode = "vmss-instances-spg", "singlePlacementGroup=true"
    else:
        name, mode = "vmss-instances-large", "singlePlacementGroup=false"
    cap = limits.in_force(name, {})
    if capacity > cap:
        report_violation(
            f"scale set {args.name} has capacity {capacity}, over the {cap} VMs a scale set holds with {mode}: "
            "split the pool into more scale sets",
            None,
        )


def infiniband_single_placement_group(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    if args.resource_type != fields.VMSS:
        return
    size = fields.get(args.props, "sku.name")
    if isinstance(size, str) and is_infiniband(size) and not _single_placement_group(args.props):
        report_violation(
            f"scale set {args.name} uses InfiniBand size {size} with singlePlacementGroup=false: InfiniBand "
            "only connects VMs inside one placement group; set singlePlacementGroup to true",
            None,
        )


def accelerated_networking(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    for what, nic in _nic_configs(args):
        if fields.get(nic, "enableAcceleratedNetworking") is not True:
            report_violation(f"{what} has accelerated networking off: set enableAcceleratedNetworking true", None)


def _os_profile(args: ResourceValidationArgs) -> tuple[str, Any] | None:
    if args.resource_type == fields.VM:
        return f"VM {args.name}", fields.get(args.props, "osProfile", {})
    if args.resource_type == fields.VMSS:
        return f"scale set {args.name}", fields.get(args.props, "virtualMachineProfile.osProfile", {})
    return None


def ssh_keys_only(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    found = _os_profile(args)
    if found is None:
        return
    what, profile = found
    if fields.get(profile, "windowsConfiguration") is not None:
        return
    if fields.get(profile, "linuxConfiguration.disablePasswordAuthentication") is not True:
        report_violation(
            f"{what} allows password login: set osProfile.linuxConfiguration.disablePasswordAuthentication "
            "true and log in with SSH keys",
            None,
        )
    elif fields.get(profile, "adminPassword") is not None:
        report_violation(f"{what} sets adminPassword: remove it and log in with SSH keys", None)


def encryption_at_host(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    if args.resource_type == fields.VM:
        what, path = f"VM {args.name}", "securityProfile.encryptionAtHost"
    elif args.resource_type == fields.VMSS:
        what, path = f"scale set {args.name}", "virtualMachineProfile.securityProfile.encryptionAtHost"
    else:
        return
    if fields.get(args.props, path) is not True:
        report_violation(f"{what} has encryption at host off: set {path} true", None)


def _role_counts(graph: Graph) -> Counter[str]:
    counts: Counter[str] = Counter()
    for vm in graph.of_type(fields.VM):
        counts[fields.role(vm.props) or ""] += 1
    for vmss in graph.of_type(fields.VMSS):
        counts[fields.role(vmss.props) or ""] += fields.number(fields.get(vmss.props, "sku.capacity")) or 0
    return counts


def _first_urn(graph: Graph, host_role: str) -> str | None:
    for res in graph.resources:
        if res.resource_type in (fields.VM, fields.VMSS) and fields.role(res.props) == host_role:
            return res.urn
    return None


def control_plane_member_count(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    graph = Graph(args.resources)
    counts = _role_counts(graph)
    for host_role in CONTROL_PLANE_ROLES:
        count = counts[host_role]
        if count and count not in QUORUM_SIZES:
            report_violation(
                f"{count} {host_role} hosts: use 1, 3 or 5 (an odd member count keeps a quorum)",
                _first_urn(graph, host_role),
            )


def control_plane_redundancy(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    graph = Graph(args.resources)
    counts = _role_counts(graph)
    for host_role in CONTROL_PLANE_ROLES:
        if counts[host_role] == 1:
            report_violation(
                f"1 {host_role} host: a single member has no redundancy; use 3 or 5 in production",
                _first_urn(graph, host_role),
            )


def etcd_low_latency_storage(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    graph = Graph(args.resources)
    for vm in graph.of_type(fields.VM):
        if fields.role(vm.props) not in ("etcd", "events-etcd"):
            continue
        size = fields.get(vm.props, "hardwareProfile.vmSize", "")
        if SKUS.get(size) and SKUS[size].local_nvme_gib > 0:
            continue
        disks = [_disk_sku(graph, d) for d in fields.items(vm.props, "storageProfile.dataDisks")]
        if any(sku in FAST_DISK_SKUS for sku in disks):
            continue
        seen = ", ".join(str(s) for s in disks) or "no data disk"
        report_violation(
            f"etcd VM {vm.name} ({size}, {seen}) has neither local NVMe nor a Premium SSD v2 / Ultra data disk: "
            "etcd is latency-bound; use an Lsv3 size or a PremiumV2_LRS disk",
            vm.urn,
        )


def _disk_sku(graph: Graph, data_disk: Any) -> str | None:
    inline = fields.get(data_disk, "managedDisk.storageAccountType")
    if isinstance(inline, str):
        return inline
    disk = graph.find(fields.ref_id(data_disk, "managedDisk"))
    sku = fields.get(disk.props, "sku.name") if disk else None
    return sku if isinstance(sku, str) else None


def apiserver_memory_sizing(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    if args.resource_type != fields.VM or fields.role(args.props) != "apiserver":
        return
    nodes = fields.int_tag(args.props, tagnames.CLUSTER_NODES)
    if nodes is None:
        report_violation(
            f"API server VM {args.name} has no {tagnames.CLUSTER_NODES} tag: tag it with the cluster's "
            "planned node count so its size can be checked",
            None,
        )
        return
    size = str(fields.get(args.props, "hardwareProfile.vmSize", ""))
    sku = SKUS.get(size)
    if sku is None:
        report_violation(
            f"API server VM {args.name} size {size!r} is unknown: add it to modules/vm_sizing/skus.py", None
        )
        return
    vcpus, memory = apiserver_min_vcpus(nodes), apiserver_min_memory_gib(nodes)
    if sku.vcpus < vcpus or sku.memory_gib < memory:
        report_violation(
            f"API server VM {args.name} is {size} ({sku.vcpus} vCPU, {sku.memory_gib} GiB) but "
            f"{nodes} nodes need at least {vcpus} vCPU and {memory} GiB: pick a larger size",
            None,
        )
