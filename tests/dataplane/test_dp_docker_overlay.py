"""Real packets through the ``docker`` driver (Docker's overlay) between node namespaces.

Topology (all namespaces carry the run's prefix)::

    fabric ── ul0 bridge ── eth0 10.9.0.1x/24 of node n0…n2
    node: ov-br0 (gateway of its block, /16 of the overlay) ⊃ ov-vx0 (VXLAN 4096, UDP 4789)

Checked: containers on different nodes share one subnet (on-link, no router: the
sender's neighbour table holds the peer container's own MAC), exchange ICMP and
TCP, carried as VXLAN on UDP 4789; scaling 3→2 nodes removes the gone node's flood
entry everywhere; programming twice changes nothing.
"""

from __future__ import annotations

import ipaddress

import pytest

from netbay.dataplane import rtnl as kernel
from netbay.drivers.docker import DockerOverlayConfig, block_len
from netbay.drivers.docker.driver import BRIDGE, DEVICE, DockerOverlay
from netbay.drivers.leases import LeaseError
from netbay.drivers.node import Node

from .cluster_net import Lab, tcp_exchange
from .dp_helpers import ping


def Swarm(make_ns, tag: str) -> Lab:  # noqa: N802
    """Nodes on one underlay running the overlay driver; a container ``p<node>`` each."""
    return Lab(make_ns, tag, DockerOverlay(DockerOverlayConfig()))


def _flood(n: Node) -> list[str]:
    idx = kernel.link_index(n.ns, DEVICE)
    return sorted(e.dst for e in kernel.fdb(n.ns, idx) if e.mac == "00:00:00:00:00:00")


def test_containers_on_two_nodes_share_one_subnet_over_vxlan(make_ns):
    s = Swarm(make_ns, "o")
    s.scale([0, 1])
    a, b = s.pods[0], s.pods[1]
    # one subnet: the containers' prefix is the overlay's, not the node block's
    assert kernel.rtnl(a).addresses(kernel.link_index(a, "eth0"))[0] == f"{s.pod_ip(0)}/16"
    assert ping(a, s.pod_ip(1), count=5)
    assert ping(b, s.pod_ip(0), count=5)
    peer, reply = tcp_exchange(a, b, s.pod_ip(1))
    assert (peer, reply) == (s.pod_ip(0), b"pong")   # no NAT
    # on-link: a's neighbour entry for b is b's own MAC (L2 across nodes, no router hop)
    b_mac = kernel.rtnl(b).link("eth0").address
    a_eth0 = kernel.link_index(a, "eth0")
    assert b_mac in {x.mac for x in kernel.neighbours(a, a_eth0) if x.ip == s.pod_ip(1)}
    # carried by VXLAN: the device learned b's MAC behind node 1's underlay address
    learned = {e.mac: e.dst for e in kernel.fdb(s.nodes[0].ns, kernel.link_index(s.nodes[0].ns, DEVICE))}
    assert learned.get(b_mac) == s.nodes[1].ip
    info = kernel.vxlan_info(s.nodes[0].ns, DEVICE)
    assert (info.vni, info.port, info.local, info.learning, info.mtu) == (4096, 4789, s.nodes[0].ip, True, 1450)
    assert kernel.rtnl(a).link("eth0").mtu == 1450
    # the node reaches containers on every node through its bridge (its gateway on the /16)
    br = kernel.rtnl(s.nodes[0].ns).link(BRIDGE)
    assert kernel.rtnl(s.nodes[0].ns).addresses(br.index)[0] == f"{s.nodes[0].gateway}/16"
    assert ping(s.nodes[0].ns, s.pod_ip(1), count=3)


def test_scale_down_removes_the_flood_entry_and_sync_is_idempotent(make_ns):
    s = Swarm(make_ns, "q")
    s.scale([0, 1, 2])
    assert _flood(s.nodes[0]) == sorted([s.nodes[1].ip, s.nodes[2].ip])
    assert ping(s.pods[2], s.pod_ip(0), count=3)
    gone = s.nodes[2].ip
    s.scale([0, 1])
    for n in s.nodes.values():
        assert gone not in _flood(n)
    assert _flood(s.nodes[1]) == [s.nodes[0].ip]
    s.driver.setup_node(s.nodes[0])
    assert s.driver.sync_peers(s.nodes[0], list(s.nodes.values())) == [s.nodes[1].ip]
    assert _flood(s.nodes[0]) == [s.nodes[1].ip]
    assert ping(s.pods[0], s.pod_ip(1), count=3)


def test_blocks_and_refusals():
    assert block_len(16) == 24 and block_len(22) == 26
    with pytest.raises(LeaseError):
        block_len(25)
    ov = DockerOverlay(DockerOverlayConfig("10.201.0.0/22"))
    got = ov.allocate(["a", "b"], {})
    assert all(ipaddress.ip_network(v).prefixlen == 26 for v in got.values())
    n = Node("x", "10.9.0.10/24", got["a"])
    with pytest.raises(ValueError):
        ov.check_address(n, n.gateway)
