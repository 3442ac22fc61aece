"""kuryr: the pod subnet pool, the service network and subnet, and the pod router.

As kuryr-kubernetes' model: the cluster subnet is a subnet pool (a namespace's —
or a node's — subnet is allocated from it by the mapping controller,
:mod:`netbay.k8s`), the service range is a subnet cluster IPs (load-balancer VIPs)
come from, one security group lets every pod take every connection
(Kubernetes' default allow; NetworkPolicy narrows it), and one router with a gateway on the external network joins them, so
floating IPs reach Services and pods. The controller finds them by their
``netbay-resource`` tags (``RESOURCES``); the cluster's delete sweeps by the
cluster tag, so what the controller made under that tag goes with it.
"""

from __future__ import annotations

from netbay.drivers.kuryr import SPEC as KURYR
from netbay.coe.fragments.types import Context, Fragment, rule
from netbay.coe.graph import Node, Param, get_param, get_resource

POOL, ROUTER, SERVICE_NET, SERVICE_SUBNET = "kuryr_pod_pool", "kuryr_router", "kuryr_service_net", \
    "kuryr_service_subnet"
# Kubernetes' default: a pod not selected by any NetworkPolicy takes every connection
# (kuryr's pod_security_groups). Egress is open in every new group already.
POD_SG = "kuryr_pod_default"
# Dual-stack (labels kuryr_pod_subnet_pool_ipv6 / kuryr_service_cidr_ipv6): the IPv6 pod
# pool and service subnet, beside the IPv4 ones, on the same service network and router.
POOL6, SERVICE_SUBNET6 = "kuryr_pod_pool_ipv6", "kuryr_service_subnet_ipv6"
NODE_PORTS = (30000, 32767)
ROUTERS = (ROUTER, "extrouter")  # the pod router: kuryr's own, or the cluster's
RESOURCES = (POOL, SERVICE_NET, SERVICE_SUBNET, POD_SG)   # the IPv6 ones only on a dual-stack cluster


def fragment(ctx: Context) -> Fragment:
    labels = ctx.driver_labels(KURYR)
    out = Fragment()
    out.params = [(Param(s.key, "string", s.default, s.help, s.allowed), labels[s.key]) for s in KURYR.labels]
    # With a network of its own the cluster's router (``extrouter``) is kuryr's pod
    # router too: nodes then reach pods and cluster IPs (NodePort) through their
    # default gateway. On a given network a router of its own joins pods and services.
    router = "extrouter" if ctx.new_network else ROUTER
    dual_stack = bool(labels["kuryr_service_cidr_ipv6"])
    families = ("IPv4", "IPv6") if dual_stack else ("IPv4",)
    out.nodes = [
        Node(POOL, "OS::Neutron::SubnetPool", {
            "prefixes": [get_param("kuryr_pod_subnet_pool")],
            "default_prefixlen": get_param("kuryr_pod_subnet_prefixlen")}),
        Node(SERVICE_NET, "OS::Neutron::Net", {"name": "services"}),
        Node(SERVICE_SUBNET, "OS::Neutron::Subnet", {
            "cidr": get_param("kuryr_service_cidr"), "network": get_resource(SERVICE_NET)}),
        Node(POD_SG, "OS::Neutron::SecurityGroup", {"rules": [{"direction": "ingress", "ethertype": family}
                                                               for family in families]}),
        Node("kuryr_service_inside", "OS::Neutron::RouterInterface",
             {"router": get_resource(router), "subnet": get_resource(SERVICE_SUBNET)}),
    ]
    # NodePort Services answer on every node (netbay.k8s.nodeports): open the range on
    # the masters too (the minions' group takes all TCP and UDP already).
    out.sg_rules[ctx.coe.master_sg] = [rule("tcp", *NODE_PORTS), rule("udp", *NODE_PORTS)]
    if dual_stack:
        out.nodes += [
            Node(POOL6, "OS::Neutron::SubnetPool", {
                "prefixes": [get_param("kuryr_pod_subnet_pool_ipv6")],
                "default_prefixlen": get_param("kuryr_pod_subnet_prefixlen_ipv6")}),
            Node(SERVICE_SUBNET6, "OS::Neutron::Subnet", {
                "cidr": get_param("kuryr_service_cidr_ipv6"), "ip_version": 6,
                "network": get_resource(SERVICE_NET)}),
            Node("kuryr_service_inside_ipv6", "OS::Neutron::RouterInterface",
                 {"router": get_resource(router), "subnet": get_resource(SERVICE_SUBNET6)}),
        ]
    if not ctx.new_network:
        out.nodes.append(Node(ROUTER, "OS::Neutron::Router",
                              {"external_gateway_info": {"network": get_param("external_network")}}))
    return out
