"""The rtnetlink codec: message types, flags and attribute numbers, the message
layouts (:mod:`struct`), the attribute packers and parser, the link records, and addresses and MACs as
the kernel packs them. Public: the fabric's client (:mod:`.core`) and the drivers' messages (:mod:`.overlay`)
are built with it."""

from __future__ import annotations

import ipaddress
import socket
import struct
from dataclasses import dataclass

# message types
RTM_NEWLINK, RTM_DELLINK, RTM_GETLINK, RTM_SETLINK = 16, 17, 18, 19
IFLA_PROTINFO, IFLA_BRPORT_MODE, NLA_F_NESTED = 12, 4, 1 << 15
RTM_NEWADDR, RTM_DELADDR, RTM_GETADDR = 20, 21, 22
RTM_NEWROUTE, RTM_DELROUTE, RTM_GETROUTE = 24, 25, 26
NLMSG_ERROR, NLMSG_DONE = 2, 3
# flags
NLM_F_REQUEST, NLM_F_MULTI, NLM_F_ACK, NLM_F_ECHO = 1, 2, 4, 8
NLM_F_DUMP = 0x300
NLM_F_DUMP_INTR = 0x10     # on a dump's messages: a change raced it, ask again
DUMP_TRIES = 3
NLM_F_REPLACE, NLM_F_EXCL, NLM_F_CREATE = 0x100, 0x200, 0x400
NLM_F_ACK_TLVS = 0x200
# socket options
NETLINK_CAP_ACK = 10   # SOL_NETLINK, NETLINK_EXT_ACK: .sockets
NLMSGERR_ATTR_MSG = 1
# link attributes
IFLA_ADDRESS, IFLA_IFNAME, IFLA_MTU, IFLA_LINK, IFLA_MASTER = 1, 3, 4, 5, 10
IFLA_OPERSTATE, IFLA_LINKINFO, IFLA_IFALIAS, IFLA_NET_NS_FD = 16, 18, 20, 28
IFLA_GSO_MAX_SIZE, IFLA_TSO_MAX_SIZE, IFLA_GSO_IPV4_MAX_SIZE = 41, 59, 63
IFLA_INFO_KIND, IFLA_INFO_DATA, VETH_INFO_PEER = 1, 2, 1
IFF_UP = 1
OPERSTATES = {0: "UNKNOWN", 1: "NOTPRESENT", 2: "DOWN", 3: "LOWERLAYERDOWN", 4: "TESTING",
              5: "DORMANT", 6: "UP"}
# address attributes
IFA_ADDRESS, IFA_LOCAL, IFA_BROADCAST, IFA_FLAGS = 1, 2, 4, 8
IFA_F_NODAD = 0x02
# route attributes
RTA_DST, RTA_OIF, RTA_GATEWAY, RTA_PRIORITY, RTA_TABLE = 1, 4, 5, 6, 15
RT_TABLE_MAIN, RTPROT_BOOT, RTN_UNICAST, RTNH_F_ONLINK = 254, 3, 1, 4
RTN_LOCAL = 2
RT_SCOPE_UNIVERSE, RT_SCOPE_NOWHERE = 0, 255

NLMSGHDR = struct.Struct("=IHHII")        # nlmsghdr
IFINFOMSG = struct.Struct("=BxHiII")       # ifinfomsg
IFADDRMSG = struct.Struct("=BBBBI")        # ifaddrmsg
RTMSG = struct.Struct("=BBBBBBBBI")    # rtmsg
NLATTR = struct.Struct("=HH")


def align(n: int) -> int:
    return (n + 3) & ~3


def attr(kind: int, payload: bytes) -> bytes:
    raw = NLATTR.pack(NLATTR.size + len(payload), kind) + payload
    return raw + b"\0" * (align(len(raw)) - len(raw))


def u32_attr(kind: int, value: int) -> bytes:
    return attr(kind, struct.pack("=I", value))


def str_attr(kind: int, value: str) -> bytes:
    return attr(kind, value.encode() + b"\0")


def mac_attr(value: str) -> bytes:
    return bytes.fromhex(value.replace(":", ""))


def parse_attrs(data: bytes, offset: int = 0) -> dict[int, bytes]:
    out: dict[int, bytes] = {}
    while offset + NLATTR.size <= len(data):
        length, kind = NLATTR.unpack_from(data, offset)
        if length < NLATTR.size:
            break
        out[kind & 0x3FFF] = data[offset + NLATTR.size: offset + length]
        offset += align(length)
    return out


@dataclass(frozen=True, slots=True)
class LinkInfo:
    index: int
    ifname: str
    kind: str | None
    up: bool
    mtu: int
    master: int | None
    address: str | None
    peer: int | None        # IFLA_LINK: a veth's peer ifindex
    operstate: str
    gso_max_size: int = 0   # the IPv4 GSO limit (IFLA_GSO_IPV4_MAX_SIZE, else IFLA_GSO_MAX_SIZE)
    tso_max_size: int = 0   # the most the device takes (a bridge: its ports' least; 0: not told)
    alias: str = ""         # IFLA_IFALIAS (``ip link set … alias``)


def link_info(payload: bytes) -> LinkInfo:
    _family, _type, index, flags, _change = IFINFOMSG.unpack_from(payload)
    a = parse_attrs(payload, IFINFOMSG.size)
    kind = None
    if IFLA_LINKINFO in a:
        info = parse_attrs(a[IFLA_LINKINFO])
        if IFLA_INFO_KIND in info:
            kind = info[IFLA_INFO_KIND].rstrip(b"\0").decode()
    addr = a.get(IFLA_ADDRESS)
    return LinkInfo(
        index=index, ifname=a.get(IFLA_IFNAME, b"").rstrip(b"\0").decode(), kind=kind,
        up=bool(flags & IFF_UP), mtu=struct.unpack("=I", a[IFLA_MTU])[0] if IFLA_MTU in a else 0,
        master=struct.unpack("=I", a[IFLA_MASTER])[0] or None if IFLA_MASTER in a else None,
        address=":".join(f"{b:02x}" for b in addr) if addr else None,
        peer=struct.unpack("=i", a[IFLA_LINK])[0] if IFLA_LINK in a else None,
        operstate=OPERSTATES.get(a[IFLA_OPERSTATE][0], "UNKNOWN") if IFLA_OPERSTATE in a else "UNKNOWN",
        gso_max_size=next((struct.unpack("=I", a[k])[0] for k in (IFLA_GSO_IPV4_MAX_SIZE, IFLA_GSO_MAX_SIZE)
                           if k in a), 0),
        tso_max_size=struct.unpack("=I", a[IFLA_TSO_MAX_SIZE])[0] if IFLA_TSO_MAX_SIZE in a else 0,
        alias=a.get(IFLA_IFALIAS, b"").rstrip(b"\0").decode(errors="replace"))


def gso_attrs(size: int | None) -> bytes:
    """The largest GSO packet a link takes, for IPv6 and IPv4 (above 65536: BIG TCP,
    kernel 5.19+ for IPv6, 6.3+ for IPv4); nothing for None."""
    if not size:
        return b""
    return u32_attr(IFLA_GSO_MAX_SIZE, size) + u32_attr(IFLA_GSO_IPV4_MAX_SIZE, size)


def packed_ip(value: str) -> bytes:
    return ipaddress.ip_address(value).packed


def ip_family(ip: str) -> int:
    """``AF_INET`` or ``AF_INET6`` for an address or a CIDR."""
    return socket.AF_INET6 if ":" in ip else socket.AF_INET


def mac_str(raw: bytes) -> str:
    return ":".join(f"{b:02x}" for b in raw)
