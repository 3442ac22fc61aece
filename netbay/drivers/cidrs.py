"""Address ranges a pod, service or node network cannot use, and why.

A range that reaches into one of these cannot carry a cluster's traffic: the
kernel never routes loopback or link-local addresses off a host, multicast and
the reserved class E are no unicast destinations, and ``0.0.0.0/8`` is "this
host". ``0.0.0.0/0`` (every address) is the default route: pods would shadow
the whole outside world. IPv6 has the same kinds (RFC 4291): ``::/128``,
loopback ``::1``, link-local ``fe80::/10``, multicast ``ff00::/8``, the
IPv4-mapped ``::ffff:0:0/96`` and the default route ``::/0``. The API refuses
such labels naming the block.
"""

from __future__ import annotations

import ipaddress

# (block, what it is, why a cluster cannot use it)
UNUSABLE: tuple[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, str, str], ...] = tuple(
    (ipaddress.ip_network(block), name, why) for block, name, why in (
        ("0.0.0.0/8", "'this network' (RFC 1122)", "no host can be addressed there"),
        ("127.0.0.0/8", "loopback", "those addresses never leave a host, so pods on other nodes are unreachable"),
        ("169.254.0.0/16", "link-local", "those addresses are never routed beyond one link"),
        ("224.0.0.0/4", "multicast", "no interface takes a multicast address, so pods cannot be created there"),
        ("240.0.0.0/4", "reserved (class E, broadcast)", "the kernel refuses those as unicast addresses"),
        ("::/128", "unspecified IPv6 address (RFC 4291)", "no host can be addressed there"),
        ("::1/128", "IPv6 loopback", "that address never leaves a host, so pods on other nodes are unreachable"),
        ("fe80::/10", "IPv6 link-local", "those addresses are never routed beyond one link"),
        ("ff00::/8", "IPv6 multicast", "no interface takes a multicast address, so pods cannot be created there"),
        ("::ffff:0:0/96", "IPv4-mapped IPv6", "those addresses stand for IPv4 peers and are never routed as IPv6"),
    ))


def unusable(net: ipaddress.IPv4Network | ipaddress.IPv6Network) -> str | None:
    """Why ``net`` cannot be a cluster's address range, or None if it can."""
    if net.prefixlen == 0:
        return (f"{net} is the default route (every address): pod routes would take the place of "
                "the way out of the cluster")
    for block, name, why in UNUSABLE:
        if block.version == net.version and net.overlaps(block):
            inside = "is" if net.subnet_of(block) else "overlaps"  # type: ignore[arg-type]
            return f"{net} {inside} the {name} range {block}: {why}"
    return None
