"""A minimal synchronous rtnetlink client for the agent's hot path.

pyroute2 (behind :mod:`netbay.dataplane.links`) costs about a millisecond of CPU
per request on top of the kernel's work (its asyncio core, generic encoders);
wiring a port takes some ten requests, so on a busy host pyroute2 alone kept a
port from passing packets for tens of milliseconds. This module packs the few
messages the fabric sends with :mod:`struct` onto a plain netlink socket — about
0.05 ms per request — and nothing more: links (veth pairs, up/down, MTU, MAC,
master), addresses and unicast routes. Everything else stays in ``links``. The
codec itself (layouts, attribute packers, the parser) is :mod:`.codec`.

Its sockets are opened and cached as every netlink socket of netbay's is
(:mod:`netbay.dataplane.rtnl.sockets`): one per namespace and thread, :func:`rtnl`,
closed by :func:`netbay.dataplane.netns.delete` or :func:`close`. Errors are
:class:`~netbay.dataplane.rtnl.sockets.LinkError` with the kernel's errno and message.
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import os
import socket
import struct

from netbay.dataplane import netns
from netbay.dataplane.rtnl.codec import (
    DUMP_TRIES, IFADDRMSG, IFA_ADDRESS, IFA_BROADCAST, IFA_FLAGS, IFA_F_NODAD, IFA_LOCAL, IFF_UP, IFINFOMSG,
    IFLA_ADDRESS, IFLA_BRPORT_MODE, IFLA_GSO_IPV4_MAX_SIZE, IFLA_GSO_MAX_SIZE, IFLA_IFALIAS, IFLA_IFNAME,
    IFLA_INFO_DATA, IFLA_INFO_KIND, IFLA_LINK, IFLA_LINKINFO, IFLA_MASTER, IFLA_MTU, IFLA_NET_NS_FD, IFLA_OPERSTATE,
    IFLA_PROTINFO, IFLA_TSO_MAX_SIZE, LinkInfo, NETLINK_CAP_ACK, NLATTR, NLA_F_NESTED, NLMSGERR_ATTR_MSG, NLMSGHDR,
    NLMSG_DONE, NLMSG_ERROR, NLM_F_ACK, NLM_F_ACK_TLVS, NLM_F_CREATE, NLM_F_DUMP, NLM_F_DUMP_INTR, NLM_F_ECHO,
    NLM_F_EXCL, NLM_F_MULTI, NLM_F_REPLACE, NLM_F_REQUEST, OPERSTATES, RTA_DST, RTA_GATEWAY, RTA_OIF, RTA_PRIORITY,
    RTA_TABLE, RTMSG, RTM_DELADDR, RTM_DELLINK, RTM_DELROUTE, RTM_GETADDR, RTM_GETLINK, RTM_GETROUTE, RTM_NEWADDR,
    RTM_NEWLINK, RTM_NEWROUTE, RTM_SETLINK, RTNH_F_ONLINK, RTN_LOCAL, RTN_UNICAST, RTPROT_BOOT, RT_SCOPE_NOWHERE,
    RT_SCOPE_UNIVERSE, RT_TABLE_MAIN, VETH_INFO_PEER, align, attr, gso_attrs, link_info, mac_attr, parse_attrs,
    str_attr, u32_attr,
)
from netbay.dataplane.rtnl.sockets import SOL_NETLINK, LinkError, Sockets, open_in

# The codec (.codec: message layouts, attribute packers) is public and re-exported here:
# drivers' messages (netbay.dataplane.rtnl.overlay) are built with it.
__all__ = [
    "align", "attr", "close", "gso_attrs", "link_info", "LinkInfo", "mac_attr", "parse_attrs", "release",
    "Rtnl", "rtnl", "SOCKETS", "str_attr", "u32_attr", "IFADDRMSG", "IFA_ADDRESS", "IFA_BROADCAST", "IFA_FLAGS",
    "IFA_F_NODAD", "IFA_LOCAL", "IFF_UP", "IFINFOMSG", "IFLA_ADDRESS", "IFLA_GSO_IPV4_MAX_SIZE",
    "IFLA_GSO_MAX_SIZE", "IFLA_IFALIAS", "IFLA_IFNAME", "IFLA_INFO_DATA", "IFLA_INFO_KIND", "IFLA_LINK",
    "IFLA_LINKINFO", "IFLA_MASTER", "IFLA_MTU", "IFLA_NET_NS_FD", "IFLA_OPERSTATE", "IFLA_TSO_MAX_SIZE",
    "NETLINK_CAP_ACK", "NLATTR", "NLMSGERR_ATTR_MSG", "NLMSGHDR", "NLMSG_DONE",
    "NLMSG_ERROR", "NLM_F_ACK", "NLM_F_ACK_TLVS", "NLM_F_CREATE", "NLM_F_DUMP", "NLM_F_DUMP_INTR", "NLM_F_ECHO",
    "NLM_F_EXCL", "NLM_F_MULTI", "NLM_F_REPLACE", "NLM_F_REQUEST", "OPERSTATES", "RTA_DST", "RTA_GATEWAY", "RTA_OIF",
    "RTA_PRIORITY", "RTA_TABLE", "RTMSG", "RTM_DELADDR", "RTM_DELLINK", "RTM_DELROUTE", "RTM_GETADDR",
    "RTM_GETLINK", "RTM_GETROUTE", "RTM_NEWADDR", "RTM_NEWLINK", "RTM_NEWROUTE", "RTNH_F_ONLINK",
    "RTN_LOCAL", "RTN_UNICAST", "RTPROT_BOOT", "RT_SCOPE_NOWHERE", "RT_SCOPE_UNIVERSE", "RT_TABLE_MAIN",
    "VETH_INFO_PEER",
]



class Rtnl:
    """One rtnetlink socket bound to namespace ``ns``. Not thread-safe: one per thread."""

    def __init__(self, ns: str) -> None:
        self.ns = ns
        sock, self.ns_inode = open_in(ns)
        try:
            with contextlib.suppress(OSError):   # acks without the request echoed back
                sock.setsockopt(SOL_NETLINK, NETLINK_CAP_ACK, 1)
            sock.bind((0, 0))
        except BaseException:
            sock.close()
            raise
        self.sock = sock
        self._seq = 0
        self.closed = False

    def close(self) -> None:
        self.closed = True
        self.sock.close()

    # -- transport ----------------------------------------------------------------------

    def request(self, kind: int, flags: int, body: bytes, what: str) -> list[tuple[int, bytes]]:
        """Send one request and read to its end (ACK, error or DONE); returns the
        messages received before it (dumps, echoes). A dump the kernel marks as raced
        by a change (``NLM_F_DUMP_INTR``) is asked again, up to :data:`DUMP_TRIES` times."""
        for _attempt in range(DUMP_TRIES):
            out, interrupted = self._exchange(kind, flags, body, what)
            if not interrupted or flags & NLM_F_DUMP != NLM_F_DUMP:
                break
        return out

    def _exchange(self, kind: int, flags: int, body: bytes, what: str) -> tuple[list[tuple[int, bytes]], bool]:
        self._seq = (self._seq + 1) & 0xFFFFFFFF
        seq = self._seq
        self.sock.send(NLMSGHDR.pack(NLMSGHDR.size + len(body), kind, flags | NLM_F_REQUEST, seq, 0) + body)
        out: list[tuple[int, bytes]] = []
        interrupted = False
        for _ in range(1_000_000):  # bounded: a dump of a million messages would be absurd
            data = self.sock.recv(1 << 20)
            offset = 0
            while offset + NLMSGHDR.size <= len(data):
                length, mtype, mflags, mseq, _pid = NLMSGHDR.unpack_from(data, offset)
                if length < NLMSGHDR.size:
                    raise LinkError(errno.EIO, f"{what} in namespace {self.ns!r}: malformed netlink reply")
                payload = data[offset + NLMSGHDR.size: offset + length]
                offset += align(length)
                if mseq != seq:
                    continue  # a late answer to an earlier, abandoned request
                interrupted |= bool(mflags & NLM_F_DUMP_INTR)
                if mtype == NLMSG_ERROR:
                    code = -struct.unpack_from("=i", payload)[0]
                    if code == 0:
                        return out, interrupted
                    raise LinkError(code, f"{what} in namespace {self.ns!r}: {os.strerror(code)}"
                                    + self._ext_ack(payload, mflags))
                if mtype == NLMSG_DONE:
                    return out, interrupted
                out.append((mtype, payload))
                if not mflags & NLM_F_MULTI and not flags & NLM_F_ACK:
                    return out, interrupted
        raise LinkError(errno.EIO, f"{what} in namespace {self.ns!r}: no end of reply")

    @staticmethod
    def _ext_ack(payload: bytes, flags: int) -> str:
        if not flags & NLM_F_ACK_TLVS or len(payload) < 4 + NLMSGHDR.size:
            return ""
        msg = parse_attrs(payload, 4 + NLMSGHDR.size).get(NLMSGERR_ATTR_MSG)
        if not msg:
            return ""
        return " (" + msg.rstrip(b"\0").decode(errors="replace") + ")"

    # -- links ----------------------------------------------------------------------------

    def link(self, ifname: str | None = None, index: int = 0) -> LinkInfo | None:
        """The link named ``ifname`` (or with ``index``), or None."""
        payload = self.link_message(ifname, index)
        return link_info(payload) if payload is not None else None

    def link_message(self, ifname: str | None = None, index: int = 0) -> bytes | None:
        """The kernel's ``ifinfomsg`` of the link named ``ifname`` (or with ``index``), or
        None: for readers of attributes :class:`LinkInfo` leaves out (VXLAN's)."""
        body = IFINFOMSG.pack(socket.AF_UNSPEC, 0, index, 0, 0) + (str_attr(IFLA_IFNAME, ifname) if ifname else b"")
        try:
            msgs = self.request(RTM_GETLINK, 0, body, f"get link {ifname or index}")
        except LinkError as exc:
            if exc.errno in (errno.ENODEV, errno.ENOENT):
                return None
            raise
        return msgs[0][1] if msgs else None

    def links(self) -> list[LinkInfo]:
        msgs = self.request(RTM_GETLINK, NLM_F_DUMP, IFINFOMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0), "dump links")
        return [link_info(p) for t, p in msgs if t == RTM_NEWLINK]

    def add_veth(self, name: str, peer: str, peer_ns: str | None, *, mtu: int | None = None,
                 peer_mac: str | None = None, master: int | None = None, up: bool = False,
                 gso_max_size: int | None = None) -> int:
        """Create veth ``name`` here with its peer created directly in ``peer_ns``; the
        local end enslaved to ``master`` and up if asked. Returns the local ifindex.
        EEXIST if either name is taken (nothing is changed then).

        ``gso_max_size``: largest GSO packet on both ends, IPv6 and IPv4 (above 65536:
        BIG TCP, kernel 5.19+ for IPv6, 6.3+ for IPv4).

        ``peer_ns`` None: the peer goes to the process's own (host) namespace — only for
        a container runtime to move it at once (Docker's Join)."""
        gso = gso_attrs(gso_max_size)
        peer_attrs = str_attr(IFLA_IFNAME, peer) + gso
        if mtu:
            peer_attrs += u32_attr(IFLA_MTU, mtu)
        if peer_mac:
            peer_attrs += attr(IFLA_ADDRESS, mac_attr(peer_mac))
        fd = os.open(netns.locate(peer_ns) if peer_ns else "/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        try:
            peer_attrs += u32_attr(IFLA_NET_NS_FD, fd)
            info = str_attr(IFLA_INFO_KIND, "veth") + attr(
                IFLA_INFO_DATA, attr(VETH_INFO_PEER, IFINFOMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0) + peer_attrs))
            body = IFINFOMSG.pack(socket.AF_UNSPEC, 0, 0, IFF_UP if up else 0, IFF_UP if up else 0)
            body += str_attr(IFLA_IFNAME, name) + attr(IFLA_LINKINFO, info) + gso
            if mtu:
                body += u32_attr(IFLA_MTU, mtu)
            if master:
                body += u32_attr(IFLA_MASTER, master)
            msgs = self.request(RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL | NLM_F_ACK | NLM_F_ECHO, body,
                                f"add veth {name}/{peer_ns}:{peer}")
        finally:
            os.close(fd)
        for t, p in msgs:
            if t == RTM_NEWLINK:
                return link_info(p).index
        found = self.link(name)
        if found is None:
            raise LinkError(errno.ENODEV, f"veth {name!r} vanished in namespace {self.ns!r}")
        return found.index

    def set_link(self, index: int, *, up: bool | None = None, mtu: int | None = None,
                 master: int | None = None, mac: str | None = None, gso_max_size: int | None = None,
                 alias: str | None = None, name: str | None = None) -> None:
        """``alias``: the link's ifalias (``""`` removes it). ``name``: renamed (the kernel
        renames before it applies ``up``, so a down link is renamed and brought up in one
        request; EEXIST if the name is taken)."""
        flags = change = 0
        if up is not None:
            flags, change = (IFF_UP if up else 0), IFF_UP
        body = IFINFOMSG.pack(socket.AF_UNSPEC, 0, index, flags, change)
        if mtu is not None:
            body += u32_attr(IFLA_MTU, mtu)
        if master is not None:
            body += u32_attr(IFLA_MASTER, master)
        if mac is not None:
            body += attr(IFLA_ADDRESS, mac_attr(mac))
        if alias is not None:
            body += attr(IFLA_IFALIAS, alias.encode())  # no NUL: an empty payload clears it
        if name is not None:
            body += str_attr(IFLA_IFNAME, name)
        body += gso_attrs(gso_max_size)
        self.request(RTM_NEWLINK, NLM_F_ACK, body, f"set link {index}")

    def set_hairpin(self, index: int, on: bool = True) -> None:
        """Bridge port ``index``'s hairpin mode (``IFLA_BRPORT_MODE``): a frame may leave by
        the port it came in — a pod reaching itself through its Service's translation."""
        body = IFINFOMSG.pack(socket.AF_BRIDGE, 0, index, 0, 0)
        body += attr(IFLA_PROTINFO | NLA_F_NESTED, attr(IFLA_BRPORT_MODE, struct.pack("=B", int(on))))
        self.request(RTM_SETLINK, NLM_F_ACK, body, f"set hairpin on link {index}")

    def delete_link(self, ifname: str) -> bool:
        body = IFINFOMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0) + str_attr(IFLA_IFNAME, ifname)
        try:
            self.request(RTM_DELLINK, NLM_F_ACK, body, f"delete link {ifname}")
        except LinkError as exc:
            if exc.errno in (errno.ENODEV, errno.ENOENT):
                return False
            raise
        return True

    # -- addresses ------------------------------------------------------------------------

    def _addr_body(self, index: int, cidr: str) -> bytes:
        iface = ipaddress.ip_interface(cidr)
        v6 = iface.version == 6
        family = socket.AF_INET6 if v6 else socket.AF_INET
        flags = IFA_F_NODAD if v6 else 0
        raw = iface.ip.packed
        body = IFADDRMSG.pack(family, iface.network.prefixlen, flags, 0, index)
        body += attr(IFA_LOCAL, raw) + attr(IFA_ADDRESS, raw)
        if v6:
            body += u32_attr(IFA_FLAGS, flags)
        elif iface.network.prefixlen < 31:
            body += attr(IFA_BROADCAST, iface.network.broadcast_address.packed)
        return body

    def add_address(self, index: int, cidr: str) -> bool:
        """Add ``cidr`` to link ``index`` (IPv6 without duplicate address detection:
        IPAM made it unique); False if it was there."""
        try:
            self.request(RTM_NEWADDR, NLM_F_CREATE | NLM_F_EXCL | NLM_F_ACK, self._addr_body(index, cidr),
                         f"add address {cidr}")
        except LinkError as exc:
            if exc.errno == errno.EEXIST:
                return False
            raise
        return True

    def del_address(self, index: int, cidr: str) -> bool:
        try:
            self.request(RTM_DELADDR, NLM_F_ACK, self._addr_body(index, cidr), f"delete address {cidr}")
        except LinkError as exc:
            if exc.errno in (errno.EADDRNOTAVAIL, errno.ENOENT, errno.ESRCH):
                return False
            raise
        return True

    def addresses(self, index: int) -> list[str]:
        """CIDRs on link ``index`` (both families)."""
        out = []
        msgs = self.request(RTM_GETADDR, NLM_F_DUMP, IFADDRMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0), "dump addresses")
        for t, p in msgs:
            if t != RTM_NEWADDR:
                continue
            family, plen, _flags, _scope, idx = IFADDRMSG.unpack_from(p)
            if idx != index:
                continue
            a = parse_attrs(p, IFADDRMSG.size)
            raw = a.get(IFA_LOCAL) or a.get(IFA_ADDRESS)
            if raw:
                out.append(f"{ipaddress.ip_address(raw)}/{plen}")
        return out

    def delivers(self, address: str) -> bool:
        """Whether packets to ``address`` are delivered here yet (its route lookup gives a
        local route). An IPv6 address is listed as soon as it is added, even without DAD,
        but its local route comes only when addrconf's worker has run: until then the
        kernel drops what is sent to it (``Ip6InAddrErrors``) — a neighbour advertisement
        answering its first solicitation, say, which then waits a second to be asked again."""
        ip = ipaddress.ip_address(address)
        family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
        body = RTMSG.pack(family, ip.max_prefixlen, 0, 0, 0, 0, 0, 0, 0) + attr(RTA_DST, ip.packed)
        try:
            msgs = self.request(RTM_GETROUTE, 0, body, f"route get {address}")
        except LinkError:
            return False   # no route at all (ENETUNREACH)
        return any(t == RTM_NEWROUTE and RTMSG.unpack_from(p)[7] == RTN_LOCAL for t, p in msgs)

    # -- routes ---------------------------------------------------------------------------

    def _route_body(self, dst: str, gateway: str | None, oif: int | None, onlink: bool,
                    scope: int, metric: int | None = None) -> bytes:
        net = ipaddress.ip_network(dst)
        family = socket.AF_INET6 if net.version == 6 else socket.AF_INET
        body = RTMSG.pack(family, net.prefixlen, 0, 0, RT_TABLE_MAIN, RTPROT_BOOT, scope, RTN_UNICAST,
                         RTNH_F_ONLINK if onlink else 0)
        if net.prefixlen:
            body += attr(RTA_DST, net.network_address.packed)
        if gateway is not None:
            body += attr(RTA_GATEWAY, ipaddress.ip_address(gateway).packed)
        if oif is not None:
            body += u32_attr(RTA_OIF, oif)
        if metric is not None:
            body += u32_attr(RTA_PRIORITY, metric)
        return body

    def replace_route(self, dst: str, *, gateway: str | None = None, oif: int | None = None,
                      onlink: bool = False) -> None:
        """Create or replace the main-table route to ``dst`` (a CIDR; ``0.0.0.0/0``)."""
        self.request(RTM_NEWROUTE, NLM_F_CREATE | NLM_F_REPLACE | NLM_F_ACK,
                     self._route_body(dst, gateway, oif, onlink, RT_SCOPE_UNIVERSE), f"replace route {dst}")

    def del_route(self, dst: str, *, gateway: str | None = None, oif: int | None = None,
                  metric: int | None = None) -> bool:
        try:
            self.request(RTM_DELROUTE, NLM_F_ACK,
                         self._route_body(dst, gateway, oif, False, RT_SCOPE_NOWHERE, metric),
                         f"delete route {dst}")
        except LinkError as exc:
            if exc.errno == errno.ESRCH:
                return False
            raise
        return True

    def main_routes(self, family: int = socket.AF_INET) -> list[tuple[tuple[int, ...], dict[int, bytes]]]:
        """The main table's routes, each as its ``rtmsg`` fields (family, dst_len, src_len,
        tos, table, protocol, scope, type, flags) and its attributes."""
        out = []
        msgs = self.request(RTM_GETROUTE, NLM_F_DUMP, RTMSG.pack(family, 0, 0, 0, 0, 0, 0, 0, 0), "dump routes")
        for t, p in msgs:
            if t != RTM_NEWROUTE:
                continue
            head = RTMSG.unpack_from(p)
            a = parse_attrs(p, RTMSG.size)
            table = struct.unpack("=I", a[RTA_TABLE])[0] if RTA_TABLE in a else head[4]
            if table == RT_TABLE_MAIN:
                out.append((head, a))
        return out

    def routes(self, family: int = socket.AF_INET) -> list[tuple[str, str | None, int | None, int | None]]:
        """(dst CIDR, gateway, oif, metric) of the main table's unicast routes."""
        out = []
        for (fam, dst_len, _s, _tos, _table, _proto, _scope, rtype, _flags), a in self.main_routes(family):
            if rtype != RTN_UNICAST:
                continue
            zero = "0.0.0.0" if fam == socket.AF_INET else "::"
            dst = str(ipaddress.ip_address(a[RTA_DST])) if RTA_DST in a else zero
            gw = str(ipaddress.ip_address(a[RTA_GATEWAY])) if RTA_GATEWAY in a else None
            oif = struct.unpack("=I", a[RTA_OIF])[0] if RTA_OIF in a else None
            metric = struct.unpack("=I", a[RTA_PRIORITY])[0] if RTA_PRIORITY in a else None
            out.append((f"{dst}/{dst_len}", gw, oif, metric))
        return out


# --- one socket per namespace and thread ------------------------------------------------------

SOCKETS: Sockets[Rtnl] = Sockets(Rtnl)


def rtnl(ns: str) -> Rtnl:
    """The calling thread's :class:`Rtnl` for ``ns`` (re-opened if ``ns`` was re-created)."""
    return SOCKETS.get(ns)


def release(ns: str) -> None:
    """Close the calling thread's socket of ``ns`` (others' stay: they may be in use)."""
    SOCKETS.release(ns)


def close(ns: str) -> None:
    """Close every cached socket of ``ns`` (all threads)."""
    SOCKETS.close(ns)
