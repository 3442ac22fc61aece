"""In-process ICMP echo from inside network namespaces, many probes at once.

A raw ICMP socket is bound to the namespace of the thread that opens it, for its
whole life (:mod:`netbay.dataplane.netns`), so one socket per source namespace —
opened while the thread is briefly inside — sends every probe of that namespace,
and a single ``select`` loop collects the replies of all of them. Nothing forks
``ping`` (a fork per cell costs more than the probe), no thread enters a namespace
for longer than a ``socket()`` call, and the whole matrix takes at most
``count × timeout`` seconds however many cells it has.

Replies are matched on (source address, identifier, sequence): the identifier is
random per source socket, the sequence numbers the probe. Needs CAP_NET_RAW.
"""

from __future__ import annotations

import secrets
import select
import socket
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass

from netbay.dataplane import netns

ECHO_REQUEST, ECHO_REPLY = 8, 0
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


def echo_request(ident: int, seq: int, payload: bytes = PAYLOAD) -> bytes:
    header = struct.pack("!BBHHH", ECHO_REQUEST, 0, 0, ident, seq)
    return struct.pack("!BBHHH", ECHO_REQUEST, 0, checksum(header + payload), ident, seq) + payload


def parse_reply(data: bytes) -> tuple[int, int] | None:
    """(identifier, sequence) of an echo reply read from a raw socket (IP header first)."""
    if len(data) < 20:
        return None
    ihl = (data[0] & 0x0F) * 4
    if len(data) < ihl + 8:
        return None
    typ, _code, _ck, ident, seq = struct.unpack("!BBHHH", data[ihl:ihl + 8])
    return (ident, seq) if typ == ECHO_REPLY else None


def open_socket(ns: str) -> socket.socket:
    """A raw ICMP socket inside ``ns`` (NetnsError if it does not exist, PermissionError
    without CAP_NET_RAW)."""
    with netns.entered(ns):
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
    sockets: dict[str, socket.socket] = {}
    idents: dict[str, int] = {}
    result: list[bool | None] = [False] * len(probes)
    try:
        for i, p in enumerate(probes):
            if p.ns not in sockets and p.ns not in idents:
                try:
                    sockets[p.ns] = open_socket(p.ns)
                    idents[p.ns] = secrets.randbits(16)
                except netns.NetnsError:
                    idents[p.ns] = -1
            if idents[p.ns] < 0:
                result[i] = None
        by_fd = {s.fileno(): ns for ns, s in sockets.items()}
        n = len(probes)
        for attempt in range(count):
            pending = {(p.ns, i) for i, p in enumerate(probes) if result[i] is False}
            if not pending:
                break
            for ns, i in pending:
                seq = attempt * n + i + 1  # (seq - 1) % n is the probe, whatever the round
                try:
                    sockets[ns].sendto(echo_request(idents[ns], seq), (probes[i].dst, 0))
                except OSError:
                    pass  # no route, unreachable network: the cell stays False
            _collect(probes, sockets, by_fd, idents, pending, result, time.monotonic() + timeout)
        return result
    finally:
        for s in sockets.values():
            s.close()


def _collect(probes: Sequence[Probe], sockets: dict[str, socket.socket], by_fd: dict[int, str],
             idents: dict[str, int], pending: set[tuple[str, int]], result: list[bool | None],
             deadline: float) -> None:
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
            ns = by_fd[fd]
            s = sockets[ns]
            for _ in range(256):  # drain, bounded
                try:
                    data, addr = s.recvfrom(2048)
                except (BlockingIOError, InterruptedError):
                    break
                got = parse_reply(data)
                if got is None or got[0] != idents[ns] or got[1] == 0:
                    continue
                index = (got[1] - 1) % n
                if probes[index].ns == ns and probes[index].dst == addr[0]:
                    result[index] = True
                    pending.discard((ns, index))


def ping(ns: str, dst: str, timeout: float = 1.0, count: int = 1) -> bool:
    """ICMP echo from inside ``ns`` to ``dst``: True if any of ``count`` requests got its
    reply within ``timeout`` seconds each. Raises NetnsError if ``ns`` does not exist."""
    got = run([Probe(ns, dst)], timeout=timeout, count=count)[0]
    if got is None:  # a missing namespace is the caller's error, not a False
        raise netns.NetnsError(2, f"network namespace {ns!r} does not exist")
    return got


__all__ = ["Probe", "checksum", "echo_request", "open_socket", "parse_reply", "ping", "run"]
