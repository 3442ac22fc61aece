"""Outgoing NAT for pods: flannel's ``--ip-masq`` and calico's ``natOutgoing``, in the node.

A pod's address means nothing outside its cluster: the cluster's router has no
route to the pod network, nor has a sandbox on another network. So traffic from
the pod network to anything outside it leaves the node masqueraded to the node's
own address, which the router routes (and SNATs further towards the external
network, as for any node). Pod-to-pod traffic, across nodes too, keeps its
source: flannel's ``-s Network -d Network -j RETURN``, calico's ``ip daddr !=
@all-ipam-pools``. Multicast is left alone, as flannel does.

One table per node namespace (``ip nb-masq``): a set with the pod network(s) and
one rule, so the rule never grows with the pools. Everything goes through
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


def _saddr_daddr(field: str) -> dict:
    return {"payload": {"protocol": "ip", "field": field}}


def _commands(nets: list[str]) -> list[dict]:
    """(Re)create the table holding ``nets``, as one transaction."""
    t = {"family": FAMILY, "table": TABLE}
    rule = [
        {"match": {"op": "==", "left": _saddr_daddr("saddr"), "right": f"@{SET}"}},
        {"match": {"op": "!=", "left": _saddr_daddr("daddr"), "right": f"@{SET}"}},
        {"match": {"op": "!=", "left": _saddr_daddr("daddr"), "right": prefix(MULTICAST)}},
        {"counter": None},
        {"masquerade": {"flags": ["fully-random"]}},
    ]
    cmds: list[dict] = [
        {"add": {"table": {"family": FAMILY, "name": TABLE}}},
        {"delete": {"table": {"family": FAMILY, "name": TABLE}}},   # add+delete: drop if present
        {"add": {"table": {"family": FAMILY, "name": TABLE}}},
        {"add": {"set": {**t, "name": SET, "type": "ipv4_addr", "flags": ["interval"]}}},
        {"add": {"chain": {**t, "name": "postrouting", "type": "nat", "hook": "postrouting",
                           "prio": 100, "policy": "accept"}}},
        {"add": {"rule": {**t, "chain": "postrouting", "expr": rule,
                          "comment": "pods leaving the pod network: masquerade"}}},
    ]
    if nets:
        cmds.append({"add": {"element": {**t, "name": SET, "elem": [prefix(n) for n in nets]}}})
    return cmds


def networks(ns: str) -> set[str] | None:
    """The pod networks masqueraded in ``ns``; None when the table is not there."""
    with Nft(ns) as nft:
        if (FAMILY, TABLE) not in nft.tables():
            return None
        try:
            return {parse_prefix(e) for e in nft.list_set(FAMILY, TABLE, SET)}
        except (NftError, ValueError):
            return set()   # a table not in our shape: ensure() rebuilds it


def ensure(ns: str, pod_networks: Iterable[str]) -> bool:
    """Masquerade what leaves ``pod_networks`` in node ``ns``. Idempotent: True when
    the table changed."""
    want = sorted({str(ipaddress.ip_network(n)) for n in pod_networks})
    if networks(ns) == set(want):
        return False
    with Nft(ns) as nft:
        nft.run(_commands(want))
    return True


def remove(ns: str) -> bool:
    """Drop the table (ip-masq / natOutgoing off, or the driver leaves the node)."""
    with Nft(ns) as nft:
        if (FAMILY, TABLE) not in nft.tables():
            return False
        nft.run([{"delete": {"table": {"family": FAMILY, "name": TABLE}}}])
    return True
