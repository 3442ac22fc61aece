"""The static ruleset: both tables' hooks, sets, maps and fixed chains, and the zone table."""

from __future__ import annotations

from typing import Any

from netbay.dataplane.sg.nftjson import (
    LOW, MAX_GROUPS, TABLE, ZONE_TABLE, masked, max_plen, nft_match, nft_meta, nft_nfproto, nft_obj, nft_payload, nft_rule,
    nft_set_mark,
)


_ND_OUT = [131, 132, 133, 135, 136, 143]        # MLD report/done, RS, NS, NA, MLDv2 report
_ND_IN = [130, 131, 132, 134, 135, 136, 143]    # + MLD query, RA


def common_chains() -> dict[str, list[list]]:
    """What every filtered port starts with (Neutron's ND/DHCP/conntrack prologue)."""
    v4, v6 = nft_nfproto(4), nft_nfproto(6)
    icmp6 = nft_payload("icmpv6", "type")
    state = {"ct": {"key": "state"}}

    def udp(sport: int, dport: int) -> list:
        return [nft_match(nft_meta("l4proto"), "udp"), nft_match(nft_payload("udp", "sport"), sport),
                nft_match(nft_payload("udp", "dport"), dport)]

    # Ports whose groups are all ``stateful: false`` skip both: their rules alone decide.
    tracked = nft_match({"&": [nft_meta("mark"), LOW]}, "@stateless", "!=")
    est = [tracked, nft_match(state, ["established", "related"], "in"), {"accept": None}]
    inv = [tracked, nft_match(state, "invalid", "in"), {"drop": None}]
    return {
        "egress_common": [
            [v6, nft_match(icmp6, 134), {"drop": None}],        # router advertisements
            [v6, nft_match(icmp6, {"set": _ND_OUT}), {"accept": None}],
            [v4, *udp(68, 67), {"accept": None}],             # DHCP client
            [v6, *udp(546, 547), {"accept": None}],
            [v4, *udp(67, 68), {"drop": None}],               # DHCP server replies
            [v6, *udp(547, 546), {"drop": None}],
            est, inv,
        ],
        "ingress_common": [
            [v6, nft_match(icmp6, {"set": _ND_IN}), {"accept": None}],
            [v4, *udp(67, 68), {"accept": None}],
            [v6, *udp(547, 546), {"accept": None}],
            est, inv,
        ],
    }


def spoof_rules(fam: int, plen: int) -> list[list]:
    """Rules of chain ``spoof_allow`` for the ``src<fam>[_<plen>]`` set."""
    name = "@" + src_set(fam, plen)
    ifn, esrc, etype = nft_meta("iifname"), nft_payload("ether", "saddr"), nft_payload("ether", "type")
    if fam == 6:
        return [[nft_match(etype, "ip6"),
                 nft_match({"concat": [ifn, esrc, masked(nft_payload("ip6", "saddr"), 6, plen)]}, name),
                 {"accept": None}]]
    return [[nft_match(etype, "ip"),
             nft_match({"concat": [ifn, esrc, masked(nft_payload("ip", "saddr"), 4, plen)]}, name),
             {"accept": None}],
            [nft_match(etype, "arp"),
             nft_match({"concat": [ifn, esrc, masked(nft_payload("arp", "saddr ip"), 4, plen)]}, name),
             nft_match({"concat": [ifn, nft_payload("arp", "saddr ether"),
                                masked(nft_payload("arp", "saddr ip"), 4, plen)]}, name),
             {"accept": None}]]


def src_set(fam: int, plen: int) -> str:
    return f"src{fam}" if plen == max_plen(fam) else f"src{fam}_{plen}"


def base_ruleset() -> list[dict]:
    """Drop and re-create both tables: hooks, sets and maps, fixed chains."""
    out: list[dict] = []
    for fam in ("bridge", "inet"):
        t = {"family": fam, "name": TABLE}
        out += [{"add": {"table": t}}, {"delete": {"table": t}}, {"add": {"table": t}}]

    def chain(fam: str, name: str, hook: str | None = None, prio: int = 0) -> dict:
        body: dict[str, Any] = {"name": name}
        if hook:
            body.update(type="filter", hook=hook, prio=prio, policy="accept")
        return {"add": nft_obj("chain", fam, **body)}

    def mk(fam: str, name: str, key: str | list, data: str | None = None) -> dict:
        body: dict[str, Any] = {"name": name, "type": key}
        if data:
            body["map"] = data
        return {"add": nft_obj("map" if data else "set", fam, **body)}

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
    ifn, esrc, etype = nft_meta("iifname"), nft_payload("ether", "saddr"), nft_payload("ether", "type")
    out += [
        nft_rule("bridge", "prerouting", [nft_set_mark({"map": {"key": ifn, "data": "@port_mark"}})]),
        nft_rule("bridge", "prerouting", [nft_match(ifn, "@filtered"), {"jump": {"target": "spoof"}}]),
        nft_rule("bridge", "spoof", [nft_match({"concat": [ifn, esrc]}, "@macs", "!="), {"drop": None}]),
        nft_rule("bridge", "spoof", [{"jump": {"target": "spoof_allow"}}]),
        nft_rule("bridge", "spoof", [nft_match(etype, "ip"), nft_match(nft_payload("ip", "saddr"), "0.0.0.0"),
                                  nft_match(nft_payload("ip", "protocol"), "udp"),
                                  nft_match(nft_payload("udp", "sport"), 68), nft_match(nft_payload("udp", "dport"), 67),
                                  {"accept": None}]),                     # DHCP discover
        nft_rule("bridge", "spoof", [nft_match(etype, "ip6"), nft_match(nft_payload("ip6", "saddr"), "::"),
                                  nft_match(nft_payload("ip6", "nexthdr"), "ipv6-icmp"),
                                  nft_match(nft_payload("icmpv6", "type"), {"set": [131, 135, 143]}),
                                  {"accept": None}]),                     # DAD, MLD from ::
        nft_rule("bridge", "spoof", [nft_match(etype, {"set": ["ip", "ip6", "arp"]}), {"drop": None}]),
        nft_rule("bridge", "forward", [nft_set_mark(0)]),
        nft_rule("bridge", "forward", [nft_set_mark({"map": {"key": nft_meta("oifname"),
                                                       "data": "@port_mark"}})]),
    ]
    out += [nft_rule("bridge", "spoof_allow", r)
            for fam in (4, 6) for r in spoof_rules(fam, max_plen(fam))]
    for name, rules in common_chains().items():
        out.append(chain("inet", name))
        out += [nft_rule("inet", name, r) for r in rules]
    low = {"&": [nft_meta("mark"), LOW]}
    for d, hook in (("e", "egress"), ("i", "ingress")):
        out.append(nft_rule("inet", f"{hook}_hook", [nft_match(low, "@filtered"),
                                                  {"jump": {"target": f"{hook}_port"}}]))
        out.append(nft_rule("inet", f"{hook}_port", [{"jump": {"target": f"{hook}_common"}}]))
        for i in range(MAX_GROUPS):
            out.append(nft_rule("inet", f"{hook}_port", [
                nft_set_mark({"map": {"key": low, "data": f"@slot{i}"}}),
                {"jump": {"target": f"{d}shapes"}}]))
        out.append(nft_rule("inet", f"{hook}_port", [{"drop": None}]))
    return out


# The zone table: created (idempotently) in nft syntax, because its maps need ``typeof``.
ZONE_TEXT = f"""add table inet {ZONE_TABLE}
add map inet {ZONE_TABLE} zone {{ typeof meta mark : ct zone; }}
add map inet {ZONE_TABLE} bridge_zone {{ typeof meta iifname : ct zone; }}
add chain inet {ZONE_TABLE} raw {{ type filter hook prerouting priority -300; policy accept; }}
flush chain inet {ZONE_TABLE} raw
add rule inet {ZONE_TABLE} raw ct zone set iifname map @bridge_zone
add rule inet {ZONE_TABLE} raw ct zone set meta mark & 0x{LOW:08x} map @zone
"""
