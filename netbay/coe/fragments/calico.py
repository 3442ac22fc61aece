"""Calico: its IP pool config from the labels, and BGP/VXLAN in the masters' group.

Calico's nodes peer over BGP (TCP 179) and, with VXLAN encapsulation, tunnel over
UDP 4789; minions take all TCP and UDP already, so only the masters' group
gains those rules (Magnum's later templates add TCP 179 the same way). IP-in-IP is
IP protocol 4, which neither group lets in: both gain a rule for it. An IPv6 pool
(``calico_ipv6pool``) gives the minions' group the IPv6 twins of its rules.
"""

from __future__ import annotations

from netbay.drivers.calico import SPEC as CALICO
from netbay.coe.fragments.types import Context, Fragment, ipv6_rules, rule
from netbay.coe.graph import Node, Param, get_attr, get_param

BGP_PORT = 179
VXLAN_PORT = 4789
ENCAPSULATING = {"Always", "CrossSubnet"}


def fragment(ctx: Context) -> Fragment:
    labels = ctx.driver_labels(CALICO)
    out = Fragment()
    out.params = [(Param(s.key, "string", s.default, s.help, s.allowed), labels[s.key]) for s in CALICO.labels]
    out.nodes = [Node("calico_pool_config", "OS::Heat::Value", {"type": "json", "value": {
        "cidr": get_param("calico_ipv4pool"),
        "ipipMode": get_param("calico_ipv4pool_ipip"),
        "vxlanMode": get_param("calico_ipv4pool_vxlan"),
        "natOutgoing": labels["calico_ipv4pool_nat_outgoing"] == "true",
    }})]
    out.node_metadata = {"network_config": get_attr("calico_pool_config", "value")}
    rules = [rule("tcp", BGP_PORT)]
    if labels["calico_ipv4pool_vxlan"] in ENCAPSULATING:
        rules.append(rule("udp", VXLAN_PORT))
    if labels["calico_ipv4pool_ipip"] in ENCAPSULATING:
        rules.append(rule("ipip"))
        out.sg_rules[ctx.coe.minion_sg] = [rule("ipip")]
    if labels["calico_ipv6pool"]:      # refused with IP-in-IP (IPv4 only): never both
        out.sg_rules[ctx.coe.minion_sg] = ipv6_rules(ctx.coe.minion_rules)
    out.sg_rules[ctx.coe.master_sg] = rules
    return out
