"""In-process ICMP echo from inside network namespaces, many probes at once.

A raw ICMP socket is bound to the namespace of the thread that opens it, for its
whole life (:mod:`netbay.dataplane.netns`), so one socket per source namespace —
opened while the thread is briefly inside — sends every probe of that namespace,
and a single ``select`` loop collects the replies of all of them. Nothing forks
``ping`` (a fork per cell costs more than the probe), no thread enters a namespace
for longer than a ``socket()`` call, and the whole matrix takes at most
``count × timeout`` seconds however many cells it has.

Replies are matched on (source address, identifier, sequence): the identifier is
random per source socket, the sequence numbers the probe. Needs CAP_NET_RAW. Both
families: an IPv6 destination is probed with ICMPv6 echo from a raw ICMPv6 socket of
the same namespace (the kernel fills in its checksum, and hands replies over without
the IPv6 header).
"""

from __future__ import annotations

import ipaddress
import secrets
import select
import socket
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass

from netbay.dataplane import netns

ECHO_REQUEST, ECHO_REPLY = 8, 0
ECHO6_REQUEST, ECHO6_REPLY = 128, 129
PAYLOAD = b"netbay-probe"
MAX_READS = 100_000  # bound on packets read in one wait, whatever arrives


@dataclass(frozen=True)
class Probe:
    """One cell: ICMP echo from namespace ``ns`` to ``dst``."""
    ns: str
    dst: str


def checksum(data: bytes) -> int:
    """The Internet checksum (RFC 1071)."""
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return ~s & 0xFFFF


def echo_request(ident: int, seq: int, payload: bytes = PAYLOAD, family: int = 4) -> bytes:
    """An echo request; ICMPv6's (``family=6``) goes out with a zero checksum, which the
    kernel fills in for raw ICMPv6 sockets."""
    if family == 6:
        return struct.pack("!BBHHH", ECHO6_REQUEST, 0, 0, ident, seq) + payload
    header = struct.pack("!BBHHH", ECHO_REQUEST, 0, 0, ident, seq)
    return struct.pack("!BBHHH", ECHO_REQUEST, 0, checksum(header + payload), ident, seq) + payload


def parse_reply(data: bytes, family: int = 4) -> tuple[int, int] | None:
    """(identifier, sequence) of an echo reply read from a raw socket (IPv4: its IP
    header first; IPv6: the ICMPv6 message alone)."""
    if family == 6:
        if len(data) < 8:
            return None
        typ, _code, _ck, ident, seq = struct.unpack("!BBHHH", data[:8])
        return (ident, seq) if typ == ECHO6_REPLY else None
    if len(data) < 20:
        return None
    ihl = (data[0] & 0x0F) * 4
    if len(data) < ihl + 8:
        return None
    typ, _code, _ck, ident, seq = struct.unpack("!BBHHH", data[ihl:ihl + 8])
    return (ident, seq) if typ == ECHO_REPLY else None


def family_of(dst: str) -> int:
    """4 or 6: the family a probe of ``dst`` uses (4 for a name: IPv4 sockets resolve it)."""
    try:
        return ipaddress.ip_address(dst.split("%")[0]).version
    except ValueError:
        return 4


def open_socket(ns: str, family: int = 4) -> socket.socket:
    """A raw ICMP (``family=6``: ICMPv6) socket inside ``ns`` (NetnsError if it does not
    exist, PermissionError without CAP_NET_RAW)."""
    with netns.entered(ns):
        if family == 6:
            s = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)
        else:
            s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    s.setblocking(False)
    return s


def run(probes: Sequence[Probe], *, timeout: float = 1.0, count: int = 1) -> list[bool | None]:
    """Whether each probe got its echo reply: True, False, or None when its namespace
    could not be entered. ``count`` rounds at most, each waiting ``timeout`` seconds
    for the cells still unanswered; all cells of a round are in flight together."""
    timeout = max(0.01, float(timeout))
    count = max(1, int(count))
    if len(probes) * count > 0xFFFF:
        raise ValueError(f"{len(probes)} probes x {count} rounds do not fit ICMP sequence numbers")
    keys = [(p.ns, family_of(p.dst)) for p in probes]   # one socket per namespace and family
    sockets: dict[Source, socket.socket] = {}
    idents: dict[Source, int] = {}
    result: list[bool | None] = [False] * len(probes)
    try:
        for i, key in enumerate(keys):
            if key not in idents:
                try:
                    sockets[key] = open_socket(*key)
                    idents[key] = secrets.randbits(16)
                except netns.NetnsError:
                    idents[key] = -1
            if idents[key] < 0:
                result[i] = None
        by_fd = {s.fileno(): key for key, s in sockets.items()}
        n = len(probes)
        for attempt in range(count):
            pending = {(keys[i], i) for i in range(n) if result[i] is False}
            if not pending:
                break
            for key, i in pending:
                seq = attempt * n + i + 1  # (seq - 1) % n is the probe, whatever the round
                try:
                    sockets[key].sendto(echo_request(idents[key], seq, family=key[1]), (probes[i].dst, 0))
                except OSError:
                    pass  # no route, unreachable network: the cell stays False
            _collect(keys, probes, sockets, by_fd, idents, pending, result, time.monotonic() + timeout)
        return result
    finally:
        for s in sockets.values():
            s.close()


Source = tuple[str, int]   # (namespace, family): what one socket probes from


def _collect(keys: Sequence[Source], probes: Sequence[Probe], sockets: dict[Source, socket.socket],
             by_fd: dict[int, Source], idents: dict[Source, int], pending: set[tuple[Source, int]],
             result: list[bool | None], deadline: float) -> None:
    """Read replies until every pending probe has one or ``deadline`` passes. A late
    reply to an earlier round counts too."""
    n = len(probes)
    poller = select.poll()  # not select(): no FD_SETSIZE limit on the number of namespaces
    for s in sockets.values():
        poller.register(s, select.POLLIN)
    for _ in range(MAX_READS):
        left = deadline - time.monotonic()
        if not pending or left <= 0:
            return
        for fd, _event in poller.poll(left * 1000):
            key = by_fd[fd]
            s = sockets[key]
            for _ in range(256):  # drain, bounded
                try:
                    data, addr = s.recvfrom(2048)
                except (BlockingIOError, InterruptedError):
                    break
                got = parse_reply(data, key[1])
                if got is None or got[0] != idents[key] or got[1] == 0:
                    continue
                index = (got[1] - 1) % n
                if keys[index] == key and _same(probes[index].dst, addr[0]):
                    result[index] = True
                    pending.discard((key, index))


def _same(dst: str, source: str) -> bool:
    """Whether a reply's source is the probed address (IPv6 spelled either way)."""
    try:
        return ipaddress.ip_address(dst.split("%")[0]) == ipaddress.ip_address(source.split("%")[0])
    except ValueError:
        return False


def ping(ns: str, dst: str, timeout: float = 1.0, count: int = 1) -> bool:
    """ICMP (or ICMPv6) echo from inside ``ns`` to ``dst``: True if any of ``count`` requests got its
    reply within ``timeout`` seconds each. Raises NetnsError if ``ns`` does not exist."""
    got = run([Probe(ns, dst)], timeout=timeout, count=count)[0]
    if got is None:  # a missing namespace is the caller's error, not a False
        raise netns.NetnsError(2, f"network namespace {ns!r} does not exist")
    return got


__all__ = ["Probe", "checksum", "echo_request", "family_of", "open_socket", "parse_reply", "ping", "run"]
