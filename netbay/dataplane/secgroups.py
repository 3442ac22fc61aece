"""Security groups in the fabric namespace, with Neutron semantics, on nftables.

Enforced outside the workload, on the bridges of the fabric namespace. This kernel
has no bridge-family conntrack, so (as DESIGN.md says) ``br_netfilter`` hands bridged
IPv4/IPv6 to the ``inet`` hooks, where conntrack works. Each packet's path::

  bridge prerouting (-300)  meta mark = ingress port's mark          (@port_mark, every port)
                            anti-spoofing chain of that port         (@spoof -> ps_<port>)
  inet prerouting (raw)     ct zone = its network's zone             (@bridge_zone, @port_zone)
  bridge forward (-300)     mark |= egress port's mark << 16         (@out -> po_<port>)
  inet forward (0)          egress rules of the sending port         (@egress: mark & 0xffff)
  inet forward (1)          ingress rules of the receiving port      (@ingress: mark & 0xffff0000)

(``iifname`` in the inet hooks is the bridge, hence the marks; br_netfilter does not
expose the bridge ports there, but the bridge-family forward hook, which runs just
before it, sees ``oifname`` — so ingress is dispatched on the real output port, also
for broadcast and for addresses routed behind a port.)

Why it stays fast at 10,000 rules or members: every rule and every member is a
*hash-set element*, never a rule in a long chain (appending to a chain of N rules
and pipapo interval-set deletes both cost O(N) in the kernel here). A group chain
holds one rule per *shape* — (direction, ethertype, remote prefix length or remote
group, kind of protocol match, port block size) — looking up a concatenated key in
that shape's set; a Neutron rule becomes a few elements (a port range splits into
aligned power-of-two blocks; a prefix is matched as ``addr & mask``). Shape rules
are created on first use and left in place (an empty set matches nothing), so a rule
change is element adds/deletes. A remote group is a set of member addresses that
the shape rules reference; adding a port to a group adds its addresses.

Neutron behaviour kept: stateful (established/related accepted, invalid dropped),
default deny both ways for a port with port security, ARP/ND/DHCP-client allowed,
RA and DHCP-server replies from ports dropped, anti-spoofing of MAC, IPs and ARP
(allowed_address_pairs: IP or CIDR with optional MAC, plus the EUI-64 link-local of
each allowed MAC), ``port_security_enabled=false`` and ``network:*`` device owners
bypass everything. When permissions shrink (rule removed, member leaves a remote
group, port leaves a group) the conntrack entries of the affected ports' flows are
deleted in their zone, so open connections are re-checked (Neutron does the same).

Limits (documented, deliberate): allowed_address_pairs given as a CIDR are enforced
by anti-spoofing but are not members of remote-group sets (hash sets hold hosts);
remote_address_group_id is not supported (such a rule allows nothing).

Use: call :meth:`SecurityGroups.sync` first after a start (it rebuilds atomically in
one transaction); then the incremental verbs, each one nft transaction. If an
incremental transaction is refused, the realizer rebuilds from what it was told.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import logging
import re
import socket
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Union

from netbay.dataplane import links, netns
from netbay.dataplane.names import Names
from netbay.dataplane.nft import Nft, NftError

__all__ = ["SecurityGroups", "TABLE", "MAX_MARK", "MAX_ZONE"]

log = logging.getLogger(__name__)

TABLE = "nb_sg"
MAX_MARK = 0xFFFF          # port marks live in the low 16 bits, egress copy in the high 16
MAX_ZONE = 0xFFFF
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


def _jump(chain: str) -> dict:
    return {"jump": {"target": chain}}


def _set_mark(value: Any) -> dict:
    return {"mangle": {"key": _meta("mark"), "value": value}}


def _concat(items: list) -> Any:
    return items[0] if len(items) == 1 else {"concat": items}


def _obj(kind: str, family: str, **body: Any) -> dict:
    return {kind: {"family": family, "table": TABLE, **body}}


def _rule(family: str, chain: str, expr: list) -> dict:
    return {"add": _obj("rule", family, chain=chain, expr=expr)}


def _nfproto(fam: int) -> dict:
    return _match(_meta("nfproto"), "ipv4" if fam == 4 else "ipv6")


def _ipproto(fam: int) -> str:
    return "ip" if fam == 4 else "ip6"


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

    def hosts(self, fam: int) -> list[str]:
        """Addresses that make this port a member of its groups (remote-group sets)."""
        out = [str(n.network_address) for n in self.fixed if n.version == fam]
        out += [str(n.network_address) for _, n in self.pairs
                if n.version == fam and n.num_addresses == 1]
        return out

    def nets(self) -> list[IPNet]:
        return list(self.fixed) + [n for _, n in self.pairs]


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
    net_id = port.get("network_id")
    return _Port(id=pid, tap=Names.tap(pid), mark=mark, zone=zone, secured=secured, mac=mac,
                 groups=groups, fixed=tuple(fixed), pairs=tuple(pairs),
                 bridge=Names.bridge(net_id) if isinstance(net_id, str) and net_id else None)


@dataclass(frozen=True)
class _Shape:
    """One rule of a group chain and its set: what a family of Neutron rules looks like."""
    direction: str    # "i" ingress | "e" egress
    family: int       # 4 | 6
    remote: str       # "" any | "n<len>" prefix | "g<group id>" remote group
    kind: str         # "a" any protocol | "p" protocol | "t<k>" port block 2**k | "c" icmp type | "cc" type+code

    def set_name(self, group: str) -> str:
        return f"{self.direction}{self.family}_{group}_{self.remote or 'x'}_{self.kind}"


Atom = tuple[_Shape, tuple]


@dataclass(frozen=True)
class _Rule:
    id: str
    group: str
    atoms: tuple[Atom, ...]
    direction: str
    family: int
    prefix: IPNet | None
    remote_group: str | None


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
    """A Neutron rule as the elements it adds (None: it allows nothing here)."""
    rid = _check_id("security group rule", rule.get("id"))
    gid = _check_id("security group", group or rule.get("security_group_id"))
    direction = {"ingress": "i", "egress": "e"}.get(rule.get("direction"))
    fam = {"IPv4": 4, "IPv6": 6}.get(rule.get("ethertype") or "IPv4")
    if direction is None or fam is None:
        raise ValueError(f"rule {rid}: bad direction/ethertype {rule.get('direction')!r}/"
                         f"{rule.get('ethertype')!r}")
    proto = _protocol(rule.get("protocol"), fam)
    remote_group = rule.get("remote_group_id")
    prefix = None
    if remote_group:
        remote = "g" + _check_id("remote security group", remote_group)
        base: list = []
    elif rule.get("remote_address_group_id"):
        log.warning("rule %s: remote_address_group_id is not supported; it allows nothing", rid)
        return None
    else:
        remote, base = "", []
        if rule.get("remote_ip_prefix"):
            prefix = ipaddress.ip_network(rule["remote_ip_prefix"], strict=False)
            if prefix.version != fam:
                log.warning("rule %s: prefix %s does not match %s; it allows nothing",
                            rid, prefix, rule.get("ethertype"))
                return None
            if prefix.prefixlen:
                remote, base = f"n{prefix.prefixlen}", [str(prefix.network_address)]
    lo, hi = rule.get("port_range_min"), rule.get("port_range_max")
    if proto is None:
        pieces = [("a", [])]
    elif proto == ICMP[fam] and lo is not None:
        pieces = [("c", [int(lo)])] if hi is None else [("cc", [int(lo), int(hi)])]
    elif proto in PORT_PROTOCOLS and lo is not None:
        lo, hi = int(lo), int(hi if hi is not None else lo)
        if not 0 <= lo <= hi <= 65535:
            raise ValueError(f"rule {rid}: bad port range {lo}-{hi}")
        if lo <= 1 and hi == 65535:
            pieces = [("p", [proto])]
        else:
            pieces = [(f"t{k}", [proto, start]) for start, k in _port_blocks(lo, hi)]
    else:
        pieces = [("p", [proto])]
    atoms = []
    for kind, vals in pieces:
        key = tuple(base + vals) or ("ipv4" if fam == 4 else "ipv6",)
        atoms.append((_Shape(direction, fam, remote, kind), key))
    return _Rule(rid, gid, tuple(atoms), direction, fam, prefix,
                 remote_group if remote_group else None)


def _shape_expr(shape: _Shape, group: str) -> tuple[list, list[str]]:
    """(rule expressions, set key types) of ``shape`` in ``group``'s chain."""
    fam = shape.family
    ip = _ipproto(fam)
    peer = _pl(ip, "saddr" if shape.direction == "i" else "daddr")
    exprs: list = [_nfproto(fam)]
    key: list = []
    types: list[str] = []
    if shape.remote.startswith("g"):
        exprs.append(_match(peer, f"@m{fam}_{shape.remote[1:]}"))
    elif shape.remote.startswith("n"):
        plen, maxlen = int(shape.remote[1:]), 32 if fam == 4 else 128
        mask = ipaddress.ip_network(f"{'0.0.0.0' if fam == 4 else '::'}/{plen}").netmask
        key.append(peer if plen == maxlen else {"&": [peer, str(mask)]})
        types.append("ipv4_addr" if fam == 4 else "ipv6_addr")
    k = shape.kind
    if k == "p":
        key.append(_meta("l4proto"))
        types.append("inet_proto")
    elif k.startswith("t"):
        bits = int(k[1:])
        dport = _pl("th", "dport")
        key += [_meta("l4proto"), dport if bits == 0 else {"&": [dport, (0xFFFF << bits) & 0xFFFF]}]
        types += ["inet_proto", "inet_service"]
    elif k in ("c", "cc"):
        icmp = "icmp" if fam == 4 else "icmpv6"
        key.append(_pl(icmp, "type"))
        types.append(f"{icmp}_type")
        if k == "cc":
            key.append(_pl(icmp, "code"))
            types.append(f"{icmp}_code")
    if not key:
        key, types = [_meta("nfproto")], ["nf_proto"]
    exprs += [_match(_concat(key), "@" + shape.set_name(group)), {"accept": None}]
    return exprs, types


# --- the per-port objects ---------------------------------------------------------------

_ND_OUT = [131, 132, 133, 135, 136, 143]        # MLD report/done, RS, NS, NA, MLDv2 report
_ND_IN = [130, 131, 132, 134, 135, 136, 143]    # + MLD query, RA


def _common_chains() -> dict[str, list[list]]:
    """Rules every filtered port starts with (Neutron's ND/DHCP/conntrack prologue)."""
    v4, v6 = _nfproto(4), _nfproto(6)
    icmp6 = _pl("icmpv6", "type")

    def udp(sport: int, dport: int) -> list:
        return [_match(_meta("l4proto"), "udp"), _match(_pl("udp", "sport"), sport),
                _match(_pl("udp", "dport"), dport)]

    est = [_match(_ct_state(), ["established", "related"], "in"), {"accept": None}]
    inv = [_match(_ct_state(), "invalid", "in"), {"drop": None}]
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


def _ct_state() -> dict:
    return {"ct": {"key": "state"}}


def _disjoint(entries: Iterable[tuple[str, IPNet]]) -> list[tuple[str, IPNet]]:
    """Drop (mac, net) entries covered by another one with the same MAC (an anonymous
    interval set refuses overlapping elements)."""
    uniq = sorted(set(entries), key=lambda e: (e[0], e[1].version, e[1].prefixlen))
    out: list[tuple[str, IPNet]] = []
    for mac, net in uniq:
        if not any(m == mac and n.version == net.version and net.subnet_of(n)  # type: ignore[arg-type]
                   for m, n in out):
            out.append((mac, net))
    return out


def _elem(mac: str, net: IPNet) -> dict:
    addr: Any = (str(net.network_address) if net.num_addresses == 1
                 else {"prefix": {"addr": str(net.network_address), "len": net.prefixlen}})
    return {"concat": [mac, addr]}


def _spoof_rules(p: _Port) -> list[list]:
    """The bridge-family anti-spoofing chain of a filtered port (return = allowed)."""
    macs = sorted({p.mac} | {m for m, _ in p.pairs})
    mac_set = {"set": macs}
    esrc = _pl("ether", "saddr")
    etype = _pl("ether", "type")
    v4 = _disjoint([(p.mac, n) for n in p.fixed if n.version == 4]
                   + [(m, n) for m, n in p.pairs if n.version == 4])
    v6 = _disjoint([(p.mac, n) for n in p.fixed if n.version == 6]
                   + [(m, n) for m, n in p.pairs if n.version == 6]
                   + [(m, _link_local(m)) for m in macs])
    rules: list[list] = []
    if v4:
        s4 = {"set": [_elem(m, n) for m, n in v4]}
        rules.append([_match(etype, "ip"),
                      _match({"concat": [esrc, _pl("ip", "saddr")]}, s4), {"return": None}])
        rules.append([_match(etype, "arp"),
                      _match({"concat": [esrc, _pl("arp", "saddr ip")]}, s4),
                      _match({"concat": [_pl("arp", "saddr ether"), _pl("arp", "saddr ip")]}, s4),
                      {"return": None}])
    rules.append([_match(etype, "ip"), _match(esrc, mac_set), _match(_pl("ip", "saddr"), "0.0.0.0"),
                  _match(_pl("ip", "protocol"), "udp"), _match(_pl("udp", "sport"), 68),
                  _match(_pl("udp", "dport"), 67), {"return": None}])   # DHCP discover
    s6 = {"set": [_elem(m, n) for m, n in v6]}
    rules.append([_match(etype, "ip6"),
                  _match({"concat": [esrc, _pl("ip6", "saddr")]}, s6), {"return": None}])
    rules.append([_match(etype, "ip6"), _match(esrc, mac_set), _match(_pl("ip6", "saddr"), "::"),
                  _match(_pl("ip6", "nexthdr"), "ipv6-icmp"),
                  _match(_pl("icmpv6", "type"), {"set": [131, 135, 143]}),
                  {"return": None}])                                     # DAD and MLD from ::
    rules.append([_match(etype, {"set": ["ip", "ip6", "arp"]}), {"drop": None}])
    rules.append([_match(esrc, mac_set), {"return": None}])
    rules.append([{"drop": None}])
    return rules


@dataclass(frozen=True)
class _PortFacts:
    """Everything a port puts in the kernel, as comparable facts."""
    elems: frozenset[tuple[str, str, Any, Any]]        # (family, map, key, value)
    chains: Mapping[tuple[str, str], tuple[str, ...]]  # (family, chain) -> rules (JSON text)
    members: frozenset[tuple[str, int, str]]           # (group, fam, address)
    groups: frozenset[str]                             # groups whose chains it jumps to
    zones: frozenset[int]
    bridge_zone: tuple[str, int] | None


def _port_facts(p: _Port) -> _PortFacts:
    elems: set[tuple[str, str, Any, Any]] = {("bridge", "port_mark", p.tap, p.mark)}
    chains: dict[tuple[str, str], tuple[str, ...]] = {}
    zones = frozenset({p.zone} if p.zone else ())
    if p.zone:
        elems.add(("inet", "port_zone", p.mark, f"zone_{p.zone}"))
    if p.secured:
        elems |= {("bridge", "spoof", p.tap, f"ps_{p.id}"), ("bridge", "out", p.tap, f"po_{p.id}"),
                  ("inet", "egress", p.mark, f"pe_{p.id}"),
                  ("inet", "ingress", p.mark << 16, f"pi_{p.id}")}

        def enc(rules: list[list]) -> tuple[str, ...]:
            return tuple(json.dumps(r, separators=(",", ":")) for r in rules)

        chains[("bridge", f"ps_{p.id}")] = enc(_spoof_rules(p))
        chains[("bridge", f"po_{p.id}")] = enc([[_set_mark({"|": [_meta("mark"), p.mark << 16]})]])
        for d, common in (("e", "egress_common"), ("i", "ingress_common")):
            chains[("inet", f"p{d}_{p.id}")] = enc(
                [[_jump(common)]] + [[_jump(f"g{d}_{g}")] for g in p.groups] + [[{"drop": None}]])
    members = frozenset((g, fam, a) for g in p.groups for fam in (4, 6) for a in p.hosts(fam))
    return _PortFacts(frozenset(elems), chains, members,
                      frozenset(p.groups) if p.secured else frozenset(), zones,
                      (p.bridge, p.zone) if p.bridge and p.zone else None)


# --- transactions ------------------------------------------------------------------------

class _Tx:
    """One nft transaction, assembled in phases so that references resolve: objects are
    created first, rules next, then element deletes and adds, and deletions of what is
    no longer referenced last (port chains before group chains before sets)."""

    PHASES = ("create", "rules", "del_elems", "add_elems", "del_port_chains",
              "del_group_chains", "del_sets", "del_misc")

    def __init__(self) -> None:
        self.cmds: dict[str, list[dict]] = {p: [] for p in self.PHASES}
        self.kills: list[_Kill] = []

    def add(self, phase: str, cmd: dict) -> None:
        self.cmds[phase].append(cmd)

    def elem(self, add: bool, family: str, name: str, key: Any, value: Any = None,
             comment: str | None = None) -> None:
        if value is None or not add:
            e: Any = key
        else:
            data = {"jump": {"target": value}} if isinstance(value, str) else value
            e = [key, data]
        if comment is not None and add:
            e = {"elem": {"val": key, "comment": comment}} if value is None else \
                [{"elem": {"val": key, "comment": comment}}, e[1]]
        verb = "add" if add else "delete"
        self.add("add_elems" if add else "del_elems",
                 {verb: _obj("element", family, name=name, elem=[e])})

    def commands(self) -> list[dict]:
        return [c for p in self.PHASES for c in self.cmds[p]]

    def __bool__(self) -> bool:
        return any(self.cmds.values()) or bool(self.kills)


@dataclass(frozen=True)
class _Kill:
    """Conntrack entries to delete: in ``zone``, original direction from ``src`` to ``dst``
    (None: any address)."""
    zone: int
    src: frozenset[IPNet] | None
    dst: frozenset[IPNet] | None


@dataclass
class _Group:
    id: str
    known: bool = False                      # ensured (vs only referenced)
    made: bool = False                       # chains and member sets exist in the kernel
    rules: dict[str, _Rule] = field(default_factory=dict)
    shapes: set[_Shape] = field(default_factory=set)
    elems: Counter = field(default_factory=Counter)        # (shape, key) -> rules using it
    ports: set[str] = field(default_factory=set)           # filtered ports jumping here
    members: dict[int, Counter] = field(default_factory=lambda: {4: Counter(), 6: Counter()})
    member_ports: set[str] = field(default_factory=set)
    remote_users: Counter = field(default_factory=Counter)  # group -> shapes using our sets


# --- the realizer ------------------------------------------------------------------------

class SecurityGroups:
    """Neutron security groups of the ports of one fabric namespace.

    Inputs are plain Neutron JSON (dicts). Ports carry the ``mark`` (1..65535, unique
    per port, chosen by the agent) and ``zone`` (conntrack zone of the port's network).
    """

    def __init__(self, fabric_ns: str, *, nft: Nft | None = None) -> None:
        self.ns = fabric_ns
        self._nft = nft
        self._ports: dict[str, _Port] = {}
        self._facts: dict[str, _PortFacts] = {}
        self._groups: dict[str, _Group] = {}
        self._rule_group: dict[str, str] = {}
        self._desired_groups: dict[str, Mapping[str, Any]] = {}
        self._zones: Counter = Counter()
        self._bridge_zones: Counter = Counter()
        self._built = False
        self._brnf = False

    # -- public verbs -----------------------------------------------------------------

    def sync(self, ports: Iterable[tuple[Mapping[str, Any], int, int]],
             groups: Iterable[Mapping[str, Any]]) -> None:
        """Make the kernel hold exactly ``ports`` (``(port, mark, zone)``) and ``groups``:
        rebuilt in one nft transaction (traffic sees the old or the new ruleset)."""
        parsed = [_parse_port(p, m, z) for p, m, z in ports]
        gs = {_check_id("security group", g.get("id")): g for g in groups}
        for g in gs.values():
            self._parse_rules(g)  # validate before touching anything
        self._rebuild(parsed, gs)

    def ensure_port(self, port: Mapping[str, Any], mark: int, zone: int) -> None:
        p = _parse_port(port, mark, zone)
        old = self._ports.get(p.id)
        if old == p and self._built:
            return
        self._apply(lambda tx: self._port_tx(tx, p.id, p))

    def remove_port(self, port_id: str) -> None:
        if port_id not in self._ports:
            return
        self._apply(lambda tx: self._port_tx(tx, port_id, None))

    def ensure_group(self, group: Mapping[str, Any]) -> None:
        """Ensure a group and exactly its ``security_group_rules`` (rules are immutable in
        Neutron: compared by id)."""
        gid = _check_id("security group", group.get("id"))
        rules = self._parse_rules(group)
        self._desired_groups[gid] = group
        self._apply(lambda tx: self._group_tx(tx, gid, rules))

    def remove_group(self, group_id: str) -> None:
        if group_id not in self._groups and group_id not in self._desired_groups:
            return
        self._desired_groups.pop(group_id, None)
        self._apply(lambda tx: self._group_tx(tx, group_id, None))

    def ensure_rule(self, rule: Mapping[str, Any]) -> None:
        """Add one rule (its ``security_group_id`` names the group): element adds only."""
        r = _parse_rule(rule)
        rid = _check_id("security group rule", rule.get("id"))
        gid = _check_id("security group", rule.get("security_group_id"))
        self._remember_rule(gid, rule, add=True)
        self._apply(lambda tx: self._rule_tx(tx, gid, rid, r))

    def remove_rule(self, rule_id: str) -> None:
        """Remove one rule by id: element deletes, and its flows' conntrack entries."""
        gid = self._rule_group.get(rule_id)
        if gid is None:
            return
        self._remember_rule(gid, {"id": rule_id}, add=False)
        self._apply(lambda tx: self._rule_tx(tx, gid, rule_id, None))

    def observed(self) -> set[str]:
        """Ids of the ports present in the kernel (element comments of ``port_mark``)."""
        nft = self._ctx()
        try:
            elems = nft.list_set("bridge", TABLE, "port_mark")
        except NftError:
            return set()
        out = set()
        for e in elems:
            key = e[0] if isinstance(e, list) else e
            if isinstance(key, dict) and "elem" in key and key["elem"].get("comment"):
                out.add(key["elem"]["comment"])
        return out

    def observed_groups(self) -> set[str]:
        """Ids of the groups whose chains exist in the kernel."""
        try:
            objs = self._ctx().run([{"list": {"chains": {"family": "inet"}}}])
        except NftError:
            return set()
        return {o["chain"]["name"][3:] for o in Nft._objects(objs)
                if "chain" in o and o["chain"].get("table") == TABLE
                and o["chain"]["name"].startswith("gi_")}

    def close(self) -> None:
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
            for key in ("net.bridge.bridge-nf-call-iptables", "net.bridge.bridge-nf-call-ip6tables"):
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

    def _remember_rule(self, gid: str, rule: Mapping[str, Any], add: bool) -> None:
        """Keep the desired group (the base of a rebuild) in step with single-rule verbs."""
        g = dict(self._desired_groups.get(gid) or {"id": gid, "security_group_rules": []})
        rules = [r for r in g.get("security_group_rules") or () if r.get("id") != rule["id"]]
        if add:
            rules.append(dict(rule))
        g["security_group_rules"] = rules
        self._desired_groups[gid] = g

    def _apply(self, build: Any) -> None:
        """Run one incremental change; on refusal, rebuild from the desired state."""
        self._bridge_netfilter()
        if not self._built:
            self._rebuild([p for p in self._ports.values()], dict(self._desired_groups),
                          then=build)
            return
        tx = _Tx()
        build(tx)
        cmds = tx.commands()
        try:
            if cmds:
                self._ctx().run(cmds)
        except NftError as exc:
            log.error("security groups: incremental update refused, rebuilding: %s", exc)
            self._rebuild(list(self._ports.values()), dict(self._desired_groups))
        self._kill(tx.kills)

    def _rebuild(self, ports: list[_Port], groups: Mapping[str, Mapping[str, Any]],
                 then: Any = None) -> None:
        """Everything from scratch, in one transaction (delete and re-create both tables)."""
        self._bridge_netfilter()
        self._ports, self._facts, self._groups, self._rule_group = {}, {}, {}, {}
        self._zones, self._bridge_zones = Counter(), Counter()
        self._desired_groups = dict(groups)
        self._built = False
        tx = _Tx()
        for g in groups.values():
            self._group_tx(tx, g["id"], self._parse_rules(g))
        for p in ports:
            self._port_tx(tx, p.id, p)
        if then is not None:
            then(tx)
        cmds = self._base() + tx.commands()
        self._ctx().run(cmds)
        self._built = True

    @staticmethod
    def _base() -> list[dict]:
        """Drop and re-create both tables with the hooks, maps and common chains."""
        out: list[dict] = []
        for fam in ("bridge", "inet"):
            t = {"family": fam, "name": TABLE}
            out += [{"add": {"table": t}}, {"delete": {"table": t}}, {"add": {"table": t}}]

        def chain(fam: str, name: str, hook: str | None = None, prio: int = 0) -> dict:
            body: dict[str, Any] = {"name": name}
            if hook:
                body.update(type="filter", hook=hook, prio=prio, policy="accept")
            return {"add": _obj("chain", fam, **body)}

        def vmap(fam: str, name: str, key: str, data: str = "verdict") -> dict:
            return {"add": _obj("map", fam, name=name, type=key, map=data)}

        out += [vmap("bridge", "port_mark", "ifname", "mark"), vmap("bridge", "spoof", "ifname"),
                vmap("bridge", "out", "ifname"),
                vmap("inet", "egress", "mark"), vmap("inet", "ingress", "mark"),
                vmap("inet", "port_zone", "mark"), vmap("inet", "bridge_zone", "ifname")]
        out += [chain("bridge", "prerouting", "prerouting", -300),
                chain("bridge", "forward", "forward", -300),
                chain("inet", "prerouting", "prerouting", -300),
                chain("inet", "egress_hook", "forward", 0),
                chain("inet", "ingress_hook", "forward", 1)]
        out += [
            _rule("bridge", "prerouting", [_set_mark({"map": {"key": _meta("iifname"),
                                                              "data": "@port_mark"}})]),
            _rule("bridge", "prerouting", [{"vmap": {"key": _meta("iifname"), "data": "@spoof"}}]),
            _rule("bridge", "forward", [_set_mark({"&": [_meta("mark"), LOW]})]),
            _rule("bridge", "forward", [{"vmap": {"key": _meta("oifname"), "data": "@out"}}]),
            _rule("inet", "prerouting", [{"vmap": {"key": _meta("iifname"), "data": "@bridge_zone"}}]),
            _rule("inet", "prerouting", [{"vmap": {"key": {"&": [_meta("mark"), LOW]},
                                                   "data": "@port_zone"}}]),
            _rule("inet", "egress_hook", [{"vmap": {"key": {"&": [_meta("mark"), LOW]},
                                                    "data": "@egress"}}]),
            _rule("inet", "ingress_hook", [{"vmap": {"key": {"&": [_meta("mark"), HIGH]},
                                                     "data": "@ingress"}}]),
        ]
        for name, rules in _common_chains().items():
            out.append(chain("inet", name))
            out += [_rule("inet", name, r) for r in rules]
        return out

    # -- groups -----------------------------------------------------------------------

    def _group(self, gid: str) -> _Group:
        g = self._groups.get(gid)
        if g is None:
            g = self._groups[gid] = _Group(gid)
        return g

    def _make_group(self, tx: _Tx, g: _Group) -> None:
        """Chains gi_/ge_ and member sets m4_/m6_ (created on first reference)."""
        if g.made:
            return
        for d in "ie":
            tx.add("create", {"add": _obj("chain", "inet", name=f"g{d}_{g.id}")})
        for fam in (4, 6):
            tx.add("create", {"add": _obj("set", "inet", name=f"m{fam}_{g.id}",
                                           type="ipv4_addr" if fam == 4 else "ipv6_addr")})
            for addr in g.members[fam]:
                tx.elem(True, "inet", f"m{fam}_{g.id}", addr)
        g.made = True

    def _gc_group(self, tx: _Tx, gid: str) -> None:
        """Delete a group's kernel objects once nothing needs them."""
        g = self._groups.get(gid)
        if g is None or g.known or g.ports or g.remote_users or g.member_ports or g.rules:
            return
        if g.made:
            for d in "ie":
                tx.add("del_group_chains", {"delete": _obj("chain", "inet", name=f"g{d}_{gid}")})
            for shape in g.shapes:
                tx.add("del_sets", {"delete": _obj("set", "inet", name=shape.set_name(gid))})
            for fam in (4, 6):
                tx.add("del_sets", {"delete": _obj("set", "inet", name=f"m{fam}_{gid}")})
        del self._groups[gid]
        for shape in g.shapes:
            if shape.remote.startswith("g"):
                self._drop_remote_user(tx, shape.remote[1:], gid)

    def _drop_remote_user(self, tx: _Tx, remote: str, user: str) -> None:
        r = self._groups.get(remote)
        if r is None:
            return
        r.remote_users[user] -= 1
        if r.remote_users[user] <= 0:
            del r.remote_users[user]
        self._gc_group(tx, remote)

    def _group_tx(self, tx: _Tx, gid: str, rules: dict[str, _Rule | None] | None) -> None:
        g = self._group(gid)
        g.known = rules is not None
        want = {rid: r for rid, r in (rules or {}).items() if r is not None}
        for rid in [r for r in g.rules if r not in want]:
            self._rule_tx(tx, gid, rid, None)
        for rid, r in want.items():
            if rid not in g.rules or g.rules[rid] != r:
                if rid in g.rules:
                    self._rule_tx(tx, gid, rid, None)
                self._rule_tx(tx, gid, rid, r)
        if g.known:
            self._make_group(tx, g)
        else:
            self._gc_group(tx, gid)

    def _rule_tx(self, tx: _Tx, gid: str, rid: str, rule: _Rule | None) -> None:
        """Add (``rule``) or remove (None) one rule of group ``gid``: element updates, plus
        a shape rule and set the first time a shape is used."""
        g = self._group(gid)
        old = g.rules.pop(rid, None)
        if old is not None:
            self._rule_group.pop(rid, None)
            for shape, key in old.atoms:
                g.elems[(shape, key)] -= 1
                if g.elems[(shape, key)] <= 0:
                    del g.elems[(shape, key)]
                    tx.elem(False, "inet", shape.set_name(gid), _concat(list(key)))
            self._kill_rule(tx, g, old)
        if rule is None:
            self._gc_group(tx, gid)
            return
        self._make_group(tx, g)
        g.rules[rid] = rule
        self._rule_group[rid] = gid
        for shape, key in rule.atoms:
            if shape not in g.shapes:
                self._add_shape(tx, g, shape)
            g.elems[(shape, key)] += 1
            if g.elems[(shape, key)] == 1:
                tx.elem(True, "inet", shape.set_name(gid), _concat(list(key)))

    def _add_shape(self, tx: _Tx, g: _Group, shape: _Shape) -> None:
        if shape.remote.startswith("g"):
            r = self._group(shape.remote[1:])
            self._make_group(tx, r)
            r.remote_users[g.id] += 1
        exprs, types = _shape_expr(shape, g.id)
        tx.add("create", {"add": _obj("set", "inet", name=shape.set_name(g.id),
                                       type=types[0] if len(types) == 1 else types)})
        tx.add("rules", _rule("inet", f"g{shape.direction}_{g.id}", exprs))
        g.shapes.add(shape)

    # -- ports ------------------------------------------------------------------------

    def _port_tx(self, tx: _Tx, pid: str, p: _Port | None) -> None:
        """Move port ``pid`` from what it has in the kernel to ``p`` (None: remove it)."""
        old_p = self._ports.get(pid)
        old = self._facts.get(pid)
        new = _port_facts(p) if p is not None else None
        empty = _PortFacts(frozenset(), {}, frozenset(), frozenset(), frozenset(), None)
        o, n = old or empty, new or empty
        for gid in n.groups - o.groups:
            g = self._group(gid)
            self._make_group(tx, g)
            g.ports.add(pid)
        for zone in n.zones - o.zones:
            self._zones[zone] += 1
            if self._zones[zone] == 1:
                tx.add("create", {"add": _obj("chain", "inet", name=f"zone_{zone}")})
                tx.add("rules", _rule("inet", f"zone_{zone}",
                                      [{"mangle": {"key": {"ct": {"key": "zone"}}, "value": zone}}]))
        # chains: create, rewrite, delete
        for key, rules in n.chains.items():
            fam, name = key
            if key not in o.chains:
                tx.add("create", {"add": _obj("chain", fam, name=name)})
            elif o.chains[key] == rules:
                continue
            else:
                tx.add("rules", {"flush": _obj("chain", fam, name=name)})
            for r in rules:
                tx.add("rules", _rule(fam, name, json.loads(r)))
        for key in o.chains.keys() - n.chains.keys():
            tx.add("del_port_chains", {"delete": _obj("chain", key[0], name=key[1])})
        # map elements (an element whose value changes is deleted, then added)
        okeys = {(f, m, k): v for f, m, k, v in o.elems}
        nkeys = {(f, m, k): v for f, m, k, v in n.elems}
        for (f, m, k), v in okeys.items():
            if nkeys.get((f, m, k)) != v:
                tx.elem(False, f, m, k, v)
        for (f, m, k), v in nkeys.items():
            if okeys.get((f, m, k)) != v:
                tx.elem(True, f, m, k, v, comment=pid if m == "port_mark" else None)
        # remote-group members (refcounted: the same address may be on two networks)
        for gid, fam, addr in o.members - n.members:
            g = self._group(gid)
            g.members[fam][addr] -= 1
            if g.members[fam][addr] <= 0:
                del g.members[fam][addr]
                if g.made:
                    tx.elem(False, "inet", f"m{fam}_{gid}", addr)
        for gid, fam, addr in n.members - o.members:
            g = self._group(gid)
            self._make_group(tx, g)
            g.members[fam][addr] += 1
            if g.members[fam][addr] == 1 and g.made:
                tx.elem(True, "inet", f"m{fam}_{gid}", addr)
        old_groups = set(old_p.groups) if old_p else set()
        new_groups = set(p.groups) if p else set()
        for gid in new_groups - old_groups:
            self._group(gid).member_ports.add(pid)
        # bridge fallback zone
        if o.bridge_zone != n.bridge_zone:
            if o.bridge_zone:
                self._bridge_zones[o.bridge_zone] -= 1
                if self._bridge_zones[o.bridge_zone] <= 0:
                    del self._bridge_zones[o.bridge_zone]
                    tx.elem(False, "inet", "bridge_zone", o.bridge_zone[0],
                            f"zone_{o.bridge_zone[1]}")
            if n.bridge_zone:
                self._bridge_zones[n.bridge_zone] += 1
                if self._bridge_zones[n.bridge_zone] == 1:
                    br = n.bridge_zone[0]
                    if any(b == br for b, _ in self._bridge_zones if (b, _) != n.bridge_zone):
                        log.warning("bridge %s has ports in two zones; keeping the first", br)
                    else:
                        tx.elem(True, "inet", "bridge_zone", br, f"zone_{n.bridge_zone[1]}")
        # state, then what is no longer referenced
        if p is None:
            self._ports.pop(pid, None)
            self._facts.pop(pid, None)
        else:
            self._ports[pid] = p
            self._facts[pid] = n
        for zone in o.zones - n.zones:
            self._zones[zone] -= 1
            if self._zones[zone] <= 0:
                del self._zones[zone]
                if not any(z == zone for _, z in self._bridge_zones):
                    tx.add("del_misc", {"delete": _obj("chain", "inet", name=f"zone_{zone}")})
        self._kill_port(tx, old_p, p)
        for gid in old_groups - new_groups:
            g = self._groups.get(gid)
            if g is not None:
                g.member_ports.discard(pid)
        for gid in o.groups - n.groups:
            g = self._groups.get(gid)
            if g is not None:
                g.ports.discard(pid)
        for gid in (o.groups - n.groups) | (old_groups - new_groups):
            self._gc_group(tx, gid)

    # -- conntrack ----------------------------------------------------------------------

    def _kill_rule(self, tx: _Tx, g: _Group, rule: _Rule) -> None:
        """A removed rule: its group's filtered ports re-check their flows in that direction."""
        for pid in g.ports:
            p = self._ports.get(pid)
            if p is None or not p.zone:
                continue
            mine = frozenset(n for n in p.nets() if n.version == rule.family)
            peer = frozenset([rule.prefix]) if rule.prefix is not None else None
            if not mine:
                continue
            if rule.direction == "i":
                tx.kills.append(_Kill(p.zone, peer, mine))
            else:
                tx.kills.append(_Kill(p.zone, mine, peer))

    def _kill_port(self, tx: _Tx, old: _Port | None, new: _Port | None) -> None:
        """Permissions of and towards a port that shrank: delete the affected flows."""
        if old is None:
            return
        if new is not None and new.zone and new.secured and (
                not old.secured or set(old.groups) - set(new.groups)):
            mine = frozenset(new.nets())
            if mine:
                tx.kills += [_Kill(new.zone, mine, None), _Kill(new.zone, None, mine)]
        # As a remote-group member: flows between its lost addresses and the filtered
        # ports of every group whose rules name a group it was in.
        old_hosts = {n for n in old.nets() if n.num_addresses == 1}
        new_hosts = {n for n in new.nets() if n.num_addresses == 1} if new else set()
        for remote in old.groups:
            stays = new is not None and remote in new.groups
            lost = frozenset(old_hosts - new_hosts if stays else old_hosts)
            r = self._groups.get(remote)
            if not lost or r is None:
                continue
            for user in r.remote_users:
                ug = self._groups.get(user)
                if ug is None:
                    continue
                dirs = {x.direction for x in ug.rules.values() if x.remote_group == remote}
                for pid in ug.ports:
                    q = self._ports.get(pid)
                    if q is None or not q.zone or pid == old.id:
                        continue
                    theirs = frozenset(q.nets())
                    if "i" in dirs:
                        tx.kills.append(_Kill(q.zone, lost, theirs))
                    if "e" in dirs:
                        tx.kills.append(_Kill(q.zone, theirs, lost))

    def _kill(self, kills: list[_Kill]) -> None:
        if not kills:
            return
        try:
            _ct_delete(self.ns, kills)
        except Exception as exc:  # noqa: BLE001 - new flows are already refused; log, go on
            log.warning("security groups: could not delete conntrack entries in %s: %s",
                        self.ns, exc)


# --- conntrack (ctnetlink through pyroute2, socket opened inside the namespace) ---------

def _ct_delete(ns: str, kills: list[_Kill]) -> int:
    """Delete the conntrack entries ``kills`` describe; returns how many."""
    from pyroute2.netlink import NETLINK_NETFILTER
    from pyroute2.netlink.nfnetlink.nfctsocket import NFCTSocket

    by_zone: dict[int, list[_Kill]] = {}
    for k in kills:
        by_zone.setdefault(k.zone, []).append(k)
    with netns.entered(ns):
        if netns.in_home():
            raise PermissionError(f"namespace {ns!r} is the host's namespace")
        sk = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_NETFILTER)
    deleted = 0
    try:
        ct = NFCTSocket(nfgen_family=socket.AF_UNSPEC, use_socket=sk)
        try:
            for zone, ks in by_zone.items():
                doomed = []
                for msg in ct.dump(zone=zone):
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
                    if any(_hit(s, k.src) and _hit(d, k.dst) for k in ks):
                        doomed.append((msg["nfgen_family"], orig))
                for family, orig in doomed:
                    with contextlib.suppress(Exception):  # gone meanwhile
                        _ct_del_one(sk, family, orig, zone)
                        deleted += 1
        finally:
            with contextlib.suppress(Exception):
                ct.close()
    finally:
        sk.close()
    return deleted


def _hit(addr: ipaddress.IPv4Address | ipaddress.IPv6Address, nets: frozenset[IPNet] | None) -> bool:
    return nets is None or any(addr.version == n.version and addr in n for n in nets)


def _ct_del_one(sk: socket.socket, family: int, orig: Any, zone: int) -> None:
    from pyroute2.netlink import NLM_F_ACK, NLM_F_REQUEST
    from pyroute2.netlink.nfnetlink import NFNL_SUBSYS_CTNETLINK
    from pyroute2.netlink.nfnetlink.nfctsocket import IPCTNL_MSG_CT_DELETE, nfct_msg

    msg = nfct_msg()
    msg["nfgen_family"] = family
    msg["attrs"] = [["CTA_TUPLE_ORIG", {"attrs": orig["attrs"]}], ["CTA_ZONE", zone]]
    msg["header"]["type"] = (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_DELETE
    msg["header"]["flags"] = NLM_F_REQUEST | NLM_F_ACK
    msg["header"]["sequence_number"] = 1
    msg.encode()
    sk.send(msg.data)
    sk.settimeout(1.0)
    sk.recv(65536)  # the ack (or ENOENT if it expired meanwhile)
