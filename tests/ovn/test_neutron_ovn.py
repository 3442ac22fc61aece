"""A real Neutron (ML2/OVN) on the OVN lab: ports made through openstacksdk, bound to
two chassis by ``binding:host_id``, plugged into each chassis's br-int the os-vif way;
Neutron turns them ACTIVE because OVN saw them claimed, ICMP crosses the chassis, and
a security group without an ICMP rule drops (OVN ACLs) until the rule is added."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from netbay.dataplane import netns
from tests.dataplane.dp_helpers import ping

from .cloudhelp import Net, Plugs, wait_active, wait_status
from .lab import OvnLab
from .probes import reaches

# Also `peers`: the real Keystone and Neutron come from the peers' virtualenv, which the
# peers' pytest process installs (scripts/test.sh runs `-m peers` as its own process).
pytestmark = [pytest.mark.ovn, pytest.mark.peers]

CIDR = "10.20.0.0/24"


@pytest.fixture(scope="module")
def net(conn) -> Iterator[Net]:
    network = conn.network.create_network(name="ovn-net")
    subnet = conn.network.create_subnet(network_id=network.id, cidr=CIDR, ip_version=4, name="ovn-subnet")
    yield Net(network, subnet)
    conn.network.delete_network(network)


@pytest.fixture
def plugs(ovn_lab: OvnLab, conn, net: Net) -> Iterator[Plugs]:
    """Neutron's port list and the lab's namespaces as they were, after each test."""
    ports_before = {p.id for p in conn.network.ports()}
    namespaces_before = list(ovn_lab.namespaces)
    made = Plugs(ovn_lab, conn, net)
    try:
        yield made
    finally:
        made.undo()
    assert {p.id for p in conn.network.ports()} == ports_before
    assert ovn_lab.namespaces == namespaces_before
    assert not [b.ns for _, b in made.made if netns.exists(b.ns)]


def test_ports_bound_and_active(ovn_lab: OvnLab, conn, plugs: Plugs) -> None:
    a, box_a = plugs.port(ovn_lab.hvs[0], "a")
    b, box_b = plugs.port(ovn_lab.hvs[1], "b")
    for port, hv in ((a, ovn_lab.hvs[0]), (b, ovn_lab.hvs[1])):
        assert port.binding_host_id == hv.chassis
        assert port.binding_vif_type == "ovs"
        assert port.binding_vif_details["bridge_name"] == "br-int"
        assert port.binding_vif_details["datapath_type"] == "netdev"  # the lab's userspace br-int
        assert wait_active(conn, port.id) == "ACTIVE"
        assert ovn_lab.bound_chassis(port.id) == hv.chassis  # OVN's claim, in the SB


def test_os_vif_plugs_by_the_binding(ovn_lab: OvnLab, conn, net: Net, plugs: Plugs) -> None:
    """os-vif's own ``ovs`` plugin (native OVSDB on the chassis's socket) plugs each port
    as its ``binding:vif_details`` say; OVN claims it, Neutron turns it ACTIVE, ICMP
    crosses; os-vif's unplug takes it out and Neutron reports it DOWN."""
    pytest.importorskip("os_vif", reason="os-vif is netbay's optional `cloud` extra")
    from .osvif_plug import OsVifPlugger

    made = []
    for hv, name in ((ovn_lab.hvs[0], "va"), (ovn_lab.hvs[1], "vb")):
        port, box = plugs.port(hv, name, plug=False)
        assert port.binding_vif_type == "ovs"
        plugger = OsVifPlugger(hv)
        plugger.plug(port, box, net.network.mtu)
        ids = hv.vsctl("--bare", "--columns=external_ids", "list", "Interface", box.host_end)
        for key in (f"iface-id={port.id}", f"attached-mac={port.mac_address}", "iface-status=active",
                    f"vm-uuid={port.device_id}"):
            assert key in ids.replace('"', ""), f"{key} not in {ids}"
        made.append((plugger, port, box))
    for _, port, _ in made:
        assert wait_status(conn, port.id, "ACTIVE") == "ACTIVE"
    ovn_lab.sync()
    (_, _, box_a), (plugger_b, port_b, box_b) = made
    assert reaches(box_a, box_b) and reaches(box_b, box_a)
    plugger_b.unplug(port_b, box_b, net.network.mtu)
    assert box_b.host_end not in ovn_lab.hvs[1].vsctl("list-ports", "br-int").split()
    assert wait_status(conn, port_b.id, "DOWN") == "DOWN"


def test_ping_across_chassis(ovn_lab: OvnLab, conn, plugs: Plugs) -> None:
    a, box_a = plugs.port(ovn_lab.hvs[0], "a")
    b, box_b = plugs.port(ovn_lab.hvs[1], "b")
    assert wait_active(conn, a.id) == wait_active(conn, b.id) == "ACTIVE"
    ovn_lab.sync()
    assert reaches(box_a, box_b)
    assert reaches(box_b, box_a)
    before = ovn_lab.hvs[0].uplink_tx_packets()  # it crossed the underlay (Geneve)
    assert sum(ping(box_a.ns, box_b.ip, timeout=1.0) for _ in range(3)) == 3
    assert ovn_lab.hvs[0].uplink_tx_packets() - before >= 3


def test_security_group_drops_then_allows(ovn_lab: OvnLab, conn, plugs: Plugs) -> None:
    group = conn.network.create_security_group(name="no-icmp")  # egress only, as made
    try:
        a, box_a = plugs.port(ovn_lab.hvs[0], "a", security_group_ids=[group.id])
        b, box_b = plugs.port(ovn_lab.hvs[1], "b", security_group_ids=[group.id])
        assert wait_active(conn, a.id) == wait_active(conn, b.id) == "ACTIVE"
        ovn_lab.sync()
        assert not any(ping(box_a.ns, box_b.ip, timeout=0.5) for _ in range(4)), \
            "a group without an ICMP rule let ICMP in"
        conn.network.create_security_group_rule(security_group_id=group.id, direction="ingress",
                                                ethertype="IPv4", protocol="icmp")
        ovn_lab.sync()
        assert reaches(box_a, box_b)
    finally:
        plugs.undo()
        plugs.made.clear()
        conn.network.delete_security_group(group)
