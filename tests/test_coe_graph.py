"""Cluster composition and HOT rendering, pure (no server): the graph each fragment
adds, the security groups exactly as the Magnum networking guide lists them, and a
rendered template whose every intrinsic resolves."""

from __future__ import annotations

import pytest
import yaml

from netbay.coe.compose import build, compose, driver_fragment
from netbay.coe.fragments import NETWORK_DRIVERS
from netbay.coe.graph import Graph, GraphError, Node, Param, get_attr, get_param, get_resource, intrinsics
from netbay.coe.hot import to_hot, to_yaml

K8S = {"coe": "kubernetes", "network_driver": "flannel", "external_network_id": "public",
       "master_lb_enabled": True, "floating_ip_enabled": True, "labels": {}}
CLUSTER = {"name": "k1", "uuid": "3c1b1a38-0000-4000-8000-000000000001", "master_count": 1, "node_count": 2}

GUIDE_BASE = [{"protocol": "icmp"}, {"protocol": "tcp", "port_range_min": 22, "port_range_max": 22}]
GUIDE_MASTER = [{"protocol": "tcp", "port_range_min": p, "port_range_max": q}
                for p, q in ((7080, 7080), (8080, 8080), (2379, 2379), (2380, 2380), (6443, 6443), (30000, 32767))]
GUIDE_MINION = [{"protocol": "icmp"}, {"protocol": "tcp"}, {"protocol": "udp"}]


def rules(graph: Graph, sg: str) -> list[dict]:
    node = graph.nodes[sg]
    assert node.type == "OS::Neutron::SecurityGroup"
    return node.properties["rules"]


def of_type(graph: Graph, type_: str) -> list[str]:
    return sorted(n for n, node in graph.nodes.items() if node.type == type_)


# --- the graph itself ------------------------------------------------------------------------


def test_dependencies_come_from_intrinsics_and_depends_on() -> None:
    g = Graph()
    g.param(Param("cidr"), "10.1.0.0/24")
    g.add(Node("net", "OS::Neutron::Net"))
    g.add(Node("sub", "OS::Neutron::Subnet", {"network": get_resource("net"), "cidr": get_param("cidr")}))
    g.add(Node("port", "OS::Neutron::Port", {"network": get_resource("net"),
                                             "fixed_ips": [{"subnet": get_resource("sub")}]}))
    g.add(Node("fip", "OS::Neutron::FloatingIP", {"port_id": get_resource("port")}, depends_on=("sub",)))
    g.add(Node("other", "OS::Neutron::Net"))
    g.check()
    assert g.nodes["port"].requires() == {"net", "sub"}
    assert g.nodes["fip"].requires() == {"port", "sub"}
    assert g.waves() == [["net", "other"], ["sub"], ["port"], ["fip"]]
    assert g.dependents()["net"] == {"sub", "port"}
    assert Graph.from_dict(g.to_dict()).to_dict() == g.to_dict()


def test_cycles_and_dangling_references_are_refused() -> None:
    g = Graph()
    g.add(Node("a", "OS::Neutron::Port", {"network": get_resource("b")}))
    g.add(Node("b", "OS::Neutron::Port", {"network": get_attr("c", "id")}))
    g.add(Node("c", "OS::Neutron::Port", {"network": get_resource("a")}))
    with pytest.raises(GraphError, match="cycle among a, b, c"):
        g.waves()
    g2 = Graph()
    g2.add(Node("a", "OS::Neutron::Port", {"network": get_resource("missing")}))
    with pytest.raises(GraphError, match="unknown resource"):
        g2.check()
    g3 = Graph()
    g3.add(Node("a", "OS::Neutron::Port", {"network": get_param("nope")}))
    with pytest.raises(GraphError, match="unknown parameter"):
        g3.check()
    with pytest.raises(GraphError, match="duplicate"):
        g3.add(Node("a", "OS::Neutron::Net"))
    with pytest.raises(GraphError, match="unknown type"):
        g3.add(Node("z", "OS::Nova::Flavor"))


# --- the base fragment --------------------------------------------------------------------------


def test_security_groups_exactly_as_the_networking_guide() -> None:
    g = build({**K8S, "labels": {"flannel_backend": "host-gw"}}, CLUSTER)
    assert rules(g, "secgroup_base") == GUIDE_BASE
    assert rules(g, "secgroup_kube_master") == GUIDE_MASTER
    assert rules(g, "secgroup_kube_minion") == GUIDE_MINION


def test_private_network_router_and_load_balancers() -> None:
    g = build(K8S, CLUSTER)
    assert g.nodes["fixed_subnet"].properties == {
        "cidr": get_param("fixed_network_cidr"), "network": get_resource("fixed_network"),
        "dns_nameservers": [get_param("dns_nameserver")]}
    assert g.value("fixed_network_cidr") == "10.0.0.0/24"
    assert g.value("external_network") == "public"
    assert g.nodes["extrouter"].properties == {"external_gateway_info": {"network": get_param("external_network")}}
    assert g.nodes["extrouter_inside"].requires() == {"extrouter", "fixed_subnet"}
    assert of_type(g, "OS::Octavia::LoadBalancer") == ["api_lb", "etcd_lb"]
    assert g.nodes["api_listener"].properties["protocol_port"] == get_param("api_port")
    assert g.value("api_port") == 6443
    assert g.nodes["etcd_listener"].properties["protocol_port"] == 2379
    for monitor in ("api_monitor", "etcd_monitor"):
        props = g.nodes[monitor].properties
        assert (props["type"], props["delay"], props["max_retries"], props["timeout"]) == ("TCP", 5, 5, 5)
    member = g.nodes["api_pool_member_0"].properties
    assert member["address"] == get_attr("kube_master_0_eth0", "fixed_ips", 0, "ip_address")
    assert member["pool"] == get_resource("api_pool")
    assert of_type(g, "OS::Octavia::PoolMember") == ["api_pool_member_0", "etcd_pool_member_0"]
    # Floating IPs: the API VIP (not the master) and every minion, after the router interface.
    assert of_type(g, "OS::Neutron::FloatingIP") == ["api_lb_floating", "kube_minion_0_floating",
                                                      "kube_minion_1_floating"]
    assert g.nodes["api_lb_floating"].properties["port_id"] == get_attr("api_lb", "vip_port_id")
    assert g.nodes["api_lb_floating"].depends_on == ("extrouter_inside",)
    assert g.nodes["api_lb_floating"].requires() == {"api_lb", "extrouter_inside"}
    assert g.outputs["api_address"].value["str_replace"]["params"]["HOST"] == get_attr(
        "api_lb_floating", "floating_ip_address")


def test_nodes_ports_and_groups() -> None:
    g = build(K8S, {**CLUSTER, "node_count": 3})
    assert of_type(g, "OS::Nova::Server") == ["kube_master_0", "kube_minion_0", "kube_minion_1", "kube_minion_2"]
    port = g.nodes["kube_master_0_eth0"].properties
    assert port["security_groups"] == [get_resource("secgroup_base"), get_resource("secgroup_kube_master")]
    assert port["fixed_ips"] == [{"subnet": get_resource("fixed_subnet")}]
    assert g.nodes["kube_minion_2_eth0"].properties["security_groups"][1] == get_resource("secgroup_kube_minion")
    server = g.nodes["kube_minion_1"].properties
    assert server["networks"] == [{"port": get_resource("kube_minion_1_eth0")}]
    assert server["metadata"]["role"] == "minion"
    assert server["metadata"]["api_server"] == get_attr("api_lb", "vip_address")
    assert len(g.outputs["node_addresses"].value) == 3
    assert g.value("number_of_minions") == 3


def test_without_load_balancer_masters_get_floating_ips() -> None:
    g = build({**K8S, "master_lb_enabled": False}, CLUSTER)
    assert of_type(g, "OS::Octavia::LoadBalancer") == []
    assert "kube_master_0_floating" in g.nodes
    assert g.outputs["master_addresses"].value == [get_attr("kube_master_0_floating", "floating_ip_address")]
    assert g.outputs["api_address"].value["str_replace"]["params"]["HOST"] == get_attr(
        "kube_master_0_floating", "floating_ip_address")


def test_floating_ips_disabled() -> None:
    g = build({**K8S, "floating_ip_enabled": False}, CLUSTER)
    assert of_type(g, "OS::Neutron::FloatingIP") == []
    assert g.outputs["node_addresses"].value[0] == get_attr("kube_minion_0_eth0", "fixed_ips", 0, "ip_address")
    assert g.outputs["api_address"].value["str_replace"]["params"]["HOST"] == get_attr("api_lb", "vip_address")


def test_existing_fixed_network_is_reused() -> None:
    g = build({**K8S, "fixed_network": "mynet", "fixed_subnet": "mysub"}, CLUSTER)
    for name in ("fixed_network", "fixed_subnet", "extrouter", "extrouter_inside"):
        assert name not in g.nodes
    assert g.nodes["kube_master_0_eth0"].properties["network"] == get_param("fixed_network")
    assert g.nodes["api_lb"].properties["vip_subnet"] == get_param("fixed_subnet")
    assert (g.value("fixed_network"), g.value("fixed_subnet")) == ("mynet", "mysub")
    assert g.nodes["api_lb_floating"].depends_on == ()


def test_fixed_subnet_cidr_label_and_dns() -> None:
    g = build({**K8S, "labels": {"fixed_subnet_cidr": "10.9.0.0/24"}, "dns_nameserver": "1.1.1.1,9.9.9.9"}, CLUSTER)
    assert g.value("fixed_network_cidr") == "10.9.0.0/24"
    assert g.value("dns_nameserver") == "1.1.1.1"


# --- network driver fragments -----------------------------------------------------------------------


def test_flannel_fragment_builds_its_config_from_labels() -> None:
    labels = {"flannel_network_cidr": "10.200.0.0/16", "flannel_network_subnetlen": "26",
              "flannel_backend": "vxlan"}
    g = compose({**K8S, "labels": labels}, CLUSTER, NETWORK_DRIVERS["flannel"])
    config = g.nodes["flannel_network_config"]
    assert config.type == "OS::Heat::Value"
    assert config.properties["value"] == {"Network": get_param("flannel_network_cidr"),
                                          "Subnetlen": get_param("flannel_network_subnetlen"),
                                          "Backend": {"Type": get_param("flannel_backend")}}
    assert (g.value("flannel_network_cidr"), g.value("flannel_network_subnetlen"), g.value("flannel_backend")) \
        == ("10.200.0.0/16", 26, "vxlan")
    assert rules(g, "secgroup_kube_master") == GUIDE_MASTER + [
        {"protocol": "udp", "port_range_min": 8472, "port_range_max": 8472}]
    assert rules(g, "secgroup_kube_minion") == GUIDE_MINION
    for server in ("kube_master_0", "kube_minion_0"):
        assert g.nodes[server].properties["metadata"]["network_config"] == get_attr("flannel_network_config", "value")
    defaults = build(K8S, CLUSTER)
    assert (defaults.value("flannel_network_cidr"), defaults.value("flannel_network_subnetlen"),
            defaults.value("flannel_backend")) == ("10.100.0.0/16", 24, "vxlan")


def test_flannel_host_gw_opens_no_vxlan_port() -> None:
    g = build({**K8S, "labels": {"flannel_backend": "host-gw"}}, CLUSTER)
    assert rules(g, "secgroup_kube_master") == GUIDE_MASTER


def test_calico_fragment() -> None:
    g = build({**K8S, "network_driver": "calico", "labels": {"calico_ipv4pool": "10.111.0.0/16"}}, CLUSTER)
    assert "flannel_network_config" not in g.nodes and "flannel_backend" not in g.params
    value = g.nodes["calico_pool_config"].properties["value"]
    assert value["cidr"] == get_param("calico_ipv4pool") and g.value("calico_ipv4pool") == "10.111.0.0/16"
    assert rules(g, "secgroup_kube_master") == GUIDE_MASTER + [
        {"protocol": "tcp", "port_range_min": 179, "port_range_max": 179}]
    g2 = build({**K8S, "network_driver": "calico", "labels": {"calico_ipv4pool_vxlan": "Always"}}, CLUSTER)
    assert rules(g2, "secgroup_kube_master")[-1] == {"protocol": "udp", "port_range_min": 4789,
                                                      "port_range_max": 4789}
    assert {"protocol": "ipip"} not in rules(g2, "secgroup_kube_minion")
    # IP-in-IP (protocol 4) is in neither group's TCP/UDP/ICMP: both gain a rule for it.
    g3 = build({**K8S, "network_driver": "calico", "labels": {"calico_ipv4pool_ipip": "CrossSubnet"}}, CLUSTER)
    assert rules(g3, "secgroup_kube_master")[-1] == {"protocol": "ipip"}
    assert rules(g3, "secgroup_kube_minion")[-1] == {"protocol": "ipip"}


GUIDE_MINION6 = [{"protocol": "ipv6-icmp", "ethertype": "IPv6"}, {"protocol": "tcp", "ethertype": "IPv6"},
                 {"protocol": "udp", "ethertype": "IPv6"}]


@pytest.mark.parametrize("driver,labels", [("flannel", {"flannel_ipv6_network_cidr": "fd00:10::/56"}),
                                           ("calico", {"calico_ipv6pool": "fd00:20::/64"})])
def test_a_dual_stack_driver_gives_the_minions_group_ipv6_twins(driver: str, labels: dict) -> None:
    """Heat's rules default to IPv4: without the twins a minion's port drops unencapsulated
    IPv6 pod traffic (flannel host-gw, calico direct) at ingress."""
    g = build({**K8S, "network_driver": driver, "labels": labels}, CLUSTER)
    assert rules(g, "secgroup_kube_minion") == GUIDE_MINION + GUIDE_MINION6
    assert not any(r.get("ethertype") for r in rules(g, "secgroup_kube_master"))
    ipv4_only = build({**K8S, "network_driver": driver}, CLUSTER)
    assert rules(ipv4_only, "secgroup_kube_minion") == GUIDE_MINION


def test_driver_specifics_only_in_the_driver_fragment() -> None:
    bare = compose(K8S, CLUSTER, NETWORK_DRIVERS["docker"])
    flannel = compose(K8S, CLUSTER, NETWORK_DRIVERS["flannel"])
    assert set(flannel.nodes) - set(bare.nodes) == {"flannel_network_config"}
    assert set(flannel.params) - set(bare.params) == {"flannel_network_cidr", "flannel_network_subnetlen",
                                                      "flannel_backend"}
    assert not any(p.startswith(("flannel", "calico")) for p in bare.params)
    with pytest.raises(GraphError):
        driver_fragment("weave")


def test_swarm_and_mesos() -> None:
    swarm = build({"coe": "swarm", "network_driver": "docker", "external_network_id": "public"},
                  {"name": "s", "node_count": 2})
    assert of_type(swarm, "OS::Nova::Server") == ["swarm_master_0", "swarm_node_0", "swarm_node_1"]
    assert "flannel_network_config" not in swarm.nodes
    swarm_flannel = build({"coe": "swarm-mode", "network_driver": "flannel"}, {"name": "s"})
    assert "flannel_network_config" in swarm_flannel.nodes
    assert rules(swarm_flannel, "secgroup_swarm_manager")[-1]["port_range_min"] == 8472
    mesos = build({"coe": "mesos", "master_lb_enabled": True}, {"name": "m", "node_count": 1})
    assert of_type(mesos, "OS::Octavia::LoadBalancer") == ["api_lb"]
    assert of_type(mesos, "OS::Nova::Server") == ["mesos_master_0", "mesos_slave_0"]
    with pytest.raises(GraphError):
        build({"coe": "dcos"}, {"name": "d"})


# --- HOT -----------------------------------------------------------------------------------------------


def _refs_resolve(template: dict) -> None:
    resources, params = set(template["resources"]), set(template["parameters"])
    sections = [r.get("properties", {}) for r in template["resources"].values()] + \
        [o["value"] for o in template["outputs"].values()]
    for section in sections:
        for fn, arg in intrinsics(section):
            if fn == "get_param":
                assert arg in params, arg
            elif fn == "get_resource":
                assert arg in resources, arg
            else:
                assert arg[0] in resources, arg
    for name, res in template["resources"].items():
        for dep in res.get("depends_on", []):
            assert dep in resources, (name, dep)


@pytest.mark.parametrize("template,cluster", [
    (K8S, CLUSTER),
    ({**K8S, "master_lb_enabled": False, "floating_ip_enabled": False}, {**CLUSTER, "node_count": 5}),
    ({**K8S, "network_driver": "calico", "fixed_network": "n", "fixed_subnet": "s"}, CLUSTER),
    ({"coe": "swarm", "network_driver": "docker"}, {"name": "s"}),
    ({"coe": "mesos", "master_lb_enabled": True}, {"name": "m", "master_count": 3}),
])
def test_hot_is_valid(template: dict, cluster: dict) -> None:
    g = build(template, cluster)
    hot, values = to_hot(g)
    assert hot["heat_template_version"] == "2018-08-31"
    assert set(hot) == {"heat_template_version", "description", "parameters", "resources", "outputs"}
    assert set(hot["outputs"]) == {"api_address", "master_addresses", "node_addresses"}
    for p in hot["parameters"].values():
        assert p["type"] in {"string", "number", "json", "comma_delimited_list", "boolean"}
    assert set(values) <= set(hot["parameters"])
    _refs_resolve(hot)
    # Resources appear in an order Heat could create them in (every reference earlier).
    seen: set[str] = set()
    for name, res in hot["resources"].items():
        node = g.nodes[name]
        assert node.requires() <= seen, name
        assert res["type"] == node.type
        seen.add(name)
    text, env = to_yaml(g)
    assert "&id" not in text and "*id" not in text  # no YAML aliases
    assert yaml.safe_load(text) == hot
    assert yaml.safe_load(env) == {"parameters": values}
    # The rendered template is the graph again.
    back = Graph.from_dict(g.to_dict())
    assert to_hot(back) == (hot, values)


def test_hot_constraints_and_bad_values() -> None:
    hot, values = to_hot(build(K8S, CLUSTER))
    assert hot["parameters"]["flannel_backend"]["constraints"] == [{"allowed_values": ["vxlan", "host-gw"]}]
    assert hot["resources"]["api_lb_floating"]["depends_on"] == ["extrouter_inside"]
    assert values["flannel_backend"] == "vxlan" and values["number_of_minions"] == 2
    # refused by the API's own label check, with its message (issue 24: one check everywhere)
    with pytest.raises(GraphError, match="Label flannel_backend=udp is not supported"):
        build({**K8S, "labels": {"flannel_backend": "udp"}}, CLUSTER)


def test_the_export_reads_labels_as_the_api_checked_them() -> None:
    """A padded backend still opens UDP 8472; a number given as 24.0 is the /24 it means."""
    padded = build({**K8S, "labels": {"flannel_backend": " vxlan", "flannel_network_subnetlen": 24.0}}, CLUSTER)
    hot, values = to_hot(padded)
    assert values["flannel_backend"] == "vxlan" and values["flannel_network_subnetlen"] == 24
    rules = hot["resources"]["secgroup_kube_master"]["properties"]["rules"]
    assert {"protocol": "udp", "port_range_min": 8472, "port_range_max": 8472} in [
        {k: r.get(k) for k in ("protocol", "port_range_min", "port_range_max")} for r in rules]


def test_a_registered_driver_without_a_fragment_builds_with_its_labels_as_parameters(monkeypatch) -> None:
    from netbay.drivers import example, registry

    monkeypatch.setitem(registry.DRIVERS, "example", example.SPEC)
    hot, values = to_hot(build({**K8S, "network_driver": "example", "labels": {"example_pod_cidr": " 10.7.0.0/16"}},
                               CLUSTER))
    assert values["example_pod_cidr"] == "10.7.0.0/16"
    assert "flannel_backend" not in hot["parameters"]
