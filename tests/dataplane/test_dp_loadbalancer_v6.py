"""A load balancer with an IPv6 VIP and IPv6 members on the default (nftables) provider
(issue 28 item 6): round robin over the members through the VIP, the members seeing
the VIP as the client (full proxy), a TCP monitor taking a stopped member out, least
connections counting IPv6 connections (issue 29; the haproxy
provider's IPv6 VIPs: tests/dataplane/test_dp_lb_haproxy.py). A real server and agent, members are
sandboxes with a tiny TCP server of their own.
"""

from __future__ import annotations

import socket
import threading
from collections import Counter
from collections.abc import Iterator

import pytest

from netbay.dataplane import netns
from netbay.dataplane.loadbalancer import TABLE
from netbay.dataplane.nft import Nft

from .agent_fixtures import Cloud, wait_for
from .dp_helpers import fixed_ip
from .lb_fixtures import HOLD_PORT, Holder, hold, wait_held

CLOUD_TAG = "lb6"   # the shared `cloud` fixture (conftest.py): its namespace prefix
LB = "/load-balancer/v2/lbaas"
PORT = 8080


class Member:
    """A TCP server in a sandbox: answers each connection with its name and the peer it saw."""

    def __init__(self, ns: str, name: str) -> None:
        self.name = name
        with netns.entered(ns):
            self.sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("::", PORT))
        self.sock.listen(16)
        self.sock.settimeout(0.1)
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, peer = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with conn:
                conn.sendall(f"{self.name} {peer[0]}".encode())

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(5)
        self.sock.close()


def fetch(ns: str, vip: str) -> tuple[str, str] | None:
    """(member name, the peer it saw) of one connection to the VIP; None if none answered."""
    with netns.entered(ns):
        s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    try:
        s.settimeout(1.0)
        s.connect((vip, 80))
        name, peer = s.recv(256).decode().split()
        return name, peer
    except (OSError, ValueError):
        return None
    finally:
        s.close()


@pytest.fixture(scope="module")
def lab(cloud: Cloud) -> Iterator[dict]:
    net, sub = cloud.network6("lb6-net", "fd00:79::/64")
    web = cloud.ok(cloud.http.post("/network/v2.0/security-groups", json={"security_group": {
        "name": "web6"}}), 201)["security_group"]
    cloud.ok(cloud.http.post("/network/v2.0/security-group-rules", json={"security_group_rule": {
        "security_group_id": web["id"], "direction": "ingress", "ethertype": "IPv6", "protocol": "tcp",
        "port_range_min": PORT, "port_range_max": PORT}}), 201)
    members: list[Member] = []
    sandboxes = []
    try:
        for name in ("m1", "m2", "client"):
            port = cloud.ok(cloud.http.post("/network/v2.0/ports", json={"port": {"network_id": net["id"]}}),
                            201)["port"]
            if name != "client":
                cloud.ok(cloud.http.put(f"/network/v2.0/ports/{port['id']}", json={"port": {
                    "security_groups": [*port["security_groups"], web["id"]]}}))
            sb = cloud.sandbox(f"lb6-{name}", ports=[port["id"]])
            sandboxes.append(sb)
            cloud.wait_status(f"/netbay/v1/sandboxes/{sb['id']}", "ACTIVE", 30)
            if name != "client":
                members.append(Member(cloud.sandbox_ns(sb["id"]), name))
        yield {"net": net, "subnet": sub, "members": {m.name: (m, sb) for m, sb in zip(members, sandboxes)},
               "client": cloud.sandbox_ns(sandboxes[-1]["id"])}
    finally:
        for m in members:
            m.stop()
        for sb in sandboxes:
            cloud.delete_sandbox(sb["id"])


def settle(cloud: Cloud, lb_id: str, status: str = "ACTIVE") -> dict:
    return wait_for(lambda: (lb := cloud.ok(cloud.http.get(f"{LB}/loadbalancers/{lb_id}"))["loadbalancer"])
                    ["provisioning_status"] == status and lb, 30, 0.05, f"load balancer {status}")


def post(cloud: Cloud, path: str, key: str, body: dict, lb_id: str) -> dict:
    made = cloud.ok(cloud.http.post(f"{LB}/{path}", json={key: body}), 201)[key]
    settle(cloud, lb_id)
    return made


def test_ipv6_vip_spreads_over_ipv6_members(cloud: Cloud, lab: dict) -> None:
    sub = lab["subnet"]
    lb = cloud.ok(cloud.http.post(f"{LB}/loadbalancers", json={"loadbalancer": {
        "name": "lb6", "vip_subnet_id": sub["id"]}}), 201)["loadbalancer"]
    lb = settle(cloud, lb["id"])
    vip = lb["vip_address"]
    assert vip.startswith("fd00:79::")
    listener = post(cloud, "listeners", "listener", {"loadbalancer_id": lb["id"], "protocol": "TCP",
                                                      "protocol_port": 80}, lb["id"])
    pool = post(cloud, "pools", "pool", {"listener_id": listener["id"], "protocol": "TCP",
                                         "lb_algorithm": "ROUND_ROBIN"}, lb["id"])
    for _m, sb in lab["members"].values():
        post(cloud, f"pools/{pool['id']}/members", "member", {
            "address": fixed_ip(cloud.port(sb["ports"][0]["port_id"]), 6), "protocol_port": PORT,
            "subnet_id": sub["id"]}, lb["id"])
    with Nft(cloud.names.loadbalancer(lb["id"])) as nft:
        assert ("ip6", TABLE) in nft.tables()
    wait_for(lambda: fetch(lab["client"], vip), 10, 0.05, "the VIP answering")
    got = [fetch(lab["client"], vip) for _ in range(12)]
    counts = Counter(g[0] for g in got if g)
    assert set(counts) == {"m1", "m2"} and max(counts.values()) - min(counts.values()) <= 1, got
    assert {g[1] for g in got if g} == {vip}, "the members see the VIP (full proxy)"

    post(cloud, "healthmonitors", "healthmonitor", {"pool_id": pool["id"], "type": "TCP", "delay": 1,
                                                     "timeout": 1, "max_retries": 1}, lb["id"])
    lab["members"]["m2"][0].stop()   # its sandbox stays: connections are refused, the monitor sees it
    wait_for(lambda: {(fetch(lab["client"], vip) or ("refused",))[0] for _ in range(4)} == {"m1"}, 20, 0.2,
             "the monitor taking m2 out")
    cloud.ok(cloud.http.delete(f"{LB}/loadbalancers/{lb['id']}", params={"cascade": "true"}), 204)


def test_ipv6_least_connections_follows_open_connections(cloud: Cloud, lab: dict) -> None:
    """LEAST_CONNECTIONS over an IPv6 VIP (the ``ip6`` table's element, IPv6 members named
    by conntrack's reply tuples): held-open connections go a, then b; when b's closes,
    the next goes to b again."""
    web = cloud.ok(cloud.http.get("/network/v2.0/security-groups", params={"name": "web6"}))["security_groups"][0]
    cloud.ok(cloud.http.post("/network/v2.0/security-group-rules", json={"security_group_rule": {
        "security_group_id": web["id"], "direction": "ingress", "ethertype": "IPv6", "protocol": "tcp",
        "port_range_min": HOLD_PORT, "port_range_max": HOLD_PORT}}), 201)
    sub = lab["subnet"]
    lb = cloud.ok(cloud.http.post(f"{LB}/loadbalancers", json={"loadbalancer": {
        "name": "lc6", "vip_subnet_id": sub["id"]}}), 201)["loadbalancer"]
    lb = settle(cloud, lb["id"])
    vip, ns = lb["vip_address"], cloud.names.loadbalancer(lb["id"])
    listener = post(cloud, "listeners", "listener", {"loadbalancer_id": lb["id"], "protocol": "TCP",
                                                      "protocol_port": 81}, lb["id"])
    pool = post(cloud, "pools", "pool", {"listener_id": listener["id"], "protocol": "TCP",
                                         "lb_algorithm": "LEAST_CONNECTIONS"}, lb["id"])
    address = {}
    for name in ("m1", "m2"):   # in this order: a tie goes to m1
        address[name] = fixed_ip(cloud.port(lab["members"][name][1]["ports"][0]["port_id"]), 6)
        post(cloud, f"pools/{pool['id']}/members", "member", {
            "address": address[name], "protocol_port": HOLD_PORT, "subnet_id": sub["id"]}, lb["id"])
    members = cloud.ok(cloud.http.get(f"{LB}/pools/{pool['id']}/members"))["members"]
    a, b = (next(n for n, ip in address.items() if ip == m["address"])
            for m in sorted(members, key=lambda m: (m["created_at"], m["id"])))
    holders = [Holder(cloud.sandbox_ns(sb["id"]), name, socket.AF_INET6) for name, (_m, sb) in lab["members"].items()]
    conns = []

    def open_conn(expected: str) -> socket.socket:
        s, name = hold(lab["client"], vip, 81)
        conns.append(s)
        assert name == expected
        return s

    try:
        open_conn(a)
        wait_held(ns, listener["id"], address[b], "ip6")   # 1 : 0
        gone = open_conn(b)
        wait_held(ns, listener["id"], address[a], "ip6")   # 1 : 1, a tie: the first member
        gone.close()
        wait_held(ns, listener["id"], address[b], "ip6")   # 1 : 0 active
        open_conn(b)
    finally:
        for s in conns:
            s.close()
        for h in holders:
            h.stop()
    cloud.ok(cloud.http.delete(f"{LB}/loadbalancers/{lb['id']}", params={"cascade": "true"}), 204)
