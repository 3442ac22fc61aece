"""A load balancer namespace's conntrack flows as they come and go: ctnetlink's NEW,
UPDATE and DESTROY events (and a dump, to start from or to catch up after lost events),
each read as the few attributes a least-connections count needs.

Events cost nothing per packet: the kernel sends one message when a flow is confirmed
(after its first packet, NAT done: the reply tuple names the member), one when its
entry goes (expired, deleted), and an update when its state changes (a TCP
connection's conntrack state: a handful over its life; a UDP flow's first reply).
A flow is named by its original tuple as sent (the same bytes in every event).
Messages are read as raw netlink bytes, as ``lbstats`` and ``ctkill`` read conntrack dumps.
"""

from __future__ import annotations

import errno
import ipaddress
import select
import socket
import struct
from collections.abc import Iterator
from dataclasses import dataclass

from netbay.dataplane import links, netns
from netbay.dataplane.ctkill import IPCTNL_MSG_CT_GET, NFNL_SUBSYS_CTNETLINK, CtNetlink
from netbay.dataplane.lbstats import (
    CTA_MARK,
    CTA_PROTO_NUM,
    CTA_PROTOINFO,
    CTA_PROTOINFO_TCP,
    CTA_PROTOINFO_TCP_STATE,
    CTA_TUPLE_ORIG,
    CTA_TUPLE_PROTO,
    NETLINK_NETFILTER,
    attrs,
    nested,
)

# the legacy group bits
NF_NETLINK_CONNTRACK_NEW, NF_NETLINK_CONNTRACK_UPDATE, NF_NETLINK_CONNTRACK_DESTROY = 0x1, 0x2, 0x4
IPCTNL_MSG_CT_NEW, IPCTNL_MSG_CT_DELETE = 0, 2
CTA_TUPLE_REPLY, CTA_TUPLE_IP = 2, 1
CTA_IP_V4_SRC, CTA_IP_V6_SRC = 1, 3
CTA_PROTO_SRC_PORT = 2
RCVBUF = 4 << 20     # bytes: a burst of ~20,000 events before the kernel drops some (ENOBUFS)
#: Events are sent for every flow of the namespace (``2``, the default, sends them only
#: for flows made while someone listened: a flow older than the watcher would never end).
EVENTS_SYSCTL = "net.netfilter.nf_conntrack_events"

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class EventsLost(OSError):
    """The kernel dropped events (the socket's buffer was full): count again from a dump."""


@dataclass(frozen=True)
class Flow:
    """One conntrack entry: ``key`` names it (its original tuple); ``mark`` is its ct
    mark (the listener's), ``member`` the reply tuple's source (address, port);
    ``protocol`` its IP protocol number, ``tcp_state`` a TCP entry's conntrack state
    (``TCP_CONNTRACK_*``) when the message carries it (a dump, a state change)."""
    key: bytes
    mark: int
    member: tuple[Address, int] | None
    protocol: int = 0
    tcp_state: int | None = None


def parse(msg: bytes) -> Flow | None:
    """A conntrack message (netlink header, nfgenmsg, attributes): its :class:`Flow`."""
    top = attrs(msg, 20, len(msg))
    orig = top.get(CTA_TUPLE_ORIG)
    if orig is None:
        return None
    span = top.get(CTA_MARK)
    mark = struct.unpack_from("!I", msg, span[0])[0] if span is not None else 0
    member = None
    reply = top.get(CTA_TUPLE_REPLY)
    src = nested(msg, reply, CTA_TUPLE_IP, CTA_IP_V4_SRC) or nested(msg, reply, CTA_TUPLE_IP, CTA_IP_V6_SRC)
    sport = nested(msg, reply, CTA_TUPLE_PROTO, CTA_PROTO_SRC_PORT)
    if src is not None and sport is not None:
        member = (ipaddress.ip_address(bytes(msg[src[0]:src[1]])), struct.unpack_from("!H", msg, sport[0])[0])
    proto = nested(msg, orig, CTA_TUPLE_PROTO, CTA_PROTO_NUM)
    state = nested(msg, top.get(CTA_PROTOINFO), CTA_PROTOINFO_TCP, CTA_PROTOINFO_TCP_STATE)
    return Flow(bytes(msg[orig[0]:orig[1]]), mark, member, msg[proto[0]] if proto is not None else 0,
                msg[state[0]] if state is not None else None)


def dump(ns: str) -> list[Flow]:
    """Every conntrack entry of namespace ``ns`` (one dump; the kernel walks its whole
    table for it, ~10-100 ms here)."""
    with CtNetlink(ns) as ct:
        chunks = ct.request(socket.AF_UNSPEC, IPCTNL_MSG_CT_GET, dump=True)
    return [f for f in map(parse, chunks) if f is not None]


class Events:
    """A ctnetlink socket of namespace ``ns`` subscribed to NEW, UPDATE and DESTROY events."""

    def __init__(self, ns: str) -> None:
        if links.read_sysctl(ns, EVENTS_SYSCTL) != "1":
            links.sysctl(ns, EVENTS_SYSCTL, "1")
        with netns.entered(ns):
            if netns.in_home():
                raise PermissionError(f"namespace {ns!r} is the host's namespace")
            self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, 33, RCVBUF)   # SO_RCVBUFFORCE (root): above rmem_max
            self.sock.bind((0, NF_NETLINK_CONNTRACK_NEW | NF_NETLINK_CONNTRACK_UPDATE | NF_NETLINK_CONNTRACK_DESTROY))
            self.sock.setblocking(False)
        except OSError:
            self.sock.close()
            raise

    def close(self) -> None:
        self.sock.close()

    def wait(self, timeout: float) -> bool:
        """True when events are waiting (at most ``timeout`` s)."""
        return bool(select.select([self.sock], [], [], max(0.0, timeout))[0])

    def read(self) -> Iterator[tuple[bool, Flow]]:
        """The events waiting now, in order: (True: a new or changed flow | False: a flow gone, the flow).
        Raises :class:`EventsLost` when the kernel dropped some."""
        for _ in range(100_000):   # bounded: a burst is read, then the caller comes back
            try:
                data = self.sock.recv(1 << 20)
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno == errno.ENOBUFS:
                    raise EventsLost(errno.ENOBUFS, "conntrack events lost") from None
                raise
            off = 0
            while off + 16 <= len(data):
                length, mtype = struct.unpack_from("=IH", data, off)
                if length < 16:
                    break
                msg = data[off:off + length]
                off += (length + 3) & ~3
                kind = mtype & 0xFF
                if mtype >> 8 != NFNL_SUBSYS_CTNETLINK or kind not in (IPCTNL_MSG_CT_NEW, IPCTNL_MSG_CT_DELETE):
                    continue
                flow = parse(msg)
                if flow is not None:
                    yield kind == IPCTNL_MSG_CT_NEW, flow


__all__ = ["EVENTS_SYSCTL", "Events", "EventsLost", "Flow", "dump", "parse"]
