"""pods.attach / pods.detach: bridged (cni0) and routed (calico style), idempotent."""

from __future__ import annotations

import time

import pytest

from netbay.dataplane import links
from netbay.dataplane import rtnl as kernel
from netbay.dataplane.links import LinkError
from netbay.dataplane.rtnl import rtnl
from netbay.drivers import node as nodelib, pods
from netbay.drivers.node import Node

from .cluster_net import tcp_exchange
from .dp_helpers import ping


@pytest.fixture
def bridged(make_ns):
    n = make_ns("pn0")
    node = Node(n, "10.9.0.10/24", "10.100.1.0/24")
    nodelib.enable_forwarding(n)
    nodelib.ensure_cni_bridge(node, 1450)
    return node


def test_attach_bridged_pod(make_ns, bridged):
    p = make_ns("pp1")
    link = pods.attach(bridged.ns, p, address="10.100.1.2/24", gateway="10.100.1.1", mtu=1450)
    assert link.host_ifname.startswith("veth") and len(link.host_ifname) <= 15
    r = rtnl(p)
    eth0 = r.link("eth0")
    assert eth0.up and eth0.mtu == 1450 and eth0.index == link.index
    assert [c for c in r.addresses(eth0.index) if ":" not in c] == ["10.100.1.2/24"]
    assert ("0.0.0.0/0", "10.100.1.1", eth0.index, None) in r.routes()
    host = rtnl(bridged.ns).link(link.host_ifname)
    assert host.master == rtnl(bridged.ns).link("cni0").index and host.up
    assert ping(p, "10.100.1.1", count=3)


def test_two_pods_on_one_node_and_idempotence(make_ns, bridged):
    a, b = make_ns("pa"), make_ns("pb")
    la = pods.attach(bridged.ns, a, address="10.100.1.2/24", gateway="10.100.1.1", mtu=1450)
    pods.attach(bridged.ns, b, address="10.100.1.3/24", gateway="10.100.1.1", mtu=1450)
    assert ping(a, "10.100.1.3", count=3)
    again = pods.attach(bridged.ns, a, address="10.100.1.2/24", gateway="10.100.1.1", mtu=1450)
    assert again == la
    # a changed address and MTU converge in place
    pods.attach(bridged.ns, a, address="10.100.1.4/24", gateway="10.100.1.1", mtu=1400)
    assert [c for c in rtnl(a).addresses(la.index) if ":" not in c] == ["10.100.1.4/24"]
    assert rtnl(a).link("eth0").mtu == 1400
    assert tcp_exchange(b, a, "10.100.1.4")[0] == "10.100.1.3"


def test_detach(make_ns, bridged):
    p = make_ns("pd")
    link = pods.attach(bridged.ns, p, address="10.100.1.2/24", gateway="10.100.1.1", mtu=1450)
    assert pods.detach(bridged.ns, p) is True
    assert rtnl(bridged.ns).link(link.host_ifname) is None
    assert rtnl(p).link("eth0") is None
    assert pods.detach(bridged.ns, p) is False
    pods.attach(bridged.ns, p, address="10.100.1.2/24", gateway="10.100.1.1", mtu=1450)
    assert ping(p, "10.100.1.1", count=3)


def test_missing_bridge_is_a_clear_error(make_ns):
    n, p = make_ns("pnb"), make_ns("ppb")
    with pytest.raises(LinkError, match="bridge 'cni0' missing"):
        pods.attach(n, p, address="10.100.1.2/24", gateway="10.100.1.1", mtu=1500)


def test_routed_pod(make_ns):
    n, p, q = make_ns("rn"), make_ns("rp"), make_ns("rq")
    nodelib.enable_forwarding(n)
    # A node has an IPv4 address (eth0's on the cluster network): the source of its ARP
    # requests to pods. Without any, the node cannot resolve a pod (TCP then fails).
    rtnl(n).set_link(1, up=True)
    rtnl(n).add_address(1, "10.9.8.1/32")
    la = pods.attach(n, p, address="192.168.0.5/32", gateway=pods.ROUTED_GATEWAY, mtu=1500, bridge=None)
    pods.attach(n, q, address="192.168.0.6/32", gateway=pods.ROUTED_GATEWAY, mtu=1500, bridge=None)
    assert la.host_ifname.startswith("cali")
    host = rtnl(n).link(la.host_ifname)
    assert host.address == pods.ROUTED_MAC and host.master is None
    assert [c for c in rtnl(p).addresses(la.index) if ":" not in c] == ["192.168.0.5/32"]
    node_routes = kernel.routes(n, proto=None)
    assert any(r.dst == "192.168.0.5/32" and r.oif == host.index and r.gateway is None for r in node_routes)
    neigh = [(x.ip, x.mac) for x in kernel.neighbours(p, la.index) if x.permanent]
    assert neigh == [(pods.ROUTED_GATEWAY, pods.ROUTED_MAC)]
    assert ping(p, "192.168.0.6", count=3)
    assert tcp_exchange(q, p, "192.168.0.5")[0] == "192.168.0.6"
    assert pods.attach(n, p, address="192.168.0.5/32", gateway=pods.ROUTED_GATEWAY, mtu=1500,
                       bridge=None) == la
    assert pods.detach(n, p) is True
    assert not any(r.dst == "192.168.0.5/32" for r in kernel.routes(n, proto=None))


def test_big_packets(make_ns, bridged, request):
    """BIG TCP on the pair and on cni0 once it has a port; 64 KiB for a pod whose
    traffic leaves through a VXLAN device (``big_packets=False``)."""
    from netbay.dataplane import bigtcp

    bigtcp.force({"pod-bridged": True})   # as if this host's probe had found it faster
    request.addfinalizer(lambda: bigtcp.force(None))
    gso = bigtcp.gso_max_size("pod-bridged")
    assert rtnl(bridged.ns).link("cni0").gso_max_size == 65536     # no port yet: it cannot take more
    big, small = make_ns("pbig"), make_ns("psmall")
    lb = pods.attach(bridged.ns, big, address="10.100.1.2/24", gateway="10.100.1.1", mtu=1450)
    assert rtnl(big).link("eth0").gso_max_size == gso
    assert rtnl(bridged.ns).link(lb.host_ifname).gso_max_size == gso
    assert rtnl(bridged.ns).link("cni0").gso_max_size == gso
    ls = pods.attach(bridged.ns, small, address="10.100.1.3/24", gateway="10.100.1.1", mtu=1450,
                     big_packets=False)
    assert rtnl(small).link("eth0").gso_max_size == 65536
    assert rtnl(bridged.ns).link(ls.host_ifname).gso_max_size == 65536
    assert tcp_exchange(small, big, "10.100.1.2")[0] == "10.100.1.3"


def test_a_dual_stack_pod_answers_over_ipv6_at_once(make_ns):
    """No first IPv6 exchange waits a second for a neighbour (issue 28's IPv6 p90 tail):
    the pod's address is delivered before attach returns (its local route comes from
    addrconf's worker, even without DAD: a neighbour advertisement to it was dropped), and
    the node's bridge does no DAD on its link-local address (while tentative, the node
    cannot solicit a pod for traffic it forwards) — here the very first pod of a fresh
    bridge, reached from outside the node, then more pods reaching out."""
    n, out = make_ns("p6n"), make_ns("p6o")
    node = Node(n, "10.9.0.10/24", "10.100.1.0/24", lease6="fd00:10:0:1::/64")
    nodelib.enable_forwarding(n, ipv6=True)
    links.sysctl(out, "net.ipv6.conf.default.accept_dad", 0)     # the test's own link: no DAD
    idx = rtnl(n).add_veth("p6up", "eth0", out)
    links.sysctl(n, "net.ipv6.conf.p6up.accept_dad", 0)
    rtnl(n).set_link(idx, up=True)
    rtnl(out).set_link(rtnl(out).link("eth0").index, up=True)
    rtnl(n).add_address(idx, "fd00:99::1/64")
    rtnl(out).add_address(rtnl(out).link("eth0").index, "fd00:99::2/64")
    rtnl(out).replace_route("fd00:10::/48", gateway="fd00:99::1")
    nodelib.ensure_cni_bridge(node, 1450)
    assert links.read_sysctl(n, "net.ipv6.conf.cni0.accept_dad") == "0"
    for i in range(2, 6):
        p = make_ns(f"p6p{i}")
        link = pods.attach(n, p, address=f"10.100.1.{i}/24", gateway=node.gateway, mtu=1450,
                           address6=f"fd00:10:0:1::{i}/64", gateway6=node.gateway6)
        assert rtnl(p).delivers(f"fd00:10:0:1::{i}") and link.address6 == f"fd00:10:0:1::{i}/64"
        client, server, ip = (out, p, f"fd00:10:0:1::{i}") if i == 2 else (p, out, "fd00:99::2")
        t0 = time.monotonic()
        assert tcp_exchange(client, server, ip)[1] == b"pong"
        assert time.monotonic() - t0 < 0.5, f"pod {i}: a first exchange waited for a neighbour"
