"""Deleting the conntrack entries of flows that lost their permission (security groups).

When a rule goes, a member leaves a remote group or a port leaves a group, open
connections must be checked again: their entries are deleted in their zone, so the
next packet is a new flow for the filter. A ctnetlink dump walks the kernel's whole
conntrack table (10-20 ms here), so a worker thread does it right after the nft
commit, as Neutron does; the socket is opened inside the fabric namespace.

Only flows that were admitted *before* that commit lose their entries (``Kill.before``,
with ``net.netfilter.nf_conntrack_timestamp`` on in the namespace): a connection opened
under the new ruleset, in the milliseconds before the worker's dump reaches it, was
checked against the rules that now hold. Deleting its entry too would drop its SYN-ACK
as invalid and stall it for the client's 1 s SYN retransmit (a NetworkPolicy update that
admits port 80 while it removes port 81 kills every flow between those addresses).
"""

from __future__ import annotations

import errno
import ipaddress
import logging
import os
import socket
import struct
import threading
from dataclasses import dataclass

from netbay.dataplane import netns

__all__ = ["ConntrackWorker", "CtNetlink", "Kill", "ct_delete"]

log = logging.getLogger("netbay.dataplane.secgroups")  # its messages are the security groups'

IPNet = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class Kill:
    """Conntrack entries to delete: in ``zone``, original direction from ``src`` to ``dst``
    (None: any address); with ``before`` (CLOCK_REALTIME ns, the commit), only entries
    that started before it (or carry no start time)."""
    zone: int
    src: frozenset[IPNet] | None
    dst: frozenset[IPNet] | None
    before: int | None = None


class ConntrackWorker:
    """Deletes conntrack entries in a thread: a dump walks the kernel's whole (global)
    conntrack table, 10-15 ms here, which must not delay the nft commit that already
    refuses new flows. Batches that queue up meanwhile are merged."""

    def __init__(self, ns: str) -> None:
        self.ns = ns
        self._cond = threading.Condition()
        self._pending: set[Kill] = set()
        self._busy = False
        self._thread: threading.Thread | None = None
        self._stop = False

    def submit(self, kills: set[Kill]) -> None:
        with self._cond:
            self._pending |= kills
            if self._thread is None or not self._thread.is_alive():
                self._stop = False
                self._thread = threading.Thread(target=self._run, name=f"sg-conntrack-{self.ns}",
                                                daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def wait(self, timeout: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: not self._pending and not self._busy, timeout)

    def stop(self, timeout: float = 5.0) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
            t = self._thread
        if t is not None:
            t.join(timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._pending or self._stop, 60.0)
                if not self._pending:  # stopped, or idle for a minute: end (submit restarts)
                    self._thread = None
                    return
                batch, self._pending, self._busy = self._pending, set(), True
            try:
                ct_delete(self.ns, list(batch))
            except Exception as exc:  # noqa: BLE001 - new flows are refused already; log, go on
                log.warning("security groups: could not delete conntrack entries in %s: %s",
                            self.ns, exc)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()


def ct_delete(ns: str, kills: list[Kill]) -> int:
    """Delete the conntrack entries ``kills`` describe; returns how many."""
    by_zone: dict[int, list[Kill]] = {}
    for k in kills:
        by_zone.setdefault(k.zone, []).append(k)
    deleted = 0
    with CtNetlink(ns) as ct:
        for zone, ks in by_zone.items():
            doomed = []
            for chunk in ct.request(socket.AF_UNSPEC, IPCTNL_MSG_CT_GET, dump=True, attrs=_zone_attr(zone)):
                e = _entry(chunk)
                if e is None or e.zone != zone:
                    continue
                if any(_hit(e.src, k.src) and _hit(e.dst, k.dst) and not _after(e.start, k.before) for k in ks):
                    doomed.append(e)
            for e in doomed:
                try:
                    ct.request(e.family, IPCTNL_MSG_CT_DELETE, attrs=e.orig + _zone_attr(zone))
                    deleted += 1
                except OSError as exc:
                    if exc.errno != errno.ENOENT:  # ENOENT: it expired meanwhile
                        raise
    return deleted


def _hit(addr: ipaddress.IPv4Address | ipaddress.IPv6Address,
         nets: frozenset[IPNet] | None) -> bool:
    return nets is None or any(addr.version == n.version and addr in n for n in nets)


def _after(start: int | None, before: int | None) -> bool:
    """The flow was admitted at or after the commit: the new ruleset checked it."""
    return start is not None and before is not None and start >= before


# --- ctnetlink messages, read and written as bytes -------------------------------------------
# WHY not pyroute2's nfct_msg: decoding each dumped entry into its objects and encoding each
# delete from them is Python under the GIL of the agent's process, beside its next pass
# (py-spy: half of that process's GIL samples in bench/k8s_policy.py at 1,000 pods). An
# entry needs four attributes read, and its delete names it by the CTA_TUPLE_ORIG attribute
# the dump sent, copied as is. (The dump's own ~10 ms is the kernel's, GIL released.)

CTA_TUPLE_ORIG, CTA_ZONE, CTA_TIMESTAMP = 1, 18, 20   # enum ctattr_type
CTA_TUPLE_IP = 1                                      # enum ctattr_tuple
CTA_IP_V4_SRC, CTA_IP_V4_DST, CTA_IP_V6_SRC, CTA_IP_V6_DST = 1, 2, 3, 4  # enum ctattr_ip
CTA_TIMESTAMP_START = 1                               # enum ctattr_tstamp
NLA_TYPE_MASK = 0x3FFF                                # without NLA_F_NESTED, NLA_F_NET_BYTEORDER


@dataclass(frozen=True)
class _Entry:
    """What a dumped conntrack entry is matched on, and ``orig``: its CTA_TUPLE_ORIG
    attribute as sent (padded), which names it in a delete."""
    family: int
    zone: int
    src: ipaddress.IPv4Address | ipaddress.IPv6Address
    dst: ipaddress.IPv4Address | ipaddress.IPv6Address
    start: int | None
    orig: bytes


def _attrs(data: bytes, off: int, end: int) -> dict[int, tuple[int, int]]:
    """The netlink attributes in ``data[off:end]``: type -> (start of the attribute, end
    of its payload)."""
    out = {}
    while off + 4 <= end:
        length, kind = struct.unpack_from("=HH", data, off)
        if length < 4 or off + length > end:
            break
        out[kind & NLA_TYPE_MASK] = (off, off + length)
        off += (length + 3) & ~3
    return out


def _entry(chunk: bytes) -> _Entry | None:
    """One message of a conntrack dump (netlink header, nfgenmsg, attributes)."""
    top = _attrs(chunk, 20, len(chunk))
    orig = top.get(CTA_TUPLE_ORIG)
    ip = _attrs(chunk, orig[0] + 4, orig[1]).get(CTA_TUPLE_IP) if orig else None
    if orig is None or ip is None:
        return None
    addrs = _attrs(chunk, ip[0] + 4, ip[1])
    src = addrs.get(CTA_IP_V4_SRC) or addrs.get(CTA_IP_V6_SRC)
    dst = addrs.get(CTA_IP_V4_DST) or addrs.get(CTA_IP_V6_DST)
    if src is None or dst is None:
        return None
    zone = struct.unpack_from(">H", chunk, top[CTA_ZONE][0] + 4)[0] if CTA_ZONE in top else 0
    start = None
    if CTA_TIMESTAMP in top:  # when the entry was confirmed (CLOCK_REALTIME ns)
        ts = _attrs(chunk, top[CTA_TIMESTAMP][0] + 4, top[CTA_TIMESTAMP][1]).get(CTA_TIMESTAMP_START)
        start = struct.unpack_from(">Q", chunk, ts[0] + 4)[0] if ts else None
    tuple_attr = bytes(chunk[orig[0]:orig[1]])
    return _Entry(chunk[16], zone, ipaddress.ip_address(bytes(chunk[src[0] + 4:src[1]])),
                  ipaddress.ip_address(bytes(chunk[dst[0] + 4:dst[1]])), start,
                  tuple_attr + b"\0" * (-len(tuple_attr) % 4))


def _zone_attr(zone: int) -> bytes:
    return struct.pack("=HH", 6, CTA_ZONE) + struct.pack(">H", zone) + b"\0\0"


IPCTNL_MSG_CT_GET, IPCTNL_MSG_CT_DELETE = 1, 2
NFNL_SUBSYS_CTNETLINK = 1
NLMSG_ERROR, NLMSG_DONE = 2, 3
NLM_F_REQUEST, NLM_F_ACK, NLM_F_DUMP = 0x1, 0x4, 0x300


class CtNetlink:
    """A ctnetlink socket opened inside ``ns``; one request at a time, bounded reads.
    (pyroute2's conntrack wrapper closes a socket handed to it after one dump.)"""

    def __init__(self, ns: str) -> None:
        with netns.entered(ns):
            if netns.in_home():
                raise PermissionError(f"namespace {ns!r} is the host's namespace")
            self.sk = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 12)  # NETLINK_NETFILTER
        self.sk.settimeout(2.0)
        self.seq = 0

    def __enter__(self) -> CtNetlink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.sk.close()

    def request(self, family: int, msg_type: int, *, dump: bool = False, attrs: bytes = b"") -> list[bytes]:
        """Send one request (``attrs``: its attributes, encoded); returns the messages of
        its answer (a dump's entries), each as bytes."""
        self.seq += 1
        body = struct.pack("=BBH", family, 0, 0) + attrs   # nfgenmsg: family, NFNETLINK_V0, res_id
        flags = NLM_F_REQUEST | (NLM_F_DUMP if dump else NLM_F_ACK)
        self.sk.send(struct.pack("=IHHII", 16 + len(body), (NFNL_SUBSYS_CTNETLINK << 8) | msg_type,
                                 flags, self.seq, 0) + body)
        out: list[bytes] = []
        for _ in range(100_000):  # bounded: at most this many reads per request
            data = self.sk.recv(1 << 20)
            off = 0
            while off + 16 <= len(data):
                length, mtype, _flags, seq = struct.unpack_from("=IHHI", data, off)
                if length < 16:
                    return out
                chunk = data[off:off + length]
                off += (length + 3) & ~3
                if seq != self.seq:
                    continue
                if mtype == NLMSG_DONE:
                    return out
                if mtype == NLMSG_ERROR:
                    code = -struct.unpack_from("=i", chunk, 16)[0]
                    if code:
                        raise OSError(code, os.strerror(code))
                    return out
                out.append(chunk)
        raise TimeoutError("ctnetlink: too many replies")
