"""Real packets through the calico driver: routed pods, direct routes, VXLAN, CrossSubnet.

Nodes on an underlay as in test_dp_flannel (bridge ``ul0`` in a fabric namespace,
``eth0`` 10.9.x.1y/24). IP-in-IP needs a kernel feature this host lacks: the driver
refuses it naming the feature, and the traffic test skips with that reason.
"""

from __future__ import annotations

import pytest

from netbay.dataplane import features
from netbay.dataplane import rtnl as kernel
from netbay.dataplane.rtnl import rtnl
from netbay.drivers import leases
from netbay.drivers.calico import CalicoConfig, CalicoError, MissingKernelFeature
from netbay.drivers.calico.driver import VXLAN_DEVICE, Calico
from netbay.drivers.node import Node

from .cluster_net import Lab, node, tcp_exchange
from .dp_helpers import ping


@pytest.fixture(scope="module")
def detected() -> dict[str, features.Feature]:
    return features.detect(only=["veth", "vxlan", "ipip"])


def Cluster(make_ns, tag: str, config: CalicoConfig, detected, subnet: str = "10.9.0") -> Lab:  # noqa: N802
    """Nodes on one underlay running one calico driver; pods ``p<node>``."""
    return Lab(make_ns, tag, Calico(config, features=detected), subnet)


MODES = {"direct": CalicoConfig(), "vxlan": CalicoConfig(vxlan="Always")}


@pytest.fixture(params=sorted(MODES))
def mode(request) -> str:
    return request.param


def _leftovers(n: Node, gone: Node) -> list[str]:
    refs = {gone.ip, gone.lease_network_ip}
    bad = [f"route {r}" for r in kernel.routes(n.ns, proto=None)
           if r.dst == gone.lease or r.gateway in refs]
    for link in kernel.rtnl(n.ns).links():
        bad += [f"fdb {e}" for e in kernel.fdb(n.ns, link.index)
                if e.mac == gone.mac(VXLAN_DEVICE) or e.dst in refs]
    bad += [f"neighbour {x}" for x in kernel.neighbours(n.ns)
            if x.ip in refs or x.mac == gone.mac(VXLAN_DEVICE)]
    return bad


def test_pods_on_two_nodes(make_ns, detected, mode):
    c = Cluster(make_ns, "c", MODES[mode], detected)
    c.scale([0, 1])
    a, b = c.pods[0], c.pods[1]
    assert ping(a, c.pod_ip(1), count=5)
    assert ping(b, c.pod_ip(0), count=5)
    assert tcp_exchange(a, b, c.pod_ip(1))[0] == c.pod_ip(0)
    assert ping(a, c.u.address(1).split("/")[0], count=3)        # another node's address
    n0, n1 = c.nodes[0], c.nodes[1]
    assert rtnl(a).link("eth0").mtu == (1450 if mode == "vxlan" else 1500)
    rts = {r.dst: r for r in kernel.routes(n0.ns)}
    assert rts[n0.lease].blackhole
    if mode == "direct":
        assert rts[n1.lease].gateway == n1.ip and rts[n1.lease].oif == kernel.link_index(n0.ns, "eth0")
        assert kernel.vxlan_info(n0.ns, VXLAN_DEVICE) is None
    else:
        info = kernel.vxlan_info(n0.ns, VXLAN_DEVICE)
        assert (info.vni, info.port, info.local, info.learning) == (4096, 4789, n0.ip, False)
        assert rts[n1.lease].gateway == n1.lease_network_ip and rts[n1.lease].onlink
        assert [(e.mac, e.dst) for e in kernel.fdb(n0.ns, info.index)] == [(n1.mac(VXLAN_DEVICE), n1.ip)]
    # the pod's /32 in the node, and the blackhole for the rest of the block
    assert any(r.dst == f"{c.pod_ip(0)}/32" for r in kernel.routes(n0.ns, proto=None))
    assert not ping(b, leases.host(n0.lease, 9), timeout=0.3, count=1)


def test_grow_to_four_then_shrink_leaves_nothing(make_ns, detected, mode):
    c = Cluster(make_ns, "k", MODES[mode], detected)
    c.scale([0, 1])
    c.scale([0, 1, 2, 3])
    for new in (2, 3):
        for old in (0, 1):
            assert ping(c.pods[new], c.pod_ip(old), count=3), (new, old)
    assert tcp_exchange(c.pods[2], c.pods[1], c.pod_ip(1))[0] == c.pod_ip(2)
    assert ping(c.pods[0], c.pod_ip(2), count=2) and ping(c.pods[1], c.pod_ip(3), count=2)
    gone = [c.nodes[2], c.nodes[3]]
    assert _leftovers(c.nodes[0], gone[0])       # the check sees them while they exist
    c.scale([0, 1])
    for n in c.nodes.values():
        for g in gone:
            assert _leftovers(n, g) == [], (n.ns, g.ns)
    assert ping(c.pods[0], c.pod_ip(1), count=3)


def test_cross_subnet_uses_vxlan_only_across(make_ns, detected):
    """Nodes 0, 1 on 10.9.5.0/24, node 2 on 10.9.6.0/24 — one L2, two subnets (each
    node has an on-link route to the other subnet, as a router would give)."""
    c = Cluster(make_ns, "x", CalicoConfig(vxlan="CrossSubnet"), detected, subnet="10.9.5")
    for i in (0, 1, 2):
        c.u.add_node(i)
    # move node 2 to the other subnet
    n2 = c.u.nodes[2]
    idx = kernel.link_index(n2, "eth0")
    rtnl(n2).del_address(idx, c.u.address(2))
    rtnl(n2).add_address(idx, "10.9.6.12/24")
    for i in (0, 1):
        rtnl(c.u.nodes[i]).replace_route("10.9.6.0/24", oif=kernel.link_index(c.u.nodes[i], "eth0"))
    rtnl(n2).replace_route("10.9.5.0/24", oif=idx)
    c.leases = c.driver.allocate(["n0", "n1", "n2"], {})
    c.nodes = {0: node(c.u, 0, c.leases["n0"]), 1: node(c.u, 1, c.leases["n1"]),
               2: Node(n2, "10.9.6.12/24", c.leases["n2"])}
    for n in c.nodes.values():
        c.driver.setup_node(n)
    for n in c.nodes.values():
        c.driver.sync_peers(n, list(c.nodes.values()))
    for i in (0, 1, 2):
        c.pods[i] = make_ns(f"xp{i}")
        c.driver.attach_pod(c.nodes[i], c.pods[i], c.pod_ip(i))
    rts = {r.dst: r for r in kernel.routes(c.nodes[0].ns)}
    assert rts[c.nodes[1].lease].gateway == c.nodes[1].ip               # same subnet: direct
    assert rts[c.nodes[2].lease].gateway == c.nodes[2].lease_network_ip  # across: vxlan
    for a, b in ((0, 1), (0, 2), (2, 1)):
        assert ping(c.pods[a], c.pod_ip(b), count=3), (a, b)
        assert tcp_exchange(c.pods[a], c.pods[b], c.pod_ip(b))[0] == c.pod_ip(a)


def test_no_encapsulation_across_subnets_is_refused(make_ns, detected):
    c = Cluster(make_ns, "r", CalicoConfig(), detected, subnet="10.9.7")
    c.u.add_node(0)
    far = Node(c.u.nodes[0], "10.9.7.10/24", "192.168.0.64/26")
    with pytest.raises(CalicoError, match="calico_ipv4pool_vxlan"):
        c.driver.sync_peers(far, [far, Node("nbt-elsewhere", "10.9.99.10/24", "192.168.0.128/26")])


@pytest.mark.parametrize("ipip", ["Always", "CrossSubnet"])
def test_ipip_modes_name_the_missing_kernel_feature(detected, ipip):
    if detected["ipip"].available:
        pytest.skip("this host has IP-in-IP: nothing to refuse for the kernel's sake")
    with pytest.raises(MissingKernelFeature) as info:
        Calico(CalicoConfig(ipip=ipip), features=detected)
    assert info.value.feature == "ipip"
    assert "'ipip'" in str(info.value) and f"calico_ipv4pool_ipip={ipip}" in str(info.value)


def test_ipip_pods_exchange_traffic(make_ns, detected):
    """IP-in-IP ``Always``: tunl0 with the block's first address, peers' blocks via their
    eth0 addresses on tunl0 (onlink), pods across nodes talk, the MTU leaves room for
    the outer header; a node that goes leaves nothing."""
    if not detected["ipip"].available:
        pytest.skip(f"kernel feature 'ipip' (IP-in-IP, CONFIG_NET_IPIP) missing: {detected['ipip'].detail}")
    from netbay.drivers.calico.driver import IPIP_DEVICE

    c = Cluster(make_ns, "i", CalicoConfig(ipip="Always"), detected)
    c.scale([0, 1, 2])
    n0, n1 = c.nodes[0], c.nodes[1]
    tunl = rtnl(n0.ns).link(IPIP_DEVICE)
    assert tunl.kind == "ipip" and tunl.up and tunl.mtu == rtnl(n0.ns).link("eth0").mtu - 20
    assert f"{n0.lease_network_ip}/32" in rtnl(n0.ns).addresses(tunl.index)
    rts = {r.dst: r for r in kernel.routes(n0.ns)}
    assert rts[n1.lease].gateway == n1.ip and rts[n1.lease].oif == tunl.index and rts[n1.lease].onlink
    assert rtnl(c.pods[0]).link("eth0").mtu == tunl.mtu
    for a, b in ((0, 1), (1, 2), (2, 0)):
        assert ping(c.pods[a], c.pod_ip(b), count=3), (a, b)
        assert tcp_exchange(c.pods[a], c.pods[b], c.pod_ip(b))[0] == c.pod_ip(a)
    gone = c.nodes[2]
    c.scale([0, 1])
    assert _leftovers(c.nodes[0], gone) == []
    assert ping(c.pods[0], c.pod_ip(1), count=3)


def test_ipip_cross_subnet_on_one_subnet_routes_directly(make_ns, detected):
    if not detected["ipip"].available:
        pytest.skip(f"kernel feature 'ipip' (IP-in-IP, CONFIG_NET_IPIP) missing: {detected['ipip'].detail}")
    c = Cluster(make_ns, "j", CalicoConfig(ipip="CrossSubnet"), detected)
    c.scale([0, 1])
    rts = {r.dst: r for r in kernel.routes(c.nodes[0].ns)}
    assert rts[c.nodes[1].lease].oif == kernel.link_index(c.nodes[0].ns, "eth0")
    assert ping(c.pods[0], c.pod_ip(1), count=3)


def test_config_validation():
    with pytest.raises(CalicoError):
        CalicoConfig(vxlan="Sometimes")
    with pytest.raises(CalicoError, match="both"):
        CalicoConfig(ipip="Always", vxlan="Always")
    cfg = CalicoConfig.from_labels({"calico_ipv4pool": "10.244.0.0/16", "calico_ipv4pool_vxlan": "Always"})
    assert cfg.requires == {"veth", "vxlan"} and cfg.pool == "10.244.0.0/16"
    assert CalicoConfig(ipip="Never").requires == {"veth"}
