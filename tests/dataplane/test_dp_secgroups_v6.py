"""Security groups over IPv6 end to end (issue 28 item 6): rules through the network
API, the dataplane agent realizing them, packets between two sandboxes on an IPv6
network. As Neutron's firewalls: neighbour discovery passes a port with no ingress
rule (its NS in, its NA out), while ICMPv6 echo and TCP are dropped until a rule of
ethertype IPv6 opens them; an IPv4 ICMP rule does not open ICMPv6.
"""

from __future__ import annotations

import socket

from netbay.dataplane.rtnl import overlay, rtnl

from .agent_fixtures import Cloud, wait_for
from .dp_helpers import fixed_ip, ping
from .sg_lab import tcp

CLOUD_TAG = "sg6"   # the shared `cloud` fixture (conftest.py): its namespace prefix


def add_rule(cloud: Cloud, group: str, **rule: object) -> dict:
    return cloud.ok(cloud.http.post("/network/v2.0/security-group-rules", json={"security_group_rule": {
        "security_group_id": group, "direction": "ingress", **rule}}), 201)["security_group_rule"]


def resolved(ns: str, ip: str) -> str | None:
    """The MAC ``ns``'s eth0 has for ``ip`` (IPv6 neighbour discovery), None if unresolved."""
    link = rtnl(ns).link("eth0")
    return next((n.mac for n in overlay.neighbours(ns, link.index, socket.AF_INET6) if n.ip == ip and n.mac), None)


def test_icmpv6_and_tcp_need_a_rule_neighbour_discovery_does_not(cloud: Cloud) -> None:
    net, _ = cloud.network6("sg6-net", "fd00:77::/64")
    closed = cloud.ok(cloud.http.post("/network/v2.0/security-groups", json={"security_group": {
        "name": "sg6-closed"}}), 201)["security_group"]       # Neutron's egress rules, no ingress one
    server_port = cloud.ok(cloud.http.post("/network/v2.0/ports", json={"port": {
        "network_id": net["id"], "security_groups": [closed["id"]]}}), 201)["port"]
    server = cloud.sandbox("sg6-server", ports=[server_port["id"]])
    client = cloud.sandbox("sg6-client", networks=[net["id"]])   # the default group
    try:
        for sb in (server, client):
            cloud.wait_status(f"/netbay/v1/sandboxes/{sb['id']}", "ACTIVE", 30)
        ns_s, ns_c = cloud.sandbox_ns(server["id"]), cloud.sandbox_ns(client["id"])
        ip_s = fixed_ip(server_port, 6)
        assert not ping(ns_c, ip_s, timeout=0.5, count=2), "ICMPv6 echo passed with no rule"
        assert not tcp(ns_c, ns_s, ip_s, 80)
        # ND went through both filters meanwhile: the client knows the server's MAC
        assert wait_for(lambda: resolved(ns_c, ip_s), 5, 0.05, "ND") == server_port["mac_address"]

        add_rule(cloud, closed["id"], ethertype="IPv4", protocol="icmp")   # the other family's
        assert not ping(ns_c, ip_s, timeout=0.5, count=2), "an IPv4 ICMP rule opened ICMPv6"
        icmp6 = add_rule(cloud, closed["id"], ethertype="IPv6", protocol="ipv6-icmp")
        assert wait_for(lambda: ping(ns_c, ip_s, timeout=0.3), 10, 0.05, "ICMPv6 echo allowed by the rule")
        assert not tcp(ns_c, ns_s, ip_s, 80)
        add_rule(cloud, closed["id"], ethertype="IPv6", protocol="tcp", port_range_min=80, port_range_max=80)
        assert wait_for(lambda: tcp(ns_c, ns_s, ip_s, 80), 10, 0.05, "TCP/80 allowed by the rule")
        assert not tcp(ns_c, ns_s, ip_s, 81)
        cloud.ok(cloud.http.delete(f"/network/v2.0/security-group-rules/{icmp6['id']}"), 204)
        assert wait_for(lambda: not ping(ns_c, ip_s, timeout=0.3), 10, 0.05, "ICMPv6 dropped again")
    finally:
        for sb in (server, client):
            cloud.delete_sandbox(sb["id"])
