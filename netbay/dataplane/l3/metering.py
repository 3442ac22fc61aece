"""Neutron's metering in a router namespace: each metering label's rules count the
packets and bytes crossing the router's gateway leg, as Neutron's iptables metering
driver counts them, in nftables (table ``inet netbay-meter``).

A label is a named counter (``label-<id>``, kept across rule changes) and a chain:
its excluded rules first (``return``: not counted), then its counting rules. The
``forward`` chain jumps to every label's chain. Neutron's matches: ``remote_ip_prefix``
is the source of ``egress`` traffic (``-s P -o qg-``) and the destination of
``ingress`` traffic (``-d P -i qg-``); ``source_ip_prefix``/``destination_ip_prefix``
are matched as written. A rule's prefixes are all IPv4 or all IPv6, and it counts that
family's traffic into its label's one counter: IPv6 too (Neutron's iptables driver puts
every rule in the IPv4 table, so it meters IPv4 only). A rule mixing families counts
nothing (it can match no packet).

:func:`traffic_counters` reads the counters as Neutron's ``get_traffic_counters``
gives them (label id -> ``pkts``, ``bytes``).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from netbay.dataplane.nft import Nft, NftError, prefix

TABLE = "netbay-meter"
FAMILY = "inet"
_LEGACY = "ip"   # the table's family before IPv6 was metered: removed when met


@dataclass(frozen=True)
class MeterRule:
    direction: str                        # ingress | egress
    excluded: bool = False
    remote_ip_prefix: str | None = None
    source_ip_prefix: str | None = None
    destination_ip_prefix: str | None = None


@dataclass(frozen=True)
class MeterLabel:
    id: str
    rules: tuple[MeterRule, ...] = ()


def _match(left: dict, right: Any) -> dict:
    return {"match": {"op": "==", "left": left, "right": right}}


def _rule_match(gateway: str, rule: MeterRule) -> list[dict] | None:
    """The rule's matches (``ip`` or ``ip6`` by its prefixes' family), or None for a
    rule whose prefixes mix the two."""
    egress = rule.direction == "egress"
    fields = [("saddr" if egress else "daddr", rule.remote_ip_prefix),
              ("saddr", rule.source_ip_prefix), ("daddr", rule.destination_ip_prefix)]
    nets = [(f, ipaddress.ip_network(c, strict=False)) for f, c in fields if c]
    if len({n.version for _, n in nets}) > 1:
        return None
    out = [_match({"meta": {"key": "oifname" if egress else "iifname"}}, gateway)]
    for field_, net in nets:
        protocol = "ip" if net.version == 4 else "ip6"
        out.append(_match({"payload": {"protocol": protocol, "field": field_}}, prefix(str(net))))
    return out


def _chain(label: MeterLabel) -> str:
    return f"label-{label.id}"


def _existing_counters(nft: Nft) -> set[str] | None:
    """Our counters' names, or None when the table is not there."""
    objs = nft.list_table(FAMILY, TABLE)
    return None if objs is None else {o["counter"]["name"] for o in objs if "counter" in o}


def sync_metering(ns: str, gateway: str | None, labels: Sequence[MeterLabel]) -> None:
    """Make ``ns`` meter ``labels`` on the gateway leg ``gateway``; without a gateway or
    labels the table goes. Rules are rewritten in one transaction; counters stay."""
    with Nft(ns) as nft:
        have = _existing_counters(nft)
        if gateway is None or not labels:
            if have is not None:
                nft.run([{"delete": {"table": {"family": FAMILY, "name": TABLE}}}])
            return
        t = {"family": FAMILY, "table": TABLE}
        want = {_chain(label) for label in labels}
        cmds: list[dict] = [{"add": {"table": {"family": FAMILY, "name": TABLE}}},
                            {"add": {"chain": {**t, "name": "forward", "type": "filter", "hook": "forward",
                                               "prio": -10, "policy": "accept"}}},
                            {"flush": {"chain": {**t, "name": "forward"}}}]
        if have is None:   # made now: an IPv4-only table of before goes (add+delete: drop if present)
            legacy = {"family": _LEGACY, "name": TABLE}
            cmds[:0] = [{"add": {"table": legacy}}, {"delete": {"table": legacy}}]
        for label in labels:
            name = _chain(label)
            if name not in (have or set()):
                cmds.append({"add": {"counter": {**t, "name": name}}})
            cmds += [{"add": {"chain": {**t, "name": name}}}, {"flush": {"chain": {**t, "name": name}}}]
            ordered = sorted(label.rules, key=lambda r: not r.excluded)   # excluded first, as Neutron
            for rule in ordered:
                matches = _rule_match(gateway, rule)
                if matches is None:
                    continue
                verdict = {"return": None} if rule.excluded else {"counter": name}
                cmds.append({"add": {"rule": {**t, "chain": name, "expr": [*matches, verdict]}}})
            cmds.append({"add": {"rule": {**t, "chain": "forward", "expr": [{"jump": {"target": name}}]}}})
        for gone in sorted((have or set()) - want):
            cmds += [{"delete": {"chain": {**t, "name": gone}}}, {"delete": {"counter": {**t, "name": gone}}}]
        nft.run(cmds)


def traffic_counters(ns: str) -> dict[str, dict[str, int]]:
    """label id -> {"pkts", "bytes"} counted in ``ns`` (none when nothing is metered)."""
    with Nft(ns) as nft:
        try:
            out = nft.run([{"list": {"table": {"family": FAMILY, "name": TABLE}}}])
        except NftError:
            return {}
    counters = {}
    for o in (out or {}).get("nftables", []):
        c = o.get("counter")
        if c and str(c.get("name", "")).startswith("label-"):
            counters[c["name"][len("label-"):]] = {"pkts": int(c.get("packets", 0)), "bytes": int(c.get("bytes", 0))}
    return counters


def labels_for(router: dict[str, Any], labels: dict[str, dict[str, Any]],
               rules: dict[str, dict[str, Any]]) -> tuple[MeterLabel, ...]:
    """The labels that meter ``router``, as Neutron's metering plugin gives them to its
    agent: the router's project's labels and every shared label, each with its rules."""
    by_label: dict[str, list[MeterRule]] = {}
    for r in rules.values():
        by_label.setdefault(str(r.get("metering_label_id")), []).append(MeterRule(
            str(r.get("direction") or "ingress"), bool(r.get("excluded")), r.get("remote_ip_prefix"),
            r.get("source_ip_prefix"), r.get("destination_ip_prefix")))
    project = router.get("project_id") or router.get("tenant_id")
    return tuple(MeterLabel(lid, tuple(sorted(by_label.get(lid, ()), key=repr)))
                 for lid, label in sorted(labels.items())
                 if label.get("shared") or label.get("project_id") == project)


__all__ = ["MeterLabel", "MeterRule", "TABLE", "labels_for", "sync_metering", "traffic_counters"]
