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
from typing import Any, Union

from netbay.dataplane import netns

__all__ = ["ConntrackWorker", "Kill", "ct_delete"]

log = logging.getLogger("netbay.dataplane.secgroups")  # its messages are the security groups'

IPNet = Union[ipaddress.IPv4Network, ipaddress.IPv6Network]


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
    with _CtNetlink(ns) as ct:
        for zone, ks in by_zone.items():
            doomed = []
            for msg in ct.request(socket.AF_UNSPEC, IPCTNL_MSG_CT_GET, dump=True,
                                  attrs=[["CTA_ZONE", zone]]):
                if (msg.get_attr("CTA_ZONE") or 0) != zone:
                    continue
                orig = msg.get_attr("CTA_TUPLE_ORIG")
                ipattr = orig.get_attr("CTA_TUPLE_IP") if orig else None
                if ipattr is None:
                    continue
                src = ipattr.get_attr("CTA_IP_V4_SRC") or ipattr.get_attr("CTA_IP_V6_SRC")
                dst = ipattr.get_attr("CTA_IP_V4_DST") or ipattr.get_attr("CTA_IP_V6_DST")
                if src is None or dst is None:
                    continue
                s, d = ipaddress.ip_address(src), ipaddress.ip_address(dst)
                start = _start(msg)
                if any(_hit(s, k.src) and _hit(d, k.dst) and not _after(start, k.before) for k in ks):
                    doomed.append((msg["nfgen_family"], orig))
            for family, orig in doomed:
                try:
                    ct.request(family, IPCTNL_MSG_CT_DELETE,
                               attrs=[["CTA_TUPLE_ORIG", {"attrs": _plain(orig["attrs"])}],
                                      ["CTA_ZONE", zone]])
                    deleted += 1
                except OSError as exc:
                    if exc.errno != errno.ENOENT:  # ENOENT: it expired meanwhile
                        raise
    return deleted


def _hit(addr: ipaddress.IPv4Address | ipaddress.IPv6Address,
         nets: frozenset[IPNet] | None) -> bool:
    return nets is None or any(addr.version == n.version and addr in n for n in nets)


def _start(msg: Any) -> int | None:
    """When the entry was confirmed (CLOCK_REALTIME ns; None without timestamps)."""
    ts = msg.get_attr("CTA_TIMESTAMP")
    return ts.get_attr("CTA_TIMESTAMP_START") if ts is not None else None


def _after(start: int | None, before: int | None) -> bool:
    """The flow was admitted at or after the commit: the new ruleset checked it."""
    return start is not None and before is not None and start >= before


def _plain(attrs: Any) -> list:
    """Decoded nested attributes back into what the encoder takes."""
    out = []
    for a in attrs:
        name, value = a[0], a[1]
        if hasattr(value, "get") and "attrs" in value:
            value = {"attrs": _plain(value["attrs"])}
        out.append([name, value])
    return out


IPCTNL_MSG_CT_GET, IPCTNL_MSG_CT_DELETE = 1, 2
NFNL_SUBSYS_CTNETLINK = 1
NLMSG_ERROR, NLMSG_DONE = 2, 3


class _CtNetlink:
    """A ctnetlink socket opened inside ``ns``; one request at a time, bounded reads.
    (pyroute2's conntrack wrapper closes a socket handed to it after one dump.)"""

    def __init__(self, ns: str) -> None:
        with netns.entered(ns):
            if netns.in_home():
                raise PermissionError(f"namespace {ns!r} is the host's namespace")
            self.sk = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 12)  # NETLINK_NETFILTER
        self.sk.settimeout(2.0)
        self.seq = 0

    def __enter__(self) -> _CtNetlink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.sk.close()

    def request(self, family: int, msg_type: int, *, dump: bool = False,
                attrs: list | None = None) -> list[Any]:
        from pyroute2.netlink import NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST
        from pyroute2.netlink.nfnetlink.nfctsocket import nfct_msg

        self.seq += 1
        msg = nfct_msg()
        msg["nfgen_family"] = family
        msg["attrs"] = attrs or []
        msg["header"]["type"] = (NFNL_SUBSYS_CTNETLINK << 8) | msg_type
        msg["header"]["flags"] = NLM_F_REQUEST | (NLM_F_DUMP if dump else NLM_F_ACK)
        msg["header"]["sequence_number"] = self.seq
        msg.encode()
        self.sk.send(msg.data)
        out: list[Any] = []
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
                m = nfct_msg(chunk)
                m.decode()
                out.append(m)
        raise TimeoutError("ctnetlink: too many replies")
