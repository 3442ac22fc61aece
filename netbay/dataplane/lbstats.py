"""Load balancer statistics: the kernel's counters per listener, sent to the API.

What Octavia's amphorae report (``bytes_in``, ``bytes_out``, ``active_connections``,
``total_connections``, ``request_errors``) comes here from the load balancer's own
namespace, at no cost per packet beyond a counter:

- every listener's DNAT rule sets the connection's ``ct mark`` to the listener's
  mark and counts the connection (``conn-<listener>``: the nat chain sees only the
  first packet of a connection, so its packets are the total connections);
- a ``stats`` chain on the forward hook adds every forwarded packet to the
  listener's ``in-``/``out-`` counter through one map keyed by
  ``ct direction . ct mark`` (client→member is ``original``, member→client ``reply``);
- active connections are the conntrack entries with the listener's mark that are
  not closing: one raw ctnetlink dump of the namespace, only in a round where the
  counters moved (the kernel walks its whole conntrack hash table for a dump,
  whatever the namespace holds: ~100 ms on a busy 2-core machine).

:class:`StatsSender` reads them every ``interval`` seconds on its own thread and
sends only what changed (``PUT /netbay/v1/lbstats``), so an idle load balancer
costs one counter listing per round and no API call. Counters are
absolute; ``epoch`` names them (this process, the namespace's inode): a rebuilt
namespace or a restarted agent starts new counters, which the API adds to what
the earlier ones counted.
"""

from __future__ import annotations

import os
import socket
import struct
import zlib
from collections.abc import Callable, Mapping
from typing import Any

from netbay.dataplane import netns
from netbay.periodic import Periodic


# TCP conntrack states that hold an open connection (SYN_SENT … LAST_ACK).
_OPEN_TCP = {1, 2, 3, 4, 5, 6}
IPPROTO_TCP = 6
PROCESS = os.urandom(4).hex()   # part of every epoch: counters die with the process's table

Send = Callable[[Mapping[str, Mapping[str, Any]]], Any]


def mark(listener_id: str) -> int:
    """The ``ct mark`` of a listener's connections (stable across table rebuilds)."""
    return (zlib.crc32(listener_id.encode()) & 0x7FFFFFFF) | 1


def counter_names(listener_id: str) -> tuple[str, str, str]:
    return f"in-{listener_id}", f"out-{listener_id}", f"conn-{listener_id}"


def counter_commands(family: str, table: str, listener_ids: list[str]) -> list[dict]:
    """Named counters of ``listener_ids`` (adding one that exists keeps its value) and
    the ``stats`` chain refilled with the one counting rule."""
    t = {"family": family, "table": table}
    cmds: list[dict] = []
    for lid in listener_ids:
        for name in counter_names(lid):
            cmds.append({"add": {"counter": {**t, "name": name}}})
    cmds += [
        {"add": {"chain": {**t, "name": "stats", "type": "filter", "hook": "forward", "prio": 0,
                           "policy": "accept"}}},
        {"flush": {"chain": {**t, "name": "stats"}}},
    ]
    if listener_ids:
        entries = []
        for lid in listener_ids:
            cin, cout, _ = counter_names(lid)
            entries += [[{"concat": ["original", mark(lid)]}, cin], [{"concat": ["reply", mark(lid)]}, cout]]
        key = {"concat": [{"ct": {"key": "direction"}}, {"ct": {"key": "mark"}}]}
        cmds.append({"add": {"rule": {**t, "chain": "stats", "comment": "netbay-lb/1 stats", "expr": [
            {"counter": {"map": {"key": key, "data": {"set": entries}}}}]}}})
    return cmds


def dnat_prefix(listener_id: str) -> list[dict]:
    """Statements a listener's DNAT rule starts with: mark the connection, count it."""
    return [{"mangle": {"key": {"ct": {"key": "mark"}}, "value": mark(listener_id)}},
            {"counter": counter_names(listener_id)[2]}]


def read_counters(nft: Any, family: str, table: str) -> dict[str, tuple[int, int]]:
    """Every named counter of the table: name -> (packets, bytes)."""
    out = nft.run([{"list": {"counters": {"family": family, "table": table}}}]) or {}
    found = {}
    for item in out.get("nftables", ()):
        c = item.get("counter")
        if isinstance(c, dict) and c.get("table") == table:
            found[c["name"]] = (int(c.get("packets") or 0), int(c.get("bytes") or 0))
    return found


def drop_stale(nft: Any, family: str, table: str, counters: Mapping[str, tuple[int, int]],
               listener_ids: list[str]) -> None:
    """Delete the counters of listeners that are gone (the rules no longer name them)."""
    keep = {name for lid in listener_ids for name in counter_names(lid)}
    stale = [name for name in counters if name not in keep]
    if stale:
        nft.run([{"delete": {"counter": {"family": family, "table": table, "name": n}}} for n in stale])


# ctnetlink, as <linux/netfilter/nfnetlink_conntrack.h> defines it.
NETLINK_NETFILTER = 12
_CT_GET_DUMP = struct.pack("=HH", (1 << 8) | 1, 0x1 | 0x300)   # IPCTNL_MSG_CT_GET; NLM_F_REQUEST|NLM_F_DUMP
NLMSG_ERROR, NLMSG_DONE = 2, 3
CTA_TUPLE_ORIG, CTA_TUPLE_PROTO, CTA_PROTO_NUM = 1, 2, 1
CTA_PROTOINFO, CTA_PROTOINFO_TCP, CTA_PROTOINFO_TCP_STATE = 4, 1, 1
CTA_MARK = 8


def attrs(buf: bytes, start: int, end: int) -> dict[int, tuple[int, int]]:
    """Netlink attributes in ``buf[start:end]``: type -> (payload start, payload end)."""
    out = {}
    while start + 4 <= end:
        length, kind = struct.unpack_from("=HH", buf, start)
        if length < 4:
            break
        out[kind & 0x3FFF] = (start + 4, start + length)
        start += (length + 3) & ~3
    return out


def nested(buf: bytes, span: tuple[int, int] | None, *path: int) -> tuple[int, int] | None:
    for kind in path:
        if span is None:
            return None
        span = attrs(buf, *span).get(kind)
    return span


def open_connections(ns: str, timeout: float = 2.0) -> dict[int, int]:
    """ct mark -> connections open now, from one conntrack dump in ``ns`` (raw
    ctnetlink, IPv4: what the VIP serves)."""
    with netns.entered(ns):
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
    counts: dict[int, int] = {}
    try:
        sock.settimeout(timeout)
        sock.bind((0, 0))
        sock.send(struct.pack("=I", 20) + _CT_GET_DUMP + struct.pack("=II", 1, 0)
                  + struct.pack("=BBH", socket.AF_INET, 0, 0))
        for _ in range(1_000_000):   # bounded: a dump ends with NLMSG_DONE
            buf = sock.recv(1 << 16)
            at, done = 0, not buf
            while at + 16 <= len(buf):
                length, kind = struct.unpack_from("=IH", buf, at)
                if kind == NLMSG_DONE or length < 16:
                    done = True
                    break
                if kind == NLMSG_ERROR:
                    errno_ = -struct.unpack_from("=i", buf, at + 16)[0]
                    if errno_:
                        raise OSError(errno_, f"conntrack dump in {ns}")
                else:
                    _count(buf, at + 20, at + length, counts)
                at += (length + 3) & ~3
            if done:
                break
    finally:
        sock.close()
    return counts


def _count(buf: bytes, start: int, end: int, counts: dict[int, int]) -> None:
    top = attrs(buf, start, end)
    span = top.get(CTA_MARK)
    if span is None:
        return
    m = struct.unpack_from("!I", buf, span[0])[0]
    if not m:
        return
    proto = nested(buf, top.get(CTA_TUPLE_ORIG), CTA_TUPLE_PROTO, CTA_PROTO_NUM)
    if proto is not None and buf[proto[0]] == IPPROTO_TCP:
        state = nested(buf, top.get(CTA_PROTOINFO), CTA_PROTOINFO_TCP, CTA_PROTOINFO_TCP_STATE)
        if state is None or buf[state[0]] not in _OPEN_TCP:
            return
    counts[m] = counts.get(m, 0) + 1


def listener_stats(counters: Mapping[str, tuple[int, int]], open_by_mark: Mapping[int, int],
                   listener_id: str, epoch: str) -> dict[str, Any]:
    cin, cout, conn = counter_names(listener_id)
    return {"epoch": epoch, "bytes_in": counters.get(cin, (0, 0))[1], "bytes_out": counters.get(cout, (0, 0))[1],
            "total_connections": counters.get(conn, (0, 0))[0],
            "active_connections": open_by_mark.get(mark(listener_id), 0), "request_errors": 0}


class StatsSender(Periodic):
    """Every ``interval`` s: ``collect()`` (listener id -> stats), send what changed."""

    what = "load balancer statistics"

    def __init__(self, collect: Callable[[], dict[str, dict[str, Any]]], send: Send,
                 interval: float) -> None:
        super().__init__(interval, "netbay-lb-stats")
        self.collect, self.send = collect, send
        self.sent: dict[str, dict[str, Any]] = {}

    def round(self) -> int:
        """One collection; returns how many listeners' stats were sent."""
        now = self.collect()
        changed = {lid: s for lid, s in now.items() if self.sent.get(lid) != s}
        if changed:
            self.send({"listeners": changed})
            self.sent.update(changed)
        for lid in set(self.sent) - set(now):
            del self.sent[lid]
        return len(changed)


__all__ = ["StatsSender", "attrs", "counter_commands", "dnat_prefix", "listener_stats", "mark", "nested", "open_connections",
           "read_counters"]
