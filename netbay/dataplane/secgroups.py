"""Security groups in the fabric namespace, with Neutron semantics, on nftables.

Enforced outside the workload, on the bridges of the fabric namespace. This kernel
has no bridge-family conntrack, so (DESIGN.md) ``br_netfilter`` hands bridged IPv4
and IPv6 to the ``inet`` hooks, where conntrack works; there ``iifname`` is the
bridge, so the bridge family marks packets with their port first. A packet's path::

  bridge prerouting (-300)   mark = ingress port's mark (@port_mark); its anti-spoofing
  inet prerouting (raw)      ct zone = its network's zone (table nb_sg_zone, @zone)
  inet prerouting (0)        conntrack done: EGRESS rules of the sending port
  bridge forward (-300)      mark = egress port's mark (``oifname``: seen here, not in inet)
  inet forward (0)           INGRESS rules of the receiving port

Dispatching ingress on the real output port (not on the destination address) also
covers broadcast, multicast and addresses routed behind a port.

Why a change stays O(1) at 10,000 rules or members: nothing per port or per group is
a chain or a rule — with libnftables 1.0.6, adding a rule or a verdict-map ``jump``
element costs ~10 µs per chain in the namespace (it fetches the chain cache), and
appending to a chain of N rules or deleting from a pipapo interval set costs O(N) in
the kernel. Everything that changes is an element of a hash set or map:

* a port's groups: slot maps ``slot<i>: mark -> tag<<16 | mark`` (one per group
  position, up to :data:`MAX_GROUPS`); the generic egress/ingress chain, for each slot
  that has the port, puts the group's tag in the mark's high half and jumps to the
  shape rules;
* a rule: elements of *shape* sets keyed ``tag . (peer address & mask) . protocol .
  (port & mask)`` — a shape is (direction, ethertype, prefix length, kind of
  protocol match, port block size); a port range splits into aligned power-of-two
  blocks. Shape rules are created on first use and kept (an empty set matches
  nothing), so later changes are element adds/deletes;
* a remote group: the rules naming it are expanded over its member addresses (a
  port joining a group adds one element per address and per rule naming the group;
  adding a rule that names a group of M members adds M elements) — a separate
  member set per group would need one rule per (group, remote group) pair;
* anti-spoofing: ``ifname . ether . address`` sets (one per prefix length for CIDR
  address pairs).

Neutron behaviour kept: stateful (established/related accepted, invalid dropped),
except for a port whose groups are all ``stateful: false`` (set ``stateless``): its
rules alone decide, so replies need rules of their own, as with Neutron's NOTRACK
(flows stay in conntrack, unconsulted, so a stateful peer still sees its replies as
established), default deny both ways for a port with port security, ARP/ND/DHCP-client allowed,
RA and DHCP-server replies from ports dropped, MAC/IP/ARP anti-spoofing
(allowed_address_pairs: IP or CIDR with optional MAC, plus the EUI-64 link-local of
each allowed MAC), ``port_security_enabled=false`` and ``network:*`` device owners
bypass everything. When permissions shrink (rule removed, a member leaves a remote
group, a port leaves a group) the conntrack entries of the affected flows are deleted
in their zone, so open connections are re-checked — by a worker thread right after
the commit, as Neutron does (``ctkill``: a ctnetlink dump walks the kernel's whole
conntrack table, 10-20 ms here). Not supported: ``remote_address_group_id`` (such a rule allows
nothing); more than :data:`MAX_GROUPS` groups on one filtered port (refused).

Use: :meth:`SecurityGroups.sync` after a start (it rebuilds atomically); then the
incremental verbs, one nft transaction each — or, inside :meth:`SecurityGroups.batch`,
one for all of them (the agent's pass). If one is refused, the realizer rebuilds from
what it was told.
"""

from __future__ import annotations

import ipaddress
import logging
import re
import threading
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Union

from netbay.dataplane import links
from netbay.dataplane.ctkill import ConntrackWorker
from netbay.dataplane.ctkill import Kill as _Kill
from netbay.dataplane.names import Names
from netbay.dataplane.nft import Nft, NftError

__all__ = ["SecurityGroups", "TABLE", "ZONE_TABLE", "MAX_MARK", "MAX_ZONE", "MAX_GROUPS"]

log = logging.getLogger(__name__)

TABLE = "nb_sg"              # bridge and inet families
ZONE_TABLE = "nb_sg_zone"    # inet; its maps use ``typeof``, which nft 1.0.6 JSON cannot define
MAX_MARK = 0xFFFF            # port marks: low half of the packet mark
MAX_ZONE = 0xFFFF
MAX_TAG = 0xFFFF             # group tags: high half, while a port's rules are evaluated
MAX_GROUPS = 16              # security groups per filtered port (slot maps)
LOW, HIGH = 0x0000FFFF, 0xFFFF0000

IPNet = Union[ipaddress.IPv4Network, ipaddress.IPv6Network]

_ID_RE = re.compile(r"^[A-Za-z0-9_-]{1,100}$")
_MAC_RE = re.compile(r"^[0-9a-f]{2}(:[0-9a-f]{2}){5}$")

PROTOCOLS = {
    "icmp": 1, "igmp": 2, "ipip": 4, "tcp": 6, "egp": 8, "udp": 17, "ipv6-encap": 41,
    "ipv6-route": 43, "ipv6-frag": 44, "rsvp": 46, "gre": 47, "esp": 50, "ah": 51,
    "icmpv6": 58, "ipv6-icmp": 58, "ipv6-nonxt": 59, "ipv6-opts": 60, "ospf": 89,
    "pgm": 113, "vrrp": 112, "sctp": 132, "dccp": 33, "udplite": 136,
}
PORT_PROTOCOLS = {6, 17, 33, 132, 136}
ICMP = {4: 1, 6: 58}


# --- nftables JSON building blocks ------------------------------------------------------

def _meta(key: str) -> dict:
    return {"meta": {"key": key}}


def _pl(proto: str, fld: str) -> dict:
    return {"payload": {"protocol": proto, "field": fld}}


def _match(left: Any, right: Any, op: str = "==") -> dict:
    return {"match": {"op": op, "left": left, "right": right}}


def _set_mark(value: Any) -> dict:
    return {"mangle": {"key": _meta("mark"), "value": value}}


def _concat(items: list | tuple) -> Any:
    return items[0] if len(items) == 1 else {"concat": list(items)}


def _obj(kind: str, family: str, table: str = TABLE, **body: Any) -> dict:
    return {kind: {"family": family, "table": table, **body}}


def _rule(family: str, chain: str, expr: list) -> dict:
    return {"add": _obj("rule", family, chain=chain, expr=expr)}


def _nfproto(fam: int) -> dict:
    return _match(_meta("nfproto"), "ipv4" if fam == 4 else "ipv6")


def _maxlen(fam: int) -> int:
    return 32 if fam == 4 else 128


def _masked(expr: dict, fam: int, plen: int) -> dict:
    if plen == _maxlen(fam):
        return expr
    net = ipaddress.ip_network(f"{'0.0.0.0' if fam == 4 else '::'}/{plen}")
    return {"&": [expr, str(net.netmask)]}


def _addr_type(fam: int) -> str:
    return "ipv4_addr" if fam == 4 else "ipv6_addr"


# --- parsed inputs -----------------------------------------------------------------------

def _check_id(what: str, value: Any) -> str:
    if not isinstance(value, str) or not _ID_RE.match(value):
        raise ValueError(f"invalid {what} id {value!r}")
    return value


def _mac(value: Any) -> str:
    mac = str(value or "").lower()
    if not _MAC_RE.match(mac):
        raise ValueError(f"invalid MAC address {value!r}")
    return mac


def _link_local(mac: str) -> ipaddress.IPv6Network:
    """The EUI-64 link-local address the kernel derives from ``mac`` (Neutron allows it)."""
    b = bytes.fromhex(mac.replace(":", ""))
    eui = bytes([b[0] ^ 0x02]) + b[1:3] + b"\xff\xfe" + b[3:]
    return ipaddress.ip_network(ipaddress.IPv6Address(b"\xfe\x80" + b"\0" * 6 + eui))


@dataclass(frozen=True)
class _Port:
    id: str
    tap: str
    mark: int
    zone: int
    secured: bool
    mac: str
    groups: tuple[str, ...]
    fixed: tuple[IPNet, ...]                  # host networks (/32, /128)
    pairs: tuple[tuple[str, IPNet], ...]      # (mac, network)
    bridge: str | None

    def nets(self) -> list[IPNet]:
        return list(self.fixed) + [n for _, n in self.pairs]

    def members(self) -> set[tuple[int, str, int]]:
        """``(family, address, prefix length)`` that make it a member of its groups."""
        return {(n.version, str(n.network_address), n.prefixlen) for n in self.nets()}


def _parse_port(port: Mapping[str, Any], mark: int, zone: int) -> _Port:
    pid = _check_id("port", port.get("id"))
    if not isinstance(mark, int) or not 1 <= mark <= MAX_MARK:
        raise ValueError(f"port {pid}: mark {mark!r} outside 1..{MAX_MARK}")
    if not isinstance(zone, int) or not 0 <= zone <= MAX_ZONE:
        raise ValueError(f"port {pid}: zone {zone!r} outside 0..{MAX_ZONE}")
    mac = _mac(port.get("mac_address"))
    secured = port.get("port_security_enabled", True) is not False
    if str(port.get("device_owner") or "").startswith("network:"):
        secured = False  # Neutron's trusted ports (router legs, DHCP): never filtered
    fixed = []
    for ip in port.get("fixed_ips") or ():
        addr = ip.get("ip_address") if isinstance(ip, Mapping) else ip
        if addr:
            fixed.append(ipaddress.ip_network(addr))
    pairs = []
    for pair in port.get("allowed_address_pairs") or ():
        net = ipaddress.ip_network(pair["ip_address"], strict=False)
        pairs.append((_mac(pair.get("mac_address") or mac), net))
    groups = tuple(dict.fromkeys(_check_id("security group", g)
                                 for g in port.get("security_groups") or ()))
    if secured and len(groups) > MAX_GROUPS:
        raise ValueError(f"port {pid}: {len(groups)} security groups, at most {MAX_GROUPS}")
    net_id = port.get("network_id")
    return _Port(id=pid, tap=Names.tap(pid), mark=mark, zone=zone, secured=secured, mac=mac,
                 groups=groups, fixed=tuple(fixed), pairs=tuple(pairs),
                 bridge=Names.bridge(net_id) if isinstance(net_id, str) and net_id else None)


@dataclass(frozen=True)
class _Rule:
    id: str
    group: str
    direction: str                               # "i" | "e"
    family: int                                  # 4 | 6
    prefix: IPNet | None                         # remote_ip_prefix (None: any)
    remote_group: str | None
    pieces: tuple[tuple[str, tuple], ...]        # (kind, protocol values): see _Shape


def _protocol(value: Any, fam: int) -> int | None:
    if value is None or value in ("", "any", "0", 0):
        return None
    if isinstance(value, int) or (isinstance(value, str) and value.isdigit()):
        num = int(value)
    else:
        try:
            num = PROTOCOLS[str(value).lower()]
        except KeyError:
            raise ValueError(f"unknown protocol {value!r}") from None
    if not 0 <= num <= 255:
        raise ValueError(f"protocol {value!r} out of range")
    if num in (1, 58):
        num = ICMP[fam]  # Neutron: "icmp" on an IPv6 rule means ICMPv6
    return num


def _port_blocks(lo: int, hi: int) -> list[tuple[int, int]]:
    """[lo, hi] as aligned power-of-two blocks: [(start, k)] with block size 2**k."""
    out = []
    while lo <= hi:
        k = (lo & -lo).bit_length() - 1 if lo else 16
        while k > 0 and lo + (1 << k) - 1 > hi:
            k -= 1
        out.append((lo, k))
        lo += 1 << k
    return out


def _parse_rule(rule: Mapping[str, Any], group: str | None = None) -> _Rule | None:
    """A Neutron rule (None: it allows nothing here)."""
    rid = _check_id("security group rule", rule.get("id"))
    gid = _check_id("security group", group or rule.get("security_group_id"))
    direction = {"ingress": "i", "egress": "e"}.get(rule.get("direction"))
    fam = {"IPv4": 4, "IPv6": 6}.get(rule.get("ethertype") or "IPv4")
    if direction is None or fam is None:
        raise ValueError(f"rule {rid}: bad direction/ethertype {rule.get('direction')!r}/"
                         f"{rule.get('ethertype')!r}")
    proto = _protocol(rule.get("protocol"), fam)
    remote_group = rule.get("remote_group_id") or None
    prefix = None
    if remote_group:
        _check_id("remote security group", remote_group)
    elif rule.get("remote_address_group_id"):
        log.warning("rule %s: remote_address_group_id is not supported; it allows nothing", rid)
        return None
    elif rule.get("remote_ip_prefix"):
        prefix = ipaddress.ip_network(rule["remote_ip_prefix"], strict=False)
        if prefix.version != fam:
            log.warning("rule %s: prefix %s is not %s; it allows nothing",
                        rid, prefix, rule.get("ethertype"))
            return None
        if not prefix.prefixlen:
            prefix = None
    lo, hi = rule.get("port_range_min"), rule.get("port_range_max")
    pieces: list[tuple[str, tuple]]
    if proto is None:
        pieces = [("a", ())]
    elif proto == ICMP[fam] and lo is not None:
        pieces = [("c", (int(lo),))] if hi is None else [("cc", (int(lo), int(hi)))]
    elif proto in PORT_PROTOCOLS and lo is not None:
        lo, hi = int(lo), int(hi if hi is not None else lo)
        if not 0 <= lo <= hi <= 65535:
            raise ValueError(f"rule {rid}: bad port range {lo}-{hi}")
        if lo <= 1 and hi == 65535:
            pieces = [("p", (proto,))]
        else:
            pieces = [(f"t{k}", (proto, start)) for start, k in _port_blocks(lo, hi)]
    else:
        pieces = [("p", (proto,))]
    return _Rule(rid, gid, direction, fam, prefix, remote_group, tuple(pieces))


# --- shapes ------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Shape:
    """One rule of the egress or ingress shape chain, and its set."""
    direction: str    # "i" | "e"
    family: int       # 4 | 6
    plen: int | None  # peer prefix length; None: any peer
    kind: str         # "a" any protocol | "p" protocol | "t<k>" port block of 2**k
                      # | "c" icmp type | "cc" icmp type and code

    @property
    def set_name(self) -> str:
        plen = "x" if self.plen is None else self.plen
        return f"{self.direction}{self.family}_{plen}_{self.kind}"

    def expr(self) -> tuple[list, list[str]]:
        """(rule expressions, set key types)."""
        fam = self.family
        peer = _pl("ip" if fam == 4 else "ip6", "saddr" if self.direction == "i" else "daddr")
        key: list = [{"&": [_meta("mark"), HIGH]}]
        types = ["mark"]
        if self.plen is not None:
            key.append(_masked(peer, fam, self.plen))
            types.append(_addr_type(fam))
        k = self.kind
        if k == "p":
            key.append(_meta("l4proto"))
            types.append("inet_proto")
        elif k.startswith("t"):
            bits = int(k[1:])
            dport = _pl("th", "dport")
            mask = (0xFFFF << bits) & 0xFFFF
            key += [_meta("l4proto"), dport if bits == 0 else {"&": [dport, mask]}]
            types += ["inet_proto", "inet_service"]
        elif k in ("c", "cc"):
            icmp = "icmp" if fam == 4 else "icmpv6"
            key.append(_pl(icmp, "type"))
            types.append(f"{icmp}_type")
            if k == "cc":
                key.append(_pl(icmp, "code"))
                types.append(f"{icmp}_code")
        return [_nfproto(fam), _match(_concat(key), "@" + self.set_name), {"accept": None}], types


Atom = tuple[_Shape, tuple]


def _atoms(rule: _Rule, tag: int, plen: int | None, addr: str | None) -> list[Atom]:
    """The shape elements of ``rule`` in a group tagged ``tag``, for one peer prefix."""
    base = (tag << 16,) + ((addr,) if plen is not None else ())
    return [(_Shape(rule.direction, rule.family, plen, kind), base + vals)
            for kind, vals in rule.pieces]


# --- the static ruleset ----------------------------------------------------------------

_ND_OUT = [131, 132, 133, 135, 136, 143]        # MLD report/done, RS, NS, NA, MLDv2 report
_ND_IN = [130, 131, 132, 134, 135, 136, 143]    # + MLD query, RA


def _common_chains() -> dict[str, list[list]]:
    """What every filtered port starts with (Neutron's ND/DHCP/conntrack prologue)."""
    v4, v6 = _nfproto(4), _nfproto(6)
    icmp6 = _pl("icmpv6", "type")
    state = {"ct": {"key": "state"}}

    def udp(sport: int, dport: int) -> list:
        return [_match(_meta("l4proto"), "udp"), _match(_pl("udp", "sport"), sport),
                _match(_pl("udp", "dport"), dport)]

    # Ports whose groups are all ``stateful: false`` skip both: their rules alone decide.
    tracked = _match({"&": [_meta("mark"), LOW]}, "@stateless", "!=")
    est = [tracked, _match(state, ["established", "related"], "in"), {"accept": None}]
    inv = [tracked, _match(state, "invalid", "in"), {"drop": None}]
    return {
        "egress_common": [
            [v6, _match(icmp6, 134), {"drop": None}],        # router advertisements
            [v6, _match(icmp6, {"set": _ND_OUT}), {"accept": None}],
            [v4, *udp(68, 67), {"accept": None}],             # DHCP client
            [v6, *udp(546, 547), {"accept": None}],
            [v4, *udp(67, 68), {"drop": None}],               # DHCP server replies
            [v6, *udp(547, 546), {"drop": None}],
            est, inv,
        ],
        "ingress_common": [
            [v6, _match(icmp6, {"set": _ND_IN}), {"accept": None}],
            [v4, *udp(67, 68), {"accept": None}],
            [v6, *udp(547, 546), {"accept": None}],
            est, inv,
        ],
    }


def _spoof_allow(fam: int, plen: int) -> list[list]:
    """Rules of chain ``spoof_allow`` for the ``src<fam>[_<plen>]`` set."""
    name = "@" + _src_set(fam, plen)
    ifn, esrc, etype = _meta("iifname"), _pl("ether", "saddr"), _pl("ether", "type")
    if fam == 6:
        return [[_match(etype, "ip6"),
                 _match({"concat": [ifn, esrc, _masked(_pl("ip6", "saddr"), 6, plen)]}, name),
                 {"accept": None}]]
    return [[_match(etype, "ip"),
             _match({"concat": [ifn, esrc, _masked(_pl("ip", "saddr"), 4, plen)]}, name),
             {"accept": None}],
            [_match(etype, "arp"),
             _match({"concat": [ifn, esrc, _masked(_pl("arp", "saddr ip"), 4, plen)]}, name),
             _match({"concat": [ifn, _pl("arp", "saddr ether"),
                                _masked(_pl("arp", "saddr ip"), 4, plen)]}, name),
             {"accept": None}]]


def _src_set(fam: int, plen: int) -> str:
    return f"src{fam}" if plen == _maxlen(fam) else f"src{fam}_{plen}"


def _base() -> list[dict]:
    """Drop and re-create both tables: hooks, sets and maps, fixed chains."""
    out: list[dict] = []
    for fam in ("bridge", "inet"):
        t = {"family": fam, "name": TABLE}
        out += [{"add": {"table": t}}, {"delete": {"table": t}}, {"add": {"table": t}}]

    def chain(fam: str, name: str, hook: str | None = None, prio: int = 0) -> dict:
        body: dict[str, Any] = {"name": name}
        if hook:
            body.update(type="filter", hook=hook, prio=prio, policy="accept")
        return {"add": _obj("chain", fam, **body)}

    def mk(fam: str, name: str, key: str | list, data: str | None = None) -> dict:
        body: dict[str, Any] = {"name": name, "type": key}
        if data:
            body["map"] = data
        return {"add": _obj("map" if data else "set", fam, **body)}

    out += [mk("bridge", "port_mark", "ifname", "mark"), mk("bridge", "filtered", "ifname"),
            mk("bridge", "macs", ["ifname", "ether_addr"]),
            mk("bridge", "src4", ["ifname", "ether_addr", "ipv4_addr"]),
            mk("bridge", "src6", ["ifname", "ether_addr", "ipv6_addr"]),
            mk("inet", "filtered", "mark"), mk("inet", "stateless", "mark")]
    out += [mk("inet", f"slot{i}", "mark", "mark") for i in range(MAX_GROUPS)]
    out += [chain("bridge", "prerouting", "prerouting", -300),
            chain("bridge", "forward", "forward", -300),
            chain("bridge", "spoof"), chain("bridge", "spoof_allow"),
            chain("inet", "egress_hook", "prerouting", 0),
            chain("inet", "ingress_hook", "forward", 0),
            chain("inet", "egress_port"), chain("inet", "ingress_port"),
            chain("inet", "eshapes"), chain("inet", "ishapes")]
    ifn, esrc, etype = _meta("iifname"), _pl("ether", "saddr"), _pl("ether", "type")
    out += [
        _rule("bridge", "prerouting", [_set_mark({"map": {"key": ifn, "data": "@port_mark"}})]),
        _rule("bridge", "prerouting", [_match(ifn, "@filtered"), {"jump": {"target": "spoof"}}]),
        _rule("bridge", "spoof", [_match({"concat": [ifn, esrc]}, "@macs", "!="), {"drop": None}]),
        _rule("bridge", "spoof", [{"jump": {"target": "spoof_allow"}}]),
        _rule("bridge", "spoof", [_match(etype, "ip"), _match(_pl("ip", "saddr"), "0.0.0.0"),
                                  _match(_pl("ip", "protocol"), "udp"),
                                  _match(_pl("udp", "sport"), 68), _match(_pl("udp", "dport"), 67),
                                  {"accept": None}]),                     # DHCP discover
        _rule("bridge", "spoof", [_match(etype, "ip6"), _match(_pl("ip6", "saddr"), "::"),
                                  _match(_pl("ip6", "nexthdr"), "ipv6-icmp"),
                                  _match(_pl("icmpv6", "type"), {"set": [131, 135, 143]}),
                                  {"accept": None}]),                     # DAD, MLD from ::
        _rule("bridge", "spoof", [_match(etype, {"set": ["ip", "ip6", "arp"]}), {"drop": None}]),
        _rule("bridge", "forward", [_set_mark(0)]),
        _rule("bridge", "forward", [_set_mark({"map": {"key": _meta("oifname"),
                                                       "data": "@port_mark"}})]),
    ]
    out += [_rule("bridge", "spoof_allow", r)
            for fam in (4, 6) for r in _spoof_allow(fam, _maxlen(fam))]
    for name, rules in _common_chains().items():
        out.append(chain("inet", name))
        out += [_rule("inet", name, r) for r in rules]
    low = {"&": [_meta("mark"), LOW]}
    for d, hook in (("e", "egress"), ("i", "ingress")):
        out.append(_rule("inet", f"{hook}_hook", [_match(low, "@filtered"),
                                                  {"jump": {"target": f"{hook}_port"}}]))
        out.append(_rule("inet", f"{hook}_port", [{"jump": {"target": f"{hook}_common"}}]))
        for i in range(MAX_GROUPS):
            out.append(_rule("inet", f"{hook}_port", [
                _set_mark({"map": {"key": low, "data": f"@slot{i}"}}),
                {"jump": {"target": f"{d}shapes"}}]))
        out.append(_rule("inet", f"{hook}_port", [{"drop": None}]))
    return out


# The zone table: created (idempotently) in nft syntax, because its maps need ``typeof``.
_ZONE_TEXT = f"""add table inet {ZONE_TABLE}
add map inet {ZONE_TABLE} zone {{ typeof meta mark : ct zone; }}
add map inet {ZONE_TABLE} bridge_zone {{ typeof meta iifname : ct zone; }}
add chain inet {ZONE_TABLE} raw {{ type filter hook prerouting priority -300; policy accept; }}
flush chain inet {ZONE_TABLE} raw
add rule inet {ZONE_TABLE} raw ct zone set iifname map @bridge_zone
add rule inet {ZONE_TABLE} raw ct zone set meta mark & 0x{LOW:08x} map @zone
"""


# --- transactions ------------------------------------------------------------------------

Elem = tuple[str, str, str, Any, Any]   # (family, table, set or map, key, value or None)


class _Tx:
    """One nft transaction: objects first, then rules, then element changes. Element
    changes are netted per element (the first operation tells whether it existed) and
    sent as one command per set."""

    def __init__(self) -> None:
        self.create: list[dict] = []
        self.rules: list[dict] = []
        self.ops: dict[tuple, list[tuple[bool, Any]]] = {}
        self.comments: dict[tuple, str] = {}
        self.kills: set[_Kill] = set()

    def elem(self, add: bool, e: Elem, comment: str | None = None) -> None:
        fam, table, name, key, value = e
        self.ops.setdefault((fam, table, name, key), []).append((add, value))
        if comment is not None:
            self.comments[(fam, table, name, key)] = comment

    def commands(self) -> list[dict]:
        dels: dict[tuple, list] = {}
        adds: dict[tuple, list] = {}
        for (fam, table, name, key), ops in self.ops.items():
            existed, (last_add, value) = not ops[0][0], ops[-1]
            k = _concat(key) if isinstance(key, tuple) else key
            if existed and (not last_add or ops[0][1] != value):
                dels.setdefault((fam, table, name), []).append(k)
            elif existed:
                continue  # deleted and re-added as it was
            if last_add:
                c = self.comments.get((fam, table, name, key))
                v: Any = {"elem": {"val": k, "comment": c}} if c else k
                if value is not None:
                    v = [v, value]
                adds.setdefault((fam, table, name), []).append(v)
        out = self.create + self.rules
        for verb, groups in (("delete", dels), ("add", adds)):
            for (fam, table, name), elems in groups.items():
                out.append({verb: _obj("element", fam, table, name=name, elem=elems)})
        return out


@dataclass
class _Group:
    id: str
    tag: int
    known: bool = False                                  # ensured (vs only referenced)
    stateful: bool = True                                # ``stateful: false``: no conntrack
    rules: dict[str, _Rule] = field(default_factory=dict)
    ports: set[str] = field(default_factory=set)         # filtered ports with it in a slot
    member_ports: set[str] = field(default_factory=set)
    members: Counter = field(default_factory=Counter)    # (fam, addr, plen) -> ports
    remote_rules: set[str] = field(default_factory=set)  # rules (anywhere) naming it as remote


def _port_elems(p: _Port, tag: Any, stateless: bool = False) -> frozenset[Elem]:
    """Every element a port puts in the kernel (``tag(gid)`` gives a group's tag;
    ``stateless``: every group of the port is ``stateful: false``)."""
    out: set[Elem] = {("bridge", TABLE, "port_mark", p.tap, p.mark)}
    if p.zone:
        out.add(("inet", ZONE_TABLE, "zone", p.mark, p.zone))
    if not p.secured:
        return frozenset(out)
    out |= {("bridge", TABLE, "filtered", p.tap, None), ("inet", TABLE, "filtered", p.mark, None)}
    macs = {p.mac} | {m for m, _ in p.pairs}
    out |= {("bridge", TABLE, "macs", (p.tap, m), None) for m in macs}
    srcs = [(p.mac, n) for n in p.fixed] + list(p.pairs) + [(m, _link_local(m)) for m in macs]
    for mac, net in srcs:
        out.add(("bridge", TABLE, _src_set(net.version, net.prefixlen),
                 (p.tap, mac, str(net.network_address)), None))
    for i, gid in enumerate(p.groups):
        out.add(("inet", TABLE, f"slot{i}", p.mark, (tag(gid) << 16) | p.mark))
    if stateless and p.groups:
        out.add(("inet", TABLE, "stateless", p.mark, None))
    return frozenset(out)


# --- the realizer ------------------------------------------------------------------------

def _locked(fn: Any) -> Any:
    """Serialize the public verbs (the derived state is shared)."""
    def wrapper(self: SecurityGroups, *args: Any, **kw: Any) -> Any:
        with self._lock:
            return fn(self, *args, **kw)
    wrapper.__name__, wrapper.__doc__ = fn.__name__, fn.__doc__
    return wrapper


class SecurityGroups:
    """Neutron security groups of the ports of one fabric namespace.

    Inputs are plain Neutron JSON (dicts). Ports carry the ``mark`` (1..65535, unique
    per port in the fabric, chosen by the agent) and ``zone`` (the conntrack zone of
    the port's network, 1..65535; 0: none).
    """

    def __init__(self, fabric_ns: str) -> None:
        self.ns = fabric_ns
        self._nft: Nft | None = None
        # What we were told (the base of a rebuild): ports, and each group's rules.
        self._want_ports: dict[str, _Port] = {}
        self._want_groups: dict[str, dict[str, _Rule | None]] = {}
        self._want_stateless: set[str] = set()      # groups with ``stateful: false``
        self._want_marks: dict[int, str] = {}
        # What the kernel holds (derived, refcounted).
        self._ports: dict[str, _Port] = {}
        self._port_elems: dict[str, frozenset[Elem]] = {}
        self._groups: dict[str, _Group] = {}
        self._rule_group: dict[str, str] = {}
        self._elems: Counter = Counter()            # (shape, key) -> uses
        self._shapes: set[_Shape] = set()
        self._spoof_lens: set[tuple[int, int]] = set()
        self._bridge_zones: Counter = Counter()     # (bridge, zone) -> ports
        self._tags: dict[int, str] = {}
        self._next_tag = 1
        self._built = False
        self._brnf = False
        self._ct = ConntrackWorker(fabric_ns)
        self._lock = threading.RLock()
        self._pending: list[Any] | None = None  # builds deferred by :meth:`batch`

    # -- public verbs -----------------------------------------------------------------

    @contextmanager
    def batch(self) -> Iterator[None]:
        """The verbs called inside reach the kernel as ONE nft transaction, at the end
        (an agent pass: a change's groups and ports together): one commit, and one
        fill of libnftables' cache, which costs more the larger the ruleset."""
        with self._lock:
            outer = self._pending is None
            if outer:
                self._pending = []
            try:
                yield
            finally:
                if outer:
                    builds, self._pending = self._pending, None
                    if builds:
                        self._apply(lambda tx: [build(tx) for build in builds])

    @_locked
    def sync(self, ports: Iterable[tuple[Mapping[str, Any], int, int]],
             groups: Iterable[Mapping[str, Any]]) -> None:
        """Make the kernel hold exactly ``ports`` (``(port, mark, zone)``) and ``groups``,
        rebuilt in one nft transaction: traffic sees the old or the new ruleset."""
        parsed = {p.id: p for p in (_parse_port(p, m, z) for p, m, z in ports)}
        marks = Counter(p.mark for p in parsed.values())
        if marks and marks.most_common(1)[0][1] > 1:
            raise ValueError(f"mark {marks.most_common(1)[0][0]} given to two ports")
        gs = {}
        for g in groups:  # everything is validated before anything is touched
            gs[_check_id("security group", g.get("id"))] = self._parse_rules(g)
        self._want_ports, self._want_groups = parsed, gs
        self._want_stateless = {g["id"] for g in groups if g.get("stateful") is False}
        self._want_marks = {p.mark: p.id for p in parsed.values()}
        self._rebuild()

    @_locked
    def ensure_port(self, port: Mapping[str, Any], mark: int, zone: int) -> None:
        p = _parse_port(port, mark, zone)
        if self._want_ports.get(p.id) == p and self._built:
            return
        other = self._want_marks.get(mark)
        if other is not None and other != p.id:
            raise ValueError(f"mark {mark} is port {other}'s")
        old = self._want_ports.get(p.id)
        if old is not None and old.mark != mark:
            self._want_marks.pop(old.mark, None)
        self._want_ports[p.id] = p
        self._want_marks[mark] = p.id
        self._apply(lambda tx: self._port_tx(tx, p.id, p))

    @_locked
    def remove_port(self, port_id: str) -> None:
        old = self._want_ports.pop(port_id, None)
        if old is not None:
            self._want_marks.pop(old.mark, None)
        elif port_id not in self._ports:
            return
        self._apply(lambda tx: self._port_tx(tx, port_id, None))

    @_locked
    def ensure_group(self, group: Mapping[str, Any]) -> None:
        """Ensure a group and exactly its ``security_group_rules`` (rules are immutable in
        Neutron: compared by id and content)."""
        gid = _check_id("security group", group.get("id"))
        rules = self._parse_rules(group)
        self._want_groups[gid] = dict(rules)
        if group.get("stateful") is False:
            self._want_stateless.add(gid)
        else:
            self._want_stateless.discard(gid)
        self._apply(lambda tx: self._group_tx(tx, gid, rules))

    @_locked
    def remove_group(self, group_id: str) -> None:
        self._want_stateless.discard(group_id)
        if self._want_groups.pop(group_id, None) is None and group_id not in self._groups:
            return
        self._apply(lambda tx: self._group_tx(tx, group_id, None))

    @_locked
    def ensure_rule(self, rule: Mapping[str, Any]) -> None:
        """Add one rule (its ``security_group_id`` names the group): element adds only."""
        r = _parse_rule(rule)
        rid = _check_id("security group rule", rule.get("id"))
        gid = _check_id("security group", rule.get("security_group_id"))
        old = self._rule_group.get(rid)
        if old is not None and old != gid:
            raise ValueError(f"rule {rid} belongs to group {old}, not {gid}")
        self._want_groups.setdefault(gid, {})[rid] = r
        self._apply(lambda tx: self._rule_tx(tx, gid, rid, r))

    @_locked
    def remove_rule(self, rule_id: str) -> None:
        """Remove one rule: element deletes, then its flows' conntrack entries."""
        gid = self._rule_group.get(rule_id)
        if gid is None:
            return
        self._want_groups.get(gid, {}).pop(rule_id, None)
        self._apply(lambda tx: self._rule_tx(tx, gid, rule_id, None))

    @_locked
    def observed(self) -> set[str]:
        """Ids of the ports in the kernel (comments of the ``port_mark`` elements)."""
        try:
            res = self._ctx().run([{"list": _obj("map", "bridge", name="port_mark")}])
        except NftError:
            return set()
        out = set()
        for o in Nft._objects(res):
            for e in (o.get("map") or {}).get("elem", []):
                key = e[0] if isinstance(e, list) else e
                if isinstance(key, dict) and key.get("elem", {}).get("comment"):
                    out.add(key["elem"]["comment"])
        return out

    def wait_conntrack(self, timeout: float = 5.0) -> bool:
        """Wait until the conntrack entries of flows that lost their permission are
        deleted (done off the request path, as Neutron does); False on timeout."""
        return self._ct.wait(timeout)

    def close(self) -> None:
        self._ct.stop()
        if self._nft is not None:
            self._nft.close()
            self._nft = None

    # -- plumbing ---------------------------------------------------------------------

    def _ctx(self) -> Nft:
        if self._nft is None:
            self._nft = Nft(self.ns)
        return self._nft

    def _bridge_netfilter(self) -> None:
        """Bridged traffic must traverse the inet hooks (per namespace; the keys exist once
        br_netfilter is loaded and the namespace has a bridge)."""
        if self._brnf:
            return
        try:
            for fam in ("iptables", "ip6tables"):
                key = f"net.bridge.bridge-nf-call-{fam}"
                links.sysctl(self.ns, key, 1)
            self._brnf = True
        except OSError as exc:
            log.info("bridge netfilter sysctls not set yet in %s: %s", self.ns, exc)

    def _parse_rules(self, group: Mapping[str, Any]) -> dict[str, _Rule | None]:
        gid = _check_id("security group", group.get("id"))
        out: dict[str, _Rule | None] = {}
        for r in group.get("security_group_rules") or ():
            out[_check_id("security group rule", r.get("id"))] = _parse_rule(r, gid)
        return out

    def _apply(self, build: Any) -> None:
        """Run one incremental change (the wanted state is already updated); if it
        cannot be built or is refused, rebuild everything from the wanted state."""
        if self._pending is not None:  # inside batch(): one transaction at its end
            self._pending.append(build)
            return
        self._bridge_netfilter()
        if not self._built:  # first use without sync(): start from clean tables
            self._rebuild()
            return
        tx = _Tx()
        try:
            build(tx)
            cmds = tx.commands()
            if cmds:
                self._ctx().run(cmds)
        except Exception as exc:  # noqa: BLE001 - refused, or a bug: the rebuild repairs
            log.error("security groups: incremental update failed, rebuilding: %s", exc,
                      exc_info=not isinstance(exc, NftError))
            self._rebuild()
            return
        self._kill(tx.kills)

    def _rebuild(self) -> None:
        """Everything from the wanted state: the zone table in one transaction (kept, its
        chain re-made), then both filter tables deleted and re-created in another."""
        self._bridge_netfilter()
        self._ports, self._port_elems, self._groups, self._rule_group = {}, {}, {}, {}
        self._elems, self._shapes, self._spoof_lens = Counter(), set(), set()
        self._bridge_zones, self._tags, self._next_tag = Counter(), {}, 1
        self._built = False
        tx = _Tx()
        for gid, rules in self._want_groups.items():
            self._group_tx(tx, gid, rules)
        for p in self._want_ports.values():
            self._port_tx(tx, p.id, p)
        nft = self._ctx()
        nft.run(_ZONE_TEXT)
        flush = [{"flush": _obj("map", "inet", ZONE_TABLE, name=m)}
                 for m in ("zone", "bridge_zone")]
        nft.run(_base() + flush + tx.commands())
        self._built = True

    # -- groups and rules ---------------------------------------------------------------

    def _group(self, gid: str) -> _Group:
        g = self._groups.get(gid)
        if g is None:
            if len(self._tags) >= MAX_TAG:
                raise ValueError(f"more than {MAX_TAG} security groups")
            while self._next_tag in self._tags or not 1 <= self._next_tag <= MAX_TAG:
                self._next_tag = self._next_tag % MAX_TAG + 1
            g = self._groups[gid] = _Group(gid, self._next_tag, stateful=gid not in self._want_stateless)
            self._tags[g.tag] = gid
        return g

    def _gc_group(self, gid: str) -> None:
        """Forget a group (and free its tag) once nothing refers to it; none of its
        elements are left by then."""
        g = self._groups.get(gid)
        if g is None or g.known or g.rules or g.ports or g.member_ports or g.remote_rules:
            return
        del self._groups[gid]
        self._tags.pop(g.tag, None)

    def _group_tx(self, tx: _Tx, gid: str, rules: Mapping[str, _Rule | None] | None) -> None:
        g = self._group(gid)
        g.known = rules is not None
        stateful = gid not in self._want_stateless
        if g.stateful != stateful:  # its ports gain or lose their ``stateless`` element
            g.stateful = stateful
            for pid in sorted(g.ports):
                self._port_tx(tx, pid, self._ports[pid])
        want = {rid: r for rid, r in (rules or {}).items() if r is not None}
        for rid in [r for r in g.rules if want.get(r) != g.rules[r]]:
            self._rule_tx(tx, gid, rid, None)
        for rid, r in want.items():
            if rid not in g.rules:
                self._rule_tx(tx, gid, rid, r)
        self._gc_group(gid)

    def _rule_tx(self, tx: _Tx, gid: str, rid: str, rule: _Rule | None) -> None:
        """Add (``rule``) or remove (None) one rule of group ``gid``."""
        g = self._group(gid)
        old = g.rules.pop(rid, None)
        if old is not None:
            self._rule_group.pop(rid, None)
            for atom in self._rule_atoms(old, g):
                self._dec(tx, atom)
            self._kill_rule(tx, g, old)
            if old.remote_group:
                r = self._groups.get(old.remote_group)
                if r is not None:
                    r.remote_rules.discard(rid)
                    self._gc_group(r.id)
        if rule is not None:
            g.known = g.known or gid in self._want_groups
            g.rules[rid] = rule
            self._rule_group[rid] = gid
            if rule.remote_group:
                self._group(rule.remote_group).remote_rules.add(rid)
            for atom in self._rule_atoms(rule, g):
                self._inc(tx, atom)
        self._gc_group(gid)

    def _rule_atoms(self, rule: _Rule, g: _Group) -> list[Atom]:
        if rule.remote_group is None:
            if rule.prefix is None:
                return _atoms(rule, g.tag, None, None)
            return _atoms(rule, g.tag, rule.prefix.prefixlen, str(rule.prefix.network_address))
        r = self._groups.get(rule.remote_group)
        if r is None:
            return []
        return [a for (fam, addr, plen) in r.members if fam == rule.family
                for a in _atoms(rule, g.tag, plen, addr)]

    def _inc(self, tx: _Tx, atom: Atom) -> None:
        shape, key = atom
        if shape not in self._shapes:  # first use: the shape's set and rule
            exprs, types = shape.expr()
            tx.create.append({"add": _obj("set", "inet", name=shape.set_name,
                                          type=types[0] if len(types) == 1 else types)})
            tx.rules.append(_rule("inet", f"{shape.direction}shapes", exprs))
            self._shapes.add(shape)
        self._elems[atom] += 1
        if self._elems[atom] == 1:
            tx.elem(True, ("inet", TABLE, shape.set_name, key, None))

    def _dec(self, tx: _Tx, atom: Atom) -> None:
        self._elems[atom] -= 1
        if self._elems[atom] <= 0:
            del self._elems[atom]
            tx.elem(False, ("inet", TABLE, atom[0].set_name, atom[1], None))

    def _member(self, tx: _Tx, gid: str, member: tuple[int, str, int], delta: int) -> None:
        """A member address of ``gid`` appears (+1) or goes (-1): the rules naming
        ``gid`` as their remote group gain or lose its elements."""
        r = self._group(gid)
        before = r.members[member]
        r.members[member] += delta
        if r.members[member] <= 0:
            del r.members[member]
        if (before == 0) == (delta < 0):
            return  # the address was already there (another port, another network)
        fam, addr, plen = member
        for rid in r.remote_rules:
            u = self._groups[self._rule_group[rid]]
            rule = u.rules[rid]
            if rule.family == fam:
                for atom in _atoms(rule, u.tag, plen, addr):
                    (self._inc if delta > 0 else self._dec)(tx, atom)

    # -- ports ------------------------------------------------------------------------

    def _port_tx(self, tx: _Tx, pid: str, p: _Port | None) -> None:
        """Move port ``pid`` from what the kernel has to ``p`` (None: remove it)."""
        old = self._ports.get(pid)
        for gid in p.groups if p else ():
            self._group(gid)
        o_el = self._port_elems.get(pid, frozenset())
        n_el = _port_elems(p, lambda gid: self._groups[gid].tag,
                           all(not self._groups[gid].stateful for gid in p.groups)) if p else frozenset()
        for e in o_el - n_el:
            tx.elem(False, e)
        for e in n_el - o_el:
            fam, table, name, _, _ = e
            if name.startswith("src") and "_" in name:  # a CIDR pair: its length's set
                self._spoof_len(tx, int(name[3]), int(name.split("_")[1]))
            tx.elem(True, e, comment=pid if name == "port_mark" else None)
        o_mem = {(g, *m) for g in old.groups for m in old.members()} if old else set()
        n_mem = {(g, *m) for g in p.groups for m in p.members()} if p else set()
        for gid, *m in o_mem - n_mem:
            self._member(tx, gid, tuple(m), -1)
        for gid, *m in n_mem - o_mem:
            self._member(tx, gid, tuple(m), +1)
        o_bz = (old.bridge, old.zone) if old and old.bridge and old.zone else None
        n_bz = (p.bridge, p.zone) if p and p.bridge and p.zone else None
        if o_bz != n_bz:
            self._bridge_zone(tx, o_bz, -1)
            self._bridge_zone(tx, n_bz, +1)
        self._kill_port(tx, old, p)
        o_slots = set(old.groups) if old and old.secured else set()
        n_slots = set(p.groups) if p and p.secured else set()
        for gid in n_slots:
            self._groups[gid].ports.add(pid)
        for gid in set(p.groups if p else ()):
            self._groups[gid].member_ports.add(pid)
        if p is None:
            self._ports.pop(pid, None)
            self._port_elems.pop(pid, None)
        else:
            self._ports[pid], self._port_elems[pid] = p, n_el
        left = set(old.groups if old else ()) - set(p.groups if p else ())
        for gid in (o_slots - n_slots) | left:
            g = self._groups.get(gid)
            if g is not None:
                if gid not in n_slots:
                    g.ports.discard(pid)
                if p is None or gid not in p.groups:
                    g.member_ports.discard(pid)
                self._gc_group(gid)

    def _spoof_len(self, tx: _Tx, fam: int, plen: int) -> None:
        """First CIDR address pair of a length: its set and anti-spoofing rules."""
        if (fam, plen) in self._spoof_lens:
            return
        self._spoof_lens.add((fam, plen))
        tx.create.append({"add": _obj("set", "bridge", name=_src_set(fam, plen),
                                      type=["ifname", "ether_addr", _addr_type(fam)])})
        tx.rules += [_rule("bridge", "spoof_allow", r) for r in _spoof_allow(fam, plen)]

    def _bridge_zone(self, tx: _Tx, bz: tuple[str, int] | None, delta: int) -> None:
        """Zone of packets entering a bridge from a non-port device (e.g. VXLAN)."""
        if bz is None:
            return
        before = self._bridge_zones[bz]
        self._bridge_zones[bz] += delta
        if self._bridge_zones[bz] <= 0:
            del self._bridge_zones[bz]
        now = self._bridge_zones.get(bz, 0)
        if (before == 0) != (now == 0):
            if now and any(b == bz[0] and z != bz[1] for b, z in self._bridge_zones):
                log.warning("bridge %s has ports in two zones; keeping the first", bz[0])
                return
            tx.elem(bool(now), ("inet", ZONE_TABLE, "bridge_zone", bz[0], bz[1]))

    # -- conntrack ----------------------------------------------------------------------

    def _kill_rule(self, tx: _Tx, g: _Group, rule: _Rule) -> None:
        """A removed rule: the filtered ports of its group re-check their flows in its
        direction (from or to its prefix, when it has one)."""
        peer = frozenset([rule.prefix]) if rule.prefix is not None else None
        for pid in g.ports:
            p = self._ports.get(pid)
            mine = frozenset(n for n in p.nets() if n.version == rule.family) if p else None
            if p is None or not p.zone or not mine:
                continue
            tx.kills.add(_Kill(p.zone, peer, mine) if rule.direction == "i"
                         else _Kill(p.zone, mine, peer))

    def _kill_port(self, tx: _Tx, old: _Port | None, new: _Port | None) -> None:
        """Permissions of, or towards, a port that shrank: delete the affected flows."""
        if old is None:
            return
        if new is not None and new.zone and new.secured and (
                not old.secured or set(old.groups) - set(new.groups)):
            mine = frozenset(new.nets())
            if mine:
                tx.kills |= {_Kill(new.zone, mine, None), _Kill(new.zone, None, mine)}
        # As a remote-group member: flows between its lost addresses and the filtered
        # ports of the groups whose rules name a group it was in.
        kept = set(new.nets()) if new else set()
        for remote in old.groups:
            stays = new is not None and remote in new.groups
            lost = frozenset(set(old.nets()) - kept if stays else old.nets())
            r = self._groups.get(remote)
            if not lost or r is None:
                continue
            for rid in r.remote_rules:
                u = self._groups[self._rule_group[rid]]
                rule = u.rules[rid]
                for pid in u.ports:
                    q = self._ports.get(pid)
                    if q is None or not q.zone or pid == old.id:
                        continue
                    theirs = frozenset(q.nets())
                    tx.kills.add(_Kill(q.zone, lost, theirs) if rule.direction == "i"
                                 else _Kill(q.zone, theirs, lost))

    def _kill(self, kills: set[_Kill]) -> None:
        if kills:
            self._ct.submit(kills)
