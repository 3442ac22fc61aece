"""Clusters on the cloud, reachable: the Nova STAND-IN's servers (``tests/peers/nova_standin.py``,
no Nova runs here) placed on the OVN lab's chassis (``nova_hosts.py``) and plugged there
as netbay plugs a container's port — bound to the chassis (``binding:host_id``), then
plugged as ``binding:vif_type`` says, by :mod:`netbay.runtime.vif` — against the real
Neutron ML2/OVN of neutron_ovn.py.

- Two servers booted through the compute seam (:class:`netbay.backends.novacloud.CloudServers`)
  land on the two chassis; each port is ACTIVE because OVN claimed it (the SB names the
  chassis) and its host end is in that chassis's ``br-int``; the servers ping each
  other across the Geneve tunnel. Deleting them unplugs (no namespace, no OVS port) and
  unbinds.
- A host Neutron cannot bind to (``binding_failed``): the boot goes ``ERROR`` with a
  fault naming the ``vif_type``; nothing is plugged.
- ``netbay up --backend openstack`` on that cloud builds a cluster whose nodes are such
  servers, one per chassis; ``netbay cluster connectivity`` probes its matrix from
  them (all reachable within the cluster, and the external network through the
  cluster's router on OVN's gateway chassis). Deleting the cluster leaves Neutron's port
  list, the lab's bridges and this host's namespaces as they were.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator

import pytest

from netbay.dataplane import netns
from netbay.dataplane.names import Names
from netbay.runtime.vif import host_end
from tests.dataplane.dp_helpers import ping

from .cloudhelp import Net, iface_ids, wait_status
from .lab import OUTSIDE, PHYSNET, OvnLab
from tests import zygote

pytestmark = [pytest.mark.ovn, pytest.mark.peers]

CIDR = "10.26.0.0/24"
BOOT_TIMEOUT = 120
BUILD_TIMEOUT = 600


@pytest.fixture(scope="module")
def names(ovn_lab: OvnLab) -> Names:
    """Where the servers' namespaces are (``<prefix>s-<server id>``, a node's sandbox name)."""
    return Names(f"{ovn_lab.prefix}n-")


@pytest.fixture(scope="module")
def nova(ovn_lab: OvnLab, ovn_cloud, names: Names) -> Iterator:
    pytest.importorskip("os_vif", reason="os-vif is netbay's optional `cloud` extra")
    from tests.peers.nova_standin import NovaStandin

    from .nova_hosts import chassis_hosts

    with chassis_hosts(ovn_lab, names) as hosts, NovaStandin(ovn_cloud, hosts) as n:
        yield n
    assert netns.list(names.prefix) == []


@pytest.fixture(scope="module")
def admin(nova, ovn_cloud) -> Iterator:
    """An admin connection made after the stand-in joined the catalog (a connection reads it once)."""
    c = ovn_cloud.connection()
    yield c
    c.close()


@pytest.fixture(scope="module")
def net(admin) -> Iterator[Net]:
    network = admin.network.create_network(name="nova-ovn-net")
    subnet = admin.network.create_subnet(network_id=network.id, cidr=CIDR, ip_version=4, name="nova-ovn-subnet",
                                         is_dhcp_enabled=False)
    yield Net(network, subnet)
    admin.network.delete_network(network)


@pytest.fixture
def ports_kept(admin) -> Iterator[list[str]]:
    """Ports a test makes (deleted after it); Neutron's port list as it was."""
    before = {p.id for p in admin.network.ports()}
    made: list[str] = []
    yield made
    for port_id in made:
        admin.network.delete_port(port_id, ignore_missing=True)
    assert {p.id for p in admin.network.ports()} == before


def boot(servers, image: str, flavor: str, name: str, port_id: str) -> dict:
    return servers.create({"name": name, "imageRef": servers.image_id(image), "flavorRef": servers.flavor_id(flavor),
                           "networks": [{"port": port_id}]})


def in_br_int(ovn_lab: OvnLab) -> dict[int, list[str]]:
    return {hv.index: hv.vsctl("list-ports", "br-int").split() for hv in ovn_lab.hvs}


def test_servers_land_on_two_chassis_plugged_by_their_binding_and_talk(
        ovn_lab: OvnLab, nova, admin, net: Net, names: Names, ports_kept: list[str]) -> None:
    from netbay.backends.novacloud import CloudServers
    from netbay.backends.servers import active, gone

    servers = CloudServers(admin)
    bridges = in_br_int(ovn_lab)
    ports = [admin.network.create_port(network_id=net.network.id, name=f"vm{i}") for i in (1, 2)]
    ports_kept.extend(p.id for p in ports)
    made = [boot(servers, "cirros", "m1.tiny", f"vm{i}", p.id) for i, p in enumerate(ports, 1)]
    try:
        booted = [active(servers, s["id"], BOOT_TIMEOUT) for s in made]
        chassis = {hv.chassis: hv for hv in ovn_lab.hvs}
        hosts = [admin.network.get_port(p.id).binding_host_id for p in ports]
        assert sorted(hosts) == sorted(chassis), hosts   # one server on each chassis
        for server, port, host in zip(booted, ports, hosts, strict=True):
            assert server["OS-EXT-SRV-ATTR:host"] == host
            bound = admin.network.get_port(port.id)
            assert (bound.device_id, bound.device_owner) == (server["id"], "compute:nova")
            assert bound.binding_vif_type == "ovs" and bound.status == "ACTIVE"   # OVN claimed it
            assert ovn_lab.bound_chassis(port.id) == host
            hv, end = chassis[host], host_end(port.id)
            assert end in hv.vsctl("list-ports", "br-int").split()
            ids = iface_ids(hv, end)
            for key in (f"iface-id={port.id}", f"attached-mac={port.mac_address}", "iface-status=active",
                        f"vm-uuid={server['id']}"):
                assert key in ids, f"{key} not in {ids}"
            assert netns.exists(names.sandbox(server["id"]))
        ovn_lab.sync()
        (a, b), (pa, pb) = booted, ports
        ns_a, ns_b = names.sandbox(a["id"]), names.sandbox(b["id"])
        ip_a, ip_b = pa.fixed_ips[0]["ip_address"], pb.fixed_ips[0]["ip_address"]
        sender = chassis[hosts[0]]
        tx = sender.uplink_tx_packets()
        assert any(ping(ns_a, ip_b, timeout=1.0) for _ in range(10)), "no ICMP between the servers"
        assert any(ping(ns_b, ip_a, timeout=1.0) for _ in range(5))
        assert sender.uplink_tx_packets() > tx, "the echoes did not cross the underlay"
    finally:
        for s in made:
            servers.delete(s["id"])
        for s in made:
            gone(servers, s["id"], BOOT_TIMEOUT)
    for port in ports:
        after = admin.network.get_port(port.id)
        assert (after.device_id, after.binding_host_id) == ("", ""), after
        assert wait_status(admin, port.id, "DOWN") == "DOWN"
    assert netns.list(names.prefix) == []
    assert in_br_int(ovn_lab) == bridges


def test_a_host_neutron_cannot_bind_to_fails_the_boot_by_name(
        ovn_lab: OvnLab, nova, admin, net: Net, names: Names, ports_kept: list[str]) -> None:
    from netbay.backends.novacloud import CloudServers
    from netbay.backends.servers import active, gone

    from .nova_hosts import ChassisHost

    real = nova.hosts[0]
    nowhere = ChassisHost(real.hv, names, real.sandboxes.vifs.plugin)
    nowhere.name = "no-such-chassis"
    servers, bridges = CloudServers(admin), in_br_int(ovn_lab)
    port = admin.network.create_port(network_id=net.network.id, name="vm-nowhere")
    ports_kept.append(port.id)
    saved = nova.hosts
    nova.hosts = [nowhere]
    try:
        server = boot(servers, "cirros", "m1.tiny", "vm-nowhere", port.id)
        with pytest.raises(RuntimeError, match="binding:vif_type 'binding_failed'"):
            active(servers, server["id"], BOOT_TIMEOUT)
        assert not netns.exists(names.sandbox(server["id"]))
        assert in_br_int(ovn_lab) == bridges
        servers.delete(server["id"])
        gone(servers, server["id"], BOOT_TIMEOUT)
    finally:
        nova.hosts = saved
    assert admin.network.get_port(port.id).binding_host_id == ""


# --- a cluster of netbay on the cloud ----------------------------------------------------------------


@pytest.fixture(scope="module")
def outside(ovn_lab: OvnLab, admin) -> Iterator[str]:
    """The external network ``public`` (flat, physnet1) bridged on chassis 2 to the outside
    namespace; its gateway is the outside's address."""
    ns = ovn_lab.add_outside(ovn_lab.hvs[1])
    ext = admin.network.create_network(name="public", is_router_external=True, provider_network_type="flat",
                                       provider_physical_network=PHYSNET)
    admin.network.create_subnet(network_id=ext.id, cidr="172.24.4.0/24", ip_version=4,
                                gateway_ip=OUTSIDE.split("/")[0], is_dhcp_enabled=False, name="public-subnet")
    yield ns
    admin.network.delete_network(ext)


@pytest.fixture(scope="module")
def on_cloud(ovn_cloud, admin, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict, object]]:
    """``netbay up --backend openstack`` on the lab's cloud (clouds.yaml entry ``peer``), its
    container-infra API registered in the cloud's catalog (as an operator would, so that
    the ``netbay`` CLI of a cloud user finds it); (the CLI's environment, the server)."""
    from tests.backendfix import netbay_on_cloud

    path = tmp_path_factory.mktemp("nova-clouds") / "clouds.yaml"
    path.write_text(json.dumps({"clouds": {"peer": {"auth": ovn_cloud.auth(), "region_name": "RegionOne",
                                                    "identity_api_version": 3}}}))
    env = {"OS_CLIENT_CONFIG_FILE": str(path), "OS_CLOUD": "peer"}
    with netbay_on_cloud(env, tmp_path_factory.mktemp("nova-netbay")) as srv:
        service = admin.identity.create_service(name="netbay-magnum", type="container-infra")
        endpoint = admin.identity.create_endpoint(service_id=service.id, interface="public", region_id="RegionOne",
                                                  url=f"{srv.url}/container-infra/v1")
        try:
            yield {**{k: v for k, v in os.environ.items() if not k.startswith("OS_")}, **env, "COLUMNS": "200"}, srv
        finally:
            admin.identity.delete_endpoint(endpoint)
            admin.identity.delete_service(service)


def netbay_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return zygote.run([sys.executable, "-m", "netbay.cli.main", *args], env=env, capture_output=True, text=True,
                      timeout=300)


def test_a_cluster_on_the_cloud_has_nodes_on_the_chassis_that_answer(
        ovn_lab: OvnLab, nova, admin, names: Names, outside: str, on_cloud, ports_kept: list[str]) -> None:
    from coehelp import ci_client, create_cluster, delete_cluster, make_template
    from coehelp import wait_status as cluster_status

    env, srv = on_cloud
    ci = ci_client(srv, admin.auth_token)
    bridges = in_br_int(ovn_lab)
    template = make_template(ci, name=f"ovn-{uuid.uuid4().hex[:8]}", coe="kubernetes", network_driver="flannel",
                             external_network_id="public", master_lb_enabled=False, floating_ip_enabled=False,
                             labels={"flannel_backend": "vxlan"}, image_id="cirros", flavor_id="m1.tiny",
                             master_flavor_id="m1.small")
    cid = create_cluster(ci, template["uuid"], node_count=1)
    try:
        cluster = cluster_status(ci, cid, ("CREATE_COMPLETE", "CREATE_FAILED"), BUILD_TIMEOUT)
        assert cluster["status"] == "CREATE_COMPLETE", cluster["status_reason"]
        servers = [s for s in list(nova.servers.values()) if s["metadata"].get("netbay-cluster") == cid]
        assert sorted(s["metadata"]["role"] for s in servers) == ["master", "minion"]
        assert sorted(s["host"] for s in servers) == sorted(hv.chassis for hv in ovn_lab.hvs)
        for s in servers:
            port = admin.network.get_port(s["ports"][0])
            assert (port.binding_host_id, port.status) == (s["host"], "ACTIVE")
            assert ovn_lab.bound_chassis(port.id) == s["host"]
        ovn_lab.sync()

        r = netbay_cli(env, "cluster", "connectivity", cluster["name"], "--prefix", names.prefix, "--json",
                       "--count", "5")
        assert r.returncode == 0, r.stdout + r.stderr
        doc = json.loads(r.stdout)
        rows = {m["id"]: m for m in doc["members"]}
        assert set(rows) == {s["id"] for s in servers} and all(m["present"] for m in rows.values()), rows
        assert sorted(m["kind"] for m in rows.values()) == ["master", "minion"]
        assert doc["summary"]["within"] == {"cells": 4, "probed": 4, "reachable": 4, "not_routed": 0}
        assert doc["summary"]["all_reachable_within"]
        # The external network's gateway (the outside namespace), through the cluster's router: OVN's
        # gateway on chassis 2, SNAT to the router's address.
        assert [(o["kind"], o["address"]) for o in doc["outside"]] == [("external", OUTSIDE.split("/")[0])]
        assert doc["summary"]["outside"] == {"cells": 2, "probed": 2, "reachable": 2}, doc["outside_cells"]
        text = netbay_cli(env, "cluster", "connectivity", cluster["name"], "--prefix", names.prefix)
        assert text.returncode == 0 and "all 4 cells within the cluster reachable" in text.stdout, text.stdout + text.stderr
    finally:
        delete_cluster(ci, cid, BUILD_TIMEOUT)
        ci.delete(f"/clustertemplates/{template['uuid']}")
    assert [s for s in nova.servers.values() if s["metadata"].get("netbay-cluster") == cid] == []
    assert netns.list(names.prefix) == []
    assert in_br_int(ovn_lab) == bridges
