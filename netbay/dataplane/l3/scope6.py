"""IPv6 address scopes in a router namespace, as Neutron's L3 agent keeps them: IPv6
is routed, never NATed, so a router forwards IPv6 only between legs of one address
scope (no scope being one of its own) — between internal legs and to and from the
gateway alike, with no exception for SNAT or floating IPs (Neutron's ``scope`` filter
chain drops ``-o <leg> -m mark ! --mark <leg's scope>`` for every IPv6 leg; only IPv4
spares the gateway while SNAT is on).

One table, ``ip6 netbay-scope6``: a forward chain dropping ``iifname . oifname`` in the
set ``blocked``. No pair to block, no table. The set's elements are diffed as the NAT
table's are (:mod:`netbay.dataplane.l3.nat`); a table not exactly ours is rebuilt.
"""

from __future__ import annotations

from collections.abc import Sequence

from netbay.dataplane.l3.spec import Gateway, Leg
from netbay.dataplane.nft import Nft

TABLE = "netbay-scope6"
FAMILY = "ip6"
SET = "blocked"
_TAG = "netbay-scope6/1"

Pair = tuple[str, str]


def blocked_pairs(gateway: Gateway | None, interfaces: Sequence[Leg]) -> set[Pair]:
    """(in, out) pairs of legs, the gateway among them, whose IPv6 scopes differ."""
    legs = [(leg.ifname, leg.scope6) for leg in interfaces]
    if gateway is not None:
        legs.append((gateway.ifname, gateway.scope6))
    return {(a, b) for a, sa in legs for b, sb in legs if a != b and sa != sb}


def _table_commands(pairs: set[Pair]) -> list[dict]:
    t = {"family": FAMILY, "table": TABLE}
    cmds: list[dict] = [
        {"add": {"table": {"family": FAMILY, "name": TABLE}}},
        {"delete": {"table": {"family": FAMILY, "name": TABLE}}},   # add+delete: drop if present
        {"add": {"table": {"family": FAMILY, "name": TABLE}}},
        {"add": {"set": {**t, "name": SET, "type": ["ifname", "ifname"]}}},
        {"add": {"chain": {**t, "name": "forward", "type": "filter", "hook": "forward", "prio": 0,
                           "policy": "accept"}}},
        {"add": {"rule": {**t, "chain": "forward", "comment": _TAG, "expr": [
            {"match": {"op": "==", "left": {"concat": [{"meta": {"key": "iifname"}}, {"meta": {"key": "oifname"}}]},
                       "right": "@" + SET}},
            {"drop": None}]}}},
    ]
    return cmds + _elements("add", pairs)


def _elements(verb: str, pairs: set[Pair]) -> list[dict]:
    if not pairs:
        return []
    return [{verb: {"element": {"family": FAMILY, "table": TABLE, "name": SET,
                                "elem": [{"concat": list(p)} for p in sorted(pairs)]}}}]


_MISSING: set[Pair] = set()   # the table is not there (told apart by identity)


def _observed(nft: Nft) -> set[Pair] | None:
    """The set's pairs if the table is exactly ours, :data:`_MISSING` if there is none,
    None if it is not ours (rebuilt)."""
    listed = nft.list_table(FAMILY, TABLE)
    if listed is None:
        return _MISSING
    objs = [o for o in listed if "table" not in o]
    sets = [o["set"] for o in objs if "set" in o]
    rules = [o["rule"] for o in objs if "rule" in o]
    chains = [o["chain"] for o in objs if "chain" in o]
    if (len(objs) != 3 or len(sets) != 1 or sets[0].get("name") != SET or len(chains) != 1
            or chains[0].get("hook") != "forward" or len(rules) != 1 or rules[0].get("comment") != _TAG):
        return None
    try:
        return {(e["concat"][0], e["concat"][1]) for e in sets[0].get("elem", [])}
    except (KeyError, IndexError, TypeError):
        return None


def sync_scope6(ns: str, gateway: Gateway | None, interfaces: Sequence[Leg]) -> None:
    """Make ``ns`` drop IPv6 between legs of different scopes (see the module's text)."""
    want = blocked_pairs(gateway, interfaces)
    with Nft(ns) as nft:
        have = _observed(nft)
        if not want:
            if have is not _MISSING:
                nft.run([{"delete": {"table": {"family": FAMILY, "name": TABLE}}}])
            return
        if have is None or have is _MISSING:
            nft.run(_table_commands(want))
        elif have != want:
            cmds = _elements("delete", have - want) + _elements("add", want - have)
            nft.run(cmds)


__all__ = ["TABLE", "blocked_pairs", "sync_scope6"]
