"""Router namespaces with real packets: routing between legs, SNAT, floating IPs.

Topology (all in namespaces this test makes; the legs are wired here as the fabric
would wire them)::

    sandbox a  10.0.0.5 ─┐
    sandbox a2 10.0.0.6 ─┴─ brA ── qr-A 10.0.0.1/24 ──┐
    sandbox b  10.0.1.5 ─── brB ── qr-B 10.0.1.1/24 ──┼─ router namespace
    outside  172.24.4.1 ─── brX ── qg-G 172.24.4.10/24 ┘
              (the bridges live in a fabric namespace)

``outside`` plays the external network: it has no route to 10.0.0.0/8 and does not
forward, so anything reaching it from a sandbox must carry a 172.24.4.x source.
"""

from __future__ import annotations

import contextlib
import select
import socket
import statistics
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from netbay.dataplane import links, netns, router
from netbay.dataplane.names import Names
from netbay.dataplane.nft import Nft
from netbay.dataplane.l3.conntrack import forget_flows
from netbay.dataplane.l3.fipqos import FipLimit
from netbay.dataplane.l3.metering import MeterLabel, MeterRule, traffic_counters
from netbay.dataplane.router import FloatingIP, Gateway, Leg, PortForward
from .dp_helpers import PREFIX, ping
from .test_dp_qos import LIMIT_KBPS, transfer_kbps

NAMES = Names(PREFIX)
GW_ADDR = "172.24.4.10"
OUTSIDE = "172.24.4.1"
FIP_A = "172.24.4.20"
FIP_B = "172.24.4.21"


@dataclass
class Topo:
    router_id: str
    ns: str
    fabric: str
    a: str
    a2: str
    b: str
    outside: str
    gateway: Gateway
    legs: list[Leg] = field(default_factory=list)

    def ensure(self, fips: Sequence[FloatingIP] = (), enable_snat: bool = True,
               routes: Sequence[tuple[str, str]] = (), forwards: Sequence[PortForward] = (),
               metering: Sequence[MeterLabel] = (), fip_limits: Sequence[FipLimit] = ()) -> None:
        router.ensure_router(self.ns, gateway=self.gateway, interfaces=self.legs,
                             floating_ips=list(fips), enable_snat=enable_snat, routes=routes,
                             port_forwards=forwards, metering=metering, fip_limits=fip_limits)


@pytest.fixture
def topo(make_ns) -> Topo:
    rid = str(uuid.uuid4())
    fab = make_ns("rfab")
    a, a2, b, out = make_ns("ra"), make_ns("ra2"), make_ns("rb"), make_ns("rx")
    rns = make_ns("r-" + rid)
    assert rns == NAMES.router(rid)
    for br in ("brA", "brB", "brX"):
        links.bridge(fab, br)
    for i, (sb, br, cidr, gw) in enumerate(((a, "brA", "10.0.0.5/24", "10.0.0.1"),
                                            (a2, "brA", "10.0.0.6/24", "10.0.0.1"),
                                            (b, "brB", "10.0.1.5/24", "10.0.1.1"),
                                            (out, "brX", f"{OUTSIDE}/24", None))):
        links.wire_port(fab, br, sb, host_ifname=f"s{i}", cidrs=[cidr], gateway=gw)
    # The outside world: no way back to private addresses, no forwarding, and it must
    # see (not filter) what arrives with a private source.
    links.sysctl(out, "net.ipv4.ip_forward", 0)
    links.sysctl(out, "net.ipv4.conf.all.rp_filter", 0)
    links.sysctl(out, "net.ipv4.conf.eth0.rp_filter", 0)
    legs = []
    for br, cidr in (("brA", "10.0.0.1/24"), ("brB", "10.0.1.1/24")):
        pid = str(uuid.uuid4())
        leg = Leg(NAMES.router_interface(pid), pid, [cidr])
        links.wire_port(fab, br, rns, host_ifname=NAMES.tap(pid), ifname=leg.ifname,
                        cidrs=[cidr])
        legs.append(leg)
    gpid = str(uuid.uuid4())
    gateway = Gateway(NAMES.router_gateway(gpid), [f"{GW_ADDR}/24"], gateway_ip=OUTSIDE,
                      port_id=gpid)
    links.wire_port(fab, "brX", rns, host_ifname=NAMES.tap(gpid), ifname=gateway.ifname,
                    cidrs=[f"{GW_ADDR}/24"])
    return Topo(rid, rns, fab, a, a2, b, out, gateway, legs)


# --- traffic helpers ----------------------------------------------------------------------


def tcp_peer(server_ns: str, client_ns: str, dst: str, timeout: float = 3.0) -> str | None:
    """Connect from ``client_ns`` to ``dst`` on a port listened on in ``server_ns``;
    the peer address the server saw, or None if no connection was made in time."""
    with netns.entered(server_ns):
        srv = socket.socket()
    with netns.entered(client_ns):
        cli = socket.socket()
    try:
        srv.bind(("0.0.0.0", 0))
        srv.listen(4)
        srv.settimeout(timeout)
        cli.settimeout(timeout)
        try:
            cli.connect((dst, srv.getsockname()[1]))
            conn, peer = srv.accept()
        except OSError:  # includes socket.timeout
            return None
        conn.close()
        return peer[0]
    finally:
        cli.close()
        srv.close()


def tcp_peer_to(client_ns: str, dst: str, port: int, timeout: float) -> bool:
    """True if a TCP connection from ``client_ns`` to ``dst:port`` is made in time."""
    with netns.entered(client_ns):
        cli = socket.socket()
    try:
        cli.settimeout(timeout)
        try:
            cli.connect((dst, port))
        except OSError:
            return False
        return True
    finally:
        cli.close()


@contextlib.contextmanager
def tcp_sources_seen(ns: str, port: int):
    """Collect the source addresses of TCP packets to ``port`` arriving in ``ns``
    (a raw socket: it sees packets even when no connection can be made)."""
    with netns.entered(ns):
        raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP)
    seen: list[str] = []
    try:
        yield seen
        deadline = time.monotonic() + 1.0
        for _ in range(500):  # bounded
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([raw], [], [], min(left, 0.2))[0]:
                break
            data = raw.recv(2048)
            ihl = (data[0] & 0x0F) * 4
            if int.from_bytes(data[ihl + 2:ihl + 4], "big") == port:
                seen.append(socket.inet_ntoa(data[12:16]))
    finally:
        raw.close()


def rules_and_chains(ns: str) -> list[tuple]:
    with Nft(ns) as nft:
        return [(k, o[k].get("name") or o[k].get("comment"), o[k]["handle"])
                for o in nft.list_ruleset() for k in ("chain", "rule") if k in o]


def map_elems(ns: str, name: str) -> list:
    """Elements of set or map ``name`` of the router's table, as nft prints them."""
    with Nft(ns) as nft:
        for o in nft.list_ruleset():
            body = o.get("set") or o.get("map")
            if body and body["table"] == router.TABLE and body["name"] == name:
                return list(body.get("elem", []))
    raise AssertionError(f"no set {name}")


# --- tests ----------------------------------------------------------------------------------


def test_routes_between_internal_networks_without_nat(topo):
    topo.ensure()
    assert links.read_sysctl(topo.ns, "net.ipv4.ip_forward") == "1"
    assert ping(topo.a, "10.0.1.5", count=3)
    assert tcp_peer(topo.b, topo.a, "10.0.1.5") == "10.0.0.5"
    assert tcp_peer(topo.a, topo.b, "10.0.0.5") == "10.0.1.5"


def test_snat_to_the_gateway_address(topo):
    topo.ensure()
    assert tcp_peer(topo.outside, topo.a, OUTSIDE) == GW_ADDR
    assert tcp_peer(topo.outside, topo.b, OUTSIDE) == GW_ADDR
    assert ping(topo.b, OUTSIDE, count=3)
    # Nothing outside can open a connection to a private address.
    assert tcp_peer(topo.a, topo.outside, "10.0.0.5", timeout=0.5) is None


def test_floating_ip_inbound_keeps_source_and_outbound_leaves_as_fip(topo):
    topo.ensure([FloatingIP(FIP_A, "10.0.0.5")])
    assert f"{FIP_A}/32" in links.addresses(topo.ns, topo.gateway.ifname)
    assert tcp_peer(topo.a, topo.outside, FIP_A) == OUTSIDE
    assert ping(topo.outside, FIP_A, count=3)
    assert tcp_peer(topo.outside, topo.a, OUTSIDE) == FIP_A
    # a2, on the same network without a floating IP, still leaves as the gateway
    assert tcp_peer(topo.outside, topo.a2, OUTSIDE) == GW_ADDR
    # and between internal networks a keeps its own address
    assert tcp_peer(topo.b, topo.a, "10.0.1.5") == "10.0.0.5"


def connected(server_ns: str, client_ns: str, dst: str) -> tuple[socket.socket, socket.socket]:
    """An established TCP connection: (client socket, server's accepted socket)."""
    with netns.entered(server_ns):
        srv = socket.socket()
    with netns.entered(client_ns):
        cli = socket.socket()
    try:
        srv.bind(("0.0.0.0", 0))
        srv.listen(1)
        srv.settimeout(3)
        cli.settimeout(3)
        cli.connect((dst, srv.getsockname()[1]))
        conn, _ = srv.accept()
        conn.settimeout(3)
    except BaseException:
        cli.close()
        raise
    finally:
        srv.close()
    return cli, conn


@pytest.mark.parametrize("others", [[], [FloatingIP(FIP_B, "10.0.1.5"),
                                          FloatingIP("172.24.4.22", "10.0.0.6")]],
                         ids=["one", "three"])
def test_releasing_floating_ip_stops_inbound_and_forgets_its_flows(topo, others):
    topo.ensure([FloatingIP(FIP_A, "10.0.0.5"), *others])
    inbound = connected(topo.a, topo.outside, FIP_A)     # outside -> FIP -> a
    outbound = connected(topo.outside, topo.a, OUTSIDE)  # a -> outside, as the FIP
    try:
        for sender, receiver in (inbound, outbound):
            sender.sendall(b"before")
            assert receiver.recv(16) == b"before"

        topo.ensure([])  # released
        assert f"{FIP_A}/32" not in links.addresses(topo.ns, topo.gateway.ifname)
        for sender, receiver in (inbound, outbound):
            # The established flows went with the mapping.
            sender.sendall(b"after")
            receiver.settimeout(0.7)
            with pytest.raises((socket.timeout, ConnectionResetError)):
                receiver.recv(16)
    finally:
        for s in (*inbound, *outbound):
            s.close()
    assert tcp_peer(topo.a, topo.outside, FIP_A, timeout=0.7) is None
    assert tcp_peer(topo.outside, topo.a, OUTSIDE) == GW_ADDR


def test_without_snat_private_sources_leave_unchanged(topo):
    topo.ensure([FloatingIP(FIP_B, "10.0.1.5")], enable_snat=False)
    with netns.entered(topo.outside):
        srv = socket.socket()
    try:
        srv.bind(("0.0.0.0", 0))
        srv.listen(1)
        port = srv.getsockname()[1]
        with tcp_sources_seen(topo.outside, port) as seen:
            assert tcp_peer_to(topo.a, OUTSIDE, port, timeout=0.7) is False
        assert "10.0.0.5" in seen, seen
        assert GW_ADDR not in seen
    finally:
        srv.close()
    # Floating IPs still translate both ways without default SNAT.
    assert tcp_peer(topo.outside, topo.b, OUTSIDE) == FIP_B
    assert tcp_peer(topo.b, topo.outside, FIP_B) == OUTSIDE


def test_hairpin_to_a_floating_ip_on_the_same_network(topo):
    topo.ensure([FloatingIP(FIP_A, "10.0.0.5"), FloatingIP(FIP_B, "10.0.1.5")])
    # a2 and a share a network: the reply only comes back through the router because
    # the router masquerades DNATed internal traffic.
    assert tcp_peer(topo.a, topo.a2, FIP_A) == "10.0.0.1"
    assert tcp_peer(topo.b, topo.a2, FIP_B) == "10.0.1.1"


def test_extra_routes_lead_through_their_nexthop(topo):
    """Neutron's extra routes: 192.168.77.0/24 lives behind sandbox b (10.0.1.5); without
    the route the router sends it to the outside (its default), with it the ping goes
    through b; a changed nexthop replaces the route, an empty list removes it."""
    links.set_up(topo.b, "lo")
    links.add_address(topo.b, "lo", "192.168.77.1/32")
    topo.ensure()
    assert not ping(topo.a, "192.168.77.1", timeout=0.5)
    topo.ensure(routes=[("192.168.77.0/24", "10.0.1.5")])
    assert ping(topo.a, "192.168.77.1", count=3)
    gateways = {r.dst: r.gateway for r in links.routes(topo.ns) if r.dst != "0.0.0.0/0"}
    assert gateways["192.168.77.0/24"] == "10.0.1.5"
    topo.ensure(routes=[("192.168.77.0/24", "10.0.1.5")])  # idempotent
    topo.ensure(routes=[("192.168.77.0/24", "10.0.1.6")])
    assert {r.dst: r.gateway for r in links.routes(topo.ns)}["192.168.77.0/24"] == "10.0.1.6"
    assert not ping(topo.a, "192.168.77.1", timeout=0.5)
    topo.ensure(routes=[])
    assert "192.168.77.0/24" not in {r.dst for r in links.routes(topo.ns)}
    with pytest.raises(links.LinkError, match="192.168.78.0/24"):
        topo.ensure(routes=[("192.168.78.0/24", "10.9.9.9")])   # no leg reaches it


def test_several_nexthops_make_one_ecmp_route(topo):
    """Two nexthops for 192.168.77.0/24 (sandboxes a and a2, each holding 192.168.77.1):
    one multipath route, as Neutron's L3 agent makes it, and flows from b reach both
    (the test hashes on ports, so one client's connections spread); dropping a nexthop
    leaves a plain route through the other, an empty list none."""
    for sandbox in (topo.a, topo.a2):
        links.set_up(sandbox, "lo")
        links.add_address(sandbox, "lo", "192.168.77.1/32")
    routes = [("192.168.77.0/24", "10.0.0.6"), ("192.168.77.0/24", "10.0.0.5")]
    topo.ensure(routes=routes)
    topo.ensure(routes=routes)   # idempotent: read back as the same two nexthops
    from netbay.dataplane.l3.extraroutes import present
    assert present(topo.ns)["192.168.77.0/24"] == ("10.0.0.5", "10.0.0.6")
    links.sysctl(topo.ns, "net.ipv4.fib_multipath_hash_policy", 1)   # L4 hash: per flow
    servers = {sandbox: listening(sandbox, 7777) for sandbox in (topo.a, topo.a2)}
    try:
        reached = {sandbox: 0 for sandbox in servers}
        for _ in range(16):
            assert tcp_peer_to(topo.b, "192.168.77.1", 7777, timeout=2)
            for sandbox, srv in servers.items():
                srv.settimeout(0.05)
                with contextlib.suppress(OSError):
                    conn, _peer = srv.accept()
                    conn.close()
                    reached[sandbox] += 1
        assert sum(reached.values()) == 16 and all(reached.values()), reached
    finally:
        for srv in servers.values():
            srv.close()
    topo.ensure(routes=routes[:1])
    assert present(topo.ns)["192.168.77.0/24"] == ("10.0.0.6",)
    topo.ensure(routes=[])
    assert "192.168.77.0/24" not in present(topo.ns)


def listening(ns: str, port: int) -> socket.socket:
    with netns.entered(ns):
        srv = socket.socket()
    srv.bind(("0.0.0.0", port))
    srv.listen(4)
    srv.settimeout(2)
    return srv


def test_port_forwarding_ranges_map_port_by_port(topo):
    """``floating-ip-port-forwarding-port-ranges`` as the agent gets them (the floating
    IP's ``port_forwardings``): 3000:3002 -> a's 2000:2002 port by port, 4000:4001 -> a2's
    one port 22; a port beyond a range goes nowhere."""
    fip = {"router_id": topo.router_id, "floating_ip_address": FIP_B, "port_forwardings": [
        {"protocol": "tcp", "internal_ip_address": "10.0.0.5", "external_port_range": "3000:3002",
         "internal_port_range": "2000:2002"},
        {"protocol": "tcp", "internal_ip_address": "10.0.0.6", "external_port_range": "4000:4001",
         "internal_port": 22}]}
    spec = router.from_api({"id": topo.router_id}, [], {}, [fip], NAMES)
    assert [(f.external_port, f.internal_ip, f.internal_port) for f in spec.port_forwards] == [
        (3000, "10.0.0.5", 2000), (3001, "10.0.0.5", 2001), (3002, "10.0.0.5", 2002),
        (4000, "10.0.0.6", 22), (4001, "10.0.0.6", 22)]
    topo.ensure(forwards=spec.port_forwards)
    for sandbox, inside, outside in ((topo.a, 2001, 3001), (topo.a, 2002, 3002), (topo.a2, 22, 4000),
                                     (topo.a2, 22, 4001)):
        srv = listening(sandbox, inside)
        try:
            assert tcp_peer_to(topo.outside, FIP_B, outside, timeout=3), (inside, outside)
            conn, peer = srv.accept()
            conn.close()
            assert peer[0] == OUTSIDE
        finally:
            srv.close()
    srv = listening(topo.a, 2003)
    try:
        assert not tcp_peer_to(topo.outside, FIP_B, 3003, timeout=0.7)
    finally:
        srv.close()


def test_port_forwarding_reaches_the_internal_port_from_outside(topo):
    """A floating IP's TCP 2222 forwarded to sandbox a's port 22 and 2223 to a2's 22:
    the outside reaches each through the floating address, the server sees the outside's
    own address; a port not forwarded goes nowhere; removing one leaves the other."""
    pf_a = PortForward(FIP_B, "tcp", 2222, "10.0.0.5", 22)
    pf_a2 = PortForward(FIP_B, "tcp", 2223, "10.0.0.6", 22)
    topo.ensure(forwards=[pf_a, pf_a2])
    assert ((FIP_B, "tcp", 2222), "10.0.0.5") in [(tuple(k["concat"]), v) for k, v in map_elems(topo.ns, "pf_addr")]
    for sandbox, port in ((topo.a, 2222), (topo.a2, 2223)):
        srv = listening(sandbox, 22)
        try:
            assert tcp_peer_to(topo.outside, FIP_B, port, timeout=3)
            _conn, peer = srv.accept()
            _conn.close()
            assert peer[0] == OUTSIDE
        finally:
            srv.close()
    srv = listening(topo.a, 2224)
    try:
        assert not tcp_peer_to(topo.outside, FIP_B, 2224, timeout=0.7)
    finally:
        srv.close()
    topo.ensure(forwards=[pf_a2])
    assert len(map_elems(topo.ns, "pf_port")) == 1
    srv = listening(topo.a, 22)
    try:
        assert not tcp_peer_to(topo.outside, FIP_B, 2222, timeout=0.7)
    finally:
        srv.close()
    topo.ensure()
    assert f"{FIP_B}/32" not in links.addresses(topo.ns, topo.gateway.ifname)


def test_idempotent_repair_and_remove(topo):
    fips = [FloatingIP(FIP_A, "10.0.0.5")]
    topo.ensure(fips)
    with Nft(topo.ns) as nft:
        first = nft.list_ruleset()
    addrs = sorted(links.addresses(topo.ns))
    routes = links.routes(topo.ns)
    topo.ensure(fips)
    with Nft(topo.ns) as nft:
        assert nft.list_ruleset() == first  # same handles: nothing was rewritten
        # Someone deletes a rule: the next ensure rebuilds the table.
        rule = next(o["rule"] for o in first if "rule" in o
                    and o["rule"]["comment"].endswith("fip-dnat"))
        nft.run([{"delete": {"rule": {"family": "ip", "table": router.TABLE,
                                      "chain": rule["chain"], "handle": rule["handle"]}}}])
    assert sorted(links.addresses(topo.ns)) == addrs
    assert links.routes(topo.ns) == routes
    assert tcp_peer(topo.a, topo.outside, FIP_A, timeout=0.7) is None
    topo.ensure(fips)
    assert tcp_peer(topo.a, topo.outside, FIP_A) == OUTSIDE

    assert topo.router_id in router.observed_routers(NAMES)
    assert router.remove_router(topo.ns)
    assert not netns.exists(topo.ns)
    assert topo.router_id not in router.observed_routers(NAMES)
    assert not router.remove_router(topo.ns)


@pytest.mark.parametrize("many", [False, True], ids=["few-flows", "many-flows"])
def test_forget_flows_deletes_only_the_released_addresses(make_ns, many):
    """Both ways of finding flows: one unfiltered dump (few flows in the namespace) and
    kernel-filtered dumps (many)."""
    ns = make_ns("r-ct")
    links.set_up(ns, 1)
    router.ensure_router(ns, gateway=None, interfaces=[], floating_ips=[],
                         enable_snat=True)  # the nat table makes conntrack track flows
    with netns.entered(ns):
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for port in range(40 if many else 3):
            udp.sendto(b"x", ("127.0.0.2", 20000 + port))
        udp.sendto(b"x", ("127.0.0.3", 20000))
        udp.sendto(b"x", ("127.0.0.4", 20000))
    finally:
        udp.close()

    def count() -> int:
        return int(links.read_sysctl(ns, "net.netfilter.nf_conntrack_count"))

    before = count()
    assert before >= (42 if many else 5)
    assert forget_flows(ns, {"127.0.0.2"}) == (40 if many else 3)
    assert count() == before - (40 if many else 3)
    assert forget_flows(ns, {"127.0.0.3", "127.0.0.9"}) == 1
    assert count() == before - (41 if many else 4)


def test_missing_leg_is_reported_after_the_rest_is_done(make_ns):
    rid = str(uuid.uuid4())
    ns = make_ns("r-" + rid)
    leg = Leg(NAMES.router_interface("p1"), "p1", ["10.0.0.1/24"])
    with pytest.raises(links.LinkError) as exc:
        router.ensure_router(ns, gateway=None, interfaces=[leg], floating_ips=[],
                             enable_snat=True)
    assert leg.ifname in str(exc.value)
    assert links.read_sysctl(ns, "net.ipv4.ip_forward") == "1"
    assert map_elems(ns, "internal_subnets") == [{"prefix": {"addr": "10.0.0.0", "len": 24}}]


def test_floating_ip_changes_are_element_changes_and_timed(topo):
    """100 floating IPs; association changes touch elements only. Prints timings."""
    def fip(i: int) -> FloatingIP:
        return FloatingIP(f"172.24.5.{i}" if i < 250 else "172.24.6.1", f"10.0.0.{100 + i}")

    def timed(fips: list[FloatingIP]) -> float:
        t0 = time.perf_counter()
        topo.ensure(fips)
        return (time.perf_counter() - t0) * 1e3

    t_first = timed([fip(0)])  # builds the table
    structure = rules_and_chains(topo.ns)
    t_one = statistics.median(timed([fip(0)]) for _ in range(5))
    t_hundred = timed([fip(i) for i in range(100)])
    assert len(map_elems(topo.ns, "fip_dnat")) == 100
    assert len([a for a in links.addresses(topo.ns, topo.gateway.ifname)
                if a.startswith("172.24.5.")]) == 100
    adds, dels = [], []
    for j in range(5):
        base = [fip(i) for i in range(100)]
        adds.append(timed(base + [fip(100 + j)]))
        dels.append(timed(base))
    # Re-associating a floating IP to another fixed IP replaces its element.
    moved = [fip(i) for i in range(99)] + [FloatingIP("172.24.5.99", "10.0.1.5")]
    timed(moved)
    assert ["172.24.5.99", "10.0.1.5"] in map_elems(topo.ns, "fip_dnat")
    assert ["10.0.1.5", "172.24.5.99"] in map_elems(topo.ns, "fip_snat")
    assert ["10.0.0.199", "172.24.5.99"] not in map_elems(topo.ns, "fip_snat")
    assert rules_and_chains(topo.ns) == structure
    print(f"\nrouter ensure: first (table build) {t_first:.1f} ms; 1 FIP (no change) "
          f"{t_one:.1f} ms; 1 -> 100 FIPs {t_hundred:.1f} ms; add 1 FIP to 100 "
          f"{statistics.median(adds):.1f} ms; remove 1 FIP {statistics.median(dels):.1f} ms")


def test_from_api_builds_the_spec_from_neutron_json():
    rid, ext, sub_a, sub_x, sub_6 = "r1", "netx", "sa", "sx", "s6"
    subnets = {
        sub_a: {"id": sub_a, "cidr": "10.0.0.0/24", "gateway_ip": "10.0.0.1"},
        sub_x: {"id": sub_x, "cidr": "172.24.4.0/24", "gateway_ip": "172.24.4.1"},
        sub_6: {"id": sub_6, "cidr": "2001:db8::/64", "gateway_ip": "2001:db8::1"},
    }
    ports = [
        {"id": "pa-1234567890", "device_id": rid, "device_owner": "network:router_interface",
         "fixed_ips": [{"subnet_id": sub_a, "ip_address": "10.0.0.1"}]},
        {"id": "pg-1234567890", "device_id": rid, "device_owner": "network:router_gateway",
         "network_id": ext, "fixed_ips": [{"subnet_id": sub_x, "ip_address": "172.24.4.10"},
                                          {"subnet_id": sub_6, "ip_address": "2001:db8::a"}]},
        {"id": "other", "device_id": "r2", "device_owner": "network:router_interface",
         "fixed_ips": [{"subnet_id": sub_a, "ip_address": "10.0.0.2"}]},
        {"id": "vm", "device_id": rid, "device_owner": "compute:nova", "fixed_ips": []},
    ]
    router_json = {"id": rid, "external_gateway_info": {
        "network_id": ext, "enable_snat": False,
        "external_fixed_ips": [{"subnet_id": sub_x, "ip_address": "172.24.4.10"}]}}
    fips = [
        {"id": "f1", "router_id": rid, "port_id": "p", "floating_ip_address": "172.24.4.20",
         "fixed_ip_address": "10.0.0.5"},
        {"id": "f2", "router_id": None, "port_id": None, "floating_ip_address": "172.24.4.21",
         "fixed_ip_address": None},
        {"id": "f3", "router_id": "r2", "port_id": "q", "floating_ip_address": "172.24.4.22",
         "fixed_ip_address": "10.0.0.9"},
    ]
    names = Names("nb-")
    spec = router.from_api(router_json, ports, subnets, fips, names)
    assert spec.ns == "nb-r-r1" and spec.router_id == rid and spec.routes == ()
    routed = router.from_api({**router_json, "routes": [{"destination": "10.5.0.0/16", "nexthop": "10.0.0.7"}]},
                             ports, subnets, fips, names)
    assert routed.routes == (("10.5.0.0/16", "10.0.0.7"),)
    forwarding = {"id": "f4", "router_id": rid, "port_id": None, "floating_ip_address": "172.24.4.23",
                  "fixed_ip_address": None, "port_forwardings": [
                      {"protocol": "tcp", "external_port": 2222, "internal_ip_address": "10.0.0.5",
                       "internal_port": 22}]}
    spec_pf = router.from_api(router_json, ports, subnets, [*fips, forwarding], names)
    assert spec_pf.port_forwards == (PortForward("172.24.4.23", "tcp", 2222, "10.0.0.5", 22),)
    assert [f.id for f in spec_pf.floating_ips] == ["f1"]
    assert spec.enable_snat is False
    assert spec.interfaces == (Leg("qr-pa-12345678", "pa-1234567890", ("10.0.0.1/24",)),)
    assert spec.gateway == Gateway("qg-pg-12345678", ("172.24.4.10/24", "2001:db8::a/64"),
                                   gateway_ip="172.24.4.1", gateway_ip6="2001:db8::1",
                                   port_id="pg-1234567890")
    assert spec.floating_ips == (FloatingIP("172.24.4.20", "10.0.0.5", "f1"),)
    assert spec.fip_limits == ()
    # qos-fip: the router's floating IPs' own policies' bandwidth limits (not DSCP, not another router's)
    policies = {"qp": {"id": "qp", "rules": [
        {"type": "bandwidth_limit", "direction": "ingress", "max_kbps": 3000, "max_burst_kbps": 300},
        {"type": "dscp_marking", "dscp_mark": 26}]}, "dscp": {"id": "dscp", "rules": [
            {"type": "dscp_marking", "dscp_mark": 26}]}}
    with_qos = [{**fips[0], "qos_policy_id": "qp"}, {**fips[2], "qos_policy_id": "qp"},
                {**forwarding, "qos_policy_id": "dscp"}]
    limited = router.from_api(router_json, ports, subnets, with_qos, names, policies=policies)
    assert limited.fip_limits == (FipLimit("172.24.4.20", ingress_kbps=3000, ingress_burst_kbit=300),)
    # Neutron's default when external_gateway_info omits enable_snat; no gateway: no SNAT.
    router_json["external_gateway_info"].pop("enable_snat")
    assert router.from_api(router_json, ports, subnets, fips, names).enable_snat is True
    bare = router.from_api({"id": rid, "external_gateway_info": None}, ports[:1], subnets,
                           [], names)
    assert bare.gateway is None and bare.enable_snat is False


def test_address_scopes_part_internal_networks_but_not_nat(topo):
    """Neutron's address scope rule: legs of different scopes (no scope is one of its own)
    do not forward to each other; the gateway's SNAT and a floating IP still carry a
    scoped network's traffic; the same scope on both legs routes again."""
    from dataclasses import replace

    leg_a, leg_b = topo.legs
    topo.legs = [replace(leg_a, scope="scope-1"), leg_b]
    topo.ensure([FloatingIP(FIP_B, "10.0.1.5")])
    assert sorted(tuple(e["concat"]) for e in map_elems(topo.ns, "scope_blocked")) == sorted([
        (leg_a.ifname, leg_b.ifname), (leg_b.ifname, leg_a.ifname), (topo.gateway.ifname, leg_a.ifname)])
    assert not ping(topo.a, "10.0.1.5", timeout=0.5)
    assert tcp_peer(topo.b, topo.a, "10.0.1.5", timeout=0.7) is None
    assert tcp_peer(topo.a, topo.b, "10.0.0.5", timeout=0.7) is None
    assert tcp_peer(topo.outside, topo.a, OUTSIDE) == GW_ADDR      # SNAT via the gateway: out and back
    assert tcp_peer(topo.b, topo.a, FIP_B) == "10.0.1.1"           # b through its floating IP (hairpin)
    topo.legs = [replace(leg_a, scope="scope-1"), replace(leg_b, scope="scope-1")]
    topo.ensure([FloatingIP(FIP_B, "10.0.1.5")])
    assert ping(topo.a, "10.0.1.5", count=3)
    assert tcp_peer(topo.b, topo.a, "10.0.1.5") == "10.0.0.5"


def test_metering_labels_count_the_gateway_traffic(topo):
    """Neutron's metering: a label's rules count what crosses the gateway leg — egress by
    the internal source (``-s P -o qg-``), ingress by the internal destination after
    un-NAT (``-d P -i qg-``); an excluded rule's traffic is not counted; a rule change
    keeps the counts; no label, no table."""
    net_a = "10.0.0.0/24"
    rules = (MeterRule("egress", remote_ip_prefix=net_a), MeterRule("ingress", remote_ip_prefix=net_a),
             MeterRule("egress", excluded=True, remote_ip_prefix="10.0.0.6/32"))
    label = MeterLabel("3f1c0d9e-0000-4000-8000-000000000001", rules)
    topo.ensure(metering=[label])
    assert traffic_counters(topo.ns) == {label.id: {"pkts": 0, "bytes": 0}}
    assert ping(topo.a, OUTSIDE)                           # one request out, one reply in
    assert ping(topo.b, OUTSIDE)                           # another network: not this label's
    counted = traffic_counters(topo.ns)[label.id]
    assert counted["pkts"] == 2 and counted["bytes"] >= 2 * 28, counted
    assert ping(topo.a2, OUTSIDE)                          # excluded on the way out, counted back in
    assert traffic_counters(topo.ns)[label.id]["pkts"] == 3
    topo.ensure(metering=[MeterLabel(label.id, (*rules, MeterRule("ingress", remote_ip_prefix="10.0.1.0/24")))])
    assert traffic_counters(topo.ns)[label.id]["pkts"] == 3    # the rules changed, the count stays
    assert ping(topo.b, OUTSIDE)
    assert traffic_counters(topo.ns)[label.id]["pkts"] == 4
    topo.ensure()
    assert traffic_counters(topo.ns) == {}


def test_floating_ip_qos_limits_both_ways(topo):
    """``qos-fip``: the floating IP's ingress (to it, policed before DNAT) and egress (from
    it, policed after SNAT) bounded to the limit, its other traffic not; taken away, gone."""
    fip = FloatingIP(FIP_A, "10.0.0.5")
    limit = FipLimit(FIP_A, LIMIT_KBPS, 1000, LIMIT_KBPS, 1000)
    topo.ensure([fip], fip_limits=[limit])
    topo.ensure([fip], fip_limits=[limit])   # idempotent
    inbound = transfer_kbps(topo.outside, topo.a, FIP_A)
    outbound = transfer_kbps(topo.a, topo.outside, OUTSIDE)
    print(f"\nfloating IP limited to {LIMIT_KBPS} kbit/s: in {inbound:.0f}, out {outbound:.0f} kbit/s")
    assert 0.7 * LIMIT_KBPS <= inbound <= 1.3 * LIMIT_KBPS
    assert 0.7 * LIMIT_KBPS <= outbound <= 1.3 * LIMIT_KBPS
    assert transfer_kbps(topo.b, topo.outside, OUTSIDE) > 3 * LIMIT_KBPS   # SNAT to the gateway: not limited
    topo.ensure([fip])
    with Nft(topo.ns) as nft:
        assert nft.list_table("ip", "netbay-fipqos") is None
    assert transfer_kbps(topo.outside, topo.a, FIP_A) > 3 * LIMIT_KBPS
