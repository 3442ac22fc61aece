"""The network driver contract: every registered driver through the same lab.

Each driver (and each of its encapsulations) is built the way the agent builds it
— :func:`netbay.drivers.registry.config` from labels, :func:`~netbay.drivers.registry.make`
from the stored config — and must: let pods on two nodes talk (ICMP, and TCP that
keeps its source address), grow to three nodes and shrink back with no trace of the
node gone on any other, and after its pods are detached and its nodes torn down leave
each node as a bare one is (links, routes, addresses, the masquerade table). A dual-stack
case (its pods' links carry an ``address6``) does all of it over IPv6 too, and each of its
nodes answers on its own IPv6 address (the config's ``node_address6``: where its IPv6 node
ports answer), from another node and from pods. The example driver of ``docs/drivers.md``
(:mod:`netbay.drivers.example`) is registered for the suite.
"""

from __future__ import annotations

import ipaddress
import socket

import pytest

from netbay.dataplane import rtnl as kernel
from netbay.drivers import example, masq, registry
from netbay.drivers.node import Node

from .cluster_net import Lab, tcp_exchange
from .dp_helpers import ping

DUAL = "fd00:10::/56"
# (driver, labels): every registered driver with a node part, each encapsulation once
# (and each dual-stack one).
CASES = [
    ("docker", {}),
    ("flannel", {}),
    ("flannel", {"flannel_backend": "host-gw"}),
    ("flannel", {"flannel_ipv6_network_cidr": DUAL}),
    ("flannel", {"flannel_backend": "host-gw", "flannel_ipv6_network_cidr": DUAL}),
    ("calico", {}),
    ("calico", {"calico_ipv4pool_vxlan": "Always"}),
    ("calico", {"calico_ipv6pool": DUAL}),
    ("calico", {"calico_ipv4pool_vxlan": "Always", "calico_ipv6pool": DUAL}),
    ("example", {}),
]


@pytest.fixture(autouse=True)
def example_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(registry.DRIVERS, "example", example.SPEC)


def _case_id(case: tuple[str, dict[str, str]]) -> str:
    return "-".join([case[0], *("dual" if v == DUAL else v for v in case[1].values())])


def _lab(make_ns, name: str, labels: dict[str, str]) -> Lab:
    stored = registry.stored(registry.config(name, labels))          # what the cluster network keeps
    return Lab(make_ns, "k", registry.make(name, stored))            # what the agent builds


@pytest.fixture(params=CASES, ids=_case_id)
def lab(request: pytest.FixtureRequest, make_ns, example_registered) -> Lab:
    return _lab(make_ns, *request.param)


@pytest.fixture(params=[c for c in CASES if DUAL in c[1].values()], ids=_case_id)
def dual_lab(request: pytest.FixtureRequest, make_ns) -> Lab:
    return _lab(make_ns, *request.param)


def test_every_registered_driver_with_a_node_part_is_in_the_contract(example_registered) -> None:
    with_nodes = {name for name, spec in registry.DRIVERS.items() if spec.on_nodes}
    assert with_nodes == {name for name, _ in CASES}
    for name in with_nodes:
        assert isinstance(registry.make(name, registry.config(name, {})), registry.Driver)


NUD_PERMANENT = 0x80


FAMILIES = (socket.AF_INET, socket.AF_INET6)


def _traces(n: Node, gone: Node, gone_v6: tuple[str, ...] = ()) -> list[str]:
    """What of ``gone`` is still programmed in ``n``: routes, permanent FDB and neighbour
    entries (what the kernel learned by itself, e.g. the docker overlay's unicast FDB
    entries and ARP, ages out on its own). ``gone_v6``: its IPv6 lease and VTEP address."""
    refs = {gone.ip, gone.lease_network_ip, *gone_v6}
    leases = {gone.lease, *gone_v6}
    bad = [f"route {r}" for family in FAMILIES for r in kernel.routes(n.ns, proto=None, family=family)
           if r.dst in leases or r.gateway in refs]
    for link in kernel.rtnl(n.ns).links():
        bad += [f"fdb {e}" for e in kernel.fdb(n.ns, link.index)
                if e.dst in refs and e.state & NUD_PERMANENT]
    bad += [f"neighbour {x}" for family in FAMILIES for x in kernel.neighbours(n.ns, family=family)
            if x.ip in refs and x.permanent]
    return bad


def _state(ns: str) -> tuple[set[str], set[str], set[str], object]:
    """A node namespace as the contract compares it: link names, route destinations (both
    families; not the kernel's ``fe80::/64``, which comes with a link's IPv6 link-local
    address whenever the kernel gets to it), the addresses the driver may have given
    (not the underlay's, link-local or loopback ones), masquerade."""
    r = kernel.rtnl(ns)
    return ({link.ifname for link in r.links()},
            {r.dst for family in FAMILIES for r in kernel.routes(ns, proto=None, family=family)
             if not r.dst.startswith("fe80:")},
            {cidr for link in r.links() if link.ifname != "eth0" for cidr in r.addresses(link.index)
             if not (ipaddress.ip_interface(cidr).is_link_local or ipaddress.ip_interface(cidr).is_loopback)},
            masq.networks(ns) or None)


def _v6(lab: Lab, i: int) -> tuple[str, ...]:
    """Node ``i``'s IPv6 lease and that lease's network address (the VTEP's), if dual-stack
    (a dual-stack driver's ``dual(node)`` fills the lease in)."""
    if lab.pod_ip6(i) is None:
        return ()
    lease6 = lab.driver.dual(lab.nodes[i]).lease6
    return (lease6, str(ipaddress.ip_network(lease6).network_address))


def test_pods_on_two_nodes_talk(lab: Lab) -> None:
    lab.scale([0, 1])
    a, b = lab.pods[0], lab.pods[1]
    assert ping(a, lab.pod_ip(1), count=3)
    assert ping(b, lab.pod_ip(0), count=3)
    assert tcp_exchange(a, b, lab.pod_ip(1)) == (lab.pod_ip(0), b"pong")   # no NAT between pods
    if lab.pod_ip6(0) is not None:
        assert tcp_exchange(a, b, lab.pod_ip6(1)) == (lab.pod_ip6(0), b"pong")
        assert tcp_exchange(b, a, lab.pod_ip6(0)) == (lab.pod_ip6(1), b"pong")


def test_dual_stack_cases_give_pods_both_families() -> None:
    default = {"flannel": "vxlan", "calico": "direct"}
    duals = {(name, labels.get("flannel_backend", labels.get("calico_ipv4pool_vxlan", default[name])))
             for name, labels in CASES if DUAL in labels.values()}
    assert duals == {("flannel", "vxlan"), ("flannel", "host-gw"), ("calico", "direct"), ("calico", "Always")}


def test_a_dual_stack_node_answers_on_its_own_ipv6_address(dual_lab: Lab) -> None:
    """Where a node's IPv6 node ports answer, and what a connection it starts (a node port's
    masquerade) leaves from: an address of the node's own IPv6 lease (calico with direct
    routes would otherwise have link-local addresses only), reached through the routes
    the peers already hold."""
    lab = dual_lab
    lab.scale([0, 1])
    own = [lab.driver.config.node_address6(lab.nodes[i].lease) for i in (0, 1)]
    leases6 = [ipaddress.ip_network(lab.driver.dual(lab.nodes[i]).lease6) for i in (0, 1)]
    for i in (0, 1):
        assert ipaddress.ip_address(own[i]) in leases6[i] and own[i] != lab.pod_ip6(i)
    for i, j in ((0, 1), (1, 0)):   # another node, from an address of its own lease (flannel.1's or cni0's)
        source, reply = tcp_exchange(lab.nodes[j].ns, lab.nodes[i].ns, own[i])
        assert reply == b"pong" and ipaddress.ip_address(source) in leases6[j], source
    assert tcp_exchange(lab.pods[1], lab.nodes[0].ns, own[0]) == (lab.pod_ip6(1), b"pong"), "a pod of another node"
    assert tcp_exchange(lab.pods[0], lab.nodes[0].ns, own[0]) == (lab.pod_ip6(0), b"pong"), "a pod of its own"


def test_calico_keeps_one_node_address_of_its_pool_on_lo(make_ns) -> None:
    """Calico with direct routes holds the node's IPv6 address on ``lo``: ``setup_node``
    (as the agent's resync after a crash runs it) keeps it and removes any other address
    of the pool there (a previous block's), not addresses of others; ``teardown`` removes it."""
    lab = _lab(make_ns, "calico", {"calico_ipv6pool": DUAL})
    lab.scale([0])
    n = lab.nodes[0]
    own = f"{lab.driver.config.node_address6(n.lease)}/128"
    r = kernel.rtnl(n.ns)
    lo = r.link("lo").index
    stale, foreign = f"{ipaddress.ip_network(DUAL).network_address + 0x1000}/128", "fd99::1/128"
    r.add_address(lo, stale)
    r.add_address(lo, foreign)
    lab.driver.setup_node(n)
    held = set(r.addresses(lo))
    assert own in held and foreign in held and stale not in held
    lab.driver.teardown(n)
    held = set(r.addresses(lo))
    assert own not in held and foreign in held


def test_grow_and_shrink_leave_no_trace_of_a_node_gone(lab: Lab) -> None:
    lab.scale([0, 1])
    lab.scale([0, 1, 2])
    assert ping(lab.pods[2], lab.pod_ip(0), count=3) and ping(lab.pods[1], lab.pod_ip(2), count=3)
    gone, gone_v6 = lab.nodes[1], _v6(lab, 1)
    if gone_v6:
        assert tcp_exchange(lab.pods[2], lab.pods[1], lab.pod_ip6(1))[0] == lab.pod_ip6(2)
        assert any(gone_v6[0] in t for t in _traces(lab.nodes[0], gone, gone_v6))   # its IPv6 route too
    assert _traces(lab.nodes[0], gone, gone_v6)      # the check sees them while the node exists
    lab.scale([0, 2])
    for n in lab.nodes.values():
        assert _traces(n, gone, gone_v6) == [], n.ns
    assert tcp_exchange(lab.pods[0], lab.pods[2], lab.pod_ip(2))[0] == lab.pod_ip(0)
    if gone_v6:
        assert tcp_exchange(lab.pods[0], lab.pods[2], lab.pod_ip6(2))[0] == lab.pod_ip6(0)


def test_teardown_leaves_nothing(lab: Lab) -> None:
    bare = _state(lab.u.add_node(9))
    lab.scale([0, 1])
    for i, n in lab.nodes.items():
        assert _state(n.ns) != bare
        assert lab.driver.detach_pod(n, lab.pods[i]) is True
        lab.driver.teardown(n)
        assert _state(n.ns) == bare, n.ns
        lab.driver.teardown(n)            # idempotent
        assert _state(n.ns) == bare, n.ns
