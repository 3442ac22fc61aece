"""Gratuitous ARP (IPv4) or an unsolicited neighbour advertisement (IPv6): announce that
an address now lives at a MAC (a VIP, a floating IP)."""

from __future__ import annotations

import socket
import struct

from netbay.dataplane import netns


ETH_P_ARP = 0x0806


def announce(ns: str, ifname: str, mac: str, address: str, count: int = 2) -> None:
    """Gratuitous ARP for ``address`` (as keepalived does for Octavia's VIPs): a VIP
    address is often reused right after its previous port was deleted, and neighbours
    would otherwise keep sending to the old MAC for seconds."""
    hw = bytes.fromhex(mac.replace(":", ""))
    if ":" in address:
        _advertise(ns, ifname, hw, address, count)
        return
    ip = socket.inet_aton(address)
    frame = (b"\xff" * 6 + hw + struct.pack("!H", ETH_P_ARP)
             + struct.pack("!HHBBH", 1, 0x0800, 6, 4, 1) + hw + ip + b"\0" * 6 + ip)
    # Protocol 0: a send-only socket registers no receive hook, whose removal at
    # close would wait for an RCU grace period (~20 ms here).
    with netns.entered(ns):
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    try:
        s.bind((ifname, 0))
        for _ in range(count):
            s.send(frame)
    finally:
        s.close()


def _advertise(ns: str, ifname: str, hw: bytes, address: str, count: int) -> None:
    """An unsolicited neighbour advertisement to all nodes, override flag set (RFC 4861
    7.2.6; keepalived's for an IPv6 VIP): neighbours holding the address update its MAC.
    Sent from the address itself (it must be on ``ifname``); the kernel fills in the
    ICMPv6 checksum."""
    target = socket.inet_pton(socket.AF_INET6, address)
    na = struct.pack("!BBHI", 136, 0, 0, 0x20000000) + target + bytes((2, 1)) + hw   # O flag; target lladdr
    with netns.entered(ns):
        s = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)
        index = socket.if_nametoindex(ifname)
    try:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_HOPS, 255)   # ND's hop limit
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_IF, index)
        s.bind((address, 0, 0, index))
        for _ in range(count):
            s.sendto(na, ("ff02::1", 0, 0, index))
    finally:
        s.close()
