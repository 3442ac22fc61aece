"""The packet tests that mean the same on netbay's own dataplane and on a cloud's OVN
(issue 26, item 5), run once per backend from ``place`` (conftest.py): two pods talk
(ICMP and TCP, on two chassis on the cloud); a security group without the rule drops,
the rule lets it in; a floating IP behind a router with a gateway on the external
network answers from the outside; a load balancer's VIP (TCP) answers from both
its members (embedded: netbay's Octavia API; cloud: Octavia with ovn-octavia-provider).
The network has a router for the load balancer: on OVN, the router answers ARP for
the VIP."""

from __future__ import annotations

import os
import time

import pytest

from netbay.dataplane import netns
from tests.dataplane.dp_helpers import ping
from tests.ovn.cloudhelp import wait_lb
from tests.ovn.probes import MEMBER_PORT, VIP_PORT, Answering, ask, tcp_arrives

from .conftest import Place

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces)")

REACH_TIMEOUT = 20


def reaches(src_ns: str, dst: str, timeout: float = REACH_TIMEOUT) -> bool:
    """Whether an echo from ``src_ns`` to ``dst`` is answered within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ping(src_ns, dst, timeout=0.5):
            return True
    return False


def test_two_pods_talk(clean: Place) -> None:
    a, b = clean.pod("a", host=0), clean.pod("b", host=1)
    clean.settle(a, b)
    assert reaches(a.ns, b.ip) and reaches(b.ns, a.ip)
    assert tcp_arrives(netns.path(a.ns), netns.path(b.ns), b.ip)


def test_security_group_drops_then_allows(clean: Place) -> None:
    conn = clean.conn
    group = conn.network.create_security_group(name="both-no-icmp")   # egress only, as made
    try:
        a, b = clean.pod("sa", host=0), clean.pod("sb", host=1)
        for pod in (a, b):
            conn.network.update_port(pod.port.id, security_group_ids=[group.id])
        clean.settle(a, b)
        assert not reaches(a.ns, b.ip, timeout=3), "a group without an ICMP rule let ICMP in"
        conn.network.create_security_group_rule(security_group_id=group.id, direction="ingress",
                                                ethertype="IPv4", protocol="icmp")
        clean.sync()
        assert reaches(a.ns, b.ip), "the ICMP rule did not let ICMP in"
    finally:
        for pod in list(clean.pods):
            clean.remove(pod)
        conn.network.delete_security_group(group)


def test_floating_ip_answers_from_outside(clean: Place) -> None:
    conn = clean.conn
    group = conn.network.create_security_group(name="both-pings-from-anywhere")
    conn.network.create_security_group_rule(security_group_id=group.id, direction="ingress", ethertype="IPv4",
                                            protocol="icmp")
    router = fip = None
    try:
        router = conn.network.create_router(name="both-r", external_gateway_info={"network_id": clean.public.id})
        conn.network.add_interface_to_router(router, subnet_id=clean.subnet.id)
        pod = clean.pod("f", host=0)
        conn.network.update_port(pod.port.id, security_group_ids=[group.id])
        fip = conn.network.create_ip(floating_network_id=clean.public.id, port_id=pod.port.id)
        clean.settle(pod)
        address = conn.network.get_ip(fip.id).floating_ip_address
        assert reaches(clean.outside, address), f"the outside does not reach floating IP {address}"
    finally:
        if fip is not None:
            conn.network.delete_ip(fip)
        for pod in list(clean.pods):
            clean.remove(pod)
        if router is not None:
            conn.network.remove_interface_from_router(router, subnet_id=clean.subnet.id)
            conn.network.delete_router(router)
        conn.network.delete_security_group(group)


def test_load_balancer_vip_answers_from_both_members(clean: Place) -> None:
    conn, lbs = clean.conn, clean.lb_conn()
    router = conn.network.create_router(name="both-lb-r")
    conn.network.add_interface_to_router(router, subnet_id=clean.subnet.id)
    # The members admit their port from anywhere: the embedded proxy's source is its own address
    group = conn.network.create_security_group(name="both-web")
    conn.network.create_security_group_rule(security_group_id=group.id, direction="ingress", ethertype="IPv4",
                                            protocol="tcp", port_range_min=MEMBER_PORT, port_range_max=MEMBER_PORT)
    servers, lb = [], None
    try:
        m1, m2, client = clean.pod("m1", host=0), clean.pod("m2", host=1), clean.pod("c", host=1)
        for m in (m1, m2):
            conn.network.update_port(m.port.id, security_group_ids=[group.id])
        clean.settle(m1, m2, client)
        servers = [Answering(m.ns, m.ip, m.name) for m in (m1, m2)]
        lb = lbs.load_balancer.create_load_balancer(name="both-lb", vip_subnet_id=clean.subnet.id)
        assert wait_lb(lbs, lb.id) == "ACTIVE"
        listener = lbs.load_balancer.create_listener(loadbalancer_id=lb.id, protocol="TCP", protocol_port=VIP_PORT)
        assert wait_lb(lbs, lb.id) == "ACTIVE"
        pool = lbs.load_balancer.create_pool(listener_id=listener.id, protocol="TCP", lb_algorithm="SOURCE_IP_PORT")
        assert wait_lb(lbs, lb.id) == "ACTIVE"
        for m in (m1, m2):
            lbs.load_balancer.create_member(pool, address=m.ip, protocol_port=MEMBER_PORT, subnet_id=clean.subnet.id)
            assert wait_lb(lbs, lb.id) == "ACTIVE"
        lb = lbs.load_balancer.get_load_balancer(lb.id)
        clean.vip_ready(lb)
        clean.sync()
        got: set[str | None] = set()
        deadline = time.monotonic() + REACH_TIMEOUT
        while not {"m1", "m2"} <= got and time.monotonic() < deadline:
            got |= {ask(client.ns, lb.vip_address, VIP_PORT) for _ in range(10)}
        assert {"m1", "m2"} <= got, got
    finally:
        for server in servers:
            server.close()
        if lb is not None:
            lbs.load_balancer.delete_load_balancer(lb.id, cascade=True)
            deadline = time.monotonic() + 120
            while lbs.load_balancer.find_load_balancer(lb.id) and time.monotonic() < deadline:
                time.sleep(0.5)
        for pod in list(clean.pods):
            clean.remove(pod)
        conn.network.remove_interface_from_router(router, subnet_id=clean.subnet.id)
        conn.network.delete_router(router)
        conn.network.delete_security_group(group)
