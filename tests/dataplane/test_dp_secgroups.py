"""Security groups with real packets: sandboxes on bridges in a fabric namespace.

Every test builds a fabric namespace with one bridge per network and sandboxes wired
to it (``links.wire_port``, ``tap<port>`` ends), then lets
:class:`netbay.dataplane.secgroups.SecurityGroups` filter them. Allowed traffic is a
TCP connection (or UDP datagram) that completes; denied traffic is one that does not
within a short timeout (a drop, not a refusal, so the timeout is the only signal).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from netbay.dataplane import links
from netbay.dataplane.nft import Nft
from netbay.dataplane.ctkill import Kill as _Kill
from netbay.dataplane.ctkill import ct_delete as _ct_delete
from netbay.dataplane.secgroups import TABLE, SecurityGroups
from netbay.dataplane.sg.parse import parse_port, parse_rule, port_blocks

from .sg_lab import DENY_TIMEOUT, Lab, add_address, delivered, eventually, netns_socket, open_tcp, rule, tcp


@pytest.fixture
def lab(make_ns) -> Iterator[Lab]:
    lab = Lab(make_ns)
    try:
        yield lab
    finally:
        lab.sg.close()


# --- unit pieces ------------------------------------------------------------------------

def test_port_blocks_cover_range_exactly():
    for lo, hi in ((80, 80), (1, 1023), (8000, 8100), (0, 65535), (65535, 65535), (3, 17)):
        blocks = port_blocks(lo, hi)
        covered = [p for start, k in blocks for p in range(start, start + (1 << k))]
        assert covered == list(range(lo, hi + 1))
        assert all(start % (1 << k) == 0 for start, k in blocks)


def test_parsing_follows_neutron():
    port = {"id": "p1", "mac_address": "FA:16:3E:00:00:01", "fixed_ips": [{"ip_address": "10.0.0.1"}],
            "device_owner": "network:router_interface", "security_groups": []}
    assert not parse_port(port, 1, 1).secured                 # trusted device owner
    assert parse_port(dict(port, device_owner="compute:nova"), 1, 1).secured
    assert not parse_port(dict(port, device_owner="", port_security_enabled=False), 1, 1).secured
    with pytest.raises(ValueError):
        parse_port(port, 0x10000, 1)                          # marks are 16 bits
    r = parse_rule({"id": "r", "security_group_id": "g", "direction": "ingress",
                     "ethertype": "IPv6", "protocol": "icmp", "port_range_min": 128})
    assert r.pieces == (("c", (128,)),) and r.family == 6  # icmp on IPv6 is ICMPv6
    r = parse_rule({"id": "r", "security_group_id": "g", "direction": "egress",
                     "ethertype": "IPv4", "protocol": "udp", "port_range_min": 1,
                     "port_range_max": 65535, "remote_ip_prefix": "0.0.0.0/0"})
    assert r.pieces == (("p", (17,)),) and r.prefix is None  # all ports, from anywhere
    assert parse_rule({"id": "r", "security_group_id": "g", "direction": "ingress",
                        "ethertype": "IPv4", "remote_ip_prefix": "fd00::/64"}) is None
    # A prefix kept as written (host bits, as Neutron keeps it) matches its network.
    assert str(parse_rule({"id": "r", "security_group_id": "g", "direction": "ingress", "ethertype": "IPv4",
                           "remote_ip_prefix": "10.1.2.3/24"}).prefix) == "10.1.2.0/24"


# --- the default group ---------------------------------------------------------------------

def test_default_group_same_group_in_other_group_out_egress_allowed(lab):
    net = lab.network()
    d1, d2 = lab.group(default=True), lab.group(default=True)
    a = lab.port(net, "10.0.0.1", groups=[d1])
    b = lab.port(net, "10.0.0.2", groups=[d1])
    c = lab.port(net, "10.0.0.3", groups=[d2])
    lab.apply()
    assert eventually(lambda: tcp(a.ns, b.ns, b.ip))          # same group
    assert eventually(lambda: tcp(b.ns, a.ns, a.ip))
    assert not tcp(c.ns, a.ns, a.ip)                          # other group: ingress dropped
    assert not tcp(a.ns, c.ns, c.ip)                          # ...both ways
    assert lab.sg.observed() == {a.id, b.id, c.id}


def test_rule_opening_tcp80_from_a_cidr(lab):
    net = lab.network()
    d = lab.group(default=True)
    web = lab.group(rule(None, "ingress", protocol="tcp", port_range_min=80, port_range_max=80,
                         remote_ip_prefix="10.0.0.0/28"))
    inside = lab.port(net, "10.0.0.5", groups=[d])
    outside = lab.port(net, "10.0.0.100", groups=[d])
    server = lab.port(net, "10.0.0.20", groups=[web])
    lab.apply()
    assert eventually(lambda: tcp(inside.ns, server.ns, server.ip, 80))
    assert not tcp(outside.ns, server.ns, server.ip, 80)     # outside the CIDR
    assert not tcp(inside.ns, server.ns, server.ip, 81)      # another port


def test_port_ranges_protocol_numbers_and_icmp(lab):
    from .dp_helpers import ping

    net = lab.network()
    d = lab.group(default=True)
    srv = lab.group(rule(None, "ingress", protocol="6", port_range_min=8000, port_range_max=8100),
                    rule(None, "ingress", protocol="icmp", port_range_min=8))
    cli = lab.port(net, "10.0.0.1", groups=[d])
    s = lab.port(net, "10.0.0.2", groups=[srv])
    lab.apply()
    assert eventually(lambda: tcp(cli.ns, s.ns, s.ip, 8000))
    assert tcp(cli.ns, s.ns, s.ip, 8100)
    assert tcp(cli.ns, s.ns, s.ip, 8047)
    assert not tcp(cli.ns, s.ns, s.ip, 7999)
    assert not tcp(cli.ns, s.ns, s.ip, 8101)
    assert ping(cli.ns, s.ip, timeout=0.5, count=2)           # icmp echo-request (type 8)


# --- remote groups, rule changes ---------------------------------------------------------

def test_remote_group_follows_membership(lab):
    net = lab.network()
    d, clients = lab.group(default=True), lab.group()
    web = lab.group(rule(None, "ingress", protocol="tcp", port_range_min=80, port_range_max=81,
                         remote_group_id=clients))
    a = lab.port(net, "10.0.0.1", groups=[d])
    s = lab.port(net, "10.0.0.2", groups=[web])
    lab.apply()
    assert not tcp(a.ns, s.ns, s.ip)
    a.groups = [d, clients]
    lab.update(a)                                            # member added: an element
    assert eventually(lambda: tcp(a.ns, s.ns, s.ip))
    with open_tcp(a.ns, s.ns, s.ip, 81) as (cli, conn):
        assert delivered(conn, cli, b"before")
        a.groups = [d]
        lab.update(a)                                        # member removed
        assert not tcp(a.ns, s.ns, s.ip)                     # new connections dropped
        assert lab.sg.wait_conntrack(5)
        assert not delivered(conn, cli, b"after")            # the open one too (conntrack)


def test_rule_removal_refuses_new_connections_and_kills_open_ones(lab):
    net = lab.network()
    d = lab.group(default=True)
    web = lab.group()
    a = lab.port(net, "10.0.0.1", groups=[d])
    s = lab.port(net, "10.0.0.2", groups=[web])
    lab.apply()
    assert not tcp(a.ns, s.ns, s.ip)
    r = rule(web, "ingress", protocol="tcp", port_range_min=80, port_range_max=81)
    lab.sg.ensure_rule(r)
    assert eventually(lambda: tcp(a.ns, s.ns, s.ip))
    with open_tcp(a.ns, s.ns, s.ip, 81) as (cli, conn):
        assert delivered(conn, cli, b"hello")
        lab.sg.remove_rule(r["id"])
        assert not tcp(a.ns, s.ns, s.ip)
        assert lab.sg.wait_conntrack(5)
        assert not delivered(conn, cli, b"again")
    # and through ensure_group (the whole group, by rule id)
    lab.groups[web]["security_group_rules"] = [r]
    lab.sg.ensure_group(lab.groups[web])
    assert eventually(lambda: tcp(a.ns, s.ns, s.ip))
    lab.groups[web]["security_group_rules"] = []
    lab.sg.ensure_group(lab.groups[web])
    assert not tcp(a.ns, s.ns, s.ip)


# --- anti-spoofing ----------------------------------------------------------------------

def test_spoofed_ip_dropped_until_allowed_address_pair(lab):
    net = lab.network()
    d = lab.group(default=True)
    a = lab.port(net, "10.0.0.1", groups=[d])
    b = lab.port(net, "10.0.0.2", groups=[d])
    lab.apply()
    assert eventually(lambda: tcp(a.ns, b.ns, b.ip))
    add_address(a.ns, "10.0.0.99/24")
    assert not tcp(a.ns, b.ns, b.ip, src="10.0.0.99")
    a.pairs = [{"ip_address": "10.0.0.99"}]
    lab.update(a)
    assert eventually(lambda: tcp(a.ns, b.ns, b.ip, src="10.0.0.99"))
    a.pairs = [{"ip_address": "10.0.0.96/29"}]                # a CIDR pair
    lab.update(a)
    assert eventually(lambda: tcp(a.ns, b.ns, b.ip, src="10.0.0.99"))
    a.pairs = []
    lab.update(a)
    assert not tcp(a.ns, b.ns, b.ip, src="10.0.0.99")
    assert eventually(lambda: tcp(a.ns, b.ns, b.ip))


def test_spoofed_mac_dropped(lab):
    net = lab.network()
    d = lab.group(default=True)
    a = lab.port(net, "10.0.0.1", groups=[d])
    b = lab.port(net, "10.0.0.2", groups=[d])
    lab.apply()
    assert eventually(lambda: tcp(a.ns, b.ns, b.ip))
    links.set_mac(a.ns, "eth0", "fa:16:3e:99:99:99")
    assert not tcp(a.ns, b.ns, b.ip)
    links.set_mac(a.ns, "eth0", a.mac)
    assert eventually(lambda: tcp(a.ns, b.ns, b.ip))


def test_port_security_disabled_passes_everything(lab):
    net = lab.network()
    d = lab.group(default=True)
    a = lab.port(net, "10.0.0.1", groups=[d])
    free = lab.port(net, "10.0.0.2", secured=False)
    lab.apply()
    assert eventually(lambda: tcp(a.ns, free.ns, free.ip, 1234))  # a's egress; no ingress filter
    assert not tcp(free.ns, a.ns, a.ip)                      # a still filters its ingress
    add_address(free.ns, "10.0.0.77/24")
    a2 = lab.port(net, "10.0.0.3", secured=False)
    lab.update(a2)
    assert eventually(lambda: tcp(free.ns, a2.ns, a2.ip, 22, src="10.0.0.77"))  # spoof ok
    # turning port security on filters at once
    free.secured, free.groups = True, [d]
    lab.update(free)
    assert not tcp(free.ns, a2.ns, a2.ip, 22, src="10.0.0.77")
    assert eventually(lambda: tcp(free.ns, a.ns, a.ip))      # now in a's group


# --- IPv6, zones ------------------------------------------------------------------------

def test_ipv6_default_group(lab):
    net = lab.network()
    d1, d2 = lab.group(default=True), lab.group(default=True)
    a = lab.port(net, "10.0.0.1", ip6="fd00::1", groups=[d1])
    b = lab.port(net, "10.0.0.2", ip6="fd00::2", groups=[d1])
    c = lab.port(net, "10.0.0.3", ip6="fd00::3", groups=[d2])
    lab.apply()
    assert eventually(lambda: tcp(a.ns, b.ns, "fd00::2"))    # ND works, same group allowed
    assert not tcp(c.ns, b.ns, "fd00::2")
    add_address(a.ns, "fd00::99/64")
    assert not tcp(a.ns, b.ns, "fd00::2", src="fd00::99")     # spoofed IPv6 source


def _udp_flow(src_ns: str, src: tuple[str, int], dst_ns: str, dst: tuple[str, int]) -> bool:
    rx = netns_socket(dst_ns, socket.AF_INET, socket.SOCK_DGRAM)
    tx = netns_socket(src_ns, socket.AF_INET, socket.SOCK_DGRAM)
    try:
        rx.bind(dst)
        rx.settimeout(DENY_TIMEOUT)
        tx.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        tx.bind(src)
        tx.sendto(b"x", dst)
        try:
            return rx.recv(16) == b"x"
        except OSError:
            return False
    finally:
        rx.close()
        tx.close()


def _overlap(lab: Lab, same_zone: bool) -> bool:
    """Two networks with identical addresses. On net1 a1 sends UDP 10.0.0.1:5000 ->
    10.0.0.2:6000 (allowed). On net2, b2 (another group than a2, so a2's ingress denies
    it) sends the reply 5-tuple 10.0.0.2:6000 -> 10.0.0.1:5000. True if a2 got it."""
    n1, n2 = lab.network(), lab.network()
    if same_zone:
        lab.zones[n2] = lab.zones[n1]
    d1, d2, d3 = (lab.group(default=True) for _ in range(3))
    a1 = lab.port(n1, "10.0.0.1", groups=[d1])
    b1 = lab.port(n1, "10.0.0.2", groups=[d1])
    a2 = lab.port(n2, "10.0.0.1", mac=a1.mac, groups=[d2])
    b2 = lab.port(n2, "10.0.0.2", mac=b1.mac, groups=[d3])
    lab.apply()
    assert eventually(lambda: _udp_flow(a1.ns, ("10.0.0.1", 5000), b1.ns, ("10.0.0.2", 6000)))
    return _udp_flow(b2.ns, ("10.0.0.2", 6000), a2.ns, ("10.0.0.1", 5000))


def test_overlapping_networks_are_isolated_by_conntrack_zones(lab):
    assert not _overlap(lab, same_zone=False)


def test_without_distinct_zones_the_overlap_leaks(lab):
    """The control for the test above: one shared zone lets net2 ride net1's flow."""
    assert _overlap(lab, same_zone=True)


# --- lifecycle -----------------------------------------------------------------------------

def test_remove_port_and_group_leave_nothing_behind(lab):
    net = lab.network()
    d = lab.group(default=True)
    a = lab.port(net, "10.0.0.1", groups=[d])
    b = lab.port(net, "10.0.0.2", groups=[d])
    lab.apply()
    nft = Nft(lab.fabric)
    try:
        baseline = elements(nft)
        e = lab.group(rule(None, "ingress", protocol="udp", port_range_min=53, port_range_max=60,
                           remote_ip_prefix="10.1.0.0/16"),
                      rule(None, "egress", "IPv6", protocol="tcp", remote_group_id=d))
        c = lab.port(net, "10.0.0.3", ip6="fd00::3", groups=[e, d])
        c.pairs = [{"ip_address": "10.0.5.0/24", "mac_address": "fa:16:3e:11:11:11"}]
        lab.sg.ensure_group(lab.groups[e])
        lab.update(c)
        grown = elements(nft)
        assert sum(grown.values()) > sum(baseline.values())
        lab.sg.remove_port(c.id)
        lab.sg.remove_group(e)
        after = elements(nft)
        assert {k: v for k, v in after.items() if v} == {k: v for k, v in baseline.items() if v}
        assert lab.sg.observed() == {a.id, b.id}
        assert eventually(lambda: tcp(a.ns, b.ns, b.ip))
    finally:
        nft.close()


def elements(nft: Nft) -> dict[str, int]:
    """Element count of every set and map of the realizer's tables."""
    out = {}
    for o in nft.list_ruleset():
        body = o.get("set") or o.get("map")
        if body and body["table"] in (TABLE, "nb_sg_zone"):
            out[f"{body['family']} {body['name']}"] = len(body.get("elem", []))
    return out


def test_sync_rebuilds_and_drops_what_nothing_wants(lab):
    net = lab.network()
    d = lab.group(default=True)
    a = lab.port(net, "10.0.0.1", groups=[d])
    b = lab.port(net, "10.0.0.2", groups=[d])
    lab.apply()
    assert eventually(lambda: tcp(a.ns, b.ns, b.ip))
    # A new realizer (an agent restart) adopts the kernel by resyncing.
    lab.sg.close()
    lab.sg = SecurityGroups(lab.fabric)
    del lab.ports[b.id]
    lab.apply()
    assert lab.sg.observed() == {a.id}
    assert tcp(a.ns, b.ns, b.ip)            # b is no longer filtered (not a port of ours)
    assert not tcp(b.ns, a.ns, a.ip)        # ...and a still only admits its group


def test_a_refused_change_rebuilds_from_what_was_asked(lab):
    """Someone deletes our tables; the next change cannot apply incrementally and the
    realizer rebuilds everything it was told, that change included."""
    net = lab.network()
    d, other = lab.group(default=True), lab.group(default=True)
    a = lab.port(net, "10.0.0.1", groups=[d])
    b = lab.port(net, "10.0.0.2", groups=[other])
    lab.apply()
    assert not tcp(a.ns, b.ns, b.ip)
    nft = Nft(lab.fabric)
    try:
        nft.run("delete table inet nb_sg; delete table bridge nb_sg")
    finally:
        nft.close()
    b.groups = [other, d]
    lab.update(b)
    assert eventually(lambda: tcp(a.ns, b.ns, b.ip))          # the change is in
    c = lab.port(net, "10.0.0.3", groups=[other])
    lab.update(c)
    assert not tcp(c.ns, a.ns, a.ip)                          # and filtering is back


def test_conntrack_delete_by_zone_and_address(lab):
    net = lab.network()
    d = lab.group(default=True)
    a = lab.port(net, "10.0.0.1", groups=[d])
    b = lab.port(net, "10.0.0.2", groups=[d])
    lab.apply()
    assert eventually(lambda: _udp_flow(a.ns, ("10.0.0.1", 5001), b.ns, ("10.0.0.2", 6001)))
    import ipaddress
    host = frozenset([ipaddress.ip_network("10.0.0.1/32")])
    assert _ct_delete(lab.fabric, [_Kill(a.zone + 100, host, None)]) == 0   # other zone
    assert _ct_delete(lab.fabric, [_Kill(a.zone, host, None)]) >= 1
    assert _ct_delete(lab.fabric, [_Kill(a.zone, host, None)]) == 0


def test_conntrack_delete_keeps_flows_admitted_after_the_commit(lab):
    """A kill submitted after an nft commit spares the flows that started after it: the
    new ruleset admitted them (deleting them would drop their replies as invalid)."""
    import ipaddress
    net = lab.network()
    d = lab.group(default=True)
    a = lab.port(net, "10.0.0.1", groups=[d])
    b = lab.port(net, "10.0.0.2", groups=[d])
    lab.apply()
    assert links.read_sysctl(lab.fabric, "net.netfilter.nf_conntrack_timestamp") == "1"
    assert eventually(lambda: _udp_flow(a.ns, ("10.0.0.1", 5001), b.ns, ("10.0.0.2", 6001)))  # before
    time.sleep(0.01)
    commit = time.time_ns()
    assert _udp_flow(a.ns, ("10.0.0.1", 5002), b.ns, ("10.0.0.2", 6002))                        # after
    host = frozenset([ipaddress.ip_network("10.0.0.1/32")])
    assert _ct_delete(lab.fabric, [_Kill(a.zone, host, None, before=commit)]) == 1  # the older flow
    assert _ct_delete(lab.fabric, [_Kill(a.zone, host, None, before=commit)]) == 0  # the newer stays
    assert _ct_delete(lab.fabric, [_Kill(a.zone, host, None)]) == 1                 # (it is there)
