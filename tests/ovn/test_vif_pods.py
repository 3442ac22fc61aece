"""The Kubernetes mapping's pods on a real cloud dataplane: :class:`netbay.k8s.sandbox.PodSandboxes`
with os-vif (the step both pod runtimes, sandbox and Docker, plug a pod's port with),
against the real Neutron ML2/OVN of neutron_ovn.py.

A pod's port made as the mapping controller makes it (``compute:kuryr``, bound to the
chassis by ``binding:host_id``) is plugged as Neutron's ``binding:vif_type``/
``binding:vif_details`` say: ``eth0`` in the pod's namespace, its host end in that
chassis's ``br-int`` (os-vif); OVN claims it (ACTIVE) and two pods on two chassis talk
through the Geneve tunnel. A port bound where no chassis is (``binding_failed``) is
refused by name before the pod's namespace is made. Unplugging leaves nothing in
``br-int`` and no namespace.
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator

import pytest

from netbay.dataplane import netns
from netbay.dataplane.names import Names
from netbay.dataplane.rtnl import release
from netbay.runtime.vif import Unpluggable, host_end
from tests.dataplane.dp_helpers import ping

from .cloudhelp import Net, iface_ids, wait_status
from .lab import Hypervisor, OvnLab
from .probes import tcp_arrives

pytestmark = [pytest.mark.ovn, pytest.mark.peers]

CIDR = "10.23.0.0/24"


@pytest.fixture(scope="module")
def net(conn) -> Iterator[Net]:
    network = conn.network.create_network(name="pods-ovn-net")
    subnet = conn.network.create_subnet(network_id=network.id, cidr=CIDR, ip_version=4, name="pods-ovn-subnet",
                                        is_dhcp_enabled=False)
    yield Net(network, subnet)
    conn.network.delete_network(network)


@pytest.fixture(scope="module")
def pluggers(ovn_lab: OvnLab) -> Iterator[dict]:
    """os-vif's plugin per chassis (a connection of its own each), closed with the module
    (else its thread keeps dialling the stopped lab's database)."""
    pytest.importorskip("os_vif", reason="os-vif is netbay's optional `cloud` extra")
    from .osvif_plug import OsVifPlugger

    made = {hv.index: OsVifPlugger(hv) for hv in ovn_lab.hvs}
    yield made
    for plugger in made.values():
        plugger.plugin.ovsdb._ovsdb.ovsdb_connection.stop(timeout=10)


def sandboxes(lab: OvnLab, hv: Hypervisor, pluggers: dict):
    """The pods of chassis ``hv``: plugged with os-vif into its br-int."""
    from netbay.k8s.sandbox import PodSandboxes
    from netbay.runtime.vif import OvsVifs

    return PodSandboxes(Names(f"{lab.prefix}k{hv.index}-"), OvsVifs(hv.ovsdb, hv.ns, plugin=pluggers[hv.index].plugin))


def pod_port_of(conn, net: Net, host: str, name: str, **attrs) -> dict:
    """A pod's port as the mapping controller makes it (bound at once), as the API answers it."""
    port = conn.network.create_port(network_id=net.network.id, name=f"default/{name}", device_owner="compute:kuryr",
                                    device_id=str(uuid.uuid4()), binding_host_id=host, **attrs)
    return {"id": port.id, "network_id": port.network_id, "mac_address": port.mac_address,
            "fixed_ips": port.fixed_ips, "device_id": port.device_id, "binding:vif_type": port.binding_vif_type,
            "binding:vif_details": port.binding_vif_details}


def nat_view(lab: OvnLab) -> str:
    """What OVN made of the router, its gateway and NAT (for a failure's message)."""
    return "\n".join([lab.nbctl("show"), lab.nbctl("--bare", "--columns=name,gateway_chassis,options", "list",
                                                    "Logical_Router_Port"),
                      lab.nbctl("--bare", "--columns=type,external_ip,logical_ip,logical_port", "list", "NAT"),
                      lab.sbctl("--bare", "--columns=_uuid,name", "list", "Chassis"),
                      lab.sbctl("--bare", "--columns=logical_port,chassis", "find", "Port_Binding",
                                "type=chassisredirect"),
                      lab.hvs[1].appctl("ovs-vswitchd", "dpctl/dump-flows")[-4000:]])


@pytest.fixture
def ports_kept(conn) -> Iterator[list[str]]:
    """Ports a test makes (deleted after it); Neutron's port list as it was."""
    before = {p.id for p in conn.network.ports()}
    made: list[str] = []
    yield made
    for port_id in made:
        conn.network.delete_port(port_id)
    assert {p.id for p in conn.network.ports()} == before


def test_pods_on_two_chassis_are_plugged_by_their_binding_and_talk(
        ovn_lab: OvnLab, conn, net: Net, pluggers: dict, ports_kept: list[str]) -> None:
    from netbay.k8s.sandbox import pod_port

    subnet = {"cidr": CIDR, "gateway_ip": net.subnet.gateway_ip}
    pods = []
    try:
        for hv, name in zip(ovn_lab.hvs[:2], ("pa", "pb"), strict=True):
            boxes = sandboxes(ovn_lab, hv, pluggers)
            port = pod_port_of(conn, net, hv.chassis, name)
            ports_kept.append(port["id"])
            assert port["binding:vif_type"] == "ovs"
            ns = boxes.plug(pod_port(port, subnet, net.network.mtu))
            release(ns)
            pods.append((hv, boxes, port, ns))
            assert boxes.plugged(port["id"])
            end = host_end(port["id"])
            assert end in hv.vsctl("list-ports", "br-int").split()
            ids = iface_ids(hv, end)
            for key in (f"iface-id={port['id']}", f"attached-mac={port['mac_address']}", "iface-status=active",
                        f"vm-uuid={port['device_id']}"):
                assert key in ids, f"{key} not in {ids}"
        for hv, _, port, _ in pods:
            assert wait_status(conn, port["id"], "ACTIVE") == "ACTIVE"
            assert ovn_lab.bound_chassis(port["id"]) == hv.chassis
        ovn_lab.sync()
        (_, _, port_a, ns_a), (_, _, port_b, ns_b) = pods
        ip_a, ip_b = port_a["fixed_ips"][0]["ip_address"], port_b["fixed_ips"][0]["ip_address"]
        assert any(ping(ns_a, ip_b, timeout=1.0) for _ in range(10)), "no ICMP across the chassis"
        assert any(ping(ns_b, ip_a, timeout=1.0) for _ in range(5))
        assert tcp_arrives(netns.path(ns_a), netns.path(ns_b), ip_b)
    finally:
        for hv, boxes, port, ns in pods:
            boxes.unplug(port["id"])
            assert host_end(port["id"]) not in hv.vsctl("list-ports", "br-int").split()
            assert not netns.exists(ns)


def test_a_vif_type_netbay_cannot_plug_is_refused_before_the_pod_is_made(
        ovn_lab: OvnLab, conn, net: Net, pluggers: dict, ports_kept: list[str]) -> None:
    from netbay.k8s.sandbox import pod_port

    hv = ovn_lab.hvs[0]
    boxes = sandboxes(ovn_lab, hv, pluggers)
    in_bridge = hv.vsctl("list-ports", "br-int")
    port = pod_port_of(conn, net, "no-such-chassis", "refused")
    ports_kept.append(port["id"])
    with pytest.raises(Unpluggable, match="binding:vif_type 'binding_failed'"):
        boxes.plug(pod_port(port, {"cidr": CIDR, "gateway_ip": net.subnet.gateway_ip}, net.network.mtu))
    assert not netns.exists(boxes.ns(port["id"]))
    assert hv.vsctl("list-ports", "br-int") == in_bridge


def test_a_floating_ip_makes_a_pod_reachable_from_outside(
        ovn_lab: OvnLab, conn, net: Net, pluggers: dict, ports_kept: list[str]) -> None:
    """A router with its gateway on the external (provider) network — bridged on chassis 2
    to a namespace standing for the outside — and a floating IP on the pod's port (the
    pod on chassis 1): the outside reaches the pod at the floating IP, through OVN's
    gateway router (NAT) and the Geneve tunnel."""
    from netbay.k8s.sandbox import pod_port

    from .lab import OUTSIDE, PHYSNET

    outside = ovn_lab.add_outside(ovn_lab.hvs[1])
    outside_ip = OUTSIDE.split("/")[0]
    ext = conn.network.create_network(name="public", is_router_external=True, provider_network_type="flat",
                                      provider_physical_network=PHYSNET)
    router = fip = None
    group = conn.network.create_security_group(name="pings-from-anywhere")   # the default group admits its own only
    conn.network.create_security_group_rule(security_group_id=group.id, direction="ingress", ethertype="IPv4",
                                            protocol="icmp")
    hv = ovn_lab.hvs[0]
    boxes, port = sandboxes(ovn_lab, hv, pluggers), None
    try:
        conn.network.create_subnet(network_id=ext.id, cidr="172.24.4.0/24", ip_version=4, gateway_ip=outside_ip,
                                   is_dhcp_enabled=False, name="public-subnet")
        router = conn.network.create_router(name="r1", external_gateway_info={"network_id": ext.id})
        conn.network.add_interface_to_router(router, subnet_id=net.subnet.id)
        port = pod_port_of(conn, net, hv.chassis, "pf", security_group_ids=[group.id])
        ports_kept.insert(0, port["id"])
        ns = boxes.plug(pod_port(port, {"cidr": CIDR, "gateway_ip": net.subnet.gateway_ip}, net.network.mtu))
        release(ns)
        fip = conn.network.create_ip(floating_network_id=ext.id, port_id=port["id"])
        assert wait_status(conn, port["id"], "ACTIVE") == "ACTIVE"
        ovn_lab.sync()
        address = fip.floating_ip_address
        reached = any(ping(outside, address, timeout=1.0) for _ in range(15))
        assert reached, (f"the outside does not reach floating IP {address}:\n{nat_view(ovn_lab)}\n"
                         + subprocess.run(["ip", "-n", outside, "neigh"], capture_output=True, text=True).stdout
                         + subprocess.run(["ip", "-n", outside, "-s", "link", "show", "oeth0"], capture_output=True,
                                          text=True).stdout)
    finally:
        if fip is not None:
            conn.network.delete_ip(fip)
        if port is not None:
            boxes.unplug(port["id"])
        if router is not None:
            conn.network.remove_interface_from_router(router, subnet_id=net.subnet.id)
            conn.network.delete_router(router)
        conn.network.delete_network(ext)
        if port is not None:
            conn.network.delete_port(port["id"])
            ports_kept.remove(port["id"])
        conn.network.delete_security_group(group)
