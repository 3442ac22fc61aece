"""The network driver contract: every registered driver through the same lab.

Each driver (and each of its encapsulations) is built the way the agent builds it
— :func:`netbay.drivers.registry.config` from labels, :func:`~netbay.drivers.registry.make`
from the stored config — and must: let pods on two nodes talk (ICMP, and TCP that
keeps its source address), grow to three nodes and shrink back with no trace of the
node gone on any other, and after its pods are detached and its nodes torn down leave
each node as a bare one is (links, routes, the masquerade table). The example driver
of ``docs/drivers.md`` (:mod:`netbay.drivers.example`) is registered for the suite.
"""

from __future__ import annotations

import pytest

from netbay.dataplane import rtnl as kernel
from netbay.drivers import example, masq, registry
from netbay.drivers.node import Node

from .cluster_net import Lab, tcp_exchange
from .dp_helpers import ping

# (driver, labels): every registered driver with a node part, each encapsulation once.
CASES = [
    ("docker", {}),
    ("flannel", {}),
    ("flannel", {"flannel_backend": "host-gw"}),
    ("calico", {}),
    ("calico", {"calico_ipv4pool_vxlan": "Always"}),
    ("example", {}),
]


@pytest.fixture(autouse=True)
def example_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(registry.DRIVERS, "example", example.SPEC)


@pytest.fixture(params=CASES, ids=lambda case: "-".join([case[0], *case[1].values()]))
def lab(request: pytest.FixtureRequest, make_ns, example_registered) -> Lab:
    name, labels = request.param
    stored = registry.stored(registry.config(name, labels))          # what the cluster network keeps
    return Lab(make_ns, "k", registry.make(name, stored))            # what the agent builds


def test_every_registered_driver_with_a_node_part_is_in_the_contract(example_registered) -> None:
    with_nodes = {name for name, spec in registry.DRIVERS.items() if spec.on_nodes}
    assert with_nodes == {name for name, _ in CASES}
    for name in with_nodes:
        assert isinstance(registry.make(name, registry.config(name, {})), registry.Driver)


NUD_PERMANENT = 0x80


def _traces(n: Node, gone: Node) -> list[str]:
    """What of ``gone`` is still programmed in ``n``: routes, permanent FDB and neighbour
    entries (what the kernel learned by itself, e.g. the docker overlay's unicast FDB
    entries and ARP, ages out on its own)."""
    refs = {gone.ip, gone.lease_network_ip}
    bad = [f"route {r}" for r in kernel.routes(n.ns, proto=None) if r.dst == gone.lease or r.gateway in refs]
    for link in kernel.rtnl(n.ns).links():
        bad += [f"fdb {e}" for e in kernel.fdb(n.ns, link.index)
                if e.dst in refs and e.state & NUD_PERMANENT]
    bad += [f"neighbour {x}" for x in kernel.neighbours(n.ns) if x.ip in refs and x.permanent]
    return bad


def _state(ns: str) -> tuple[set[str], set[str], object]:
    """A node namespace as the contract compares it: link names, route destinations, masquerade."""
    return ({link.ifname for link in kernel.rtnl(ns).links()},
            {r.dst for r in kernel.routes(ns, proto=None)}, masq.networks(ns) or None)


def test_pods_on_two_nodes_talk(lab: Lab) -> None:
    lab.scale([0, 1])
    a, b = lab.pods[0], lab.pods[1]
    assert ping(a, lab.pod_ip(1), count=3)
    assert ping(b, lab.pod_ip(0), count=3)
    assert tcp_exchange(a, b, lab.pod_ip(1)) == (lab.pod_ip(0), b"pong")   # no NAT between pods


def test_grow_and_shrink_leave_no_trace_of_a_node_gone(lab: Lab) -> None:
    lab.scale([0, 1])
    lab.scale([0, 1, 2])
    assert ping(lab.pods[2], lab.pod_ip(0), count=3) and ping(lab.pods[1], lab.pod_ip(2), count=3)
    gone = lab.nodes[1]
    assert _traces(lab.nodes[0], gone)      # the check sees them while the node exists
    lab.scale([0, 2])
    for n in lab.nodes.values():
        assert _traces(n, gone) == [], n.ns
    assert tcp_exchange(lab.pods[0], lab.pods[2], lab.pod_ip(2))[0] == lab.pod_ip(0)


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
