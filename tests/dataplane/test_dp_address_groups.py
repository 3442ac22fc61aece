"""Address groups in security groups with real packets, through the API and the agent
(issue 29): a rule naming an address group admits its members and drops the rest;
an address added or removed reaches the fabric in place."""

from __future__ import annotations

from .agent_fixtures import Cloud, wait_for
from .sg_lab import tcp

CLOUD_TAG = "ag"   # the shared `cloud` fixture (conftest.py): its namespace prefix


def _sandbox_on(cloud: Cloud, name: str, port_id: str) -> str:
    sb = cloud.sandbox(name, ports=[port_id])
    cloud.wait_status(f"/network/v2.0/ports/{port_id}", "ACTIVE")
    cloud.wait_status(f"/netbay/v1/sandboxes/{sb['id']}", "ACTIVE")
    return cloud.sandbox_ns(sb["id"])


def test_member_allowed_non_member_dropped(cloud: Cloud) -> None:
    conn = cloud.server.connect()
    net = conn.network.create_network(name="agnet")
    conn.network.create_subnet(network_id=net.id, cidr="10.64.0.0/24", ip_version=4)
    sg = conn.network.create_security_group(name="web-ag")
    a, c = conn.network.create_port(network_id=net.id), conn.network.create_port(network_id=net.id)
    ip_a, ip_c = a.fixed_ips[0]["ip_address"], c.fixed_ips[0]["ip_address"]
    group = conn.network.create_address_group(name="clients", addresses=[f"{ip_a}/32", "192.0.2.0/24"])
    conn.network.create_security_group_rule(security_group_id=sg.id, direction="ingress", ethertype="IPv4",
                                            protocol="tcp", remote_address_group_id=group.id)
    server = conn.network.create_port(network_id=net.id, security_group_ids=[sg.id])
    ip_s = server.fixed_ips[0]["ip_address"]
    ns_s, ns_a, ns_c = (_sandbox_on(cloud, n, p.id) for n, p in (("ag-s", server), ("ag-a", a), ("ag-c", c)))
    wait_for(lambda: tcp(ns_a, ns_s, ip_s), 15, 0.1, "the member admitted")
    assert not tcp(ns_c, ns_s, ip_s)
    conn.network.add_addresses_to_address_group(group, [f"{ip_c}/32"])
    wait_for(lambda: tcp(ns_c, ns_s, ip_s), 15, 0.1, "an address added admitted")
    conn.network.remove_addresses_from_address_group(group, [f"{ip_a}/32"])
    wait_for(lambda: not tcp(ns_a, ns_s, ip_s), 15, 0.1, "an address removed dropped")
    assert tcp(ns_c, ns_s, ip_s)
