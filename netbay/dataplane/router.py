"""Router namespaces: forwarding between legs, SNAT to the external network, floating IPs.

The legs — veths ``qr-<port>`` (internal subnets) and ``qg-<port>`` (external
network) with the ports' MACs, addresses and MTU — are wired by the fabric. This
module works *inside* the router namespace only: forwarding sysctls, the default
route via the external subnet's gateway, the floating IPs as /32s on the ``qg-`` leg
(so the router answers ARP for them) and one nftables table, ``ip netbay-nat``.

The table's rules never change. Every fact — which device is the gateway and its
SNAT address, the internal subnets, the floating IPs — is a set or map element, so
associating or releasing a floating IP adds or deletes elements (one small nft
transaction), never rewrites a rule::

    chain prerouting   (nat, dstnat)
        dnat to ip daddr map @fip_dnat                            # floating -> fixed
    chain postrouting  (nat, srcnat)
        oifname @gateway_ifs snat to ip saddr map @fip_snat       # fixed -> floating
        ip saddr @internal_subnets snat to oifname map @gateway_snat
        ct status dnat ip saddr @internal_subnets masquerade      # hairpin to a FIP

``gateway_snat`` (gateway device -> its address) is empty when ``enable_snat`` is
false, so internal traffic leaves with its private source. Between two internal legs
nothing matches: plain routing. A sandbox reaching a floating IP of its own network
is masqueraded to the leg address, or the reply would bypass the router. IPv6 is
routed, never NATed (as in Neutron). Releasing a floating IP also deletes its
conntrack entries, so established flows do not keep the old translation.

An ensure lists the table once, diffs its elements against the desired ones and
applies the difference in one transaction; a table that is missing or not exactly
ours is rebuilt atomically. Reads of links, addresses and routes use a small
rtnetlink dump reader (see below); writes go through :mod:`links`.

Verbs, all idempotent: :func:`ensure_router`, :func:`remove_router`,
:func:`observed_routers`; :func:`from_api` turns Neutron JSON into a :class:`RouterSpec`.
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import logging
import os
import socket
import struct
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from netbay.dataplane import links, netns
from netbay.dataplane.names import Names
from netbay.dataplane.nft import Nft, NftError

__all__ = [
    "Leg", "Gateway", "FloatingIP", "RouterSpec", "TABLE", "ensure_router", "ensure",
    "remove_router", "observed_routers", "from_api",
]

log = logging.getLogger(__name__)

TABLE = "netbay-nat"
FAMILY = "ip"
_TAG = "netbay-router/1"  # rule comments; a table without exactly these rules is rebuilt

ROUTER_INTERFACE = "network:router_interface"
ROUTER_GATEWAY = "network:router_gateway"


# --- desired state ---------------------------------------------------------------------


@dataclass(frozen=True)
class Leg:
    """An internal leg: ``qr-<port>`` with the port's addresses (CIDRs, ``10.0.0.1/24``)."""
    ifname: str
    port_id: str = ""
    addresses: Sequence[str] = ()


@dataclass(frozen=True)
class Gateway:
    """The external leg ``qg-<port>``; ``gateway_ip``/``gateway_ip6`` are the external
    subnets' gateways (the default routes), None when a subnet has none."""
    ifname: str
    addresses: Sequence[str] = ()
    gateway_ip: str | None = None
    gateway_ip6: str | None = None
    port_id: str = ""


@dataclass(frozen=True)
class FloatingIP:
    floating_ip_address: str
    fixed_ip_address: str
    id: str = ""


@dataclass(frozen=True)
class RouterSpec:
    """Everything :func:`ensure_router` needs for one router, as plain data."""
    router_id: str
    ns: str
    gateway: Gateway | None = None
    interfaces: Sequence[Leg] = ()
    floating_ips: Sequence[FloatingIP] = ()
    enable_snat: bool = True


# --- from the API's JSON -----------------------------------------------------------------


def _cidrs(port: Mapping[str, Any], subnets: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The port's fixed IPs with their subnets' prefix lengths (unknown subnets skipped:
    the agent ensures again when the subnet arrives)."""
    out = []
    for fixed in port.get("fixed_ips") or ():
        subnet = subnets.get(fixed.get("subnet_id") or "")
        if subnet is None or not fixed.get("ip_address"):
            continue
        plen = ipaddress.ip_network(subnet["cidr"], strict=False).prefixlen
        out.append(f"{fixed['ip_address']}/{plen}")
    return out


def _subnet_gateways(port: Mapping[str, Any], subnets: Mapping[str, Mapping[str, Any]]
                     ) -> dict[int, str]:
    """{IP version: gateway_ip} of the subnets the port has addresses on (first wins)."""
    out: dict[int, str] = {}
    for fixed in port.get("fixed_ips") or ():
        subnet = subnets.get(fixed.get("subnet_id") or "")
        gw = subnet.get("gateway_ip") if subnet else None
        if gw:
            out.setdefault(ipaddress.ip_address(gw).version, gw)
    return out


def from_api(router: Mapping[str, Any], ports: Iterable[Mapping[str, Any]],
             subnets: Mapping[str, Mapping[str, Any]],
             floatingips: Iterable[Mapping[str, Any]], names: Names) -> RouterSpec:
    """Build a router's :class:`RouterSpec` from Neutron JSON.

    ``ports`` and ``floatingips`` may be all of them: the router's own are picked by
    ``device_id``/``router_id``. Legs come from the router's ports (``device_owner``
    ``network:router_interface`` / ``network:router_gateway``), prefix lengths and
    gateways from ``subnets`` (by id), SNAT from ``external_gateway_info.enable_snat``
    (Neutron's default: true), floating IPs from those with this ``router_id`` and a
    ``port_id``.
    """
    rid = router["id"]
    legs: list[Leg] = []
    gateway: Gateway | None = None
    for port in ports:
        if port.get("device_id") != rid:
            continue
        owner = port.get("device_owner")
        if owner == ROUTER_INTERFACE:
            legs.append(Leg(names.router_interface(port["id"]), port["id"],
                            tuple(_cidrs(port, subnets))))
        elif owner == ROUTER_GATEWAY:
            gws = _subnet_gateways(port, subnets)
            gateway = Gateway(names.router_gateway(port["id"]), tuple(_cidrs(port, subnets)),
                              gateway_ip=gws.get(4), gateway_ip6=gws.get(6), port_id=port["id"])
    info = router.get("external_gateway_info") or {}
    enable_snat = bool(info) and info.get("enable_snat") is not False
    fips = tuple(
        FloatingIP(f["floating_ip_address"], f["fixed_ip_address"], f.get("id", ""))
        for f in floatingips
        if f.get("router_id") == rid and f.get("port_id") and f.get("fixed_ip_address")
        and f.get("floating_ip_address"))
    return RouterSpec(router_id=rid, ns=names.router(rid), gateway=gateway,
                      interfaces=tuple(legs), floating_ips=fips, enable_snat=enable_snat)


# --- the nftables table ----------------------------------------------------------------

_V4 = "ipv4_addr"
# name -> (kind, key type, data type or None, flags)
_SETS: dict[str, tuple[str, str, str | None, tuple[str, ...]]] = {
    "gateway_ifs": ("set", "ifname", None, ()),
    "gateway_snat": ("map", "ifname", _V4, ()),
    "internal_subnets": ("set", _V4, None, ("interval",)),
    "fip_dnat": ("map", _V4, _V4, ()),
    "fip_snat": ("map", _V4, _V4, ()),
}
# name -> (hook, priority)
_CHAINS = {"prerouting": ("prerouting", -100), "postrouting": ("postrouting", 100)}


def _payload(field_: str) -> dict:
    return {"payload": {"protocol": "ip", "field": field_}}


def _meta(key: str) -> dict:
    return {"meta": {"key": key}}


def _match(left: dict, right: Any, op: str = "==") -> dict:
    return {"match": {"op": op, "left": left, "right": right}}


def _lookup(key: dict, name: str) -> dict:
    return {"map": {"key": key, "data": "@" + name}}


# chain -> [(comment, expressions)], in order
_RULES: dict[str, list[tuple[str, list[dict]]]] = {
    "prerouting": [
        ("fip-dnat", [{"dnat": {"family": "ip", "addr": _lookup(_payload("daddr"), "fip_dnat")}}]),
    ],
    "postrouting": [
        ("fip-snat", [_match(_meta("oifname"), "@gateway_ifs"),
                      {"snat": {"family": "ip", "addr": _lookup(_payload("saddr"), "fip_snat")}}]),
        ("snat", [_match(_payload("saddr"), "@internal_subnets"),
                  {"snat": {"family": "ip", "addr": _lookup(_meta("oifname"), "gateway_snat")}}]),
        ("hairpin", [_match({"ct": {"key": "status"}}, "dnat", op="in"),
                     _match(_payload("saddr"), "@internal_subnets"),
                     {"masquerade": None}]),
    ],
}


def _table_commands(elements: Mapping[str, set]) -> list[dict]:
    """(Re)create the whole table with ``elements``, as one transaction."""
    t = {"family": FAMILY, "table": TABLE}
    cmds: list[dict] = [
        {"add": {"table": {"family": FAMILY, "name": TABLE}}},
        {"delete": {"table": {"family": FAMILY, "name": TABLE}}},  # add+delete: drop if present
        {"add": {"table": {"family": FAMILY, "name": TABLE}}},
    ]
    for name, (kind, key, data, flags) in _SETS.items():
        body: dict[str, Any] = {**t, "name": name, "type": key}
        if data:
            body["map"] = data
        if flags:
            body["flags"] = list(flags)
        cmds.append({"add": {kind: body}})
    for name, (hook, prio) in _CHAINS.items():
        cmds.append({"add": {"chain": {**t, "name": name, "type": "nat", "hook": hook,
                                       "prio": prio, "policy": "accept"}}})
    for chain, rules in _RULES.items():
        for comment, expr in rules:
            cmds.append({"add": {"rule": {**t, "chain": chain, "expr": expr,
                                          "comment": f"{_TAG} {comment}"}}})
    cmds += _element_commands("add", {n: sorted(e) for n, e in elements.items()})
    return cmds


def _element_commands(verb: str, elements: Mapping[str, Iterable]) -> list[dict]:
    cmds = []
    for name, elems in elements.items():
        js = [_elem_json(name, e) for e in elems]
        if js:
            cmds.append({verb: {"element": {"family": FAMILY, "table": TABLE, "name": name,
                                            "elem": js}}})
    return cmds


def _elem_json(name: str, e: Any) -> Any:
    if name == "internal_subnets":
        net = ipaddress.ip_network(e)
        return {"prefix": {"addr": str(net.network_address), "len": net.prefixlen}}
    return list(e) if isinstance(e, tuple) else e


def _parse_elem(name: str, raw: Any) -> Any:
    """An element as nft prints it -> our canonical form; ValueError if unexpected."""
    if name == "internal_subnets":
        if isinstance(raw, str):
            return str(ipaddress.ip_network(raw))
        if isinstance(raw, dict) and "prefix" in raw:
            p = raw["prefix"]
            return str(ipaddress.ip_network(f"{p['addr']}/{p['len']}"))
        raise ValueError(raw)
    if _SETS[name][2] is None:
        if isinstance(raw, str):
            return raw
        raise ValueError(raw)
    if isinstance(raw, list) and len(raw) == 2 and all(isinstance(x, str) for x in raw):
        return (raw[0], raw[1])
    raise ValueError(raw)


def _observed_table(nft: Nft) -> dict[str, set] | None:
    """The table's elements if its structure is exactly ours, else None (rebuild)."""
    try:
        out = nft.run([{"list": {"table": {"family": FAMILY, "name": TABLE}}}])
    except NftError as exc:
        if "No such file" in exc.error or "does not exist" in exc.error:
            return None
        raise
    objs = [o for o in (out or {}).get("nftables", []) if "metainfo" not in o]
    sets: dict[str, set] = {}
    chains: dict[str, tuple] = {}
    rules: dict[str, list[str]] = {}
    try:
        for o in objs:
            kind = next(iter(o))
            body = o[kind]
            if kind in ("set", "map"):
                name = body["name"]
                spec = _SETS.get(name)
                if spec is None or (kind, body.get("type"), body.get("map"),
                                    tuple(body.get("flags", ()))) != spec:
                    return None
                sets[name] = {_parse_elem(name, e) for e in body.get("elem", [])}
            elif kind == "chain":
                chains[body["name"]] = (body.get("type"), body.get("hook"), body.get("prio"),
                                        body.get("policy"))
            elif kind == "rule":
                rules.setdefault(body["chain"], []).append(body.get("comment", ""))
            elif kind != "table":
                return None
    except (ValueError, KeyError, StopIteration):
        return None
    if set(sets) != set(_SETS):
        return None
    if chains != {n: ("nat", h, p, "accept") for n, (h, p) in _CHAINS.items()}:
        return None
    if rules != {c: [f"{_TAG} {cm}" for cm, _ in rs] for c, rs in _RULES.items()}:
        return None
    return sets


def _desired_elements(gateway: Gateway | None, interfaces: Sequence[Leg],
                      floating_ips: Sequence[FloatingIP], enable_snat: bool) -> dict[str, set]:
    internal = [ipaddress.ip_interface(a).network for leg in interfaces for a in leg.addresses]
    v4 = [n for n in internal if n.version == 4]
    want: dict[str, set] = {n: set() for n in _SETS}
    want["internal_subnets"] = {str(n) for n in ipaddress.collapse_addresses(v4)}
    if gateway is not None:
        want["gateway_ifs"].add(gateway.ifname)
        gw4 = _gateway_v4(gateway)
        if enable_snat and gw4 is not None:
            want["gateway_snat"].add((gateway.ifname, gw4))
    fixed_seen: set[str] = set()
    for fip in floating_ips:
        floating = str(ipaddress.IPv4Address(fip.floating_ip_address))
        fixed = str(ipaddress.IPv4Address(fip.fixed_ip_address))
        want["fip_dnat"].add((floating, fixed))
        if fixed not in fixed_seen:  # one fixed IP leaves as one floating IP
            fixed_seen.add(fixed)
            want["fip_snat"].add((fixed, floating))
    if len({f for f, _ in want["fip_dnat"]}) != len(want["fip_dnat"]):
        raise ValueError("a floating IP address is mapped to two fixed IPs")
    return want


def _gateway_v4(gateway: Gateway) -> str | None:
    for a in gateway.addresses:
        iface = ipaddress.ip_interface(a)
        if iface.version == 4:
            return str(iface.ip)
    return None


def _sync_nft(ns: str, want: dict[str, set]) -> set[str]:
    """Make the table hold ``want``; returns the floating IPs whose mapping went away
    (their connections are forgotten by the caller)."""
    with Nft(ns) as nft:
        have = _observed_table(nft)
        if have is None:
            nft.run(_table_commands(want))
            return set()
        gone = {n: have[n] - want[n] for n in _SETS}
        new = {n: want[n] - have[n] for n in _SETS}
        cmds = _element_commands("delete", {n: sorted(e) for n, e in gone.items()})
        cmds += _element_commands("add", {n: sorted(e) for n, e in new.items()})
        if cmds:
            nft.run(cmds)  # deletes first: a re-mapped key is deleted, then added
        return {floating for floating, _ in gone["fip_dnat"]}


# --- connection tracking ------------------------------------------------------------------


def _forget_flows(ns: str, addresses: set[str]) -> int:
    """Delete the conntrack entries of released floating IPs, as Neutron does: otherwise
    established flows keep their old translation (inbound: original destination is the
    floating IP; outbound: the reply goes to it). Best effort: a failure is logged, not
    raised (the mapping itself is already gone).

    Costs measured here: every conntrack dump walks the host's whole hash table (~13 ms
    for 262k buckets), and pyroute2 parses ~1 ms per entry. So: nothing when the
    namespace tracks no flow; one unfiltered dump when it tracks few; otherwise two
    kernel-filtered dumps (CTA_FILTER) per address, which parse only matching flows."""
    if not addresses:
        return 0
    try:
        count = int(links.read_sysctl(ns, "net.netfilter.nf_conntrack_count"))
    except (links.LinkError, ValueError):
        count = 0  # conntrack not loaded: nothing to forget
    if count == 0:
        return 0
    from pyroute2 import Conntrack  # imported here: only releases need it
    from pyroute2.netlink.nfnetlink.nfctsocket import NFCTAttrTuple

    if count > 10 * (2 * len(addresses) - 1):
        filters = [{which: NFCTAttrTuple(daddr=a)} for a in sorted(addresses)
                   for which in ("tuple_orig", "tuple_reply")]
    else:
        filters = [{}]
    n = 0
    try:
        with netns.entered(ns):
            ct = Conntrack()
            try:
                for f in filters:
                    for entry in list(ct.dump_entries(**f)):
                        if not (entry.tuple_orig.daddr in addresses
                                or entry.tuple_reply.daddr in addresses):
                            continue
                        try:
                            ct.delete(entry)
                            n += 1
                        except Exception:  # gone meanwhile
                            pass
            finally:
                ct.close()
    except Exception as exc:  # pragma: no cover - conntrack netlink unavailable
        log.warning("router %s: cannot flush conntrack for %s: %s", ns, sorted(addresses), exc)
    return n


# --- links, addresses, routes ---------------------------------------------------------------
#
# Reads go through a minimal rtnetlink dump reader: pyroute2 parses ~1 ms per message
# here, and a router with 100 floating IPs has 100 addresses and 200 local routes, so
# a no-change ensure cost ~60 ms in dumps alone; this reader takes well under 1 ms.
# Writes (rare) stay with :mod:`links`.

_NLMSG = struct.Struct("=IHHII")       # len, type, flags, seq, pid
_RTA = struct.Struct("=HH")            # len, type
_IFINFO = struct.Struct("=BxHiII")     # family, type, index, flags, change
_IFADDR = struct.Struct("=BBBBI")      # family, prefixlen, flags, scope, index
_RTMSG = struct.Struct("=BBBBBBBBI")   # family, dst/src len, tos, table, proto, scope, type, flags
RTM_GETLINK, RTM_GETADDR, RTM_GETROUTE = 18, 22, 26
NLMSG_ERROR, NLMSG_DONE = 2, 3
NLM_F_REQUEST, NLM_F_DUMP, NLM_F_DUMP_INTR = 0x1, 0x300, 0x10
SOL_NETLINK, NETLINK_GET_STRICT_CHK = 270, 12
IFF_UP = 0x1


def _attrs(buf: bytes, off: int, end: int) -> dict[int, bytes]:
    out: dict[int, bytes] = {}
    while off + 4 <= end:
        ln, typ = _RTA.unpack_from(buf, off)
        if ln < 4:
            break
        out[typ & 0x3FFF] = buf[off + 4:off + ln]
        off += (ln + 3) & ~3
    return out


def _dump(ns: str, msg_type: int, body: bytes, *, timeout: float = 5.0
          ) -> list[tuple[bytes, int, int]]:
    """One rtnetlink dump inside ``ns``: [(buffer, body offset, message end)].

    Strict checking lets the kernel filter by the header's fields (ifindex, table);
    callers filter again, for kernels without it. A dump interrupted by a concurrent
    change (NLM_F_DUMP_INTR) is redone."""
    for _attempt in range(3):
        msgs, interrupted = _dump_once(ns, msg_type, body, timeout)
        if not interrupted:
            break
    return msgs


def _dump_once(ns: str, msg_type: int, body: bytes, timeout: float
               ) -> tuple[list[tuple[bytes, int, int]], bool]:
    with netns.entered(ns):
        if netns.in_home():
            raise links.LinkError(errno.EPERM, f"namespace {ns!r} is the host's namespace")
        sk = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
    try:
        with contextlib.suppress(OSError):
            sk.setsockopt(SOL_NETLINK, NETLINK_GET_STRICT_CHK, 1)
        sk.settimeout(timeout)
        sk.bind((0, 0))
        sk.send(_NLMSG.pack(_NLMSG.size + len(body), msg_type, NLM_F_REQUEST | NLM_F_DUMP,
                            1, 0) + body)
        out = []
        interrupted = False
        deadline = time.monotonic() + timeout
        for _ in range(100_000):  # bounded: a dump ends with NLMSG_DONE
            if time.monotonic() > deadline:
                raise links.LinkError(errno.ETIMEDOUT, f"rtnetlink dump in {ns!r} timed out")
            buf = sk.recv(1 << 20)
            off = 0
            while off + _NLMSG.size <= len(buf):
                ln, typ, flags, seq, _pid = _NLMSG.unpack_from(buf, off)
                if ln < _NLMSG.size:
                    break
                if seq == 1:
                    interrupted |= bool(flags & NLM_F_DUMP_INTR)
                    if typ == NLMSG_DONE:
                        return out, interrupted
                    if typ == NLMSG_ERROR:
                        code = -struct.unpack_from("=i", buf, off + _NLMSG.size)[0]
                        raise links.LinkError(code, f"rtnetlink dump in {ns!r}: "
                                                    f"{os.strerror(code)}")
                    out.append((buf, off + _NLMSG.size, off + ln))
                off += (ln + 3) & ~3
        raise links.LinkError(errno.EOVERFLOW, f"rtnetlink dump in {ns!r} did not end")
    finally:
        sk.close()


def _link_table(ns: str) -> dict[str, tuple[int, bool]]:
    """{ifname: (ifindex, up)} of every link in ``ns``."""
    out = {}
    for buf, off, end in _dump(ns, RTM_GETLINK, _IFINFO.pack(socket.AF_UNSPEC, 0, 0, 0, 0)):
        _fam, _typ, idx, flags, _ch = _IFINFO.unpack_from(buf, off)
        name = _attrs(buf, off + _IFINFO.size, end).get(3)  # IFLA_IFNAME
        if name:
            out[name.rstrip(b"\0").decode()] = (idx, bool(flags & IFF_UP))
    return out


def _v4_addresses(ns: str, index: int) -> set[str]:
    """IPv4 CIDRs on link ``index``."""
    out = set()
    for buf, off, end in _dump(ns, RTM_GETADDR, _IFADDR.pack(socket.AF_INET, 0, 0, 0, index)):
        fam, plen, _fl, _sc, idx = _IFADDR.unpack_from(buf, off)
        if fam != socket.AF_INET or idx != index:
            continue
        at = _attrs(buf, off + _IFADDR.size, end)
        local = at.get(2) or at.get(1)  # IFA_LOCAL, else IFA_ADDRESS
        if local and len(local) == 4:
            out.add(f"{socket.inet_ntoa(local)}/{plen}")
    return out


def _default_routes(ns: str, family: int) -> list[tuple[str | None, int | None, int]]:
    """[(gateway, oif, metric)] of the main table's default routes of ``family``."""
    out = []
    main = links.RT_TABLE_MAIN
    for buf, off, end in _dump(ns, RTM_GETROUTE, _RTMSG.pack(family, 0, 0, 0, main, 0, 0, 0, 0)):
        fam, dst_len, _s, _tos, table, _p, _sc, rtype, _f = _RTMSG.unpack_from(buf, off)
        if fam != family or dst_len != 0 or rtype != 1:  # RTN_UNICAST
            continue
        at = _attrs(buf, off + _RTMSG.size, end)
        if 15 in at:  # RTA_TABLE (the header holds only 8 bits)
            table = struct.unpack("=I", at[15])[0]
        if table != main:
            continue
        gw = at.get(5)  # RTA_GATEWAY
        oif = at.get(4)  # RTA_OIF
        prio = at.get(6)  # RTA_PRIORITY
        out.append((socket.inet_ntop(family, gw) if gw else None,
                    struct.unpack("=i", oif)[0] if oif else None,
                    struct.unpack("=I", prio)[0] if prio else 0))
    return out


# What Neutron's L3 agent sets in a router namespace. Set explicitly: a new namespace
# inherits the host's IPv4 values. arp_ignore=1: answer ARP only on the leg holding
# the address (the floating IPs on qg-); arp_announce=2: ARP from the leg's own address.
ROUTER_SYSCTLS = {
    "net.ipv4.ip_forward": "1",
    "net.ipv4.conf.all.arp_ignore": "1",
    "net.ipv4.conf.all.arp_announce": "2",
    "net.ipv6.conf.all.forwarding": "1",
}


def _sysctls(ns: str) -> None:
    for key, value in ROUTER_SYSCTLS.items():
        try:
            if links.read_sysctl(ns, key) != value:
                links.sysctl(ns, key, value)
        except links.LinkError as exc:
            if exc.errno != errno.ENOENT or ".ipv6." not in key:  # no IPv6: nothing to route
                raise


def _sync_floating_addresses(ns: str, gateway: Gateway, index: int,
                             floating_ips: Sequence[FloatingIP]) -> None:
    """The floating IPs as /32s on the gateway leg; other /32s we put there go."""
    own = {str(ipaddress.ip_interface(a)) for a in gateway.addresses}
    want = {f"{ipaddress.IPv4Address(f.floating_ip_address)}/32" for f in floating_ips} - own
    have = {a for a in _v4_addresses(ns, index) if a.endswith("/32")} - own
    for a in sorted(have - want):
        links.del_address(ns, index, a)
    for a in sorted(want - have):
        links.add_address(ns, index, a)
        _announce(ns, gateway.ifname, a.split("/")[0])


def _announce(ns: str, ifname: str, address: str) -> None:
    """Gratuitous ARP for a floating IP just added, as Neutron's L3 agent sends: a
    floating IP is often reused right after its previous router let it go, and the
    outside would keep sending replies to the old router's MAC for seconds."""
    from netbay.dataplane.garp import announce
    from netbay.dataplane.rtnl import rtnl

    try:
        link = rtnl(ns).link(ifname)
        if link is not None and link.address:
            announce(ns, ifname, link.address, address)
    except OSError as exc:   # best effort: neighbours re-resolve in time anyway
        log.debug("router namespace %s: gratuitous ARP for %s: %s", ns, address, exc)


def _sync_default_routes(ns: str, gateway: Gateway | None, index: int | None) -> None:
    """One default route per family via the external subnet's gateway on the ``qg-`` leg;
    none without a gateway."""
    for family, gw in ((socket.AF_INET, gateway.gateway_ip if gateway else None),
                       (socket.AF_INET6, gateway.gateway_ip6 if gateway else None)):
        try:
            current = _default_routes(ns, family)
        except links.LinkError:
            if family == socket.AF_INET6:
                continue  # no IPv6 in this kernel
            raise
        dst = "0.0.0.0/0" if family == socket.AF_INET else "::/0"
        keep = None
        if gw is not None and index is not None:
            addr = ipaddress.ip_address(gw)
            keep = next((r for r in current if r[0] == str(addr) and r[1] == index), None)
            if keep is None:
                nets = [ipaddress.ip_interface(a).network for a in gateway.addresses]
                onlink = not any(addr in n for n in nets if n.version == addr.version)
                links.replace_route(ns, "default", gateway=str(addr), dev=index, onlink=onlink)
                current = _default_routes(ns, family)
                keep = next((r for r in current if r[0] == str(addr) and r[1] == index), None)
        for r in current:
            if r is keep:
                continue
            try:
                links.del_route(ns, dst, gateway=r[0], dev=r[1], metric=r[2])
            except links.LinkError as exc:
                if exc.errno not in (errno.ENOENT, errno.ESRCH):
                    raise


# --- verbs ---------------------------------------------------------------------------------


def ensure_router(ns: str, *, gateway: Gateway | None, interfaces: Sequence[Leg],
                  floating_ips: Sequence[FloatingIP], enable_snat: bool) -> None:
    """Make router namespace ``ns`` forward between its legs and NAT to the outside.

    Creates ``ns`` if the fabric has not yet; sets forwarding; syncs the nft table's
    elements (rebuilding the table only if it is missing or not ours); puts the
    floating IPs on the gateway leg and routes by default via the external gateway.
    Idempotent. Legs the fabric has not wired yet are reported at the end with
    :class:`links.LinkError` (ENODEV) after everything else was done.
    """
    want = _desired_elements(gateway, interfaces, floating_ips, enable_snat)
    netns.create(ns)
    _sysctls(ns)
    released = _sync_nft(ns, want)

    present = _link_table(ns)
    lo = present.get("lo")
    if lo is not None and not lo[1]:
        links.set_up(ns, lo[0])
    missing = [leg.ifname for leg in interfaces if leg.ifname not in present]
    gw_index = None
    if gateway is not None:
        if gateway.ifname not in present:
            missing.append(gateway.ifname)
        else:
            gw_index = present[gateway.ifname][0]
            _sync_floating_addresses(ns, gateway, gw_index, floating_ips)
    _sync_default_routes(ns, gateway, gw_index)
    _forget_flows(ns, released)
    if missing:
        raise links.LinkError(errno.ENODEV, f"router namespace {ns!r}: legs not wired yet: "
                                            f"{', '.join(missing)}")


def ensure(spec: RouterSpec) -> None:
    """:func:`ensure_router` for a :class:`RouterSpec`."""
    ensure_router(spec.ns, gateway=spec.gateway, interfaces=spec.interfaces,
                  floating_ips=spec.floating_ips, enable_snat=spec.enable_snat)


def remove_router(ns: str) -> bool:
    """Delete the router namespace (its legs, table and connections go with it)."""
    return netns.delete(ns)


def observed_routers(names: Names) -> set[str]:
    """Ids of the routers whose namespaces exist (``<prefix>r-<id>``)."""
    head = names.router("")
    return {n[len(head):] for n in netns.list(head) if len(n) > len(head)}
