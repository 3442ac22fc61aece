"""netbay's own binding on a real cloud dataplane: ``netbay cni-daemon --backend openstack``
on each of two lab chassis (one daemon per chassis, as one per host), against the real
Neutron ML2/OVN of neutron_ovn.py. The CNI calls are real (the ``netbay-cni`` launcher,
forked with a runtime's environment and stdin).

Each daemon binds the pod's port to its chassis (``binding:host_id``: the hostname
ovn-controller registered, read from its Open vSwitch), reads Neutron's
``binding:vif_type``/``binding:vif_details`` and plugs the host end into that chassis's
``br-int`` with os-vif (:mod:`netbay.runtime.vif`): the ports turn ACTIVE because OVN
saw them claimed, and the two pods ping each other through OVN's Geneve tunnel. DEL
unplugs (no OVS port left) and Neutron's port list is as it was; a port Neutron binds
with a ``vif_type`` netbay cannot plug is refused by name, nothing made. A restarted
daemon finishes a half-done plug and removes OVS ports whose device is gone. ``netbay
doctor --backend openstack`` says whether a chassis can bind.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from netbay.dataplane import netns
from netbay.runtime.vif import host_end
from tests.dataplane.cni_fixtures import Daemon, invoke, netbay_conf
from tests.dataplane.dp_helpers import ping

from .cloudhelp import iface_ids, wait_status
from .cni import Pods, add, delete, start_daemon
from .lab import OvnLab
from .probes import tcp_arrives
from tests import zygote

pytestmark = [pytest.mark.ovn, pytest.mark.peers]

CIDR = "10.21.0.0/24"


@pytest.fixture(scope="module")
def net(conn) -> Iterator:
    network = conn.network.create_network(name="vif-net")
    conn.network.create_subnet(network_id=network.id, cidr=CIDR, ip_version=4, name="vif-subnet",
                               is_dhcp_enabled=False)
    yield network
    conn.network.delete_network(network)


@pytest.fixture
def pods(ovn_lab: OvnLab, conn) -> Iterator[Pods]:
    ports_before = {p.id for p in conn.network.ports()}
    made = Pods(ovn_lab)
    try:
        yield made
    finally:
        made.delete_all()
    assert {p.id for p in conn.network.ports()} == ports_before


def test_cni_add_binds_on_each_chassis_pods_ping_del_unplugs(
        ovn_lab: OvnLab, conn, net, daemons: list[Daemon], plugin: Path, pods: Pods) -> None:
    boxes = []
    for hv, daemon, name in zip(ovn_lab.hvs, daemons, ("va", "vb"), strict=False):
        pod = pods()
        result = add(plugin, daemon, net, pod, name)
        (port,) = conn.network.ports(network_id=net.id, name=f"default/{name}")
        assert port.binding_host_id == hv.chassis and port.binding_vif_type == "ovs"
        assert port.device_owner == "compute:kuryr"
        end = host_end(port.id)
        assert end in hv.vsctl("list-ports", "br-int").split()
        ids = iface_ids(hv, end)
        for key in (f"iface-id={port.id}", f"attached-mac={port.mac_address}", "iface-status=active",
                    f"vm-uuid={port.device_id}"):
            assert key in ids, f"{key} not in {ids}"
        assert result["interfaces"][0]["mac"] == port.mac_address
        boxes.append((hv, daemon, pod, name, port))
    for hv, _, _, _, port in boxes:
        assert wait_status(conn, port.id, "ACTIVE") == "ACTIVE"
        assert ovn_lab.bound_chassis(port.id) == hv.chassis  # OVN's claim, in the SB
    ovn_lab.sync()
    (_, _, pod_a, _, port_a), (_, _, pod_b, _, port_b) = boxes
    ip_a, ip_b = port_a.fixed_ips[0]["ip_address"], port_b.fixed_ips[0]["ip_address"]
    assert any(ping(pod_a, ip_b, timeout=1.0) for _ in range(10)), "no ICMP across the chassis"
    assert any(ping(pod_b, ip_a, timeout=1.0) for _ in range(5))
    before = ovn_lab.hvs[0].uplink_tx_packets()  # it crossed the underlay (Geneve)
    assert sum(ping(pod_a, ip_b, timeout=1.0) for _ in range(3)) == 3
    assert ovn_lab.hvs[0].uplink_tx_packets() - before >= 3
    # TCP too: the binding turned the pods' TX checksum offload off (a netdev br-int)
    assert tcp_arrives(netns.path(pod_a), netns.path(pod_b), ip_b)

    for hv, daemon, pod, name, port in boxes:
        delete(plugin, daemon, net, pod, name)
        assert host_end(port.id) not in hv.vsctl("list-ports", "br-int").split()
        assert hv.vsctl("--bare", "--columns=name", "find", "Interface", f"external_ids:iface-id={port.id}") == ""
    assert not list(conn.network.ports(network_id=net.id, device_owner="compute:kuryr"))


def test_a_vif_type_netbay_cannot_plug_is_refused_by_name(
        ovn_lab: OvnLab, conn, net, env: dict[str, str], plugin: Path, pods: Pods,
        tmp_path: Path) -> None:
    """Bound to a host that is no chassis, ML2/OVN answers ``binding_failed``: refused by
    that name before the pair is made; the port made for it is deleted again."""
    hv = ovn_lab.hvs[0]
    ports_in_bridge = hv.vsctl("list-ports", "br-int")
    daemon = start_daemon(ovn_lab, hv, env, tmp_path / "nochassis", "--host", "no-such-chassis")
    try:
        pod = pods()
        r = invoke(plugin, "ADD", netbay_conf("vifnet", net.id, daemon.sock), container="refused",
                   netns=netns.path(pod))
        assert r.rc == 1 and "binding:vif_type 'binding_failed'" in r.json["msg"], r
        assert "cannot plug" in r.json["msg"]
        from netbay.runtime.inside import present

        assert present(netns.path(pod), "eth0") is None
        assert hv.vsctl("list-ports", "br-int") == ports_in_bridge
    finally:
        daemon.stop()


def test_restart_finishes_a_half_done_plug_and_drops_a_stale_one(
        ovn_lab: OvnLab, conn, net, env: dict[str, str], daemons: list[Daemon], plugin: Path,
        pods: Pods, tmp_path: Path) -> None:
    """A crash between the veth and os-vif's OVS port (here: the port taken out of
    br-int behind the daemon's back) is finished on restart from the host end's note;
    an OVS port of netbay's whose device is gone is removed."""
    hv, daemon = ovn_lab.hvs[0], daemons[0]
    pod = pods()
    add(plugin, daemon, net, pod, "half")
    (port,) = conn.network.ports(network_id=net.id, name="default/half")
    end = host_end(port.id)
    daemon.stop()
    stale = f"nbv{uuid.uuid4().hex[:11]}"
    try:
        hv.vsctl("del-port", "br-int", end)
        hv.vsctl("add-port", "br-int", stale)   # no such device
        assert end not in hv.vsctl("list-ports", "br-int").split()
        daemon.start(timeout=60)
        listed = hv.vsctl("list-ports", "br-int").split()
        assert end in listed and stale not in listed, listed
        assert f"iface-id={port.id}" in iface_ids(hv, end)
        assert wait_status(conn, port.id, "ACTIVE") == "ACTIVE"
    finally:
        hv.vsctl("--if-exists", "del-port", "br-int", stale)
        if daemon.proc is None or daemon.proc.poll() is not None:
            daemon.start(timeout=60)
        delete(plugin, daemon, net, pod, "half")
    assert end not in hv.vsctl("list-ports", "br-int").split()


def test_doctor_says_whether_this_host_can_bind(ovn_lab: OvnLab, env: dict[str, str], tmp_path: Path) -> None:
    def doctor(ovsdb: str) -> dict:
        r = zygote.run([sys.executable, "-m", "netbay.cli.main", "doctor", "--json", "--backend", "openstack",
                        "--ovsdb", ovsdb], capture_output=True, text=True, timeout=120, env=env)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)["binding"]

    hv = ovn_lab.hvs[1]
    found = doctor(hv.ovsdb)
    assert found["ok"] and found["reachable"], found
    assert found["system_id"] == hv.chassis and found["hostname"] == hv.chassis
    assert found["bridge"] == "br-int" and found["bridge_present"] and found["vif_types"] == ["ovs"]
    assert [(c["check"], c["ok"]) for c in found["checks"]] == [
        ("ovsdb", True), ("chassis", True), ("bridge", True), ("vif_types", True)]
    missing = doctor(f"unix:{tmp_path / 'no.sock'}")
    assert not missing["ok"] and not missing["reachable"] and missing["vif_types"] == [], missing


def doctor_lines(env: dict[str, str], ovsdb: str) -> list[str]:
    """The binding's lines of ``netbay doctor --backend openstack`` (its text output)."""
    r = zygote.run([sys.executable, "-m", "netbay.cli.main", "doctor", "--backend", "openstack",
                    "--ovsdb", ovsdb], capture_output=True, text=True, timeout=120, env={**env, "COLUMNS": "250"})
    assert r.returncode == 0, r.stdout + r.stderr
    head = r.stdout.splitlines()
    at = next(i for i, line in enumerate(head) if line.startswith("this host "))
    return [head[at]] + [line.strip() for line in head[at + 1:at + 5] if line.startswith(("  yes: ", "  no: "))]


def test_doctor_says_each_missing_thing_in_one_line(ovn_lab: OvnLab, env: dict[str, str], tmp_path: Path) -> None:
    """A chassis: four yes lines. Then an Open vSwitch database of its own (a bare
    ``ovsdb-server`` in the lab's central namespace: no ovs-vswitchd, no ovn-controller),
    made to lack one thing at a time: each lack is one line saying what is missing."""
    from .daemons import OVS_SCHEMA, create_db, ctl, spawn, wait_for

    hv = ovn_lab.hvs[0]
    lines = doctor_lines(env, hv.ovsdb)
    assert lines == ["this host can bind the cloud's ports:",
                     f"yes: OVS database {hv.ovsdb} reachable",
                     f"yes: registered as OVN chassis {hv.chassis} (ports bind to it as binding:host_id {hv.chassis})",
                     "yes: integration bridge br-int present",
                     "yes: vif_types netbay can plug here: ovs"], lines

    gone = f"unix:{tmp_path / 'no.sock'}"
    lines = doctor_lines(env, gone)
    assert len(lines) == 2 and lines[0] == "this host cannot bind the cloud's ports:", lines
    assert lines[1].startswith(f"no: OVS database {gone} not reachable: "), lines

    run = ovn_lab.dir / "bare"
    run.mkdir()
    create_db(ovn_lab.central_ns, run / "conf.db", OVS_SCHEMA)
    sock = run / "db.sock"
    server = spawn("ovsdb-server", ovn_lab.central_ns, run, ["ovsdb-server", f"--remote=punix:{sock}",
                                                             str(run / "conf.db")])
    db = f"unix:{sock}"

    def vsctl(*args: str) -> None:
        ctl(ovn_lab.central_ns, run, "ovs-vsctl", f"--db={db}", "--timeout=20", "--no-wait", *args)

    try:
        wait_for("the bare ovsdb socket", sock.is_socket, 20, [server])
        vsctl("init")
        no_chassis = ("no: not registered as an OVN chassis: no system-id in the Open_vSwitch table's external_ids "
                      "(ovn-controller sets it; is it configured and running?)")
        no_bridge = "no: integration bridge br-int missing (ovn-controller creates it)"
        no_vifs = "no: no vif_type can be plugged here: ovs needs the integration bridge br-int"
        assert doctor_lines(env, db)[1:] == [f"yes: OVS database {db} reachable", no_chassis, no_bridge, no_vifs]
        vsctl("set", "Open_vSwitch", ".", "external_ids:system-id=bare", "external_ids:hostname=bare-host")
        assert doctor_lines(env, db)[1:] == [
            f"yes: OVS database {db} reachable",
            "yes: registered as OVN chassis bare (ports bind to it as binding:host_id bare-host)", no_bridge, no_vifs]
        vsctl("remove", "Open_vSwitch", ".", "external_ids", "system-id")
        vsctl("add-br", "br-int")
        assert doctor_lines(env, db) == [
            "this host cannot bind the cloud's ports:", f"yes: OVS database {db} reachable", no_chassis,
            "yes: integration bridge br-int present", "yes: vif_types netbay can plug here: ovs"]
    finally:
        server.stop()
    assert not server.alive()
