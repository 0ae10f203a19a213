"""The pack's policies: each rule function with its name (a stable id), why it exists, its
enforcement level and severity. Importable: only ``__main__.py`` constructs the ``PolicyPack``."""

from __future__ import annotations

from pulumi_policy import (
    EnforcementLevel,
    Policy,
    PolicyConfigSchema,
    ResourceValidationPolicy,
    Severity,
    StackValidationPolicy,
)

from modules import tags as tagnames
from policies.rules import checksums, compute, kubernetes, network, stack, storage

NAME = "azure-gpu-k8s"
VERSION = "0.1.0"
ENFORCEMENT = EnforcementLevel.MANDATORY
"""Every policy is mandatory unless it says otherwise."""

ADVISORY = EnforcementLevel.ADVISORY
HIGH, MEDIUM, LOW, CRITICAL = Severity.HIGH, Severity.MEDIUM, Severity.LOW, Severity.CRITICAL

POLICIES: list[Policy] = [
    # Network
    StackValidationPolicy(
        name="no-spoke-to-spoke-peering",
        description="Spokes peer only with the hub, so one cluster's failure or compromise stays in that cluster.",
        validate=network.no_spoke_to_spoke_peering,
        severity=HIGH,
    ),
    StackValidationPolicy(
        name="peered-vnets-no-overlap",
        description="Peered VNets must not overlap: Azure refuses the peering and routing would be ambiguous.",
        validate=network.peered_vnets_do_not_overlap,
        severity=HIGH,
    ),
    StackValidationPolicy(
        name="subnet-holds-its-pools",
        description="A subnet holds (instances + surge) x (1 + pod IPs) for its pools plus 5 reserved "
        "addresses: with Azure CNI every pod is an IP configuration in the node subnet.",
        validate=network.subnet_holds_its_pools,
        severity=HIGH,
    ),
    StackValidationPolicy(
        name="ip-configurations-within-limits",
        description="IP configurations per VNet and per peered group stay within Azure's hard limits (65,536 "
        "per VNet, 128,000 per peered group): beyond them `pulumi up` fails partway, after part of the fleet "
        "is created and billed.",
        validate=network.ip_configurations_within_limits,
        severity=CRITICAL,
    ),
    StackValidationPolicy(
        name="no-hard-limit-override",
        description="A stack never declares a raised value for a limit Azure does not raise (private IPs per "
        "VNet or peered group, IPs per NIC, scale-set caps): only quotas are adjustable.",
        validate=network.no_hard_limit_override,
        severity=HIGH,
    ),
    ResourceValidationPolicy(
        name="nsg-no-admin-ports-from-internet",
        description="No NSG rule allows inbound from *, Internet, 0.0.0.0/0 or ::/0 to SSH, RDP, etcd, "
        "the API server or the kubelet: those are reached through the hub only.",
        validate=network.nsg_no_admin_ports_from_internet,
        severity=CRITICAL,
        config_schema=PolicyConfigSchema(
            properties={
                "ports": {
                    "type": "array",
                    "items": {"type": "string", "pattern": "^[0-9]+(-[0-9]+)?$"},
                    "default": list(network.PROTECTED_PORTS),
                    "description": "Ports and ranges never open to the internet.",
                }
            }
        ),
    ),
    ResourceValidationPolicy(
        name="nsg-lets-load-balancer-probes-in",
        description="An NSG that denies inbound from the Internet (or *) allows AzureLoadBalancer first: "
        "health probes come from 168.63.129.16, and Azure's own allow (65001) comes after any custom deny, "
        "so the internal load balancer would mark every API server down.",
        validate=network.nsg_lets_load_balancer_probes_in,
        severity=HIGH,
    ),
    ResourceValidationPolicy(
        name="subnet-has-nsg",
        description="Every subnet has a network security group (except the ones Azure forbids it on).",
        validate=network.subnet_has_nsg,
        severity=MEDIUM,
    ),
    StackValidationPolicy(
        name="no-public-ip-on-cluster-hosts",
        description="Nodes, API servers, etcd and Prometheus hosts have no public IP: only the NAT host, "
        "the hub's Bastion and jump hosts face the internet.",
        validate=network.no_public_ip_on_cluster_hosts,
        severity=CRITICAL,
    ),
    # Compute
    ResourceValidationPolicy(
        name="nic-ip-configurations",
        description="A NIC holds at most 256 IP configurations, and a pool's NICs carry exactly "
        "1 + pod IPs (the node, then one per pod that is not host-network) so pods never run out of addresses.",
        validate=compute.nic_ip_configurations,
        severity=HIGH,
    ),
    ResourceValidationPolicy(
        name="scale-set-capacity-within-cap",
        description="A scale set holds at most 100 VMs in one placement group, 1,000 without: split larger pools.",
        validate=compute.scale_set_capacity_within_cap,
        severity=HIGH,
    ),
    ResourceValidationPolicy(
        name="infiniband-single-placement-group",
        description="InfiniBand connects VMs only inside one placement group: IB scale sets keep "
        "singlePlacementGroup true.",
        validate=compute.infiniband_single_placement_group,
        severity=HIGH,
    ),
    ResourceValidationPolicy(
        name="accelerated-networking",
        description="Node and host NICs use accelerated networking (SR-IOV): pods talk natively at line rate.",
        validate=compute.accelerated_networking,
        severity=MEDIUM,
    ),
    ResourceValidationPolicy(
        name="ssh-keys-only",
        description="VMs disable password authentication: SSH keys only.",
        validate=compute.ssh_keys_only,
        severity=HIGH,
    ),
    ResourceValidationPolicy(
        name="no-placeholder-checksum",
        description="No resource carries an all-zero sha256 (in an input, an image build script or a host's "
        "bundle): a placeholder is not a checksum (issue 21).",
        validate=checksums.no_placeholder_checksum,
        severity=CRITICAL,
    ),
    ResourceValidationPolicy(
        name="encryption-at-host",
        description="VMs encrypt temp disks and caches at the host.",
        validate=compute.encryption_at_host,
        severity=MEDIUM,
    ),
    StackValidationPolicy(
        name="control-plane-member-count",
        description="API server and etcd counts are 1, 3 or 5: an odd count keeps an etcd quorum.",
        validate=compute.control_plane_member_count,
        severity=HIGH,
    ),
    StackValidationPolicy(
        name="control-plane-redundancy",
        description="A single API server or etcd member has no redundancy: fine for dev, not for production.",
        validate=compute.control_plane_redundancy,
        enforcement_level=ADVISORY,
        severity=LOW,
    ),
    StackValidationPolicy(
        name="etcd-low-latency-storage",
        description="etcd is latency-bound: local NVMe or Premium SSD v2 / Ultra disks, never a network "
        "P-series disk (~2 ms vs ~200 us).",
        validate=compute.etcd_low_latency_storage,
        severity=HIGH,
    ),
    ResourceValidationPolicy(
        name="apiserver-memory-sizing",
        description="API server VMs meet the sizing rule for the cluster's planned nodes: GCE's vCPU table "
        "(>500 nodes 32, >3,000 nodes 64) and heap linear in nodes (~70 GB at 7,500).",
        validate=compute.apiserver_memory_sizing,
        enforcement_level=ADVISORY,
        severity=MEDIUM,
    ),
    # Storage
    ResourceValidationPolicy(
        name="storage-https-only",
        description="Storage accounts accept HTTPS only.",
        validate=storage.storage_https_only,
        severity=HIGH,
    ),
    ResourceValidationPolicy(
        name="storage-min-tls-1-2",
        description="Storage accounts require TLS 1.2 or later.",
        validate=storage.storage_min_tls_1_2,
        severity=HIGH,
    ),
    ResourceValidationPolicy(
        name="storage-no-public-blob-access",
        description="Datasets and checkpoints are never publicly readable.",
        validate=storage.storage_no_public_blob_access,
        severity=CRITICAL,
    ),
    # Kubernetes
    StackValidationPolicy(
        name="balloon-priority-range",
        description="Balloon pods run at a priority from -10 to -1: below cluster-autoscaler's -10 cutoff "
        "they reserve nothing; at 0 real pods cannot preempt them.",
        validate=kubernetes.balloon_priority_range,
        severity=MEDIUM,
        config_schema=PolicyConfigSchema(
            properties={
                "min": {"type": "integer", "default": kubernetes.BALLOON_MIN},
                "max": {"type": "integer", "default": kubernetes.BALLOON_MAX},
            }
        ),
    ),
    ResourceValidationPolicy(
        name="container-limits",
        description="Every container has resource limits, so one workload cannot starve a node's agents.",
        validate=kubernetes.container_limits,
        severity=MEDIUM,
    ),
    ResourceValidationPolicy(
        name="privileged-needs-justification",
        description="Privileged containers and host networking need an annotation saying why.",
        validate=kubernetes.privileged_needs_justification,
        severity=HIGH,
        config_schema=PolicyConfigSchema(
            properties={
                "annotation": {
                    "type": "string",
                    "minLength": 1,
                    "default": kubernetes.JUSTIFICATION,
                    "description": "Annotation key that carries the justification.",
                }
            }
        ),
    ),
    # Stack
    ResourceValidationPolicy(
        name="required-tags",
        description="Every taggable Azure resource carries owner, cost-center and cluster tags.",
        validate=stack.required_tags,
        severity=MEDIUM,
        config_schema=PolicyConfigSchema(
            properties={
                "tags": {
                    "type": "array",
                    "items": {"type": "string", "minLength": 1},
                    "default": list(tagnames.REQUIRED),
                }
            }
        ),
    ),
]
