"""A router between two IPv6 networks (issue 28 item 6): routed, as Neutron routes IPv6
— no NAT66, so the far side sees the sender's own address. Two sandboxes through the
network API and the dataplane agent, real packets.
"""

from __future__ import annotations

import socket

from netbay.dataplane import netns

from .agent_fixtures import Cloud, wait_for
from .dp_helpers import fixed_ip, ping

CLOUD_TAG = "rt6"   # the shared `cloud` fixture (conftest.py): its namespace prefix


def peer_of_one_connection(client: str, server: str, dst: str, port: int = 7000) -> str:
    """Connect from namespace ``client`` to ``dst:port`` (a listener in ``server``); the
    source address the listener saw."""
    with netns.entered(server):
        srv = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    with netns.entered(client):
        cli = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    try:
        srv.bind((dst, port))
        srv.listen(1)
        srv.settimeout(5)
        cli.settimeout(5)
        cli.connect((dst, port))
        conn, peer = srv.accept()
        conn.close()
        return peer[0]
    finally:
        cli.close()
        srv.close()


def test_ipv6_is_routed_without_nat(cloud: Cloud) -> None:
    net_a, sub_a = cloud.network6("rt6-a", "fd00:78:1::/64")
    net_b, sub_b = cloud.network6("rt6-b", "fd00:78:2::/64")
    router = cloud.ok(cloud.http.post("/network/v2.0/routers", json={"router": {"name": "rt6"}}), 201)["router"]
    for sub in (sub_a, sub_b):
        cloud.ok(cloud.http.put(f"/network/v2.0/routers/{router['id']}/add_router_interface",
                                json={"subnet_id": sub["id"]}))
    a = cloud.sandbox("rt6-sa", networks=[net_a["id"]])
    b = cloud.sandbox("rt6-sb", networks=[net_b["id"]])
    try:
        for sb in (a, b):
            cloud.wait_status(f"/netbay/v1/sandboxes/{sb['id']}", "ACTIVE", 30)
        ns_a, ns_b = cloud.sandbox_ns(a["id"]), cloud.sandbox_ns(b["id"])
        ip_a, ip_b = (fixed_ip(cloud.port(sb["ports"][0]["port_id"]), 6) for sb in (a, b))
        assert wait_for(lambda: ping(ns_a, sub_a["gateway_ip"], timeout=0.3), 15, 0.05, "the router's leg")
        assert wait_for(lambda: ping(ns_a, ip_b, timeout=0.3), 15, 0.05, "a -> b through the router")
        assert ping(ns_b, ip_a, count=2)
        assert peer_of_one_connection(ns_a, ns_b, ip_b) == ip_a   # the sender's own address: no NAT66
    finally:
        for sb in (a, b):
            cloud.delete_sandbox(sb["id"])
