"""The dataplane agent against a real server: namespaces, veths and real packets.

One server (``netbay up --no-agent``, SQLite) and one agent (this run's prefix)
for the module; tests run in file order and the last one deletes everything
through the API and checks that nothing of the prefix is left in the kernel.
"""

from __future__ import annotations

import errno
import ipaddress
import signal
import socket
import subprocess
import time

import httpx
import pytest

from netbay.dataplane import links, netns
from netbay.dataplane.names import Names
from netbay.dataplane.nft import Nft

from .agent_fixtures import Cloud, agent_subprocess, wait_for
from .dp_helpers import ping

SANDBOX_OWNER = "netbay:sandbox"


CLOUD_TAG = "ag"   # the shared `cloud` fixture (conftest.py): its namespace prefix


@pytest.fixture(scope="module")
def net(cloud: Cloud) -> tuple[dict, dict]:
    return cloud.network("agent-net", "10.1.0.0/24", mtu=1400,
                         host_routes=[{"destination": "10.99.0.0/16", "nexthop": "10.1.0.254"}])


def _revision(cloud: Cloud) -> int:
    return cloud.ok(cloud.http.get("/netbay/v1/state"))["revision"]


def _changes(cloud: Cloud, since: int) -> list[dict]:
    return cloud.ok(cloud.http.get("/netbay/v1/changes", params={"since": since}))["changes"]


def _tcp_roundtrip(client_ns: str, server_ns: str, server_ip: str) -> bytes:
    family = socket.AF_INET6 if ":" in server_ip else socket.AF_INET
    with netns.entered(server_ns):
        srv = socket.socket(family)
    with netns.entered(client_ns):
        cli = socket.socket(family)
    try:
        srv.bind((server_ip, 0))
        srv.listen(1)
        srv.settimeout(5)
        cli.settimeout(5)
        cli.connect((server_ip, srv.getsockname()[1]))
        conn, _ = srv.accept()
        with conn:
            cli.sendall(b"hello over the fabric")
            data = conn.recv(100)
            conn.sendall(data.upper())
            return cli.recv(100)
    finally:
        cli.close()
        srv.close()


def _v4(ns: str, ifname: str) -> list[str]:
    return [a for a in links.addresses(ns, ifname) if ipaddress.ip_interface(a).version == 4]


def _probe(ns: str, dst: str, timeout: float = 5.0) -> float:
    """Seconds until an ICMP echo from ``ns`` to ``dst`` is answered (bounded)."""
    t0 = time.monotonic()
    for _ in range(100_000):
        if time.monotonic() - t0 > timeout:
            break
        try:
            if ping(ns, dst, timeout=0.003):
                return time.monotonic() - t0
        except OSError:  # namespace or interface not there yet
            time.sleep(0.001)
    raise AssertionError(f"no ICMP answer from {dst} in {ns} after {timeout}s")


# --- wiring and traffic --------------------------------------------------------------------


def test_two_sandboxes_exchange_icmp_and_tcp(cloud: Cloud, net: tuple[dict, dict]) -> None:
    network, subnet = net
    since = _revision(cloud)
    a = cloud.sandbox("a", networks=[network["id"]])
    b = cloud.sandbox("b", networks=[network["id"]])
    assert a["status"] == "BUILD" and a["ports"][0]["interface"] == "eth0"
    pa, pb = a["ports"][0]["port_id"], b["ports"][0]["port_id"]
    port_a = cloud.wait_status(f"/network/v2.0/ports/{pa}", "ACTIVE")
    cloud.wait_status(f"/network/v2.0/ports/{pb}", "ACTIVE")
    cloud.wait_status(f"/netbay/v1/sandboxes/{a['id']}", "ACTIVE")
    # The port was created DOWN; the agent's report made it ACTIVE (through the stream too).
    mine = [c for c in _changes(cloud, since) if c["resource"] == "port" and c["id"] == pa]
    assert mine[0]["action"] == "create" and mine[0]["data"]["status"] == "DOWN"
    assert mine[-1]["data"]["status"] == "ACTIVE"

    ns_a, ns_b = cloud.sandbox_ns(a["id"]), cloud.sandbox_ns(b["id"])
    ip_a, ip_b = port_a["fixed_ips"][0]["ip_address"], cloud.ip_of(pb)
    # The port as the API describes it, in the kernel.
    eth0 = links.get_link(ns_a, "eth0")
    assert eth0 is not None and eth0.up and eth0.mtu == 1400
    assert eth0.address == port_a["mac_address"]
    assert f"{ip_a}/24" in links.addresses(ns_a, "eth0")
    routes = {(r.dst, r.gateway) for r in links.routes(ns_a)}
    assert ("0.0.0.0/0", subnet["gateway_ip"]) in routes
    assert ("10.99.0.0/16", "10.1.0.254") in routes
    tap = links.get_link(cloud.names.fabric, Names.tap(pa))
    bridge = links.get_link(cloud.names.fabric, Names.bridge(network["id"]))
    assert tap is not None and bridge is not None and tap.master == bridge.index and tap.up
    assert links.read_sysctl(cloud.names.fabric, "net.bridge.bridge-nf-call-iptables") == "1"

    assert ping(ns_a, ip_b, count=3) and ping(ns_b, ip_a, count=3)
    assert _tcp_roundtrip(ns_a, ns_b, ip_b) == b"HELLO OVER THE FABRIC"
    for sb in (a, b):
        cloud.delete_sandbox(sb["id"])


def test_dual_stack_sandboxes(cloud: Cloud) -> None:
    network, _ = cloud.network("dual", "10.3.0.0/24")
    v6 = cloud.ok(cloud.http.post("/network/v2.0/subnets", json={"subnet": {
        "network_id": network["id"], "cidr": "fd00:3::/64", "ip_version": 6}}), 201)["subnet"]
    a = cloud.sandbox("v6a", networks=[network["id"]])
    b = cloud.sandbox("v6b", networks=[network["id"]])
    for sb in (a, b):
        cloud.wait_status(f"/network/v2.0/ports/{sb['ports'][0]['port_id']}", "ACTIVE")
    ip6_b = next(f["ip_address"] for f in cloud.port(b["ports"][0]["port_id"])["fixed_ips"] if ":" in f["ip_address"])
    ns_a, ns_b = cloud.sandbox_ns(a["id"]), cloud.sandbox_ns(b["id"])
    assert f"{ip6_b}/64" in links.addresses(ns_b, "eth0")
    assert ("::/0", v6["gateway_ip"]) in {(r.dst, r.gateway) for r in links.routes(ns_a, family=10)}
    # Usable at once: no duplicate address detection keeping it tentative.
    assert _tcp_roundtrip(ns_a, ns_b, ip6_b) == b"HELLO OVER THE FABRIC"
    for sb in (a, b):
        cloud.delete_sandbox(sb["id"])
    cloud.ok(cloud.http.delete(f"/network/v2.0/networks/{network['id']}"), 204)


def test_deleting_a_sandbox_removes_its_namespace_and_veths(cloud: Cloud, net: tuple[dict, dict]) -> None:
    network, _ = net
    net2, _ = cloud.network("second", "10.2.0.0/24")
    sb = cloud.sandbox("del-me", networks=[network["id"], net2["id"]])
    assert [p["interface"] for p in sb["ports"]] == ["eth0", "eth1"]
    ports = [p["port_id"] for p in sb["ports"]]
    for pid in ports:
        cloud.wait_status(f"/network/v2.0/ports/{pid}", "ACTIVE")
    ns = cloud.sandbox_ns(sb["id"])
    assert {lk.ifname for lk in links.links(ns)} == {"lo", "eth0", "eth1"}
    # One default route: the first port with a gateway's.
    defaults = [r for r in links.routes(ns) if r.dst == "0.0.0.0/0"]
    assert [(r.gateway, r.oif) for r in defaults] == [("10.1.0.1", links.index(ns, "eth0"))]
    taps = {Names.tap(p) for p in ports}
    assert taps <= set(cloud.taps())

    cloud.delete_sandbox(sb["id"])
    wait_for(lambda: not netns.exists(ns), 10, what="sandbox namespace deleted")
    wait_for(lambda: not taps & set(cloud.taps()), 10, what="its taps gone from the fabric")
    for pid in ports:  # the ports it made went with it
        assert cloud.http.get(f"/network/v2.0/ports/{pid}").status_code == 404
    cloud.ok(cloud.http.delete(f"/network/v2.0/networks/{net2['id']}"), 204)
    wait_for(lambda: links.get_link(cloud.names.fabric, Names.bridge(net2["id"])) is None, 10,
             what="the deleted network's bridge removed")


def test_given_port_is_wired_then_unbound_and_kept(cloud: Cloud, net: tuple[dict, dict]) -> None:
    network, _ = net
    port = cloud.ok(cloud.http.post("/network/v2.0/ports", json={"port": {
        "network_id": network["id"], "name": "given"}}), 201)["port"]
    assert port["status"] == "DOWN"
    time.sleep(0.2)  # an unbound port is nobody's: the agent leaves it alone
    assert cloud.port(port["id"])["status"] == "DOWN" and Names.tap(port["id"]) not in cloud.taps()
    sb = cloud.sandbox("given", ports=[port["id"]])
    bound = cloud.wait_status(f"/network/v2.0/ports/{port['id']}", "ACTIVE")
    assert bound["device_owner"] == SANDBOX_OWNER and bound["device_id"] == sb["id"]
    assert links.get_link(cloud.sandbox_ns(sb["id"]), "eth0").address == port["mac_address"]
    cloud.delete_sandbox(sb["id"])
    after = cloud.port(port["id"])
    assert after["device_id"] == "" and after["device_owner"] == "" and after["status"] == "DOWN"
    wait_for(lambda: Names.tap(port["id"]) not in cloud.taps(), 10, what="unbound port unwired")
    time.sleep(0.2)
    assert cloud.port(port["id"])["status"] == "DOWN"
    cloud.ok(cloud.http.delete(f"/network/v2.0/ports/{port['id']}"), 204)


def test_container_port_bound_before_its_plug_is_adopted_once_plugged(cloud: Cloud, net: tuple[dict, dict]) -> None:
    """CNI ADD and kuryr pods make a port bound in one call, then plug it: the agent,
    which found no fabric end at first, looks again and reports ACTIVE once it is there."""
    from netbay.runtime.attach import Attacher, Plug

    network, _ = net
    port = cloud.ok(cloud.http.post("/network/v2.0/ports", json={"port": {
        "network_id": network["id"], "device_owner": "compute:netbay", "binding:host_id": socket.gethostname(),
        "device_id": "c0ffee00-0000-4000-8000-0000000000bb"}}), 201)["port"]
    ns = f"{cloud.names.prefix}ct-late"
    netns.create(ns)
    attacher = Attacher(cloud.names)
    try:
        time.sleep(0.3)  # the agent has seen the bound port and found no fabric end
        assert cloud.port(port["id"])["status"] == "DOWN"
        attacher.plug(Plug(port["id"], network["id"], port["mac_address"], 1400), netns.path(ns), "eth0")
        cloud.wait_status(f"/network/v2.0/ports/{port['id']}", "ACTIVE", timeout=5)
    finally:
        attacher.unplug(port["id"], False)
        netns.delete(ns)
        cloud.http.delete(f"/network/v2.0/ports/{port['id']}")


def test_port_updates_are_reconciled_in_place(cloud: Cloud, net: tuple[dict, dict]) -> None:
    network, subnet = net
    a = cloud.sandbox("upd-a", networks=[network["id"]])
    b = cloud.sandbox("upd-b", networks=[network["id"]])
    pa, pb = a["ports"][0]["port_id"], b["ports"][0]["port_id"]
    cloud.wait_status(f"/network/v2.0/ports/{pa}", "ACTIVE")
    cloud.wait_status(f"/network/v2.0/ports/{pb}", "ACTIVE")
    ns_a, ns_b = cloud.sandbox_ns(a["id"]), cloud.sandbox_ns(b["id"])
    eth0_index = links.index(ns_a, "eth0")
    old_ip = cloud.ip_of(pa)
    cloud.ok(cloud.http.put(f"/network/v2.0/ports/{pa}", json={"port": {
        "fixed_ips": [{"subnet_id": subnet["id"], "ip_address": "10.1.0.200"}]}}))
    wait_for(lambda: _v4(ns_a, "eth0") == ["10.1.0.200/24"], 10, what="address replaced")
    assert links.index(ns_a, "eth0") == eth0_index  # fixed in place, not rebuilt
    assert ping(ns_b, "10.1.0.200", count=3) and not ping(ns_b, old_ip, timeout=0.3)

    cloud.ok(cloud.http.put(f"/network/v2.0/ports/{pa}", json={"port": {"admin_state_up": False}}))
    cloud.wait_status(f"/network/v2.0/ports/{pa}", "DOWN")
    assert not links.get_link(cloud.names.fabric, Names.tap(pa)).up
    assert not ping(ns_b, "10.1.0.200", timeout=0.3, count=2)
    cloud.ok(cloud.http.put(f"/network/v2.0/ports/{pa}", json={"port": {"admin_state_up": True}}))
    cloud.wait_status(f"/network/v2.0/ports/{pa}", "ACTIVE")
    assert ping(ns_b, "10.1.0.200", count=3)
    for sb in (a, b):
        cloud.delete_sandbox(sb["id"])


def test_external_network_has_its_outside_world(cloud: Cloud) -> None:
    public = cloud.ok(cloud.http.get("/network/v2.0/networks", params={"name": "public"}))["networks"][0]
    outside = cloud.ok(cloud.http.get("/network/v2.0/ports", params={
        "network_id": public["id"], "device_owner": "netbay:external"}))["ports"]
    assert len(outside) == 1 and outside[0]["fixed_ips"][0]["ip_address"] == "172.24.4.1"
    cloud.wait_status(f"/network/v2.0/ports/{outside[0]['id']}", "ACTIVE")
    ns = cloud.names.external(public["id"])
    assert "172.24.4.1/24" in links.addresses(ns, Names.external_port(outside[0]["id"]))


def test_sandbox_reaches_the_outside_through_a_router(cloud: Cloud, net: tuple[dict, dict]) -> None:
    pytest.importorskip("netbay.dataplane.router")
    network, subnet = net
    public = cloud.ok(cloud.http.get("/network/v2.0/networks", params={"name": "public"}))["networks"][0]
    router = cloud.ok(cloud.http.post("/network/v2.0/routers", json={"router": {
        "name": "r1", "external_gateway_info": {"network_id": public["id"]}}}), 201)["router"]
    cloud.ok(cloud.http.put(f"/network/v2.0/routers/{router['id']}/add_router_interface",
                            json={"subnet_id": subnet["id"]}))
    sb = cloud.sandbox("out", networks=[network["id"]])
    cloud.wait_status(f"/network/v2.0/ports/{sb['ports'][0]['port_id']}", "ACTIVE")
    ns = cloud.sandbox_ns(sb["id"])
    assert ping(ns, subnet["gateway_ip"], count=3)           # the router's leg
    assert ping(ns, "172.24.4.1", count=3, timeout=1.0)      # the outside world, SNATed
    cloud.wait_status(f"/network/v2.0/routers/{router['id']}", "ACTIVE")
    # A floating IP: the outside world reaches the sandbox through it (ICMP admitted).
    pid = sb["ports"][0]["port_id"]
    icmp = cloud.ok(cloud.http.post("/network/v2.0/security-groups", json={"security_group": {
        "name": "icmp-in"}}), 201)["security_group"]
    cloud.ok(cloud.http.post("/network/v2.0/security-group-rules", json={"security_group_rule": {
        "security_group_id": icmp["id"], "direction": "ingress", "ethertype": "IPv4", "protocol": "icmp"}}), 201)
    cloud.ok(cloud.http.put(f"/network/v2.0/ports/{pid}", json={"port": {
        "security_groups": [*cloud.port(pid)["security_groups"], icmp["id"]]}}))
    fip = cloud.ok(cloud.http.post("/network/v2.0/floatingips", json={"floatingip": {
        "floating_network_id": public["id"], "port_id": sb["ports"][0]["port_id"]}}), 201)["floatingip"]
    cloud.wait_status(f"/network/v2.0/floatingips/{fip['id']}", "ACTIVE")
    outside = cloud.names.external(public["id"])
    wait_for(lambda: ping(outside, fip["floating_ip_address"], timeout=0.3), 10, 0.05,
             what="the floating IP answering from outside")
    cloud.ok(cloud.http.delete(f"/network/v2.0/floatingips/{fip['id']}"), 204)
    wait_for(lambda: not ping(outside, fip["floating_ip_address"], timeout=0.2), 10, 0.05,
             what="the released floating IP silent")
    cloud.delete_sandbox(sb["id"])
    cloud.ok(cloud.http.delete(f"/network/v2.0/security-groups/{icmp['id']}"), 204)


def test_security_groups_filter_between_sandboxes(cloud: Cloud, net: tuple[dict, dict]) -> None:
    pytest.importorskip("netbay.dataplane.secgroups")
    network, _ = net
    closed = cloud.ok(cloud.http.post("/network/v2.0/security-groups", json={"security_group": {
        "name": "closed"}}), 201)["security_group"]
    port_c = cloud.ok(cloud.http.post("/network/v2.0/ports", json={"port": {
        "network_id": network["id"], "security_groups": [closed["id"]]}}), 201)["port"]
    c = cloud.sandbox("sg-c", ports=[port_c["id"]])
    a = cloud.sandbox("sg-a", networks=[network["id"]])
    for pid in (port_c["id"], a["ports"][0]["port_id"]):
        cloud.wait_status(f"/network/v2.0/ports/{pid}", "ACTIVE")
    ns_a, ip_c = cloud.sandbox_ns(a["id"]), port_c["fixed_ips"][0]["ip_address"]
    assert not ping(ns_a, ip_c, timeout=0.3, count=2)   # "closed" admits nothing
    rule = cloud.ok(cloud.http.post("/network/v2.0/security-group-rules", json={"security_group_rule": {
        "security_group_id": closed["id"], "direction": "ingress", "ethertype": "IPv4",
        "protocol": "icmp"}}), 201)["security_group_rule"]
    wait_for(lambda: ping(ns_a, ip_c, timeout=0.2), 10, 0.05, what="ICMP admitted by the new rule")
    cloud.ok(cloud.http.delete(f"/network/v2.0/security-group-rules/{rule['id']}"), 204)
    wait_for(lambda: not ping(ns_a, ip_c, timeout=0.2, count=2), 10, 0.05, what="ICMP refused again")
    for sb in (a, c):
        cloud.delete_sandbox(sb["id"])
    cloud.ok(cloud.http.delete(f"/network/v2.0/ports/{port_c['id']}"), 204)
    cloud.ok(cloud.http.delete(f"/network/v2.0/security-groups/{closed['id']}"), 204)


def test_netbay_up_runs_the_agent_and_stops_cleanly(tmp_path) -> None:
    from conftest import start_server

    from .agent_fixtures import sweep_prefix
    from .dp_helpers import PREFIX

    prefix = f"{PREFIX}up-"
    names = Names(prefix)
    server = start_server(f"sqlite:///{tmp_path / 'netbay.db'}", tmp_path,
                          extra=("--agent", "--agent-prefix", prefix))
    try:
        with httpx.Client(base_url=server.url, headers={"X-Auth-Token": server.token()}, timeout=30) as http:
            public = http.get("/network/v2.0/networks", params={"name": "public"}).json()["networks"][0]
            wait_for(lambda: netns.exists(names.external(public["id"])), 20, what="the outside world wired")
            sb = http.post("/netbay/v1/sandboxes", json={"sandbox": {"name": "up"}}).json()["sandbox"]
            wait_for(lambda: netns.exists(names.sandbox(sb["id"])), 20, what="the sandbox namespace")
            wait_for(lambda: http.get(f"/netbay/v1/sandboxes/{sb['id']}").json()["sandbox"]["status"]
                     == "ACTIVE", 20, what="the sandbox ACTIVE")
        t0 = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        # uvicorn re-raises the signal once it has shut down gracefully
        assert server.proc.wait(timeout=15) in (0, -signal.SIGTERM)
        log = (tmp_path / "server.log").read_text()
        assert "Traceback" not in log and "graceful shutdown exceeded" not in log
        assert time.monotonic() - t0 < 8, "netbay up took too long to stop"
    finally:
        if server.proc.poll() is None:
            server.proc.kill()
            server.proc.wait(timeout=10)
        sweep_prefix(prefix)


# --- restarts ----------------------------------------------------------------------------------


def test_resync_adopts_what_exists_and_removes_what_nothing_wants(cloud: Cloud, net: tuple[dict, dict]) -> None:
    network, _ = net
    kept = cloud.sandbox("kept", networks=[network["id"]])
    kept_port = kept["ports"][0]["port_id"]
    cloud.wait_status(f"/network/v2.0/ports/{kept_port}", "ACTIVE")
    kept_ns = cloud.sandbox_ns(kept["id"])
    ino, eth0 = netns.inode(kept_ns), links.index(kept_ns, "eth0")
    cloud.agent.stop()
    try:
        # While the agent is away: a new sandbox, and junk under its names.
        late = cloud.sandbox("late", networks=[network["id"]])
        junk_ns = cloud.names.sandbox("00000000-0000-4000-8000-000000000000")
        netns.create(junk_ns)
        junk_tap = Names.tap("ffffffff-0000-4000-8000-000000000000")
        links.veth_pair(cloud.names.fabric, junk_tap, junk_ns, "eth0")
        links.add_address(kept_ns, "eth0", "10.1.0.77/24")   # a stale address on a kept port
    finally:
        cloud.agent.start()
    assert not netns.exists(junk_ns) and junk_tap not in cloud.taps()
    assert netns.inode(kept_ns) == ino and links.index(kept_ns, "eth0") == eth0   # adopted
    assert "10.1.0.77/24" not in links.addresses(kept_ns, "eth0")
    cloud.wait_status(f"/network/v2.0/ports/{late['ports'][0]['port_id']}", "ACTIVE")
    assert ping(cloud.sandbox_ns(late["id"]), cloud.ip_of(kept_port), count=3)
    for sb in (kept, late):
        cloud.delete_sandbox(sb["id"])


def _expected_namespaces(cloud: Cloud) -> set[str]:
    state = cloud.ok(cloud.http.get("/netbay/v1/state"))
    n = cloud.names
    out = {n.sandbox(s["id"]) for s in state["sandboxes"]} | {n.router(r["id"]) for r in state["routers"]}
    out |= {n.external(p["network_id"]) for p in state["ports"] if p["device_owner"] == "netbay:external"}
    if state["networks"]:
        out.add(n.fabric)
    return out


def test_sigkill_in_the_middle_of_building_then_restart_converges(
        cloud: Cloud, net: tuple[dict, dict], tmp_path) -> None:
    network, _ = net
    count = 50
    cloud.agent.stop()
    proc = None
    try:
        sandboxes = [cloud.sandbox(f"k{i}", networks=[network["id"]]) for i in range(count)]
        want = {Names.tap(sb["ports"][0]["port_id"]) for sb in sandboxes}
        proc = agent_subprocess(cloud.server, cloud.names.prefix, tmp_path / "agent.log")
        wait_for(lambda: len(want & set(cloud.taps())) >= 3 or proc.poll() is not None, 60, 0.0005,
                 what="the agent subprocess to start wiring")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        at_kill = len(want & set(cloud.taps()))
        assert 0 < at_kill < count, f"not killed mid-build: {at_kill} of {count} wired"
        proc = agent_subprocess(cloud.server, cloud.names.prefix, tmp_path / "agent.log")

        def all_active() -> bool:
            ports = cloud.ok(cloud.http.get("/network/v2.0/ports", params={
                "device_owner": SANDBOX_OWNER, "status": "ACTIVE"}))["ports"]
            return len({p["device_id"] for p in ports} & {s["id"] for s in sandboxes}) == count
        wait_for(all_active, 60, 0.1, what="all ports ACTIVE after the restart")
        # Exactly what is wanted: one veth per port, no duplicates, nothing leaked.
        wanted_taps = {Names.tap(p["id"]) for p in cloud.ok(cloud.http.get("/netbay/v1/state"))["ports"]
                       if p["device_owner"] in (SANDBOX_OWNER, "netbay:external")
                       or p["device_owner"].startswith("network:router_")}
        assert set(cloud.taps()) == wanted_taps
        assert set(cloud.namespaces()) == _expected_namespaces(cloud)
        for sb in sandboxes:
            ns = cloud.sandbox_ns(sb["id"])
            assert sorted(lk.ifname for lk in links.links(ns)) == ["eth0", "lo"]
            assert _v4(ns, "eth0") == [f"{cloud.ip_of(sb['ports'][0]['port_id'])}/24"]
            assert len([r for r in links.routes(ns) if r.dst == "0.0.0.0/0"]) == 1
        assert ping(cloud.sandbox_ns(sandboxes[0]["id"]), cloud.ip_of(sandboxes[-1]["ports"][0]["port_id"]))
    finally:
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        cloud.agent.start()
    for sb in sandboxes:
        cloud.delete_sandbox(sb["id"])
    wait_for(lambda: not want & set(cloud.taps()), 20, what="the 50 ports unwired")


# --- figures ------------------------------------------------------------------------------------


def test_ports_bound_to_existing_sandboxes_carry_traffic(cloud: Cloud, net: tuple[dict, dict]) -> None:
    """A port made through the Port API for an existing (empty) sandbox is wired into it
    and carries packets; a sandbox made with its network too. (How fast: bench/wiring.py.)"""
    network, _ = net
    peer = cloud.sandbox("peer", networks=[network["id"]])
    peer_ip = cloud.ip_of(peer["ports"][0]["port_id"])
    cloud.wait_status(f"/network/v2.0/ports/{peer['ports'][0]['port_id']}", "ACTIVE")
    empties = [cloud.sandbox(f"m{i}") for i in range(5)]
    for sb in empties:
        wait_for(lambda sb=sb: netns.exists(cloud.sandbox_ns(sb["id"])), 10, what="empty sandbox namespace")
    host = cloud.ok(cloud.http.get(f"/netbay/v1/sandboxes/{peer['id']}"))["sandbox"]["host"]
    for sb in empties:
        r = cloud.http.post("/network/v2.0/ports", json={"port": {
            "network_id": network["id"], "device_owner": SANDBOX_OWNER, "device_id": sb["id"],
            "binding:host_id": host}})
        assert r.status_code == 201, r.text
        _probe(cloud.sandbox_ns(sb["id"]), peer_ip)
        cloud.wait_status(f"/network/v2.0/ports/{r.json()['port']['id']}", "ACTIVE")
    made = [cloud.sandbox(f"s{i}", networks=[network["id"]]) for i in range(5)]
    for sb in made:
        _probe(cloud.sandbox_ns(sb["id"]), peer_ip)
    for sb in [peer, *empties, *made]:
        for p in cloud.ok(cloud.http.get("/network/v2.0/ports", params={"device_id": sb["id"]}))["ports"]:
            if p["device_owner"] == SANDBOX_OWNER:
                cloud.http.delete(f"/network/v2.0/ports/{p['id']}")
        cloud.delete_sandbox(sb["id"])


def test_100_sandboxes_are_wired_and_a_cold_start_wires_100_more(cloud: Cloud, net: tuple[dict, dict]) -> None:
    network, _ = net
    n = 100

    def active(ids: set[str]) -> bool:
        ports = cloud.ok(cloud.http.get("/network/v2.0/ports", params={
            "device_owner": SANDBOX_OWNER, "status": "ACTIVE"}))["ports"]
        return {p["device_id"] for p in ports} >= ids

    live = [cloud.sandbox(f"h{i}", networks=[network["id"]]) for i in range(n)]
    wait_for(lambda: active({s["id"] for s in live}), 60, 0.02, what="100 sandboxes ACTIVE")
    # The agent alone: 100 more sandboxes made while it is stopped, then a cold start.
    cloud.agent.stop()
    cold = [cloud.sandbox(f"c{i}", networks=[network["id"]]) for i in range(n)]
    assert not any(netns.exists(cloud.sandbox_ns(s["id"])) for s in cold)
    cloud.agent.start(timeout=60)
    wait_for(lambda: active({s["id"] for s in cold}), 60, 0.05, what="100 more ACTIVE after a cold start")
    assert ping(cloud.sandbox_ns(live[0]["id"]), cloud.ip_of(cold[-1]["ports"][0]["port_id"]))
    assert ping(cloud.sandbox_ns(cold[0]["id"]), cloud.ip_of(live[-1]["ports"][0]["port_id"]))
    for sb in live + cold:
        cloud.delete_sandbox(sb["id"])


# --- last: everything goes ------------------------------------------------------------------------


def test_deleting_everything_through_the_api_leaves_nothing(cloud: Cloud) -> None:
    http = cloud.http
    tables = {ns: _tables(ns) for ns in netns.list(cloud.names.prefix)}
    assert any(tables.values()), f"no nftables table to remove (security groups, routers): {tables}"
    for sb in cloud.ok(http.get("/netbay/v1/sandboxes"))["sandboxes"]:
        cloud.delete_sandbox(sb["id"])
    for fip in cloud.ok(http.get("/network/v2.0/floatingips"))["floatingips"]:
        cloud.ok(http.delete(f"/network/v2.0/floatingips/{fip['id']}"), 204)
    for router in cloud.ok(http.get("/network/v2.0/routers"))["routers"]:
        for port in cloud.ok(http.get("/network/v2.0/ports", params={
                "device_id": router["id"], "device_owner": "network:router_interface"}))["ports"]:
            cloud.ok(http.put(f"/network/v2.0/routers/{router['id']}/remove_router_interface",
                              json={"port_id": port["id"]}))
        cloud.ok(http.delete(f"/network/v2.0/routers/{router['id']}"), 204)
    for port in cloud.ok(http.get("/network/v2.0/ports"))["ports"]:
        cloud.ok(http.delete(f"/network/v2.0/ports/{port['id']}"), 204)
    for network in cloud.ok(http.get("/network/v2.0/networks"))["networks"]:
        cloud.ok(http.delete(f"/network/v2.0/networks/{network['id']}"), 204)
    assert cloud.ok(http.get("/netbay/v1/state"))["networks"] == []
    wait_for(lambda: cloud.namespaces() == [], 20, what="every namespace of the prefix deleted")
    assert not netns.exists(cloud.names.fabric) and cloud.taps() == []
    # Their tables went with their namespaces.
    assert not any(_tables(ns) for ns in netns.list(cloud.names.prefix))


def _tables(ns: str) -> list[tuple[str, str]]:
    """The namespace's nftables tables; none if it went meanwhile (the agent may still be
    removing an earlier test's sandboxes when this one lists the prefix)."""
    try:
        with Nft(ns) as nft:
            return nft.tables()
    except netns.NetnsError as exc:
        if exc.errno != errno.ENOENT:
            raise
        return []
