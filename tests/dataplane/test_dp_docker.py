"""Docker's remote network + IPAM driver on a real dockerd, real packets.

dockerd runs off the host's network (netbay.runtime.dockerd); the plugin
(``netbay libnetwork``) runs as a child process named per run (``nbt<hex>dk``),
wired into this run's fabric (prefix ``nbt<hex>-dk-``), against a real netbay
server with an in-process dataplane agent.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from netbay.dataplane.names import Names
from netbay.dataplane.rtnl import rtnl
from netbay.plugins.libnetwork.journal import RESEND_WINDOW
import dockercalls  # tests/dockercalls.py
from conftest import free_port  # tests/conftest.py

from . import dockerd as dk
from .agent_fixtures import Cloud, wait_for
from .docker_fixtures import (  # noqa: F401 - daemon, plugin: the module fixtures
    GRACE, PLUGIN, Plugin, daemon, docker_network, endpoint_port, feed_head, host_container_ends, iface, made_ports,
    netbay_network, plugin, plugin_env, ports_made_since, run, sh, tcp_read)
from .dp_helpers import PREFIX, ping

pytestmark = pytest.mark.skipif(dk.available() is not None, reason=str(dk.available()))

CLOUD_TAG = "dk"   # the shared `cloud` fixture (conftest.py): its namespace prefix


# --- tests -----------------------------------------------------------------------------------


def test_plugin_discovery_ignores_the_exec_root(daemon: dk.Dockerd, plugin: Plugin) -> None:
    """dockerd with its own --exec-root still finds /run/docker/plugins/<name>.sock."""
    assert "exec" in str(daemon.root / "exec")
    r = daemon.cli("network", "create", "-d", PLUGIN, "--ipam-driver", PLUGIN, "--subnet", "10.61.0.0/24", "disco")
    assert r.returncode == 0, r.stderr
    assert daemon.cli("network", "rm", "disco").returncode == 0


def test_run_gets_the_ports_mac_and_address_and_talks_to_a_sandbox(cloud: Cloud, daemon: dk.Dockerd, plugin: Plugin) -> None:
    dnet = docker_network(daemon, "dk-a", "10.62.0.0/24")
    net = netbay_network(cloud, dnet)
    sb = cloud.sandbox("sb-a", networks=[net["id"]])
    c = run(daemon, "dk-a", "c-a", "echo hello-from-docker | nc -l -p 7000; sleep 600")
    try:
        port = endpoint_port(cloud, c, "dk-a")
        assert port["device_owner"] == "compute:netbay" and port["binding:host_id"]
        # The container is the port's device (once Docker lists it; the plugin asks off the call path).
        wait_for(lambda: cloud.port(port["id"])["device_id"] == c.id, 30, 0.05, "the container as device")
        mac, addrs = iface(c)
        ip = port["fixed_ips"][0]["ip_address"]
        assert mac == port["mac_address"]
        assert addrs == [f"{ip}/24"]
        cloud.wait_status(f"/network/v2.0/ports/{port['id']}", "ACTIVE", 30)
        sb = cloud.wait_status(f"/netbay/v1/sandboxes/{sb['id']}", "ACTIVE", 30)
        sb_ip = cloud.ip_of(sb["ports"][0]["port_id"])
        ns = cloud.sandbox_ns(sb["id"])
        assert ping(ns, ip, count=3), "sandbox -> container ICMP"
        code, out = sh(c, f"ping -c 1 -W 2 {sb_ip}")
        assert code == 0, out
        assert tcp_read(ns, ip, 7000) == b"hello-from-docker\n"
        # The veth's outer end is in this run's fabric on the network's bridge; nothing in the host.
        tap = Names.tap(port["id"])
        assert tap in cloud.taps()
        assert Names.container_end(port["id"]) not in host_container_ends()
    finally:
        c.remove(force=True)
        cloud.delete_sandbox(sb["id"])
        dnet.remove()
    wait_for(lambda: not made_ports(cloud), 10, 0.05, "the plugin's ports to go")
    wait_for(lambda: Names.tap(port["id"]) not in cloud.taps(), 10, 0.05, "the container's tap to go")
    assert not cloud.ok(cloud.http.get("/network/v2.0/networks", params={"id": net["id"]}))["networks"]


def test_two_docker_networks_joined_by_a_router(cloud: Cloud, daemon: dk.Dockerd, plugin: Plugin) -> None:
    a, b = docker_network(daemon, "dk-r1", "10.63.1.0/24"), docker_network(daemon, "dk-r2", "10.63.2.0/24")
    router = cloud.ok(cloud.http.post("/network/v2.0/routers", json={"router": {"name": "dk-r"}}), 201)["router"]
    subnets = [cloud.ok(cloud.http.get("/network/v2.0/subnets",
                                       params={"network_id": netbay_network(cloud, n)["id"]}))["subnets"][0]
               for n in (a, b)]
    for s in subnets:
        cloud.ok(cloud.http.put(f"/network/v2.0/routers/{router['id']}/add_router_interface",
                                json={"subnet_id": s["id"]}))
    c1, c2 = run(daemon, "dk-r1", "c-r1"), run(daemon, "dk-r2", "c-r2")
    try:
        p2 = endpoint_port(cloud, c2, "dk-r2")
        for c, net in ((c1, "dk-r1"), (c2, "dk-r2")):
            cloud.wait_status(f"/network/v2.0/ports/{endpoint_port(cloud, c, net)['id']}", "ACTIVE", 30)
        cloud.wait_status(f"/network/v2.0/routers/{router['id']}", "ACTIVE", 30)
        ip2 = p2["fixed_ips"][0]["ip_address"]
        code, out = sh(c1, f"ping -c 3 -W 2 {ip2}")
        assert code == 0, out
    finally:
        for c in (c1, c2):
            c.remove(force=True)
        for s in subnets:
            cloud.ok(cloud.http.put(f"/network/v2.0/routers/{router['id']}/remove_router_interface",
                                    json={"subnet_id": s["id"]}))
        cloud.ok(cloud.http.delete(f"/network/v2.0/routers/{router['id']}"), 204)
        a.remove()
        b.remove()
    wait_for(lambda: not made_ports(cloud), 10, 0.05, "the plugin's ports to go")


def test_connect_disconnect_and_existing_network(cloud: Cloud, daemon: dk.Dockerd, plugin: Plugin) -> None:
    """``-o netbay.network=`` uses an existing netbay network (kept at ``network rm``);
    connect adds eth1 with its port, disconnect removes both."""
    net, subnet = cloud.network("dk-existing", "10.64.0.0/24")
    a = docker_network(daemon, "dk-c1", "10.64.1.0/24")
    b = docker_network(daemon, "dk-c2", options={"netbay.network": net["name"]},
                       ipam_options={"netbay.subnet": subnet["id"]})
    assert netbay_network(cloud, b)["id"] == net["id"]
    c = run(daemon, "dk-c1", "c-c")
    try:
        b.connect(c)
        p = endpoint_port(cloud, c, "dk-c2")
        assert p["network_id"] == net["id"] and p["fixed_ips"][0]["subnet_id"] == subnet["id"]
        mac, addrs = iface(c, "eth1")
        assert mac == p["mac_address"] and addrs == [f"{p['fixed_ips'][0]['ip_address']}/24"]
        b.disconnect(c)
        code, _ = sh(c, "ip link show eth1")
        assert code != 0
        assert not cloud.ok(cloud.http.get("/network/v2.0/ports", params={"id": p["id"]}))["ports"]
    finally:
        c.remove(force=True)
        a.remove()
        b.remove()
    kept = cloud.ok(cloud.http.get(f"/network/v2.0/networks/{net['id']}"))["network"]
    assert not [t for t in kept["tags"] if t.startswith("netbay.docker")]
    kept_subnet = cloud.ok(cloud.http.get(f"/network/v2.0/subnets/{subnet['id']}"))["subnet"]
    assert not [t for t in kept_subnet["tags"] if t.startswith("netbay.docker")]
    wait_for(lambda: not made_ports(cloud), 10, 0.05, "the plugin's ports to go")


def test_failures_reach_docker_and_leave_nothing(cloud: Cloud, daemon: dk.Dockerd, plugin: Plugin) -> None:
    r = daemon.cli("network", "create", "-d", PLUGIN, "--ipam-driver", PLUGIN, "--subnet", "10.65.0.0/24",
                   "-o", "colour=blue", "dk-bad")
    assert r.returncode != 0 and "unknown -o option 'colour'" in r.stderr, r.stderr
    assert not cloud.ok(cloud.http.get("/network/v2.0/subnets", params={"cidr": "10.65.0.0/24"}))["subnets"]
    assert daemon.cli("network", "create", "-d", PLUGIN, "--ipam-driver", PLUGIN, "--subnet", "10.65.0.0/24",
                      "dk-f").returncode == 0
    try:
        r = daemon.cli("run", "--rm", "--net", "dk-f", "--ip", "10.99.0.5", dk.IMAGE, "true")
        assert r.returncode != 0 and "10.99.0.5" in r.stderr, r.stderr
        r = daemon.cli("run", "--rm", "--net", "dk-f", "--ip", "10.65.0.77", dk.IMAGE, "ip", "-o", "-4", "addr")
        assert r.returncode == 0 and "10.65.0.77/24" in r.stdout, r.stderr
    finally:
        daemon.cli("network", "rm", "dk-f")
    assert not made_ports(cloud)  # at once: no sweep has had time to tidy up


def test_a_netbay_server_that_is_down_is_an_error_at_once(daemon: dk.Dockerd, tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    env = {**os.environ, "OS_AUTH_URL": f"{dead}/identity/v3", "OS_USERNAME": "admin", "OS_PASSWORD": "x",
           "OS_PROJECT_NAME": "admin"}
    p = Plugin(f"{PLUGIN}x", dead, f"{PREFIX}dx-", env, tmp_path / "down.log").start()
    try:
        t0 = time.monotonic()
        r = daemon.cli("network", "create", "-d", p.name, "--ipam-driver", p.name, "--subnet", "10.66.0.0/24", "dk-d")
        took = time.monotonic() - t0
        assert r.returncode != 0 and "unreachable" in r.stderr, r.stderr
        assert took < 10, took
    finally:
        p.stop()


def test_plugin_killed_mid_way_through_20_runs(cloud: Cloud, daemon: dk.Dockerd, plugin: Plugin,
                                               make_ns: Callable[[str], str]) -> None:
    """SIGKILL during 20 concurrent ``docker run``s, restart: every container Docker
    reports running is networked; no port, veth or host-side end is orphaned. A stray
    pair of this fabric's goes with the rest; one of another netbay's fabric on the same
    host (a test's namespace here) is not the plugin's to take."""
    stray, foreign = (secrets.token_hex(6)[:11] for _ in range(2))
    rtnl(cloud.names.fabric).add_veth(f"tap{stray}", f"nbc{stray}", None, mtu=1500)
    rtnl(make_ns("dkf")).add_veth(f"tap{foreign}", f"nbc{foreign}", None, mtu=1500)
    dnet = docker_network(daemon, "dk-k", "10.67.0.0/23")
    net = netbay_network(cloud, dnet)
    sb = cloud.sandbox("sb-k", networks=[net["id"]])
    since = feed_head(cloud)
    env = {**os.environ, "DOCKER_HOST": daemon.host}
    runs = [subprocess.Popen([dk.shutil.which("docker") or "docker", "run", "-d", "--name", f"k{i}", "--net",
                              "dk-k", dk.IMAGE, "sleep", "600"], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for i in range(20)]
    try:
        wait_for(lambda: len(made_ports(cloud)) >= 3, 60, 0.01, "the first ports")
        plugin.kill()
        killed = time.monotonic()
        time.sleep(0.5)
        plugin.start()
        for r in runs:
            r.communicate(timeout=120)
        running = [c for c in daemon.client.containers.list(filters={"network": "dk-k"}) if c.status == "running"]
        assert running, [r.returncode for r in runs]
        print(f"running {len(running)} of 20; docker run exit codes {[r.returncode for r in runs]}")
        sb = cloud.wait_status(f"/netbay/v1/sandboxes/{sb['id']}", "ACTIVE", 30)
        ns = cloud.sandbox_ns(sb["id"])
        ports = []
        for c in running:
            port = endpoint_port(cloud, c, "dk-k")
            mac, addrs = iface(c)
            assert mac == port["mac_address"] and addrs == [f"{port['fixed_ips'][0]['ip_address']}/23"], c.name
            cloud.wait_status(f"/network/v2.0/ports/{port['id']}", "ACTIVE", 30)
            assert ping(ns, port["fixed_ips"][0]["ip_address"], count=3), c.name
            ports.append(port["id"])
        wanted = set(ports) | {sb["ports"][0]["port_id"]}
        # A RequestAddress the kill cut short keeps its port for Docker's resend until the
        # journal's window closes (then the next sweep takes it); the rest go within a sweep or two.
        window = max(6 * GRACE, RESEND_WINDOW - (time.monotonic() - killed) + 3 * GRACE)
        try:
            wait_for(lambda: {p["id"] for p in made_ports(cloud)} == set(ports), window, 0.2,
                     "orphaned ports to be collected")
        except AssertionError:
            now = made_ports(cloud)
            left = [{k: p.get(k) for k in ("id", "created_at", "updated_at", "mac_address", "device_id",
                                           "binding:host_id", "tags", "status")} for p in now if p["id"] not in ports]
            gone = set(ports) - {p["id"] for p in now}
            raise AssertionError(f"after {window:.0f} s, left: {left}; running containers' ports gone: {gone}\n"
                                 f"plugin log:\n{plugin.log_with_stacks()}") from None
        made = ports_made_since(cloud, since)
        wait_for(lambda: not host_container_ends([*made, stray]), 6 * GRACE, 0.2,
                 "host-side ends to be collected")
        assert f"nbc{stray}" in plugin.log.read_text(), "the stray pair went, but not by the plugin's sweep"
        assert f"nbc{foreign}" in host_container_ends(), "the plugin took another fabric's pair"
        ours = {p["id"] for p in cloud.ok(cloud.http.get("/network/v2.0/ports",
                                                         params={"network_id": net["id"]}))["ports"]}
        assert ours - {p for p in ours if p in wanted} <= {p["id"] for p in cloud.ok(cloud.http.get(
            "/network/v2.0/ports", params={"network_id": net["id"], "device_owner": "network:dhcp"}))["ports"]}
        wait_for(lambda: set(cloud.taps()) >= {Names.tap(p) for p in wanted}, 10, 0.05, "taps")
    finally:
        for r in runs:
            if r.poll() is None:
                r.kill()
        for c in daemon.client.containers.list(all=True, filters={"name": "k"}):
            c.remove(force=True)
        cloud.delete_sandbox(sb["id"])
        dnet.remove()
    wait_for(lambda: not made_ports(cloud), 10, 0.05, "the plugin's ports to go")


def test_security_groups_apply_to_a_containers_port(cloud: Cloud, daemon: dk.Dockerd, plugin: Plugin) -> None:
    """The fabric filters the container's port as any other: a group with no ingress
    rule drops the sandbox's echo; an ICMP rule lets it through again."""
    dnet = docker_network(daemon, "dk-sg", "10.68.0.0/24")
    net = netbay_network(cloud, dnet)
    sb = cloud.sandbox("sb-sg", networks=[net["id"]])
    c = run(daemon, "dk-sg", "c-sg")
    sg = cloud.ok(cloud.http.post("/network/v2.0/security-groups",
                                  json={"security_group": {"name": "dk-locked"}}), 201)["security_group"]
    try:
        port = endpoint_port(cloud, c, "dk-sg")
        ip = port["fixed_ips"][0]["ip_address"]
        cloud.wait_status(f"/network/v2.0/ports/{port['id']}", "ACTIVE", 30)
        ns = cloud.sandbox_ns(cloud.wait_status(f"/netbay/v1/sandboxes/{sb['id']}", "ACTIVE", 30)["id"])
        assert ping(ns, ip, count=3), "default group: members reach each other"
        cloud.ok(cloud.http.put(f"/network/v2.0/ports/{port['id']}",
                                json={"port": {"security_groups": [sg["id"]]}}))
        wait_for(lambda: not ping(ns, ip, timeout=0.3), 15, 0.05, "the locked group to drop the echo")
        assert not ping(ns, ip, count=2, timeout=0.5)
        cloud.ok(cloud.http.post("/network/v2.0/security-group-rules", json={"security_group_rule": {
            "security_group_id": sg["id"], "direction": "ingress", "protocol": "icmp", "ethertype": "IPv4"}}), 201)
        wait_for(lambda: ping(ns, ip, timeout=0.3), 15, 0.05, "the ICMP rule to let the echo through")
    finally:
        c.remove(force=True)
        cloud.delete_sandbox(sb["id"])
        dnet.remove()
        cloud.ok(cloud.http.delete(f"/network/v2.0/security-groups/{sg['id']}"), 204)
    wait_for(lambda: not made_ports(cloud), 10, 0.05, "the plugin's ports to go")


def test_runtime_runs_a_container_on_a_given_port(cloud: Cloud, daemon: dk.Dockerd, plugin: Plugin) -> None:
    """The container API's seam (netbay.runtime.docker): a container on a port its caller
    made keeps that port's address and MAC; removing the container unbinds the port, keeps it."""
    from netbay.runtime.docker import DockerRuntime

    net, subnet = cloud.network("dk-given", "10.69.0.0/24")
    device = "7b1f3c0e-0000-4000-8000-00000000c0de"
    port = cloud.ok(cloud.http.post("/network/v2.0/ports", json={"port": {
        "network_id": net["id"], "device_id": device, "device_owner": "compute:netbay",
        "fixed_ips": [{"subnet_id": subnet["id"], "ip_address": "10.69.0.42"}]}}), 201)["port"]
    rt = DockerRuntime(daemon.client, PLUGIN)
    assert rt.ensure_network(net, [subnet]) == rt.ensure_network(net, [subnet]) == net["id"]
    cid = rt.run(dk.IMAGE, ["sleep", "600"], port, name="c-given")
    try:
        c = daemon.client.containers.get(cid)
        mac, addrs = iface(c)
        assert mac == port["mac_address"] and addrs == ["10.69.0.42/24"]
        bound = cloud.wait_status(f"/network/v2.0/ports/{port['id']}", "ACTIVE", 30)
        assert bound["device_id"] == device and bound["binding:host_id"]
        assert not made_ports(cloud)  # the caller's port was used, none made
    finally:
        rt.remove(cid)
        rt.remove_network(net["id"])
    kept = cloud.port(port["id"])
    assert kept["device_id"] == device and not kept["binding:host_id"]
    assert not [t for t in kept["tags"] if t.startswith("netbay.docker")]
    wait_for(lambda: Names.tap(port["id"]) not in cloud.taps(), 10, 0.05, "the tap to go")
    cloud.ok(cloud.http.delete(f"/network/v2.0/ports/{port['id']}"), 204)
    cloud.ok(cloud.http.delete(f"/network/v2.0/networks/{net['id']}"), 204)


# --- Docker's own call sequences, replayed -----------------------------------------------------

def replay(plugin: Plugin, name: str) -> list[tuple[str, dict]]:
    """Docker 20.10's captured calls on the plugin's socket (:mod:`dockercalls`); Join hands
    Docker a veth end in the host namespace and the subnet's gateway."""
    gateways: dict[str, str] = {}

    def check(path: str, req: dict, body: dict) -> None:
        if path == "/IpamDriver.RequestAddress" and req.get("Options", {}).get("RequestAddressType"):
            gateways[req["PoolID"]] = body["Address"].split("/")[0]
        if path == "/NetworkDriver.Join":
            src = body["InterfaceName"]["SrcName"]
            assert src in host_container_ends() and body["InterfaceName"]["DstPrefix"] == "eth"
            assert body["Gateway"] in gateways.values() and body["DisableGatewayService"] is True

    return dockercalls.replay(plugin.sock, name, check)


@pytest.mark.parametrize("capture", dockercalls.NAMES)
def test_dockers_captured_sequences_and_rollbacks_leave_nothing(cloud: Cloud, plugin: Plugin, capture: str) -> None:
    since = feed_head(cloud)
    answers = replay(plugin, capture)
    paths = [p for p, _ in answers]
    assert paths.count("/NetworkDriver.Join") >= 1 and "/NetworkDriver.DeleteNetwork" in paths
    assert all("Err" not in b for p, b in answers if p != "/IpamDriver.RequestPool"), answers
    assert not made_ports(cloud)  # at once: no sweep has had time to tidy up
    made = ports_made_since(cloud, since)
    assert made and not host_container_ends(made)
    tagged = [n for n in cloud.ok(cloud.http.get("/network/v2.0/networks"))["networks"]
              if any(t.startswith("netbay.docker") for t in n["tags"])]
    assert not tagged, tagged
    wait_for(lambda: not [t for t in cloud.taps() if t.startswith("tap")
                          and not any(Names.tap(p["id"]) == t for p in cloud.ok(cloud.http.get(
                              "/network/v2.0/ports"))["ports"])], 10, 0.05, "no stray taps")


def test_every_call_is_idempotent_under_dockers_resends(cloud: Cloud, plugin: Plugin) -> None:
    """Docker resends a call whose connection died: each verb twice gives one result."""
    import secrets

    import httpx

    nid, eid = secrets.token_hex(32), secrets.token_hex(32)
    mac = "02:42:0a:46:00:07"
    with httpx.Client(transport=httpx.HTTPTransport(uds=str(plugin.sock)), base_url="http://p", timeout=30) as c:
        def twice(method: str, body: dict) -> dict:
            first, second = c.post(f"/{method}", json=body), c.post(f"/{method}", json=body)
            assert first.status_code == second.status_code == 200, (method, first.text, second.text)
            return second.json()

        pool = twice("IpamDriver.RequestPool", {"AddressSpace": "netbay", "Pool": "10.70.0.0/24", "SubPool": "",
                                                "Options": {}, "V6": False})
        gw = twice("IpamDriver.RequestAddress", {"PoolID": pool["PoolID"], "Address": "", "Options": {
            "RequestAddressType": "com.docker.network.gateway"}})
        twice("NetworkDriver.CreateNetwork", {"NetworkID": nid, "Options": {"com.docker.network.generic": {}},
                                              "IPv4Data": [{"AddressSpace": "netbay", "Pool": "10.70.0.0/24",
                                                            "Gateway": gw["Address"]}], "IPv6Data": []})
        nets = cloud.ok(cloud.http.get("/network/v2.0/networks", params={"tags": f"netbay.docker.net:{nid}"}))
        assert len(nets["networks"]) == 1
        addr = twice("IpamDriver.RequestAddress", {"PoolID": pool["PoolID"], "Address": "10.70.0.7", "Options": {
            "com.docker.network.endpoint.macaddress": mac}})
        assert addr["Address"] == "10.70.0.7/24" and len(made_ports(cloud)) == 1
        twice("NetworkDriver.CreateEndpoint", {"NetworkID": nid, "EndpointID": eid, "Interface": {
            "Address": addr["Address"], "AddressIPv6": "", "MacAddress": mac}, "Options": {}})
        join = twice("NetworkDriver.Join", {"NetworkID": nid, "EndpointID": eid, "SandboxKey": "", "Options": {}})
        assert join["InterfaceName"]["SrcName"] in host_container_ends()  # one pair, not two
        assert len([e for e in host_container_ends() if e == join["InterfaceName"]["SrcName"]]) == 1
        port = made_ports(cloud)[0]
        assert port["mac_address"] == mac and port["device_id"] == eid
        twice("NetworkDriver.Leave", {"NetworkID": nid, "EndpointID": eid})
        twice("NetworkDriver.DeleteEndpoint", {"NetworkID": nid, "EndpointID": eid})
        assert join["InterfaceName"]["SrcName"] not in host_container_ends()
        twice("IpamDriver.ReleaseAddress", {"PoolID": pool["PoolID"], "Address": "10.70.0.7"})
        assert not made_ports(cloud)  # at once
        twice("IpamDriver.ReleaseAddress", {"PoolID": pool["PoolID"], "Address": gw["Address"].split("/")[0]})
        twice("IpamDriver.ReleasePool", {"PoolID": pool["PoolID"]})
        twice("NetworkDriver.DeleteNetwork", {"NetworkID": nid})
    assert not cloud.ok(cloud.http.get("/network/v2.0/networks", params={"tags": f"netbay.docker.net:{nid}"}))[
        "networks"]


def test_a_subnet_of_another_network_is_refused(cloud: Cloud, daemon: dk.Dockerd, plugin: Plugin) -> None:
    net_a, _ = cloud.network("dk-other-a", "10.71.0.0/24")
    _, sub_b = cloud.network("dk-other-b", "10.71.1.0/24")
    try:
        r = daemon.cli("network", "create", "-d", PLUGIN, "--ipam-driver", PLUGIN, "-o",
                       f"netbay.network={net_a['id']}", "--ipam-opt", f"netbay.subnet={sub_b['id']}", "dk-mixed")
        assert r.returncode != 0 and f"subnet {sub_b['id']}" in r.stderr and "is not on network" in r.stderr, r.stderr
        r = daemon.cli("network", "create", "-d", PLUGIN, "--ipam-driver", PLUGIN, "--ipam-opt",
                       f"netbay.subnet={sub_b['id']}", "--subnet", "10.71.1.0/24", "--aux-address", "h1=10.71.1.9",
                       "dk-aux")
        assert r.returncode == 0, r.stderr
        assert netbay_network(cloud, daemon.client.networks.get("dk-aux"))["id"] == sub_b["network_id"]
        assert daemon.cli("network", "rm", "dk-aux").returncode == 0
    finally:
        daemon.cli("network", "rm", "dk-mixed")
    left = cloud.ok(cloud.http.get(f"/network/v2.0/subnets/{sub_b['id']}"))["subnet"]
    assert not [t for t in left["tags"] if t.startswith("netbay.docker")], left["tags"]
    for net in (net_a["id"], sub_b["network_id"]):
        cloud.ok(cloud.http.delete(f"/network/v2.0/networks/{net}"), 204)
