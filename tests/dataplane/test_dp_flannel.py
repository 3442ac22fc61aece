"""Real packets through the flannel driver: vxlan and host-gw between node namespaces.

Topology per test (all namespaces carry the run's prefix)::

    fabric ── ul0 bridge ── eth0 10.9.0.1x/24 of node n0…n3
    node: flannel.1 (vxlan) or host-gw routes, cni0 = lease gateway, pods on cni0

Checked: ICMP and TCP between pods on different nodes; a pod reaches another
node's underlay address; growing 2→4 nodes; shrinking back leaves no route, FDB or
neighbour entry of a removed node anywhere; two clusters with the same flannel
network on separate underlays stay apart; the udp backend is refused.
"""

from __future__ import annotations

import ipaddress

import pytest

from netbay.dataplane import rtnl as kernel
from netbay.drivers.flannel import FlannelConfig
from netbay.drivers.flannel.backend import UnsupportedBackend
from netbay.drivers.flannel.backend import vxlan as vxlan_backend
from netbay.drivers.flannel.driver import Flannel
from netbay.drivers.node import Node

from .cluster_net import Lab, Listener, tcp_exchange, tcp_read
from .dp_helpers import ping

BACKENDS = ["vxlan", "host-gw"]


def Cluster(make_ns, tag: str, backend: str, subnet: str = "10.9.0") -> Lab:  # noqa: N802 - reads as the class it was
    """Nodes on one underlay running one flannel driver; pods ``p<node>``."""
    return Lab(make_ns, tag, Flannel(FlannelConfig(backend=backend)), subnet)


def _v4(cidrs: list[str]) -> list[str]:
    return [c for c in cidrs if ":" not in c]


@pytest.fixture(params=BACKENDS)
def backend(request) -> str:
    return request.param


def test_pods_on_two_nodes_exchange_icmp_and_tcp(make_ns, backend):
    c = Cluster(make_ns, "f", backend)
    c.scale([0, 1])
    a, b = c.pods[0], c.pods[1]
    assert ping(a, c.pod_ip(1), count=5)
    assert ping(b, c.pod_ip(0), count=5)
    peer, reply = tcp_exchange(a, b, c.pod_ip(1))
    assert peer == c.pod_ip(0)   # no NAT between pods
    assert reply == b"pong"
    # pod -> the other node's underlay address, and its own gateway
    assert ping(a, c.u.address(1).split("/")[0], count=3)
    assert ping(a, c.nodes[0].gateway, count=3)
    # MTU as the backend needs
    want = 1450 if backend == "vxlan" else 1500
    assert kernel.rtnl(a).link("eth0").mtu == want
    assert kernel.rtnl(c.nodes[0].ns).link("cni0").mtu == want


def test_vxlan_device_as_flannel_makes_it(make_ns):
    c = Cluster(make_ns, "v", "vxlan")
    c.scale([0, 1])
    n0, n1 = c.nodes[0], c.nodes[1]
    info = kernel.vxlan_info(n0.ns, "flannel.1")
    assert info is not None
    assert (info.vni, info.port, info.local, info.learning, info.mtu) == (1, 8472, n0.ip, False, 1450)
    assert info.address == n0.mac("flannel.1")
    assert _v4(kernel.rtnl(n0.ns).addresses(info.index)) == [f"{n0.lease_network_ip}/32"]
    assert [(e.mac, e.dst) for e in kernel.fdb(n0.ns, info.index)] == [(n1.mac("flannel.1"), n1.ip)]
    neigh = [(x.ip, x.mac, x.permanent) for x in kernel.neighbours(n0.ns, info.index)]
    assert neigh == [(n1.lease_network_ip, n1.mac("flannel.1"), True)]
    rts = [r for r in kernel.routes(n0.ns) if r.dst == n1.lease]
    assert rts and rts[0].gateway == n1.lease_network_ip and rts[0].oif == info.index and rts[0].onlink
    cni0 = kernel.rtnl(n0.ns).link("cni0")
    assert _v4(kernel.rtnl(n0.ns).addresses(cni0.index)) == [f"{n0.gateway}/24"]
    # idempotent: again changes nothing and still works
    c.driver.setup_node(n0)
    res = c.driver.sync_peers(n0, list(c.nodes.values()))
    assert (res.routes_added, res.routes_deleted, res.fdb_deleted) == (0, 0, [])
    assert ping(c.pods[0], c.pod_ip(1), count=3)


def test_host_gw_routes_via_peer_underlay(make_ns):
    c = Cluster(make_ns, "h", "host-gw")
    c.scale([0, 1])
    n0, n1 = c.nodes[0], c.nodes[1]
    eth0 = kernel.link_index(n0.ns, "eth0")
    rts = [r for r in kernel.routes(n0.ns) if r.dst == n1.lease]
    assert rts and rts[0].gateway == n1.ip and rts[0].oif == eth0 and not rts[0].onlink
    assert kernel.rtnl(n0.ns).link("flannel.1") is None


def _leftovers(n: Node, gone: Node) -> list[str]:
    """Anything in ``n`` that still refers to the removed node ``gone``."""
    bad = []
    refs = {gone.ip, gone.lease_network_ip}
    for r in kernel.routes(n.ns, proto=None):
        if r.dst == gone.lease or r.gateway in refs:
            bad.append(f"route {r}")
    for link in kernel.rtnl(n.ns).links():
        for e in kernel.fdb(n.ns, link.index):
            if e.mac == gone.mac("flannel.1") or e.dst in refs:
                bad.append(f"fdb {e} on {link.ifname}")
    for x in kernel.neighbours(n.ns):
        if x.ip in refs or x.mac == gone.mac("flannel.1"):
            bad.append(f"neighbour {x}")
    return bad


def test_grow_to_four_then_shrink_leaves_nothing(make_ns, backend):
    c = Cluster(make_ns, "g", backend)
    c.scale([0, 1])
    assert ping(c.pods[0], c.pod_ip(1), count=3)
    c.scale([0, 1, 2, 3])
    for new in (2, 3):
        for old in (0, 1):
            assert ping(c.pods[new], c.pod_ip(old), count=3), (new, old)
            assert ping(c.pods[old], c.pod_ip(new), count=3), (old, new)
    assert tcp_exchange(c.pods[3], c.pods[0], c.pod_ip(0))[0] == c.pod_ip(3)
    assert ping(c.pods[3], c.u.address(0).split("/")[0], count=3)
    # traffic to the nodes about to go, so that the kernel has ARP entries for them
    assert ping(c.pods[0], c.pod_ip(2), count=2) and ping(c.pods[1], c.pod_ip(3), count=2)
    gone = [c.nodes[2], c.nodes[3]]
    for n in (c.nodes[0], c.nodes[1]):   # the check below sees them while they are there
        for g in gone:
            found = _leftovers(n, g)
            assert any(x.startswith("route") for x in found), found
            if backend == "vxlan":
                assert any(x.startswith("fdb") for x in found), found
    # node 0 sent to node 2's pod: it has an ARP entry for node 2's underlay address
    assert any(x.ip == gone[0].ip for x in kernel.neighbours(c.nodes[0].ns))
    c.scale([0, 1])
    for n in c.nodes.values():
        for g in gone:
            assert _leftovers(n, g) == [], (n.ns, g.ns)
    assert ping(c.pods[0], c.pod_ip(1), count=3)
    # the released leases are handed out again
    assert c.driver.allocate(["n0", "n1", "n9"], c.leases)["n9"] == gone[0].lease


def test_two_clusters_same_network_stay_isolated(make_ns):
    a = Cluster(make_ns, "a", "vxlan", subnet="10.9.1")
    b = Cluster(make_ns, "b", "vxlan", subnet="10.9.2")
    a.scale([0, 1])
    b.scale([0, 1])
    assert a.leases == b.leases   # same flannel network, same leases, same pod addresses
    ip = a.pod_ip(1)
    assert ip == b.pod_ip(1)
    la = Listener(a.pods[1], ip, 7001, b"cluster-a")
    lb = Listener(b.pods[1], ip, 7001, b"cluster-b")
    try:
        assert tcp_read(a.pods[0], ip, 7001) == b"cluster-a"
        assert tcp_read(b.pods[0], ip, 7001) == b"cluster-b"
    finally:
        la.close()
        lb.close()
    # and no path from one cluster's pods to the other's underlay
    assert not ping(a.pods[0], b.u.address(0).split("/")[0], timeout=0.3, count=2)


def test_udp_backend_is_refused_with_a_reason():
    with pytest.raises(UnsupportedBackend, match="vxlan.*host-gw"):
        Flannel(FlannelConfig(backend="udp"))
    with pytest.raises(UnsupportedBackend):
        Flannel(FlannelConfig(backend="ipsec"))


def test_vxlan_udp_stays_in_the_underlay(make_ns):
    """The VTEP's source is the node's 10.9 address and its only link is eth0."""
    c = Cluster(make_ns, "s", "vxlan")
    c.scale([0, 1])
    for n in c.nodes.values():
        info = kernel.vxlan_info(n.ns, vxlan_backend.DEVICE)
        assert info.link == kernel.link_index(n.ns, "eth0")
        assert ipaddress.ip_address(info.local) in ipaddress.ip_network("10.9.0.0/24")


def test_dual_stack_pods_leaving_the_ipv6_network_are_masqueraded(make_ns):
    """flanneld's ip-masq for IPv6 (issue 28.5): a dual-stack pod reaching a host outside the
    IPv6 pod network is seen with its node's address; pod to pod keeps its source (the contract
    suite)."""
    from netbay.dataplane import links
    from netbay.drivers import masq

    from .dp_helpers import ifname

    c = Lab(make_ns, "f6", Flannel(FlannelConfig(network6="fd00:10::/56")))
    c.scale([0, 1])
    assert masq.networks(c.nodes[0].ns) == {"10.100.0.0/16", "fd00:10::/56"}
    ext = make_ns("f6x")   # IPv6 only, on the nodes' segment; node n0 gets an IPv6 address there
    links.wire_port(c.u.fabric, "ul0", ext, host_ifname=ifname("f6x"))
    for ns, cidr in ((ext, "fd99::100/64"), (c.nodes[0].ns, "fd99::10/64")):
        r = kernel.rtnl(ns)
        r.add_address(r.link("eth0").index, cidr)   # no duplicate address detection
    assert c.pod_ip6(0) == "fd00:10:0:1::2"
    assert tcp_exchange(c.pods[0], ext, "fd99::100") == ("fd99::10", b"pong")
    assert tcp_exchange(c.pods[1], c.pods[0], c.pod_ip6(0))[0] == c.pod_ip6(1)
