"""flannel: its network config, built from the labels, and the VXLAN port.

The config is flannel's ``{"Network", "Subnetlen", "Backend": {"Type"}}`` — what
Magnum's ``write-network-config`` fragment writes and ``flannel-config`` PUTs
into etcd — as an ``OS::Heat::Value`` every node carries in its metadata.
With the vxlan backend the masters' group also opens UDP 8472 (minions take all
UDP already), as Magnum's Train templates do. A dual-stack network
(``flannel_ipv6_network_cidr``) gives the minions' group the IPv6 twins of its rules.
"""

from __future__ import annotations

from netbay.drivers.flannel import SPEC as FLANNEL
from netbay.coe.fragments.types import Context, Fragment, ipv6_rules, rule
from netbay.coe.graph import Node, Param, get_attr, get_param

VXLAN_PORT = 8472


def fragment(ctx: Context) -> Fragment:
    labels = ctx.driver_labels(FLANNEL)
    spec = {s.key: s for s in FLANNEL.labels}
    out = Fragment()
    out.params = [
        (Param("flannel_network_cidr", "string", spec["flannel_network_cidr"].default,
               spec["flannel_network_cidr"].help), labels["flannel_network_cidr"]),
        (Param("flannel_network_subnetlen", "number", int(spec["flannel_network_subnetlen"].default),
               spec["flannel_network_subnetlen"].help), int(labels["flannel_network_subnetlen"])),
        (Param("flannel_backend", "string", spec["flannel_backend"].default, spec["flannel_backend"].help,
               spec["flannel_backend"].allowed), labels["flannel_backend"]),
    ]
    out.nodes = [Node("flannel_network_config", "OS::Heat::Value", {"type": "json", "value": {
        "Network": get_param("flannel_network_cidr"),
        "Subnetlen": get_param("flannel_network_subnetlen"),
        "Backend": {"Type": get_param("flannel_backend")},
    }})]
    out.node_metadata = {"network_config": get_attr("flannel_network_config", "value")}
    if labels["flannel_backend"] == "vxlan":
        out.sg_rules[ctx.coe.master_sg] = [rule("udp", VXLAN_PORT)]
    if labels["flannel_ipv6_network_cidr"]:
        out.sg_rules[ctx.coe.minion_sg] = ipv6_rules(ctx.coe.minion_rules)
    return out
