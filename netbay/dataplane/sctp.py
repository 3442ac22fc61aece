"""SCTP packets on raw sockets: the few chunks an L4 load balancer's health check needs.

This kernel may have no SCTP stack (``CONFIG_IP_SCTP`` unset) while its conntrack and
NAT know SCTP (``CONFIG_NF_CT_PROTO_SCTP``), so SCTP listeners are forwarded by
nftables like UDP ones, and a member's health is checked as Octavia's amphora checks
it: an INIT to the member's port, healthy when an INIT ACK comes back (the association
is then aborted), unhealthy on an ABORT, an ICMP error or silence. The packets are
built here, with the CRC32c checksum SCTP requires (RFC 9260, appendix A): conntrack
ignores an SCTP packet whose checksum is wrong.
"""

from __future__ import annotations

import os
import select
import socket
import struct
import time
from dataclasses import dataclass

PROTO = 132          # IPPROTO_SCTP
INIT, INIT_ACK, ABORT = 1, 2, 6
_COMMON = struct.Struct("!HHI")          # source port, destination port, verification tag
_CHUNK = struct.Struct("!BBH")           # type, flags, length
_INIT = struct.Struct("!IIHHI")          # initiate tag, a_rwnd, out streams, in streams, initial TSN


def _table() -> list[int]:
    out = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        out.append(c)
    return out


_CRC = _table()


def crc32c(data: bytes) -> int:
    """CRC32c (Castagnoli), as SCTP computes it over the whole packet."""
    c = 0xFFFFFFFF
    for b in data:
        c = _CRC[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def packet(sport: int, dport: int, vtag: int, chunk_type: int, body: bytes = b"", flags: int = 0) -> bytes:
    """One SCTP packet holding one chunk, its checksum filled in (stored little-endian,
    as the kernel stores the CRC it computes)."""
    chunk = _CHUNK.pack(chunk_type, flags, _CHUNK.size + len(body)) + body
    chunk += b"\0" * (-len(chunk) % 4)
    head = _COMMON.pack(sport, dport, vtag)
    csum = crc32c(head + b"\0\0\0\0" + chunk)
    return head + struct.pack("<I", csum) + chunk


def init(sport: int, dport: int, tag: int) -> bytes:
    return packet(sport, dport, 0, INIT, _INIT.pack(tag, 65536, 1, 1, tag))


def init_ack(sport: int, dport: int, peer_tag: int, tag: int) -> bytes:
    """An INIT ACK with a state cookie (parameter 7), as a listening endpoint answers."""
    cookie = struct.pack("!HH", 7, 8) + os.urandom(4)
    return packet(sport, dport, peer_tag, INIT_ACK, _INIT.pack(tag, 65536, 1, 1, tag) + cookie)


def abort(sport: int, dport: int, peer_tag: int) -> bytes:
    return packet(sport, dport, peer_tag, ABORT)


@dataclass(frozen=True)
class Packet:
    sport: int
    dport: int
    vtag: int
    chunk: int
    init_tag: int | None      # the initiate tag of an INIT or INIT ACK
    valid: bool               # the checksum is right


def parse(data: bytes, family: int = socket.AF_INET) -> Packet | None:
    """The SCTP packet in what a raw socket read (IPv4 raw sockets hand over the IP header)."""
    if family == socket.AF_INET:
        if len(data) < 20:
            return None
        data = data[(data[0] & 0x0F) * 4:]
    if len(data) < _COMMON.size + 4 + _CHUNK.size:
        return None
    sport, dport, vtag = _COMMON.unpack_from(data)
    (csum,) = struct.unpack_from("<I", data, 8)
    valid = crc32c(data[:8] + b"\0\0\0\0" + data[12:]) == csum
    chunk, _, _ = _CHUNK.unpack_from(data, 12)
    tag = None
    if chunk in (INIT, INIT_ACK) and len(data) >= 16 + _INIT.size:
        tag = _INIT.unpack_from(data, 16)[0]
    return Packet(sport, dport, vtag, chunk, tag, valid)


def check(sock: socket.socket, address: str, port: int, timeout: float) -> bool:
    """Octavia's SCTP health check over ``sock`` (a raw IPPROTO_SCTP socket of the prober's
    namespace): INIT, then True on the member's INIT ACK (aborted at once), False on ABORT,
    an error or no answer within ``timeout``."""
    sport = 1024 + int.from_bytes(os.urandom(2), "big") % 64000
    tag = int.from_bytes(os.urandom(4), "big") or 1
    family = sock.family
    deadline = time.monotonic() + timeout
    try:
        sock.sendto(init(sport, port, tag), (address, 0))
        for _ in range(256):   # other traffic of the protocol reaches every raw socket: skip it
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([sock], [], [], left)[0]:
                return False
            got = parse(sock.recv(65535), family)
            if got is None or not got.valid or got.dport != sport or got.sport != port or got.vtag != tag:
                continue
            if got.chunk == INIT_ACK and got.init_tag:
                sock.sendto(abort(sport, port, got.init_tag), (address, 0))
                return True
            return False
        return False
    except OSError:   # ICMP protocol/port unreachable, no route, the namespace went
        return False
