"""Address scopes and IPv6 metering in a router namespace, with real packets (issue 29):
no SNAT within one address scope, IPv6 kept within its scopes, IPv6 counted by
metering labels.

Topology (namespaces this test makes; the legs wired as the fabric would wire them)::

    sandbox a  10.0.0.5  fd00:a::5 ─ brA ─ qr-A 10.0.0.1/24 fd00:a::1/64 ─┐
    sandbox b  10.0.1.5  fd00:b::5 ─ brB ─ qr-B 10.0.1.1/24 fd00:b::1/64 ─┼─ router
    outside  172.24.4.1  fd00:e::1 ─ brX ─ qg-G 172.24.4.10/24 fd00:e::10/64 ┘

``outside`` routes the internal prefixes back through the router's gateway address, as
an external network in the internal subnets' scope does (Neutron's BGP speaker or an
operator's static routes): so a packet it receives shows whether it was SNATed.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace

import pytest

from netbay.dataplane import links, netns, router
from netbay.dataplane.l3.metering import MeterLabel, MeterRule, traffic_counters
from netbay.dataplane.names import Names
from netbay.dataplane.nft import Nft
from netbay.dataplane.router import FloatingIP, Gateway, Leg

from .agent_fixtures import wait_for
from .dp_helpers import PREFIX, ping

NAMES = Names(PREFIX)
GW4, GW6 = "172.24.4.10", "fd00:e::10"
OUT4, OUT6 = "172.24.4.1", "fd00:e::1"
A4, A6, B4, B6 = "10.0.0.5", "fd00:a::5", "10.0.1.5", "fd00:b::5"
FIP_A = "172.24.4.20"


@dataclass
class Topo:
    ns: str
    a: str
    b: str
    outside: str
    gateway: Gateway
    legs: list[Leg]

    def ensure(self, *, gateway: Gateway | None = None, legs: Sequence[Leg] | None = None,
               fips: Sequence[FloatingIP] = (), metering: Sequence[MeterLabel] = ()) -> None:
        router.ensure_router(self.ns, gateway=gateway or self.gateway, interfaces=list(legs or self.legs),
                             floating_ips=list(fips), enable_snat=True, metering=metering)

    def scoped(self, gateway: str = "", a: str = "", b: str = "", *, v6: bool = False,
               fips: Sequence[FloatingIP] = (), metering: Sequence[MeterLabel] = ()) -> None:
        """Ensure with these address scopes (of IPv4, or of IPv6 with ``v6``) on the legs."""
        field_ = "scope6" if v6 else "scope"
        leg_a, leg_b = self.legs
        self.ensure(gateway=replace(self.gateway, **{field_: gateway}),
                    legs=[replace(leg_a, **{field_: a}), replace(leg_b, **{field_: b})], fips=fips,
                    metering=metering)


def _no_dad(ns: str) -> None:
    for key in ("net.ipv6.conf.all.accept_dad", "net.ipv6.conf.default.accept_dad"):
        links.sysctl(ns, key, 0)


@pytest.fixture
def topo(make_ns) -> Topo:
    rid = str(uuid.uuid4())
    fab = make_ns("sfab")
    a, b, out = make_ns("sa"), make_ns("sb"), make_ns("sx")
    rns = make_ns("r-" + rid)
    for ns in (a, b, out, rns):
        _no_dad(ns)
    for br in ("brA", "brB", "brX"):
        links.bridge(fab, br)
    for i, (sb, br, cidrs, gw) in enumerate(((a, "brA", (f"{A4}/24", f"{A6}/64"), "10.0.0.1"),
                                             (b, "brB", (f"{B4}/24", f"{B6}/64"), "10.0.1.1"),
                                             (out, "brX", (f"{OUT4}/24", f"{OUT6}/64"), None))):
        links.wire_port(fab, br, sb, host_ifname=f"s{i}", cidrs=list(cidrs), gateway=gw)
    for sb, gw6 in ((a, "fd00:a::1"), (b, "fd00:b::1")):
        links.replace_route(sb, "::/0", gateway=gw6, dev=links.index(sb, "eth0"))
    for dst, via in (("10.0.0.0/16", GW4), ("fd00:a::/64", GW6), ("fd00:b::/64", GW6)):
        links.replace_route(out, dst, gateway=via, dev=links.index(out, "eth0"))
    links.sysctl(out, "net.ipv4.conf.all.rp_filter", 0)
    links.sysctl(out, "net.ipv4.conf.eth0.rp_filter", 0)
    legs = []
    for br, cidrs in (("brA", ("10.0.0.1/24", "fd00:a::1/64")), ("brB", ("10.0.1.1/24", "fd00:b::1/64"))):
        pid = str(uuid.uuid4())
        leg = Leg(NAMES.router_interface(pid), pid, cidrs)
        links.wire_port(fab, br, rns, host_ifname=NAMES.tap(pid), ifname=leg.ifname, cidrs=list(cidrs))
        legs.append(leg)
    gpid = str(uuid.uuid4())
    gateway = Gateway(NAMES.router_gateway(gpid), (f"{GW4}/24", f"{GW6}/64"), gateway_ip=OUT4,
                      gateway_ip6=OUT6, port_id=gpid)
    links.wire_port(fab, "brX", rns, host_ifname=NAMES.tap(gpid), ifname=gateway.ifname,
                    cidrs=list(gateway.addresses))
    t = Topo(rns, a, b, out, gateway, legs)
    t.ensure()
    assert wait_for(lambda: ping(a, OUT6, timeout=0.3) and ping(b, OUT6, timeout=0.3), 10, 0.1, "IPv6 up")
    return t


def peer(server_ns: str, client_ns: str, dst: str, timeout: float = 2.0) -> str | None:
    """Connect from ``client_ns`` to ``dst`` (a listener in ``server_ns``); the source
    address the listener saw, or None when no connection was made in time."""
    family = socket.AF_INET6 if ":" in dst else socket.AF_INET
    with netns.entered(server_ns):
        srv = socket.socket(family)
    with netns.entered(client_ns):
        cli = socket.socket(family)
    try:
        srv.bind(("::" if family == socket.AF_INET6 else "0.0.0.0", 0))
        srv.listen(4)
        srv.settimeout(timeout)
        cli.settimeout(timeout)
        try:
            cli.connect((dst, srv.getsockname()[1]))
            conn, seen = srv.accept()
        except OSError:  # includes socket.timeout
            return None
        conn.close()
        return str(seen[0])
    finally:
        cli.close()
        srv.close()


def test_no_snat_within_one_address_scope(topo: Topo) -> None:
    """Neutron's L3 agent: a subnet in the external subnet's address scope goes out with
    its own address and is reached directly; a subnet of another scope (or none) is
    SNATed to the gateway's address and not reached; a floating IP is still its
    address out; with no scope on the external subnet, everything is SNATed."""
    topo.scoped(gateway="s1", a="s1", b="s2")
    assert peer(topo.outside, topo.a, OUT4) == A4                 # same scope: routed as is
    assert peer(topo.outside, topo.b, OUT4) == GW4                # another scope: SNAT
    assert peer(topo.a, topo.outside, A4) == OUT4                 # the outside reaches a directly
    assert peer(topo.b, topo.outside, B4, timeout=0.7) is None    # ... but not b, of another scope
    topo.scoped(gateway="s1", a="s1", b="", fips=[FloatingIP(FIP_A, A4)])
    assert peer(topo.outside, topo.a, OUT4) == FIP_A              # a floating IP is kept
    assert peer(topo.outside, topo.b, OUT4) == GW4                # unscoped: SNAT
    topo.scoped(gateway="", a="", b="")
    assert peer(topo.outside, topo.a, OUT4) == GW4                # no scope anywhere: SNAT as before
    topo.scoped(gateway="", a="s1", b="s1")
    assert peer(topo.outside, topo.a, OUT4) == GW4                # the external subnet unscoped: SNAT


def test_ipv6_routed_within_its_address_scopes_only(topo: Topo) -> None:
    """IPv6 is never NATed, so it crosses no scope boundary: between internal legs, and
    to and from the gateway, with SNAT on; IPv4 keeps its own scopes meanwhile."""
    topo.scoped(gateway="s6", a="s6", b="", v6=True)
    assert peer(topo.outside, topo.a, OUT6) == A6                 # one scope: routed
    assert peer(topo.a, topo.outside, A6) == OUT6
    assert not ping(topo.b, OUT6, timeout=0.5)                    # unscoped to scoped: dropped both ways
    assert peer(topo.b, topo.outside, B6, timeout=0.7) is None
    assert not ping(topo.a, B6, timeout=0.5)
    assert ping(topo.a, B4) and peer(topo.outside, topo.b, OUT4) == GW4   # IPv4: unscoped, routed and SNATed
    topo.scoped(gateway="s6", a="s6", b="s6", v6=True)
    assert ping(topo.a, B6) and ping(topo.b, OUT6)
    assert peer(topo.b, topo.a, B6) == A6
    topo.scoped(v6=True)                                          # no scopes: no table
    with Nft(topo.ns) as nft:
        assert ("ip6", "netbay-scope6") not in nft.tables()
    assert ping(topo.b, OUT6)


def test_metering_counts_ipv6(topo: Topo) -> None:
    """A label's IPv6 rules count IPv6 across the gateway leg into the label's one counter,
    beside its IPv4 rules; a rule mixing families counts nothing."""
    rules = (MeterRule("egress", remote_ip_prefix="fd00:a::/64"), MeterRule("ingress", remote_ip_prefix="fd00:a::/64"),
             MeterRule("egress", source_ip_prefix="10.0.0.0/24"),
             MeterRule("ingress", source_ip_prefix="fd00:b::/64", destination_ip_prefix="10.0.1.0/24"))
    label = MeterLabel("3f1c0d9e-0000-4000-8000-000000000006", rules)
    topo.ensure(metering=[label])
    assert traffic_counters(topo.ns) == {label.id: {"pkts": 0, "bytes": 0}}
    assert ping(topo.a, OUT6)                              # one request out, one reply in
    counted = traffic_counters(topo.ns)[label.id]
    assert counted["pkts"] == 2 and counted["bytes"] >= 2 * 48, counted
    assert ping(topo.b, OUT6)                              # another prefix: not counted
    assert ping(topo.a, OUT4)                              # the IPv4 rule: the request out only
    assert traffic_counters(topo.ns)[label.id]["pkts"] == 3


def test_from_api_reads_each_legs_scopes_per_ip_version() -> None:
    """A leg's IPv4 and IPv6 scopes are its subnets' pools' (the first subnet of each
    version); a subnet of no pool, or a pool of no scope, is unscoped."""
    subnets = {"s4": {"id": "s4", "cidr": "10.0.0.0/24", "ip_version": 4, "subnetpool_id": "p4"},
               "s6": {"id": "s6", "cidr": "fd00:a::/64", "ip_version": 6, "subnetpool_id": "p6"},
               "x4": {"id": "x4", "cidr": "172.24.4.0/24", "ip_version": 4, "gateway_ip": "172.24.4.1"},
               "x6": {"id": "x6", "cidr": "fd00:e::/64", "ip_version": 6, "subnetpool_id": "px"}}
    pools = {"p4": {"address_scope_id": "scope-4"}, "p6": {"address_scope_id": "scope-6"},
             "px": {"address_scope_id": "scope-6"}}
    ports = [{"id": "pa-1234567890", "device_id": "r1", "device_owner": "network:router_interface",
              "fixed_ips": [{"subnet_id": "s4", "ip_address": "10.0.0.1"},
                            {"subnet_id": "s6", "ip_address": "fd00:a::1"}]},
             {"id": "pg-1234567890", "device_id": "r1", "device_owner": "network:router_gateway",
              "fixed_ips": [{"subnet_id": "x4", "ip_address": "172.24.4.10"},
                            {"subnet_id": "x6", "ip_address": "fd00:e::10"}]}]
    spec = router.from_api({"id": "r1", "external_gateway_info": {"network_id": "x"}}, ports, subnets, [],
                           Names("nb-"), pools)
    (leg,) = spec.interfaces
    assert (leg.scope, leg.scope6) == ("scope-4", "scope-6")
    assert spec.gateway is not None and (spec.gateway.scope, spec.gateway.scope6) == ("", "scope-6")
