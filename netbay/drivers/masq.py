"""Outgoing NAT for pods: flannel's ``--ip-masq`` and calico's ``natOutgoing``, in the node.

A pod's address means nothing outside its cluster: the cluster's router has no
route to the pod network, nor has a sandbox on another network. So traffic from
the pod network to anything outside it leaves the node masqueraded to the node's
own address, which the router routes (and SNATs further towards the external
network, as for any node). Pod-to-pod traffic, across nodes too, keeps its
source: flannel's ``-s Network -d Network -j RETURN``, calico's ``ip daddr !=
@all-ipam-pools``. Multicast is left alone, as flannel does.

One table per node namespace and family (``ip nb-masq``, and ``ip6 nb-masq`` for
a dual-stack pod network, as flannel's ip-masq masquerades its IPv6Network too): a
set with the pod network(s) and one rule, so the rule never grows with the pools. Everything goes through
libnftables in-process (:class:`netbay.dataplane.nft.Nft`), which refuses the
host's own namespace.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from netbay.dataplane.nft import Nft, NftError, parse_prefix, prefix

__all__ = ["TABLE", "ensure", "remove", "networks"]

FAMILY = "ip"
TABLE = "nb-masq"
SET = "pod_nets"
MULTICAST = "224.0.0.0/4"
# nft family -> (IP version, header protocol, set type, multicast block)
FAMILIES = {"ip": (4, "ip", "ipv4_addr", MULTICAST), "ip6": (6, "ip6", "ipv6_addr", "ff00::/8")}


def _saddr_daddr(field: str, protocol: str = "ip") -> dict:
    return {"payload": {"protocol": protocol, "field": field}}


def _commands(nets: list[str], family: str = FAMILY) -> list[dict]:
    """(Re)create ``family``'s table holding ``nets``, as one transaction."""
    _version, proto, set_type, multicast = FAMILIES[family]
    t = {"family": family, "table": TABLE}
    rule = [
        {"match": {"op": "==", "left": _saddr_daddr("saddr", proto), "right": f"@{SET}"}},
        {"match": {"op": "!=", "left": _saddr_daddr("daddr", proto), "right": f"@{SET}"}},
        {"match": {"op": "!=", "left": _saddr_daddr("daddr", proto), "right": prefix(multicast)}},
        {"counter": None},
        {"masquerade": {"flags": ["fully-random"]}},
    ]
    cmds: list[dict] = [
        {"add": {"table": {"family": family, "name": TABLE}}},
        {"delete": {"table": {"family": family, "name": TABLE}}},   # add+delete: drop if present
        {"add": {"table": {"family": family, "name": TABLE}}},
        {"add": {"set": {**t, "name": SET, "type": set_type, "flags": ["interval"]}}},
        {"add": {"chain": {**t, "name": "postrouting", "type": "nat", "hook": "postrouting",
                           "prio": 100, "policy": "accept"}}},
        {"add": {"rule": {**t, "chain": "postrouting", "expr": rule,
                          "comment": "pods leaving the pod network: masquerade"}}},
    ]
    if nets:
        cmds.append({"add": {"element": {**t, "name": SET, "elem": [prefix(n) for n in nets]}}})
    return cmds


def _networks(nft: Nft, family: str) -> set[str] | None:
    if (family, TABLE) not in nft.tables():
        return None
    try:
        return {parse_prefix(e) for e in nft.list_set(family, TABLE, SET)}
    except (NftError, ValueError):
        return set()   # a table not in our shape: ensure() rebuilds it


def networks(ns: str) -> set[str] | None:
    """The pod networks masqueraded in ``ns`` (both families); None when no table is there."""
    with Nft(ns) as nft:
        found = [nets for family in FAMILIES if (nets := _networks(nft, family)) is not None]
    return set().union(*found) if found else None


def ensure(ns: str, pod_networks: Iterable[str]) -> bool:
    """Masquerade what leaves ``pod_networks`` (either family) in node ``ns``; a family
    without a network has no table. Idempotent: True when a table changed."""
    nets = {ipaddress.ip_network(n) for n in pod_networks}
    changed = False
    with Nft(ns) as nft:
        for family, (version, *_rest) in FAMILIES.items():
            want = sorted(str(n) for n in nets if n.version == version)
            have = _networks(nft, family)
            if not want:
                if have is not None:
                    nft.run([{"delete": {"table": {"family": family, "name": TABLE}}}])
                    changed = True
            elif have != set(want):
                nft.run(_commands(want, family))
                changed = True
    return changed


def remove(ns: str) -> bool:
    """Drop the tables (ip-masq / natOutgoing off, or the driver leaves the node)."""
    removed = False
    with Nft(ns) as nft:
        for family in FAMILIES:
            if (family, TABLE) in nft.tables():
                nft.run([{"delete": {"table": {"family": family, "name": TABLE}}}])
                removed = True
    return removed
