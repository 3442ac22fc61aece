"""QoS on a port's host end with real packets (issue 29): a bandwidth limit measured
both ways (a bounded TCP transfer's rate within ±30% of the limit), a DSCP mark seen on
the wire, and the agent's reading of a port's policy.

    sandbox a 10.9.0.1 ── tA ─┐
                              br (fabric namespace)
    sandbox b 10.9.0.2 ── tB ─┘
"""

from __future__ import annotations

import select
import socket
import threading
import time

import pytest

from netbay.dataplane import links, netns, qos
from netbay.dataplane.qos import FabricQos, PortQos

LIMIT_KBPS = 8000            # 1 MB/s
PAYLOAD = 4 * 1000 * 1000    # ~4 s at the limit
STEADY_FROM = 1_500_000      # the rate is measured past this much (nft's bucket: 1 s of the rate + burst)


@pytest.fixture
def pair(make_ns):
    fab, a, b = make_ns("qfab"), make_ns("qa"), make_ns("qb")
    links.bridge(fab, "br")
    links.wire_port(fab, "br", a, host_ifname="tA", cidrs=["10.9.0.1/24"])
    links.wire_port(fab, "br", b, host_ifname="tB", cidrs=["10.9.0.2/24"])
    return fab, a, b


def transfer_kbps(src: str, dst: str, dst_ip: str) -> float:
    """Send PAYLOAD bytes over TCP from ``src`` to ``dst``; the rate the receiver saw past
    the first STEADY_FROM bytes (kbit/s)."""
    with netns.entered(dst):
        srv = socket.socket()
    with netns.entered(src):
        cli = socket.socket()
    # A small receive buffer: a reader the CPU starves (a loaded machine) finds at most
    # this much queued, which would otherwise count as received in no time (CI saw 1.34×).
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    srv.bind(("0.0.0.0", 0))
    srv.listen(1)
    srv.settimeout(20)
    got: dict[str, float] = {}

    def receive() -> None:
        conn, _ = srv.accept()
        conn.settimeout(20)
        total, first, mark = 0, time.monotonic(), 0
        while total < PAYLOAD:
            chunk = conn.recv(65536)
            if not chunk:
                break
            total += len(chunk)
            if not mark and total >= STEADY_FROM:
                first, mark = time.monotonic(), total
        got["seconds"], got["bytes"], got["steady"] = time.monotonic() - first, total, total - mark
        conn.close()

    reader = threading.Thread(target=receive)
    reader.start()
    try:
        cli.settimeout(20)
        cli.connect((dst_ip, srv.getsockname()[1]))
        cli.sendall(b"x" * PAYLOAD)
        cli.close()
        reader.join(30)
    finally:
        cli.close()
        srv.close()
    assert got.get("bytes") == PAYLOAD, got
    return got["steady"] * 8 / 1000 / got["seconds"]


@pytest.mark.parametrize("direction", ["egress", "ingress"])
def test_bandwidth_limit_bounds_a_transfer(pair, direction):
    """``egress``: what port a sends (policed as it enters tA); ``ingress``: what it
    receives (shaped as it leaves tA). Unlimited first, to show the limit is what binds."""
    fab, a, b = pair
    send = (a, b, "10.9.0.2") if direction == "egress" else (b, a, "10.9.0.1")
    free = transfer_kbps(*send)
    limit = PortQos(**{f"{direction}_kbps": LIMIT_KBPS, f"{direction}_burst_kbit": 1000})
    fq = FabricQos(fab)
    fq.set_port("tA", limit)
    fq.set_port("tA", limit)      # idempotent
    assert fq.policed() == ({"tA"} if direction == "egress" else set())
    limited = transfer_kbps(*send)
    print(f"\n{direction}: unlimited {free / 1000:.0f} Mbit/s, limited to {LIMIT_KBPS} kbit/s: {limited:.0f} kbit/s")
    assert free > 3 * LIMIT_KBPS
    assert 0.7 * LIMIT_KBPS <= limited <= 1.3 * LIMIT_KBPS
    fq.set_port("tA", PortQos())  # taken away
    assert fq.policed() == set()
    assert transfer_kbps(*send) > 3 * LIMIT_KBPS


def dscp_seen(ns: str, send_from: str, dst_ip: str) -> int | None:
    """The DSCP of a UDP datagram from ``send_from`` as it arrives in ``ns`` (a raw socket)."""
    with netns.entered(ns):
        raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_UDP)
    with netns.entered(send_from):
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        udp.sendto(b"mark?", (dst_ip, 40404))
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            if not select.select([raw], [], [], 0.2)[0]:
                continue
            data = raw.recv(2048)
            ihl = (data[0] & 0x0F) * 4
            if int.from_bytes(data[ihl + 2:ihl + 4], "big") == 40404:
                return data[1] >> 2
        return None
    finally:
        raw.close()
        udp.close()


def test_dscp_mark_seen_on_the_wire(pair):
    fab, a, b = pair
    assert dscp_seen(b, a, "10.9.0.2") == 0
    marks = FabricQos(fab)
    marks.set_port("tA", PortQos(dscp=26))
    assert marks.marks() == {"tA": 26}
    assert dscp_seen(b, a, "10.9.0.2") == 26
    assert dscp_seen(a, b, "10.9.0.1") == 0       # only what port a sends
    marks.set_port("tA", PortQos(dscp=46))
    assert dscp_seen(b, a, "10.9.0.2") == 46
    marks.forget_port("tA")
    assert dscp_seen(b, a, "10.9.0.2") == 0 and marks.marks() == {}


def test_port_qos_reads_the_port_then_the_network_policy():
    policies = {"p1": {"rules": [
        {"type": "bandwidth_limit", "max_kbps": 1000, "max_burst_kbps": 100, "direction": "egress"},
        {"type": "bandwidth_limit", "max_kbps": 2000, "max_burst_kbps": 0, "direction": "ingress"},
        {"type": "dscp_marking", "dscp_mark": 10}, {"type": "minimum_bandwidth", "min_kbps": 5}]},
        "p2": {"rules": [{"type": "dscp_marking", "dscp_mark": 18}]}}
    networks = {"n": {"qos_policy_id": "p2"}}
    assert qos.port_qos({"qos_policy_id": "p1", "network_id": "n"}, networks, policies) == \
        PortQos(1000, 100, 2000, 0, 10)
    assert qos.port_qos({"network_id": "n"}, networks, policies) == PortQos(dscp=18)
    assert qos.port_qos({"network_id": "n", "device_owner": "network:router_interface"}, networks,
                        policies).empty


def test_a_policy_change_concerns_its_ports_and_its_floating_ips_routers():
    """A policy's change is the work of the ports using it (theirs or their network's) and
    of the routers of the floating IPs using it (``qos-fip``: their limits live there)."""
    from types import SimpleNamespace

    from netbay.dataplane.names import Names
    from netbay.dataplane.qosrealizer import QosRealizer

    state = SimpleNamespace(
        networks={"n": {"id": "n", "qos_policy_id": "p"}},
        ports={"own": {"id": "own", "qos_policy_id": "p"}, "net": {"id": "net", "network_id": "n"},
               "other": {"id": "other", "qos_policy_id": "q"}},
        floatingips={"f": {"id": "f", "qos_policy_id": "p", "router_id": "r"},
                     "g": {"id": "g", "qos_policy_id": "p", "router_id": None},
                     "h": {"id": "h", "qos_policy_id": "q", "router_id": "r2"}})
    work: dict[str, set[str]] = {}
    QosRealizer(Names("n6-")).expand(state, SimpleNamespace(collection="policies", id="p"), work)
    assert work == {"ports": {"own", "net"}, "routers": {"r"}}


# --- end to end: the API and the agent --------------------------------------------------------

CLOUD_TAG = "qs"   # the shared `cloud` fixture (conftest.py): its namespace prefix


def test_policy_through_the_api_reaches_the_port(cloud) -> None:
    """A port given a policy through the API gets its DSCP mark and egress limit from the
    agent; a rule changed reaches it; the policy taken away lifts both."""
    from .agent_fixtures import wait_for

    conn = cloud.server.connect()
    net = conn.network.create_network(name="qos")
    conn.network.create_subnet(network_id=net.id, cidr="10.63.0.0/24", ip_version=4)
    policy = conn.network.create_qos_policy(name="gold")
    conn.network.create_qos_dscp_marking_rule(policy, dscp_mark=18)
    rule = conn.network.create_qos_bandwidth_limit_rule(policy, max_kbps=LIMIT_KBPS, max_burst_kbps=1000)
    a = conn.network.create_port(network_id=net.id, qos_policy_id=policy.id)
    b = conn.network.create_port(network_id=net.id)
    ns_a, ns_b = (cloud.sandbox_ns(cloud.sandbox(n, ports=[p.id])["id"]) for n, p in (("qa", a), ("qb", b)))
    for p in (a, b):
        cloud.wait_status(f"/network/v2.0/ports/{p.id}", "ACTIVE")
    ip_b = b.fixed_ips[0]["ip_address"]
    wait_for(lambda: dscp_seen(ns_b, ns_a, ip_b) == 18, 15, 0.1, "the DSCP mark on what port a sends")
    limited = transfer_kbps(ns_a, ns_b, ip_b)
    print(f"\nthrough the API: limited to {LIMIT_KBPS} kbit/s: {limited:.0f} kbit/s")
    assert 0.7 * LIMIT_KBPS <= limited <= 1.3 * LIMIT_KBPS
    conn.network.update_qos_dscp_marking_rule(
        next(r["id"] for r in conn.network.get_qos_policy(policy).rules if r["type"] == "dscp_marking"),
        policy, dscp_mark=46)
    wait_for(lambda: dscp_seen(ns_b, ns_a, ip_b) == 46, 15, 0.1, "the changed mark")
    conn.network.update_port(a, qos_policy_id=None)
    wait_for(lambda: dscp_seen(ns_b, ns_a, ip_b) == 0, 15, 0.1, "no mark once the policy is gone")
    assert transfer_kbps(ns_a, ns_b, ip_b) > 3 * LIMIT_KBPS
    assert rule.direction == "egress"
