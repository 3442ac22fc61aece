"""A cluster node as the drivers see it, and the small per-node helpers they share.

A :class:`Node` is plain data the integrator builds from what it knows: the node's
namespace (``nb-n-…``), its address on the cluster's private network (``eth0``'s
fixed IP with the subnet's prefix) and its lease (flannel subnet or calico block).
Nothing here reads the database.
"""

from __future__ import annotations

import errno
import hashlib
import ipaddress
from dataclasses import dataclass

from netbay.dataplane import links
from netbay.dataplane import rtnl as kernel
from netbay.drivers import leases

__all__ = ["Node", "derived_mac", "enable_forwarding", "ensure_cni_bridge", "BRIDGE"]

BRIDGE = "cni0"


def derived_mac(*parts: str) -> str:
    """A stable, locally administered unicast MAC from ``parts`` (VTEPs, bridges):
    peers can compute a node's VTEP MAC without asking the node."""
    h = hashlib.sha256("\0".join(parts).encode()).digest()
    return ":".join(f"{b:02x}" for b in (0x0E, *h[:5]))


@dataclass(frozen=True)
class Node:
    """``ns``: the node's namespace; ``address``: its underlay interface address with
    prefix (``10.0.0.5/24``); ``lease``: its share of the container network
    (``10.100.3.0/24``); ``underlay``: the underlay link's name inside ``ns``;
    ``lease6``: a dual-stack driver's IPv6 lease (``fd00:10:0:3::/64``), filled in by
    the driver from its config (:func:`netbay.drivers.leases.paired`), else empty."""

    ns: str
    address: str
    lease: str
    underlay: str = "eth0"
    lease6: str = ""

    def __post_init__(self) -> None:
        ipaddress.ip_interface(self.address)
        ipaddress.ip_network(self.lease, strict=True)
        if self.lease6:
            ipaddress.IPv6Network(self.lease6, strict=True)

    @property
    def ip(self) -> str:
        """The underlay address without prefix."""
        return str(ipaddress.ip_interface(self.address).ip)

    @property
    def underlay_net(self) -> ipaddress.IPv4Network:
        return ipaddress.ip_interface(self.address).network

    @property
    def gateway(self) -> str:
        """First address of the lease: cni0's address, the pods' default gateway."""
        return leases.gateway(self.lease)

    @property
    def lease_network_ip(self) -> str:
        """The lease's network address (flannel puts it on ``flannel.1`` as a /32)."""
        return str(ipaddress.ip_network(self.lease).network_address)

    @property
    def gateway6(self) -> str:
        """First address of the IPv6 lease (``…::1``): cni0's, the pods' IPv6 gateway."""
        return leases.gateway(self.lease6)

    @property
    def lease6_network_ip(self) -> str:
        """The IPv6 lease's network address (the VTEP's /128, the peers' next hop)."""
        return str(ipaddress.ip_network(self.lease6).network_address)

    def mac(self, device: str) -> str:
        return derived_mac(self.ns, device)


def underlay_mtu(node: Node) -> int:
    """The MTU of the node's underlay link (what a driver's pod MTU is derived from);
    ``LinkError`` (ENODEV) when the link is not there (yet)."""
    link = kernel.rtnl(node.ns).link(node.underlay)
    if link is None:
        raise kernel.LinkError(errno.ENODEV, f"underlay {node.underlay!r} missing in {node.ns!r}")
    return link.mtu


def enable_forwarding(ns: str, ipv6: bool = False) -> None:
    """IPv4 (and with ``ipv6`` IPv6) forwarding inside the node (pods ↔ underlay ↔ overlay)."""
    if links.read_sysctl(ns, "net.ipv4.ip_forward") != "1":
        links.sysctl(ns, "net.ipv4.ip_forward", 1)
    if ipv6 and links.read_sysctl(ns, "net.ipv6.conf.all.forwarding") != "1":
        links.sysctl(ns, "net.ipv6.conf.all.forwarding", 1)


def ensure_cni_bridge(node: Node, mtu: int, name: str = BRIDGE) -> int:
    """The node's pod bridge: ``cni0`` up with the lease's gateway (``10.100.3.1/24``),
    and the IPv6 lease's (``fd00:10:0:3::1/64``) on a dual-stack node, a fixed MAC and
    the pods' MTU. Returns its ifindex. Idempotent."""
    idx = kernel.ensure_bridge(node.ns, name, mtu=mtu, mac=node.mac(name))
    want = {f"{node.gateway}/{ipaddress.ip_network(node.lease).prefixlen}"}
    if node.lease6:
        # No DAD on the bridge's link-local address (its MAC is the node's own, derived):
        # while it is tentative — the first second after the first pod joins — the node
        # cannot solicit a pod's address, so IPv6 to pods waited a second for the retry.
        if links.read_sysctl(node.ns, f"net.ipv6.conf.{name}.accept_dad") != "0":
            links.sysctl(node.ns, f"net.ipv6.conf.{name}.accept_dad", 0)
        want.add(f"{node.gateway6}/{ipaddress.ip_network(node.lease6).prefixlen}")
    r = kernel.rtnl(node.ns)
    for cidr in r.addresses(idx):
        if cidr not in want and not ipaddress.ip_interface(cidr).is_link_local:
            r.del_address(idx, cidr)  # a previous lease's gateway
    for cidr in sorted(want):
        r.add_address(idx, cidr)
    return idx


def remove_cni_bridge(node: Node, name: str = BRIDGE) -> None:
    kernel.delete_link(node.ns, name)
