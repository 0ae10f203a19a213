"""Static addresses of a cluster's fixed hosts, derived from the address plan.

Azure keeps the first four addresses of every subnet (.0 network, .1 gateway, .2/.3 DNS), so
the first host address is ``network + 4``. etcd peers, certificate SANs and the API server
load balancer frontend need addresses known before deploy: they are all assigned here, from
the subnets the planner laid out, and nowhere else.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network

FIRST_HOST_OFFSET = 4


@dataclass(frozen=True)
class ClusterAddresses:
    """Every fixed address one cluster spoke needs, keyed by stable host names."""

    cluster: str
    vnet_cidrs: tuple[IPv4Network, ...]
    """The spoke VNet's address space."""
    internal_cidrs: tuple[IPv4Network, ...]
    """All address space that is not the internet for this cluster: spoke, hub, service CIDR."""
    subnets: Mapping[str, IPv4Network]
    """Subnet name (``control-plane``, ``etcd``, ``gpu-<pool>``, ...) to CIDR."""
    service_cidr: IPv4Network
    dns_service_ip: IPv4Address
    apiserver_service_ip: IPv4Address
    apiserver_vip: IPv4Address
    """Frontend of the internal load balancer in front of the API servers."""
    apiservers: Mapping[str, IPv4Address]
    etcd: Mapping[str, IPv4Address]
    events_etcd: Mapping[str, IPv4Address]
    prometheus: Mapping[str, IPv4Address]
    nat: IPv4Address


def host(subnet: IPv4Network, index: int) -> IPv4Address:
    """The ``index``-th assignable address of an Azure subnet (0-based)."""
    address = subnet.network_address + FIRST_HOST_OFFSET + index
    if address >= subnet.broadcast_address:
        raise ValueError(f"host {index} does not fit in {subnet}: give the subnet a shorter prefix")
    return address
