"""Masters and minions: what a COE fragment adds per node, shared by every COE.

A node is an ``OS::Nova::Server`` with one port on the private network in the base
and role security groups, a floating IP when ``floating_ip_enabled`` (masters only
when no API load balancer fronts them), and, for masters behind load balancers,
membership of the API and etcd pools — the guide's kubemaster/kubeminion
templates, flattened: node ``i`` is ``<prefix>_<i>``, so scaling down removes the
highest indexes, the newest nodes.
"""

from __future__ import annotations

from typing import Any

from netbay.coe.fragments.base import ETCD_PORT, fip_name, floating_ip, node_name, port_name
from netbay.coe.fragments.types import Context, Fragment
from netbay.coe.graph import Node, get_attr, get_param, get_resource
from netbay.store import labels


def masters_and_minions(ctx: Context) -> Fragment:
    out = Fragment()
    coe = ctx.coe
    for i in range(ctx.master_count):
        out.nodes += _node(ctx, coe.master_prefix, i, coe.master_sg, "master",
                           floating=ctx.floating_ips and not ctx.master_lb)
        if ctx.master_lb:
            address = get_attr(port_name(coe.master_prefix, i), "fixed_ips", 0, "ip_address")
            out.nodes.append(_member(ctx, f"api_pool_member_{i}", "api_pool", address, get_param("api_port")))
            if coe.etcd_lb:
                out.nodes.append(_member(ctx, f"etcd_pool_member_{i}", "etcd_pool", address, ETCD_PORT))
    api_server = (get_attr("api_lb", "vip_address") if ctx.master_lb
                  else get_attr(port_name(coe.master_prefix, 0), "fixed_ips", 0, "ip_address"))
    for i in range(ctx.node_count):
        out.nodes += _node(ctx, coe.minion_prefix, i, coe.minion_sg, "minion",
                           floating=ctx.floating_ips, api_server=api_server)
    return out


def _node(ctx: Context, prefix: str, index: int, role_sg: str, role: str, *, floating: bool,
          api_server: Any = None) -> list[Node]:
    port = port_name(prefix, index)
    nodes = [Node(port, "OS::Neutron::Port", {
        "network": ctx.network_ref(),
        "fixed_ips": [{"subnet": ctx.subnet_ref()}],
        "security_groups": [get_resource("secgroup_base"), get_resource(role_sg)],
    })]
    if floating:
        nodes.append(floating_ip(ctx, fip_name(prefix, index), get_resource(port)))
    # The cluster's labels ride on every server (the spec's expand-labels-scope): the node's
    # sandbox carries them, as Magnum's servers carry them in their Heat metadata.
    metadata: dict[str, Any] = {"role": role, "index": index, "labels": labels.strings(ctx.labels)}
    if api_server is not None:
        metadata["api_server"] = api_server
    nodes.append(Node(node_name(prefix, index), "OS::Nova::Server", {
        "image": get_param("server_image"),
        "flavor": get_param(f"{role}_flavor"),
        "networks": [{"port": get_resource(port)}],
        "metadata": metadata,
    }))
    return nodes


def _member(ctx: Context, name: str, pool: str, address: Any, port: Any) -> Node:
    return Node(name, "OS::Octavia::PoolMember", {
        "pool": get_resource(pool), "address": address, "protocol_port": port, "subnet": ctx.subnet_ref(),
    })
