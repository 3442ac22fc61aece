"""A load balancer's nftables table (the ``nftables`` provider): one DNAT rule per
listener over an anonymous map of its pool's member slots, and the full-proxy SNAT.
See :mod:`netbay.dataplane.loadbalancer` for the table's shape.

One rule per listener (TCP; HTTP is forwarded as TCP; UDP), its pool's members as
the elements of an anonymous map keyed by ``numgen inc`` (``ROUND_ROBIN``) or a
hash of the client address (``SOURCE_IP``: a client sticks to one member while the
pool's membership is unchanged). Weights repeat a member's slot (divided by their
greatest common divisor, interleaved); weight 0, admin-down members and members the
health monitor found down have no slot. A listener whose pool has no slot gets no
rule: the VIP's own stack answers with a reset (TCP) or port unreachable (UDP).

(Named maps would let a membership change be an element update, but the map's
size is in the rule (``mod N``), and this libnftables (1.0.6) cannot declare a map
keyed by ``numgen`` in JSON. The table is small, so it is rebuilt in one atomic
transaction when what it should hold changes — connections keep their translation
in conntrack — and not touched when nothing changed.)

``LEAST_CONNECTIONS`` (every listener in the table, as the amphora's LVS ``lc``): the
listener's rule DNATs through two named maps keyed by its ``ct mark`` (set just
before in the same rule), ``lc-addr`` and ``lc-port``, whose element for the
listener is the member with the fewest live flows; ``lb/leastconn.py`` counts them
from conntrack events and replaces that element when the least-loaded member changes.
(One map of ``addr . port`` would do, but this libnftables cannot declare a
concatenated map type in JSON.) The elements are not part of the table's content
as compared between refills: a refill puts back what the counts say then.
"""

from __future__ import annotations

import ipaddress
import math
import zlib
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from netbay.dataplane import lbstats
from netbay.dataplane.lb.spec import HAPROXY, ListenerSpec, LoadBalancerSpec, MemberSpec, PoolSpec

TABLE = "netbay-lb"
FAMILY = "ip"     # an IPv4 VIP's table; an IPv6 VIP's is ``ip6`` (:func:`table_family`)
_TAG = "netbay-lb/1"
LEAST_CONNECTIONS = "LEAST_CONNECTIONS"
LC_ADDR, LC_PORT = "lc-addr", "lc-port"   # the least-connections maps: listener mark -> member


def slots(members: Iterable[MemberSpec]) -> list[MemberSpec]:
    """Map slots for ``members`` (already filtered): each repeated weight/gcd times,
    interleaved (m1 m2 m3 m1 m3 …) so that round robin spreads evenly."""
    ms = [m for m in members if m.weight > 0]
    if not ms:
        return []
    g = 0
    for m in ms:
        g = math.gcd(g, m.weight)
    counts = [m.weight // g for m in ms]
    out: list[MemberSpec] = []
    for rnd in range(max(counts)):
        out.extend(m for m, c in zip(ms, counts) if c > rnd)
    return out


def serving(members: Iterable[MemberSpec]) -> list[MemberSpec]:
    """The slots of the members that take traffic: the primaries, or, when none of them
    can, the backup members (as HAProxy and the amphora's LVS use ``backup`` servers)."""
    ms = list(members)
    return slots(m for m in ms if not m.backup) or slots(m for m in ms if m.backup)


def _payload(proto: str, fld: str) -> dict:
    return {"payload": {"protocol": proto, "field": fld}}


def _match(left: dict, right: Any, op: str = "==") -> dict:
    return {"match": {"op": op, "left": left, "right": right}}


def table_family(spec: LoadBalancerSpec) -> str:
    """The nftables family of ``spec``'s table: ``ip`` for an IPv4 VIP, ``ip6`` for an
    IPv6 one (Octavia's VIP and members are of one family; members of the other are left out)."""
    return "ip6" if version(spec.vip_address) == 6 else FAMILY


def _dnat_rule(spec: LoadBalancerSpec, listener: ListenerSpec, pool: PoolSpec,
               members: list[MemberSpec]) -> dict:
    n = len(members)
    fam = table_family(spec)
    if pool.algorithm == LEAST_CONNECTIONS:
        mark = {"ct": {"key": "mark"}}
        nat: dict = {"family": fam, "addr": {"map": {"key": mark, "data": f"@{LC_ADDR}"}},
                     "port": {"map": {"key": mark, "data": f"@{LC_PORT}"}}}
        return _rule(spec, listener, nat)
    seed = zlib.crc32(pool.id.encode()) & 0xFFFFFFFF
    if pool.algorithm == "SOURCE_IP":
        key: dict = {"jhash": {"expr": _payload(fam, "saddr"), "mod": n, "seed": seed}}
    elif pool.algorithm == "SOURCE_IP_PORT":   # OVN's one algorithm: a flow sticks to one member
        key = {"jhash": {"expr": {"concat": [_payload(fam, "saddr"), _payload(listener.protocol, "sport")]},
                         "mod": n, "seed": seed}}
    else:
        key = {"numgen": {"mode": "inc", "mod": n, "offset": 0}}
    data = {"set": [[i, {"concat": [m.address, m.port]}] for i, m in enumerate(members)]}
    return _rule(spec, listener, {"family": fam, "addr": {"map": {"key": key, "data": data}}})


def _rule(spec: LoadBalancerSpec, listener: ListenerSpec, nat: dict) -> dict:
    fam = table_family(spec)
    expr = [_match(_payload(fam, "daddr"), spec.vip_address),
            _match(_payload(listener.protocol, "dport"), listener.port),
            *lbstats.dnat_prefix(listener.id),
            {"dnat": nat}]
    return {"add": {"rule": {"family": fam, "table": TABLE, "chain": "prerouting", "expr": expr,
                             "comment": f"{_TAG} listener {listener.id}"}}}


def candidates(spec: LoadBalancerSpec, pool: PoolSpec, in_map: Callable[[PoolSpec, MemberSpec], bool]
               ) -> list[MemberSpec]:
    """The slots of ``pool``'s members that take traffic now (``in_map``: enabled, weight,
    health; of the VIP's family; backups only while no primary can)."""
    return serving(m for m in pool.members if in_map(pool, m) and version(m.address) == version(spec.vip_address))


def least_connections_maps(family: str) -> list[dict]:
    """The two maps a least-connections rule looks its member up in, emptied."""
    t = {"family": family, "table": TABLE}
    addr = "ipv6_addr" if family == "ip6" else "ipv4_addr"
    return [{"add": {"map": {**t, "name": LC_ADDR, "type": "mark", "map": addr}}},
            {"add": {"map": {**t, "name": LC_PORT, "type": "mark", "map": "inet_service"}}},
            {"flush": {"map": {**t, "name": LC_ADDR}}},
            {"flush": {"map": {**t, "name": LC_PORT}}}]


def least_connections_element(family: str, mark: int, member: MemberSpec, *, replace: bool) -> list[dict]:
    """Point a least-connections listener (its ``mark``) at ``member``; ``replace``: its
    element is there (a map element's data cannot be changed by adding it again)."""
    t = {"family": family, "table": TABLE}
    cmds: list[dict] = []
    if replace:
        cmds += [{"delete": {"element": {**t, "name": name, "elem": [mark]}}} for name in (LC_ADDR, LC_PORT)]
    return cmds + [{"add": {"element": {**t, "name": LC_ADDR, "elem": [[mark, member.address]]}}},
                   {"add": {"element": {**t, "name": LC_PORT, "elem": [[mark, member.port]]}}}]


def kernel_part(spec: LoadBalancerSpec) -> LoadBalancerSpec:
    """What the table serves: every listener (``nftables``), or those haproxy leaves to the
    kernel (UDP and SCTP: the amphora's LVS)."""
    if spec.driver != HAPROXY:
        return spec
    return replace(spec, listeners=tuple(li for li in spec.listeners if li.protocol != "tcp"))


def table_commands(spec: LoadBalancerSpec, in_map: Callable[[PoolSpec, MemberSpec], bool],
                   *, rebuild: bool = False) -> list[dict]:
    """The table's whole content, as one transaction; ``in_map(pool, member)`` says
    whether a member has slots (enabled, weight, health).

    The chains are emptied and refilled: deleting the table (``rebuild``, for a table
    found in place, whatever it holds) makes the kernel's deferred clean-up of base
    chains cost ~30 ms to whoever closes the nft socket next, so it is kept for adopting."""
    fam = table_family(spec)
    t = {"family": fam, "table": TABLE}
    cmds: list[dict] = [{"add": {"table": {"family": fam, "name": TABLE}}}]
    if rebuild:
        cmds += [{"delete": {"table": {"family": fam, "name": TABLE}}},
                 {"add": {"table": {"family": fam, "name": TABLE}}}]
    cmds += [
        {"add": {"chain": {**t, "name": "prerouting", "type": "nat", "hook": "prerouting", "prio": -100,
                           "policy": "accept"}}},
        {"add": {"chain": {**t, "name": "postrouting", "type": "nat", "hook": "postrouting", "prio": 100,
                           "policy": "accept"}}},
        {"flush": {"chain": {**t, "name": "prerouting"}}},
        {"flush": {"chain": {**t, "name": "postrouting"}}},
        {"add": {"rule": {**t, "chain": "postrouting", "comment": f"{_TAG} full-proxy", "expr": [
            _match({"ct": {"key": "status"}}, "dnat", op="in"),
            {"snat": {"family": fam, "addr": spec.vip_address}}]}}},
        *lbstats.counter_commands(fam, TABLE, [li.id for li in spec.listeners]),
    ]
    if any((p := spec.pool(li.pool_id)) is not None and p.algorithm == LEAST_CONNECTIONS for li in spec.listeners):
        cmds += least_connections_maps(fam)   # (left in place, unused, when the last such listener goes)
    if not spec.enabled:
        return cmds
    for listener in spec.listeners:
        pool = spec.pool(listener.pool_id)
        if not listener.enabled or pool is None or not pool.enabled:
            continue
        members = candidates(spec, pool, in_map)
        if members:
            cmds.append(_dnat_rule(spec, listener, pool, members))
    return cmds


def version(address: str) -> int | None:
    """4 or 6 (None: not an address)."""
    try:
        return ipaddress.ip_address(address).version
    except ValueError:
        return None


def is_v4(address: str) -> bool:
    return version(address) == 4
