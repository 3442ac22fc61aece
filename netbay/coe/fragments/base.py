"""The base cluster fragment: what every cluster has, whatever its COE and driver.

As Magnum's kubecluster/network templates and the networking guide lay it out: a
private network and subnet (or an existing ``fixed_network``/``fixed_subnet``), a
router to the external network with the subnet attached, the base/master/minion
security groups, optionally the API and etcd load balancers with TCP health
monitors (``master_lb_enabled``) and a floating IP on the API VIP
(``floating_ip_enabled``), and the outputs Magnum reports.
"""

from __future__ import annotations

from typing import Any

from netbay.coe.fragments.types import Context, Fragment, rule
from netbay.coe.graph import Node, Output, Param, get_attr, get_param, get_resource

# The guide's secgroup_base: ICMP and SSH.
BASE_RULES = (rule("icmp"), rule("tcp", 22))
# Octavia's equivalent of the guide's LBaaS v1 health monitors.
MONITOR = {"type": "TCP", "delay": 5, "max_retries": 5, "timeout": 5}
ETCD_PORT = 2379


def node_name(prefix: str, index: int) -> str:
    return f"{prefix}_{index}"


def port_name(prefix: str, index: int) -> str:
    return f"{prefix}_{index}_eth0"


def fip_name(prefix: str, index: int) -> str:
    return f"{prefix}_{index}_floating"


def fragment(ctx: Context) -> Fragment:
    out = Fragment()
    out.params += _params(ctx)
    if ctx.new_network:
        out.nodes += [
            Node("fixed_network", "OS::Neutron::Net", {"name": "private"}),
            Node("fixed_subnet", "OS::Neutron::Subnet", {
                "cidr": get_param("fixed_network_cidr"),
                "network": get_resource("fixed_network"),
                "dns_nameservers": [get_param("dns_nameserver")],
            }),
            Node("extrouter", "OS::Neutron::Router",
                 {"external_gateway_info": {"network": get_param("external_network")}}),
            Node("extrouter_inside", "OS::Neutron::RouterInterface",
                 {"router": get_resource("extrouter"), "subnet": get_resource("fixed_subnet")}),
        ]
    coe = ctx.coe
    out.nodes += [
        Node("secgroup_base", "OS::Neutron::SecurityGroup", {"rules": [dict(r) for r in BASE_RULES]}),
        Node(coe.master_sg, "OS::Neutron::SecurityGroup", {"rules": _master_rules(ctx)}),
        Node(coe.minion_sg, "OS::Neutron::SecurityGroup", {"rules": [dict(r) for r in coe.minion_rules]}),
    ]
    if ctx.master_lb:
        out.nodes += _load_balancer(ctx, "api", get_param("api_port"))
        if coe.etcd_lb:
            out.nodes += _load_balancer(ctx, "etcd", ETCD_PORT)
        if ctx.floating_ips:
            out.nodes.append(floating_ip(ctx, "api_lb_floating", get_attr("api_lb", "vip_port_id")))
    out.outputs.update(_outputs(ctx))
    return out


def floating_ip(ctx: Context, name: str, port: Any) -> Node:
    """A floating IP on the external network; after the router interface exists, as in
    the guide (Neutron refuses a floating IP for a subnet no router reaches)."""
    depends = ("extrouter_inside",) if ctx.new_network else ()
    return Node(name, "OS::Neutron::FloatingIP",
                {"floating_network": get_param("external_network"), "port_id": port}, depends)


def _params(ctx: Context) -> list[tuple[Param, Any]]:
    params: list[tuple[Param, Any]] = [
        (Param("external_network", "string", "public", "uuid or name of the external network"),
         ctx.get("external_network_id")),
        (Param("dns_nameserver", "string", "8.8.8.8", "address of a DNS nameserver for the private subnet"),
         _first_dns(ctx.get("dns_nameserver"))),
        (Param("api_port", "number", ctx.coe.api_port, "the port the COE's API listens on"),
         ctx.get("apiserver_port")),
        (Param("network_driver", "string", "", "the container network driver"), ctx.get("network_driver")),
        (Param("labels", "json", {}, "the cluster's labels (drivers read theirs)"), dict(ctx.labels)),
        (Param("number_of_masters", "number", 1, "how many masters"), ctx.master_count),
        (Param("number_of_minions", "number", 1, "how many minions"), ctx.node_count),
        (Param("server_image", "string", "netbay-sandbox", "image of the nodes"), ctx.get("image_id")),
        (Param("master_flavor", "string", "m1.small", "flavor of the masters"), ctx.get("master_flavor_id")),
        (Param("minion_flavor", "string", "m1.small", "flavor of the minions"), ctx.get("flavor_id")),
    ]
    if ctx.new_network:
        params.append((Param("fixed_network_cidr", "string", "10.0.0.0/24", "the private subnet's range"),
                       ctx.labels.get("fixed_subnet_cidr") or ctx.get("fixed_subnet_cidr")))
    else:
        params += [
            (Param("fixed_network", "string", "", "uuid or name of an existing private network"),
             ctx.get("fixed_network")),
            (Param("fixed_subnet", "string", "", "uuid or name of an existing subnet of fixed_network"),
             ctx.get("fixed_subnet")),
        ]
    return params


def _master_rules(ctx: Context) -> list[dict[str, Any]]:
    """The COE's master rules, and the template's ``apiserver_port`` where they do not open
    it (Magnum's templates open the API port from its parameter): the API load balancer's
    health monitor must reach the masters on it."""
    rules = [dict(r) for r in ctx.coe.master_rules]
    port = ctx.get("apiserver_port")
    if port and not any(r["protocol"] == "tcp" and r.get("port_range_min", 1) <= int(port) <= r.get("port_range_max", 65535)
                        for r in rules):
        rules.append(rule("tcp", int(port)))
    return rules


def _first_dns(value: Any) -> Any:
    """Magnum's template takes a comma list; the subnet takes the first, as kubecluster does."""
    if isinstance(value, str) and value.strip():
        return value.split(",")[0].strip()
    return None


def _load_balancer(ctx: Context, role: str, port: Any) -> list[Node]:
    lb, listener, pool = f"{role}_lb", f"{role}_listener", f"{role}_pool"
    return [
        Node(lb, "OS::Octavia::LoadBalancer", {"vip_subnet": ctx.subnet_ref()}),
        Node(listener, "OS::Octavia::Listener",
             {"loadbalancer": get_resource(lb), "protocol": "TCP", "protocol_port": port}),
        Node(pool, "OS::Octavia::Pool",
             {"listener": get_resource(listener), "protocol": "TCP", "lb_algorithm": "ROUND_ROBIN"}),
        Node(f"{role}_monitor", "OS::Octavia::HealthMonitor", {"pool": get_resource(pool), **MONITOR}),
    ]


def _address(ctx: Context, prefix: str, index: int, floating: bool) -> Any:
    if floating:
        return get_attr(fip_name(prefix, index), "floating_ip_address")
    return get_attr(port_name(prefix, index), "fixed_ips", 0, "ip_address")


def _outputs(ctx: Context) -> dict[str, Output]:
    coe = ctx.coe
    masters_floating = ctx.floating_ips and not ctx.master_lb
    if ctx.master_lb:
        host = (get_attr("api_lb_floating", "floating_ip_address") if ctx.floating_ips
                else get_attr("api_lb", "vip_address"))
    else:
        host = _address(ctx, coe.master_prefix, 0, masters_floating)
    scheme = "http" if ctx.get("tls_disabled", False) else coe.api_scheme
    return {
        "api_address": Output({"str_replace": {"template": f"{scheme}://HOST:PORT",
                                               "params": {"HOST": host, "PORT": get_param("api_port")}}},
                              "the COE's API endpoint, as Magnum reports it"),
        "master_addresses": Output([_address(ctx, coe.master_prefix, i, masters_floating)
                                    for i in range(ctx.master_count)], "the masters' addresses"),
        "node_addresses": Output([_address(ctx, coe.minion_prefix, i, ctx.floating_ips)
                                  for i in range(ctx.node_count)], "the minions' addresses"),
    }
