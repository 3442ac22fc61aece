"""Neighbour entries (``ip neigh``) and VXLAN forwarding-database entries (``bridge fdb
… self dst``: ``RTM_NEWNEIGH`` on ``AF_BRIDGE`` with ``NDA_LLADDR``/``NDA_DST``), for the
container-network drivers."""

from __future__ import annotations

import errno
import ipaddress
import socket
import struct
from dataclasses import dataclass

from netbay.dataplane.rtnl.codec import ip_family, mac_str, packed_ip
from netbay.dataplane.rtnl.core import (
    NLM_F_ACK, NLM_F_CREATE, NLM_F_DUMP, NLM_F_REPLACE, attr, mac_attr, parse_attrs, rtnl,
)
from netbay.dataplane.rtnl.sockets import LinkError

RTM_NEWNEIGH, RTM_DELNEIGH, RTM_GETNEIGH = 28, 29, 30
NDA_DST, NDA_LLADDR = 1, 2
NUD_PERMANENT, NUD_NOARP = 0x80, 0x40
NTF_SELF = 0x02
NLM_F_APPEND = 0x800
AF_BRIDGE = 7

_NDM = struct.Struct("=B3xiHBB")  # ndmsg


@dataclass(frozen=True)
class Neigh:
    ifindex: int
    ip: str
    mac: str | None
    state: int

    @property
    def permanent(self) -> bool:
        return bool(self.state & NUD_PERMANENT)


@dataclass(frozen=True)
class Fdb:
    ifindex: int
    mac: str
    dst: str | None
    state: int
    flags: int


def _neigh_body(family: int, ifindex: int, state: int, flags: int, ip: str | None, mac: str | None) -> bytes:
    body = _NDM.pack(family, ifindex, state, flags, 0)
    if mac is not None:
        body += attr(NDA_LLADDR, mac_attr(mac))
    if ip is not None:
        body += attr(NDA_DST, packed_ip(ip))
    return body


def _dump_neigh(ns: str, family: int) -> list[tuple[int, int, int, dict[int, bytes]]]:
    msgs = rtnl(ns).request(RTM_GETNEIGH, NLM_F_DUMP, _NDM.pack(family, 0, 0, 0, 0), "dump neighbours")
    out = []
    for t, p in msgs:
        if t != RTM_NEWNEIGH or len(p) < _NDM.size:
            continue
        fam, idx, state, flags, _type = _NDM.unpack_from(p)
        if fam == family:
            out.append((idx, state, flags, parse_attrs(p, _NDM.size)))
    return out


def neighbours(ns: str, ifindex: int | None = None, family: int = socket.AF_INET) -> list[Neigh]:
    """Neighbour entries of ``family`` (IPv4's ARP, IPv6's ND; of link ``ifindex``, or all)."""
    out = []
    for idx, state, _flags, a in _dump_neigh(ns, family):
        if (ifindex is None or idx == ifindex) and NDA_DST in a:
            out.append(Neigh(idx, str(ipaddress.ip_address(a[NDA_DST])),
                             mac_str(a[NDA_LLADDR]) if NDA_LLADDR in a else None, state))
    return out


def add_neighbour(ns: str, ifindex: int, ip: str, mac: str) -> None:
    """A permanent neighbour entry ``ip`` → ``mac`` on ``ifindex`` (``ip neigh replace``)."""
    rtnl(ns).request(RTM_NEWNEIGH, NLM_F_CREATE | NLM_F_REPLACE | NLM_F_ACK,
                   _neigh_body(ip_family(ip), ifindex, NUD_PERMANENT, 0, ip, mac),
                   f"replace neighbour {ip}")


def del_neighbour(ns: str, ifindex: int, ip: str) -> bool:
    try:
        rtnl(ns).request(RTM_DELNEIGH, NLM_F_ACK, _neigh_body(ip_family(ip), ifindex, 0, 0, ip, None),
                       f"delete neighbour {ip}")
    except LinkError as exc:
        if exc.errno in (errno.ENOENT, errno.ESRCH, errno.ENODEV):
            return False
        raise
    return True


def fdb(ns: str, ifindex: int) -> list[Fdb]:
    """The forwarding-database entries of device ``ifindex`` (a VXLAN device's remotes)."""
    out = []
    for idx, state, flags, a in _dump_neigh(ns, AF_BRIDGE):
        if idx == ifindex and NDA_LLADDR in a:
            out.append(Fdb(idx, mac_str(a[NDA_LLADDR]),
                           str(ipaddress.ip_address(a[NDA_DST])) if NDA_DST in a else None, state, flags))
    return out


def add_fdb(ns: str, ifindex: int, mac: str, dst: str) -> None:
    """``bridge fdb replace MAC dev VXLAN self permanent dst DST``."""
    rtnl(ns).request(RTM_NEWNEIGH, NLM_F_CREATE | NLM_F_REPLACE | NLM_F_ACK,
                   _neigh_body(AF_BRIDGE, ifindex, NUD_PERMANENT | NUD_NOARP, NTF_SELF, dst, mac),
                   f"replace fdb {mac} dst {dst}")


def append_fdb(ns: str, ifindex: int, mac: str, dst: str) -> None:
    """``bridge fdb append MAC dev VXLAN self permanent dst DST``: one more remote for
    ``mac`` (all zeros: head-end replication of broadcast to every such remote)."""
    try:
        rtnl(ns).request(RTM_NEWNEIGH, NLM_F_CREATE | NLM_F_APPEND | NLM_F_ACK,
                       _neigh_body(AF_BRIDGE, ifindex, NUD_PERMANENT | NUD_NOARP, NTF_SELF, dst, mac),
                       f"append fdb {mac} dst {dst}")
    except LinkError as exc:
        if exc.errno != errno.EEXIST:
            raise


def del_fdb(ns: str, ifindex: int, mac: str, dst: str | None = None) -> bool:
    try:
        rtnl(ns).request(RTM_DELNEIGH, NLM_F_ACK,
                       _neigh_body(AF_BRIDGE, ifindex, 0, NTF_SELF, dst, mac), f"delete fdb {mac}")
    except LinkError as exc:
        if exc.errno in (errno.ENOENT, errno.ESRCH, errno.ENODEV):
            return False
        raise
    return True
