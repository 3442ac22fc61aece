"""netbay's Docker driver binding containers on a real cloud dataplane: ``netbay
libnetwork --backend openstack`` for lab chassis 1 (its OVS database, its datapath's
namespace), a private dockerd with the real Docker CLI, the real Neutron ML2/OVN of
neutron_ovn.py.

kuryr-libnetwork's order: CreateEndpoint binds the port Docker's address came with to
the chassis (``binding:host_id``), reads ``binding:vif_type``/``binding:vif_details``
and plugs the pair's host end into that chassis's ``br-int`` with os-vif; Join hands
Docker the inner end. The port turns ACTIVE because OVN claimed it, and the container
reaches a port on chassis 2 through OVN's Geneve tunnel (both ways, TCP too).
``docker rm`` unplugs; Neutron's port list is as before. A port Neutron binds with a
``vif_type`` netbay cannot plug fails ``docker run`` by name, nothing made; a restarted
plugin finishes a half-done plug.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from netbay.dataplane import netns, veth
from netbay.dataplane.names import Names
from netbay.dataplane.rtnl import rtnl
from netbay.runtime.vif import host_end
from tests.dataplane import dockerd as dk
from tests.dataplane.docker_fixtures import Plugin, sh
from tests.dataplane.dp_helpers import RUN_ID, ping

from .cloudhelp import Net, Plugs, iface_ids, wait_status
from .lab import Hypervisor, OvnLab
from .probes import tcp_arrives

pytestmark = [pytest.mark.ovn, pytest.mark.peers,
              pytest.mark.skipif(dk.available() is not None, reason=str(dk.available()))]

CIDR = "10.22.0.0/24"
NAME = f"nbt{RUN_ID}ov"


@pytest.fixture(scope="module")
def net(conn) -> Iterator[Net]:
    network = conn.network.create_network(name="docker-ovn-net")
    subnet = conn.network.create_subnet(network_id=network.id, cidr=CIDR, ip_version=4, name="docker-ovn-subnet",
                                        is_dhcp_enabled=False)
    yield Net(network, subnet)
    conn.network.delete_network(network)


@pytest.fixture(scope="module")
def daemon() -> Iterator[dk.Dockerd]:
    yield from dk.running()


def start_plugin(lab: OvnLab, hv: Hypervisor, env: dict[str, str], daemon: dk.Dockerd, log: Path, name: str = NAME,
                 *extra: str) -> Plugin:
    """``netbay libnetwork`` for chassis ``hv``: bound there, plugged with os-vif into its br-int."""
    return Plugin(name, "http://127.0.0.1:9", f"{lab.prefix}d{hv.index}-", env, log,
                  ("--backend", "openstack", "--os-cloud", "ovn", "--ovsdb", hv.ovsdb, "--ovs-netns", hv.ns,
                   "--docker-host", daemon.host, "--orphan-grace", "600", *extra)).start()


@pytest.fixture(scope="module")
def plugin(ovn_lab: OvnLab, env: dict[str, str], daemon: dk.Dockerd,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plugin]:
    p = start_plugin(ovn_lab, ovn_lab.hvs[0], env, daemon, tmp_path_factory.mktemp("vif-docker") / "plugin.log")
    try:
        yield p
    finally:
        p.stop()


@pytest.fixture(scope="module")
def docker_net(daemon: dk.Dockerd, plugin: Plugin, net: Net) -> Iterator[str]:
    """A Docker network on the cloud's network (``-o netbay.network=``), its pool the subnet's."""
    r = daemon.cli("network", "create", "-d", NAME, "--ipam-driver", NAME, "--subnet", CIDR,
                   "-o", f"netbay.network={net.network.id}", "dnet")
    assert r.returncode == 0, (r.stderr, plugin.log.read_text()[-3000:])
    yield "dnet"
    r = daemon.cli("network", "rm", "dnet")
    assert r.returncode == 0, r.stderr


@pytest.fixture
def ports_kept(conn, net: Net) -> Iterator[None]:
    """Neutron's port list as it was, after each test (ask for it before ``plugs``: checked after their undoing)."""
    before = {p.id for p in conn.network.ports()}
    yield
    assert {p.id for p in conn.network.ports()} == before


@pytest.fixture
def plugs(ovn_lab: OvnLab, conn, net: Net) -> Iterator[Plugs]:
    made = Plugs(ovn_lab, conn, net)
    try:
        yield made
    finally:
        made.undo()


def endpoint_port(conn, daemon: dk.Dockerd, container: str, docker_net: str):
    info = daemon.client.containers.get(container).attrs["NetworkSettings"]["Networks"][docker_net]
    (port,) = conn.network.ports(tags=f"netbay.docker.ep:{info['EndpointID']}")
    return port


def docker_run(daemon: dk.Dockerd, docker_net: str, name: str) -> None:
    r = daemon.cli("run", "-d", "--name", name, "--network", docker_net, dk.IMAGE, "sleep", "600")
    assert r.returncode == 0, r.stderr


def docker_rm(daemon: dk.Dockerd, name: str) -> None:
    r = daemon.cli("rm", "-f", name)
    assert r.returncode == 0, r.stderr


def test_docker_run_binds_on_the_chassis_and_reaches_the_other_one(
        ovn_lab: OvnLab, conn, net: Net, daemon: dk.Dockerd, plugin: Plugin, docker_net: str,
        ports_kept: None, plugs: Plugs) -> None:
    hv1, hv2 = ovn_lab.hvs[0], ovn_lab.hvs[1]
    other, box = plugs.port(hv2, "on-hv2")
    name = f"{NAME}a"
    docker_run(daemon, docker_net, name)
    try:
        port = endpoint_port(conn, daemon, name, docker_net)
        assert port.binding_host_id == hv1.chassis and port.binding_vif_type == "ovs", port
        assert port.device_owner == "kuryr:container"
        end = host_end(port.id)
        assert end in hv1.vsctl("list-ports", "br-int").split()
        ids = iface_ids(hv1, end)
        for key in (f"iface-id={port.id}", f"attached-mac={port.mac_address}", "iface-status=active"):
            assert key in ids, f"{key} not in {ids}"
        assert wait_status(conn, port.id, "ACTIVE") == "ACTIVE"
        assert wait_status(conn, other.id, "ACTIVE") == "ACTIVE"
        assert ovn_lab.bound_chassis(port.id) == hv1.chassis   # OVN's claim, in the SB
        ovn_lab.sync()
        ip, other_ip = port.fixed_ips[0]["ip_address"], other.fixed_ips[0]["ip_address"]
        container = daemon.client.containers.get(name)
        code, out = sh(container, "ip -o link show eth0")
        assert code == 0 and port.mac_address in out, out
        reached = any(sh(container, f"ping -c 1 -W 1 {other_ip}")[0] == 0 for _ in range(10))
        assert reached, sh(container, "ip addr; ip route")[1]
        assert any(ping(box.ns, ip, timeout=1.0) for _ in range(5))
        before = hv1.uplink_tx_packets()   # it crossed the underlay (Geneve)
        assert sum(ping(box.ns, ip, timeout=1.0) for _ in range(3)) == 3
        assert hv1.uplink_tx_packets() - before >= 3
        # TCP: the driver turned the inner end's TX checksum offload off (a netdev br-int)
        sandbox = container.attrs["NetworkSettings"]["SandboxKey"]
        assert tcp_arrives(sandbox, netns.path(box.ns), other_ip)
    finally:
        docker_rm(daemon, name)
    assert host_end(port.id) not in hv1.vsctl("list-ports", "br-int").split()
    assert hv1.vsctl("--bare", "--columns=name", "find", "Interface", f"external_ids:iface-id={port.id}") == ""


def test_a_vif_type_netbay_cannot_plug_fails_docker_run_by_name(
        ovn_lab: OvnLab, conn, net: Net, daemon: dk.Dockerd, env: dict[str, str], docker_net: str,
        plugin: Plugin, ports_kept: None, tmp_path: Path) -> None:
    """Bound to a host that is no chassis, ML2/OVN answers ``binding_failed``: CreateEndpoint
    refuses it by that name before the pair is made; Docker releases the address (the port goes)."""
    hv = ovn_lab.hvs[0]
    in_bridge = hv.vsctl("list-ports", "br-int")
    plugin.stop()
    other = start_plugin(ovn_lab, hv, env, daemon, tmp_path / "nochassis.log", NAME, "--host", "no-such-chassis")
    try:
        r = daemon.cli("run", "-d", "--name", f"{NAME}r", "--network", docker_net, dk.IMAGE, "sleep", "600")
        assert r.returncode != 0 and "binding:vif_type 'binding_failed'" in r.stderr, r.stderr
        assert "cannot plug" in r.stderr
        assert hv.vsctl("list-ports", "br-int") == in_bridge
        refused = re.search(r"port ([0-9a-f-]{36}) is bound", r.stderr)
        assert refused, r.stderr
        # by its pair's names: other workers' Docker tests make theirs in the same host namespace
        pair = {Names.container_end(refused[1]), host_end(refused[1])}
        assert not pair & set(veth.host_ends("nb")) and not pair & {lk.ifname for lk in rtnl(hv.ns).links()}
    finally:
        daemon.cli("rm", "-f", f"{NAME}r")
        other.stop()
        plugin.start()


def test_restart_finishes_a_half_done_plug(
        ovn_lab: OvnLab, conn, net: Net, daemon: dk.Dockerd, plugin: Plugin, docker_net: str,
        ports_kept: None) -> None:
    """The container's OVS port taken out of br-int while the plugin was down (as a crash
    between the pair and os-vif leaves it) is plugged again at start, from the host end's note."""
    hv = ovn_lab.hvs[0]
    name = f"{NAME}h"
    docker_run(daemon, docker_net, name)
    try:
        port = endpoint_port(conn, daemon, name, docker_net)
        end = host_end(port.id)
        plugin.stop()
        stale = f"nbv{uuid.uuid4().hex[:11]}"
        try:
            hv.vsctl("del-port", "br-int", end)
            hv.vsctl("add-port", "br-int", stale)   # no such device
            plugin.start()
            listed = hv.vsctl("list-ports", "br-int").split()
            assert end in listed and stale not in listed, listed
            assert f"iface-id={port.id}" in iface_ids(hv, end)
            assert wait_status(conn, port.id, "ACTIVE") == "ACTIVE"
        finally:
            hv.vsctl("--if-exists", "del-port", "br-int", stale)
            if plugin.proc is None or plugin.proc.poll() is not None:
                plugin.start()
    finally:
        docker_rm(daemon, name)
    assert end not in hv.vsctl("list-ports", "br-int").split()


def test_a_containers_security_group_drops_then_allows(
        ovn_lab: OvnLab, conn, net: Net, daemon: dk.Dockerd, plugin: Plugin, docker_net: str,
        ports_kept: None, plugs: Plugs) -> None:
    """The Docker container's port in a group without an ICMP rule: OVN's ACLs drop the
    other chassis's echoes; the rule added, they arrive."""
    group = conn.network.create_security_group(name="docker-no-icmp")  # egress only, as made
    name = f"{NAME}s"
    try:
        _other, box = plugs.port(ovn_lab.hvs[1], "sg-peer")
        docker_run(daemon, docker_net, name)
        try:
            port = endpoint_port(conn, daemon, name, docker_net)
            conn.network.update_port(port.id, security_group_ids=[group.id])
            assert wait_status(conn, port.id, "ACTIVE") == "ACTIVE"
            ovn_lab.sync()
            ip = port.fixed_ips[0]["ip_address"]
            assert not any(ping(box.ns, ip, timeout=0.5) for _ in range(4)), "a group without an ICMP rule let ICMP in"
            conn.network.create_security_group_rule(security_group_id=group.id, direction="ingress",
                                                    ethertype="IPv4", protocol="icmp")
            ovn_lab.sync()
            assert any(ping(box.ns, ip, timeout=1.0) for _ in range(10))
        finally:
            docker_rm(daemon, name)
    finally:
        plugs.undo()
        plugs.made.clear()
        conn.network.delete_security_group(group)


@pytest.fixture(autouse=True)
def no_namespace_left(ovn_lab: OvnLab) -> Iterator[None]:
    """No namespace of the plugin's prefix (the names Join gives containers') outlives a test."""
    yield
    assert not netns.list(f"{ovn_lab.prefix}d1-")
