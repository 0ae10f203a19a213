"""Parsing and checking CIDRs against what Azure accepts (reserved, private, overlapping)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from ipaddress import IPv4Address, IPv4Network, ip_network

from modules.errors import AgkError


class AddressError(AgkError):
    """A CIDR that Azure would refuse, or two ranges that must not overlap."""


LOOPBACK = IPv4Network("127.0.0.0/8")
LINK_LOCAL = IPv4Network("169.254.0.0/16")
WIRESERVER = IPv4Network("168.63.129.16/32")
"""Azure's virtual public IP: DHCP, DNS, health probes, the VM agent (what-is-ip-address-168-63-129-16)."""
IMDS = IPv4Address("169.254.169.254")
"""The Instance Metadata Service and managed-identity tokens (instance-metadata-service), in LINK_LOCAL."""
PLATFORM = (LOOPBACK, WIRESERVER, LINK_LOCAL)
"""Where a host's platform traffic goes: never the internet, never a VNet's."""
# Azure refuses these in any VNet (virtual-networks-faq: "What address ranges can I use").
AZURE_RESERVED = (IPv4Network("224.0.0.0/4"), IPv4Network("255.255.255.255/32"), *PLATFORM)
# Private in Azure: RFC 1918 plus the shared address space (RFC 6598).
PRIVATE = tuple(IPv4Network(c) for c in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10"))
# Subnets Azure refuses a network security group on (their services manage their own traffic:
# VPN/ExpressRoute gateway, Azure Firewall and its management subnet, Route Server). Names compare
# case-insensitively, as Azure compares them.
NSG_EXEMPT_SUBNETS = frozenset(
    {"gatewaysubnet", "azurefirewallsubnet", "azurefirewallmanagementsubnet", "routeserversubnet"}
)
# AKS refuses these for its service and pod ranges (Docker bridge and documentation ranges).
AKS_REFUSED = tuple(IPv4Network(c) for c in ("172.30.0.0/16", "172.31.0.0/16", "192.0.2.0/24"))


def parse_cidr(text: str, where: str) -> IPv4Network:
    """Parse an IPv4 CIDR strictly; ``where`` names the config key in the error."""
    try:
        net = ip_network(str(text).strip(), strict=False)
    except ValueError:
        raise AddressError(f"{where}: {text!r} is not an IPv4 CIDR: write it like 10.0.0.0/16") from None
    if not isinstance(net, IPv4Network):
        raise AddressError(f"{where}: {text!r} is IPv6: this planner lays out IPv4 address space")
    if "/" not in str(text):
        raise AddressError(f"{where}: {text!r} has no prefix length: write it like {net.network_address}/16")
    if str(net) != str(text).strip():
        raise AddressError(f"{where}: {text} has host bits set: use {net}")
    return net


def inside(net: IPv4Network, other: IPv4Network) -> str:
    return "is inside" if net.subnet_of(other) else "overlaps"


def check_usable(net: IPv4Network, where: str, *, allow_public: bool) -> None:
    """Refuse Azure-reserved ranges, and public ranges unless the stack allows them."""
    for reserved in AZURE_RESERVED:
        if net.overlaps(reserved):
            raise AddressError(
                f"{where}: {net} {inside(net, reserved)} {reserved}, which Azure reserves: use a private range"
            )
    if not allow_public and not any(net.subnet_of(p) for p in PRIVATE):
        raise AddressError(
            f"{where}: {net} is not private address space: use 10.0.0.0/8, 172.16.0.0/12, "
            "192.168.0.0/16 or 100.64.0.0/10 (or set network.allow_public_ranges: true)"
        )


def first_overlap(
    named: Iterable[tuple[str, IPv4Network]], others: Sequence[tuple[str, IPv4Network]] | None = None
) -> tuple[tuple[str, IPv4Network], tuple[str, IPv4Network]] | None:
    """The first overlapping pair, within ``named`` (when ``others`` is None) or across the two."""
    items = list(named)
    if others is None:
        for i, a in enumerate(items):
            for b in items[i + 1 :]:
                if a[1].overlaps(b[1]):
                    return a, b
        return None
    for a in items:
        for b in others:
            if a[1].overlaps(b[1]):
                return a, b
    return None
