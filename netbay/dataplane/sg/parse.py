"""Neutron's port and rule JSON, checked and reduced to what the tables need."""

from __future__ import annotations

import ipaddress
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from netbay.dataplane.names import Names
from netbay.dataplane.sg.nftjson import MAX_GROUPS, MAX_MARK, MAX_ZONE

log = logging.getLogger(__name__)

IPNet = ipaddress.IPv4Network | ipaddress.IPv6Network

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


def check_id(what: str, value: Any) -> str:
    if not isinstance(value, str) or not _ID_RE.match(value):
        raise ValueError(f"invalid {what} id {value!r}")
    return value


def parse_mac(value: Any) -> str:
    mac = str(value or "").lower()
    if not _MAC_RE.match(mac):
        raise ValueError(f"invalid MAC address {value!r}")
    return mac


def link_local(mac: str) -> ipaddress.IPv6Network:
    """The EUI-64 link-local address the kernel derives from ``mac`` (Neutron allows it)."""
    b = bytes.fromhex(mac.replace(":", ""))
    eui = bytes([b[0] ^ 0x02]) + b[1:3] + b"\xff\xfe" + b[3:]
    return ipaddress.IPv6Network(ipaddress.IPv6Address(b"\xfe\x80" + b"\0" * 6 + eui))


@dataclass(frozen=True)
class ParsedPort:
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


def parse_port(port: Mapping[str, Any], mark: int, zone: int) -> ParsedPort:
    pid = check_id("port", port.get("id"))
    if not isinstance(mark, int) or not 1 <= mark <= MAX_MARK:
        raise ValueError(f"port {pid}: mark {mark!r} outside 1..{MAX_MARK}")
    if not isinstance(zone, int) or not 0 <= zone <= MAX_ZONE:
        raise ValueError(f"port {pid}: zone {zone!r} outside 0..{MAX_ZONE}")
    mac = parse_mac(port.get("mac_address"))
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
        pairs.append((parse_mac(pair.get("mac_address") or mac), net))
    groups = tuple(dict.fromkeys(check_id("security group", g)
                                 for g in port.get("security_groups") or ()))
    if secured and len(groups) > MAX_GROUPS:
        raise ValueError(f"port {pid}: {len(groups)} security groups, at most {MAX_GROUPS}")
    net_id = port.get("network_id")
    return ParsedPort(id=pid, tap=Names.tap(pid), mark=mark, zone=zone, secured=secured, mac=mac,
                 groups=groups, fixed=tuple(fixed), pairs=tuple(pairs),
                 bridge=Names.bridge(net_id) if isinstance(net_id, str) and net_id else None)


@dataclass(frozen=True)
class ParsedRule:
    id: str
    group: str
    direction: str                               # "i" | "e"
    family: int                                  # 4 | 6
    prefix: IPNet | None                         # remote_ip_prefix (None: any)
    remote_group: str | None
    pieces: tuple[tuple[str, tuple], ...]        # (kind, protocol values): see Shape


def parse_protocol(value: Any, fam: int) -> int | None:
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


def port_blocks(lo: int, hi: int) -> list[tuple[int, int]]:
    """[lo, hi] as aligned power-of-two blocks: [(start, k)] with block size 2**k."""
    out = []
    while lo <= hi:
        k = (lo & -lo).bit_length() - 1 if lo else 16
        while k > 0 and lo + (1 << k) - 1 > hi:
            k -= 1
        out.append((lo, k))
        lo += 1 << k
    return out


def parse_rule(rule: Mapping[str, Any], group: str | None = None) -> ParsedRule | None:
    """A Neutron rule (None: it allows nothing here)."""
    rid = check_id("security group rule", rule.get("id"))
    gid = check_id("security group", group or rule.get("security_group_id"))
    direction = {"ingress": "i", "egress": "e"}.get(rule.get("direction") or "")
    fam = {"IPv4": 4, "IPv6": 6}.get(rule.get("ethertype") or "IPv4")
    if direction is None or fam is None:
        raise ValueError(f"rule {rid}: bad direction/ethertype {rule.get('direction')!r}/"
                         f"{rule.get('ethertype')!r}")
    proto = parse_protocol(rule.get("protocol"), fam)
    remote_group = rule.get("remote_group_id") or None
    prefix = None
    if remote_group:
        check_id("remote security group", remote_group)
    elif rule.get("remote_address_group_id"):   # expanded before (sg/addressgroups.py)
        log.warning("rule %s: remote_address_group_id not expanded; it allows nothing", rid)
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
            pieces = [(f"t{k}", (proto, start)) for start, k in port_blocks(lo, hi)]
    else:
        pieces = [("p", (proto,))]
    return ParsedRule(rid, gid, direction, fam, prefix, remote_group, tuple(pieces))
