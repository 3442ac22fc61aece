"""The router's nftables table, ``ip netbay-nat``: fixed rules, every fact a set or
map element (see :mod:`netbay.dataplane.router`), synced by element diff.

Besides NAT it keeps Neutron's address scope rules for IPv4 (IPv6's are in
:mod:`netbay.dataplane.l3.scope6`): a router does not forward between legs of different
address scopes (no scope being one of its own). ``scope_blocked`` holds the (in, out)
leg pairs that differ; a packet of a NATed connection (floating IP, port forwarding,
the replies of SNAT) passes all the same, and so does what leaves by the gateway while
SNAT is on, as in Neutron's L3 agent. Within one scope nothing is SNATed: the internal
subnets whose leg is in the external subnet's (non-empty) scope are ``scope_direct``,
and what they send out by the gateway leaves with its own source (Neutron's
``-o qg- -m connmark --mark <scope> -j ACCEPT`` in its ``snat`` chain); the outside
reaches them directly. A floating IP's SNAT comes first and is kept.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from netbay.dataplane.l3.spec import FloatingIP, Gateway, Leg, PortForward
from netbay.dataplane.nft import Nft, parse_prefix, prefix

TABLE = "netbay-nat"
FAMILY = "ip"
_TAG = "netbay-router/1"  # rule comments; a table without exactly these rules is rebuilt


_V4 = "ipv4_addr"
# A port forwarding's key: floating address . protocol . external port.
_PF_KEY = (_V4, "inet_proto", "inet_service")
# name -> (kind, key type, data type or None, flags)
_SETS: dict[str, tuple[str, str | tuple[str, ...], str | None, tuple[str, ...]]] = {
    "gateway_ifs": ("set", "ifname", None, ()),
    "gateway_snat": ("map", "ifname", _V4, ()),
    "internal_subnets": ("set", _V4, None, ("interval",)),
    # Internal subnets in the gateway's address scope: routed out as they are.
    "scope_direct": ("set", _V4, None, ("interval",)),
    "fip_dnat": ("map", _V4, _V4, ()),
    "fip_snat": ("map", _V4, _V4, ()),
    # Port forwardings: two maps of one key, the address and the port (libnftables 1.0.6
    # cannot make a map of concatenated data from JSON).
    "pf_addr": ("map", _PF_KEY, _V4, ()),
    "pf_port": ("map", _PF_KEY, "inet_service", ()),
    # Address scopes: (in leg, out leg) pairs whose scopes differ.
    "scope_blocked": ("set", ("ifname", "ifname"), None, ()),
}
# name -> (type, hook, priority)
_CHAINS = {"prerouting": ("nat", "prerouting", -100), "postrouting": ("nat", "postrouting", 100),
           "forward": ("filter", "forward", 0)}


def _payload(field_: str) -> dict:
    return {"payload": {"protocol": "ip", "field": field_}}


def _meta(key: str) -> dict:
    return {"meta": {"key": key}}


def _match(left: dict, right: Any, op: str = "==") -> dict:
    return {"match": {"op": op, "left": left, "right": right}}


def _lookup(key: dict, name: str) -> dict:
    return {"map": {"key": key, "data": "@" + name}}


_PF_LOOKUP = {"concat": [_payload("daddr"), _meta("l4proto"), {"payload": {"protocol": "th", "field": "dport"}}]}

# chain -> [(comment, expressions)], in order
_RULES: dict[str, list[tuple[str, list[dict]]]] = {
    "prerouting": [
        ("pf-dnat", [{"dnat": {"family": "ip", "addr": _lookup(_PF_LOOKUP, "pf_addr"),
                               "port": _lookup(_PF_LOOKUP, "pf_port")}}]),
        ("fip-dnat", [{"dnat": {"family": "ip", "addr": _lookup(_payload("daddr"), "fip_dnat")}}]),
    ],
    "postrouting": [
        ("fip-snat", [_match(_meta("oifname"), "@gateway_ifs"),
                      {"snat": {"family": "ip", "addr": _lookup(_payload("saddr"), "fip_snat")}}]),
        ("scope-direct", [_match(_meta("oifname"), "@gateway_ifs"),
                          _match(_payload("saddr"), "@scope_direct"), {"accept": None}]),
        ("snat", [_match(_payload("saddr"), "@internal_subnets"),
                  {"snat": {"family": "ip", "addr": _lookup(_meta("oifname"), "gateway_snat")}}]),
        ("hairpin", [_match({"ct": {"key": "status"}}, "dnat", op="in"),
                     _match(_payload("saddr"), "@internal_subnets"),
                     {"masquerade": None}]),
    ],
    "forward": [
        ("scope-dnat", [_match({"ct": {"key": "status"}}, "dnat", op="in"), {"accept": None}]),
        ("scope-snat", [_match({"ct": {"key": "status"}}, "snat", op="in"), {"accept": None}]),
        ("scope", [_match({"concat": [_meta("iifname"), _meta("oifname")]}, "@scope_blocked"), {"drop": None}]),
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
        body: dict[str, Any] = {**t, "name": name, "type": list(key) if isinstance(key, tuple) else key}
        if data:
            body["map"] = data
        if flags:
            body["flags"] = list(flags)
        cmds.append({"add": {kind: body}})
    for name, (kind, hook, prio) in _CHAINS.items():
        cmds.append({"add": {"chain": {**t, "name": name, "type": kind, "hook": hook,
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
    if name in ("internal_subnets", "scope_direct"):
        return prefix(e)
    if name in ("pf_addr", "pf_port"):
        return [{"concat": list(e[0])}, e[1]]
    if name == "scope_blocked":
        return {"concat": list(e)}
    return list(e) if isinstance(e, tuple) else e


def _parse_elem(name: str, raw: Any) -> Any:
    """An element as nft prints it -> our canonical form; ValueError if unexpected."""
    if name in ("internal_subnets", "scope_direct"):
        return parse_prefix(raw)
    if name in ("pf_addr", "pf_port"):
        key, data = raw
        address, proto, port = key["concat"]
        return ((address, proto, int(port)), data if name == "pf_addr" else int(data))
    if name == "scope_blocked":
        inner, outer = raw["concat"]
        return (inner, outer)
    if _SETS[name][2] is None:
        if isinstance(raw, str):
            return raw
        raise ValueError(raw)
    if isinstance(raw, list) and len(raw) == 2 and all(isinstance(x, str) for x in raw):
        return (raw[0], raw[1])
    raise ValueError(raw)


def _observed_table(nft: Nft) -> dict[str, set] | None:
    """The table's elements if its structure is exactly ours, else None (rebuild)."""
    objs = nft.list_table(FAMILY, TABLE)
    if objs is None:
        return None
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
                key = body.get("type")
                if spec is None or (kind, tuple(key) if isinstance(key, list) else key, body.get("map"),
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
    except (ValueError, KeyError, TypeError, StopIteration):
        return None
    if set(sets) != set(_SETS):
        return None
    if chains != {n: (k, h, p, "accept") for n, (k, h, p) in _CHAINS.items()}:
        return None
    if rules != {c: [f"{_TAG} {cm}" for cm, _ in rs] for c, rs in _RULES.items()}:
        return None
    return sets


def desired_elements(gateway: Gateway | None, interfaces: Sequence[Leg],
                     floating_ips: Sequence[FloatingIP], enable_snat: bool,
                     port_forwards: Sequence[PortForward] = ()) -> dict[str, set]:
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
    for pf in port_forwards:
        key = (str(ipaddress.IPv4Address(pf.floating_ip_address)), pf.protocol, int(pf.external_port))
        want["pf_addr"].add((key, str(ipaddress.IPv4Address(pf.internal_ip))))
        want["pf_port"].add((key, int(pf.internal_port)))
    want["scope_blocked"] = _scope_blocked(gateway, interfaces, enable_snat)
    want["scope_direct"] = _scope_direct(gateway, interfaces)
    return want


def _scope_direct(gateway: Gateway | None, interfaces: Sequence[Leg]) -> set[str]:
    """The IPv4 subnets of the legs in the gateway's address scope (none when the
    external subnet has no scope: unscoped traffic is SNATed, as in Neutron)."""
    if gateway is None or not gateway.scope:
        return set()
    nets = [ipaddress.ip_interface(a).network for leg in interfaces if leg.scope == gateway.scope
            for a in leg.addresses]
    return {str(n) for n in ipaddress.collapse_addresses(n for n in nets if n.version == 4)}


def _scope_blocked(gateway: Gateway | None, interfaces: Sequence[Leg], enable_snat: bool) -> set[tuple[str, str]]:
    """The (in, out) leg pairs of different address scopes: between internal legs both
    ways, from the gateway inwards, and outwards too when nothing is SNATed."""
    out = {(a.ifname, b.ifname) for a in interfaces for b in interfaces
           if a.ifname != b.ifname and a.scope != b.scope}
    if gateway is not None:
        for leg in interfaces:
            if leg.scope != gateway.scope:
                out.add((gateway.ifname, leg.ifname))
                if not enable_snat:
                    out.add((leg.ifname, gateway.ifname))
    return out


def _gateway_v4(gateway: Gateway) -> str | None:
    for a in gateway.addresses:
        iface = ipaddress.ip_interface(a)
        if iface.version == 4:
            return str(iface.ip)
    return None


def sync_nft(ns: str, want: dict[str, set]) -> set[str]:
    """Make the table hold ``want``; returns the floating IPs whose mapping went away
    (their connections are forgotten by the caller) — a floating IP's, or the last of
    its port forwardings."""
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
        forwarding = {key[0] for key, _ in want["pf_addr"]}
        return {floating for floating, _ in gone["fip_dnat"]} | \
            {key[0] for key, _ in gone["pf_addr"] if key[0] not in forwarding}
