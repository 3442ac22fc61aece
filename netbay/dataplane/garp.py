"""Gratuitous ARP: announce that an address now lives at a MAC (a VIP, a floating IP)."""

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
