"""The container API (Zun-compatible) on a real dockerd, real packets.

A private dockerd off the host's network (netbay.runtime.dockerd), the netbay
libnetwork plugin named per run (``nbt<hex>zn``), and a netbay server told where
Docker is (``NETBAY_DOCKER_HOST``, ``NETBAY_DOCKER_DRIVER``) with an in-process
dataplane agent. Containers are made through ``/container/v1`` (raw HTTP and
python-zunclient) and talk to netbay sandboxes on the same network.
"""

from __future__ import annotations

from typing import Any

import pytest

from netbay.dataplane.names import Names
from oschelp import osc_as
from zunhelp import zun_error, zun_http, zunclient

from . import dockerd as dk
from .agent_fixtures import Cloud, wait_for
from .docker_fixtures import iface, plugin_env, sh
from .dp_helpers import ping
from .zun_fixtures import cloud, daemon, docker_container, plugin, wait_container, zun  # noqa: F401 - fixtures

pytestmark = pytest.mark.skipif(dk.available() is not None, reason=str(dk.available()))


def iface_with(dc: Any, mac: str) -> str:
    code, out = sh(dc, "ip -o link")
    assert code == 0, out
    for line in out.splitlines():
        if f"link/ether {mac}" in line:
            return line.split(":")[1].strip().split("@")[0]
    raise AssertionError(f"no interface with {mac}:\n{out}")


def test_run_on_a_network_talks_to_a_sandbox_and_survives_stop_start_reboot(cloud: Cloud, daemon: dk.Dockerd,
                                                                            zun: Any) -> None:
    net, subnet = cloud.network("zn-a", "10.71.0.0/24")
    sb = cloud.sandbox("zn-sb", networks=[net["id"]])
    r = zun.post("/containers?run=true", json={
        "name": "zn-web", "image": dk.IMAGE, "command": ["sh", "-c", "trap 'exit 0' TERM; sleep 600 & wait"],
        "nets": [{"network": net["name"], "v4-fixed-ip": "10.71.0.20"}]})
    assert r.status_code == 202, r.text
    assert r.json()["status"] == "Creating"  # answered before Docker made anything
    c = wait_container(zun, r.json()["uuid"], "Running")
    (port_id,) = [a["port"] for a in c["addresses"][net["id"]]]
    port = cloud.port(port_id)
    try:
        dc = docker_container(daemon, c)
        assert dc.name == f"zun-{c['uuid']}"
        sandbox = daemon.client.api.inspect_container(f"zun-sandbox-{c['uuid']}")
        assert sandbox["Config"]["Image"] == dk.IMAGE  # no "busybox" here: the app's image
        assert iface(dc) == (port["mac_address"], ["10.71.0.20/24"])
        cloud.wait_status(f"/network/v2.0/ports/{port_id}", "ACTIVE")
        sb = cloud.wait_status(f"/netbay/v1/sandboxes/{sb['id']}", "ACTIVE")
        sb_ip = cloud.ip_of(sb["ports"][0]["port_id"])
        ns = cloud.sandbox_ns(sb["id"])
        assert ping(ns, "10.71.0.20", count=3), "sandbox -> container ICMP"
        code, out = sh(dc, f"ping -c 1 -W 2 {sb_ip}")
        assert code == 0, out
        # stop / start / reboot keep the port, its address and MAC.
        assert zun.post(f"/containers/{c['uuid']}/stop?timeout=2").status_code == 202
        wait_container(zun, c["uuid"], "Stopped")
        zun_error(zun.post(f"/containers/{c['uuid']}/stop"), 409, f"Cannot stop container {c['uuid']} in Stopped state.")
        assert zun.post(f"/containers/{c['uuid']}/start").status_code == 202
        wait_container(zun, c["uuid"], "Running")
        assert zun.post(f"/containers/{c['uuid']}/reboot?timeout=2").status_code == 202
        wait_container(zun, c["uuid"], "Running")
        dc = docker_container(daemon, c)
        assert iface(dc) == (port["mac_address"], ["10.71.0.20/24"])
        assert ping(ns, "10.71.0.20", count=3), "sandbox -> container ICMP after reboot"
        zun_error(zun.delete(f"/containers/{c['uuid']}"), 409, f"Cannot delete container {c['uuid']} in Running state.")
    finally:
        r = zun.delete(f"/containers/{c['uuid']}?force=true")
        cloud.delete_sandbox(sb["id"])
    assert r.status_code == 204, r.text
    assert not daemon.client.containers.list(all=True, filters={"name": f"zun-{c['uuid']}"})
    assert cloud.http.get(f"/network/v2.0/ports/{port_id}").status_code == 404
    wait_for(lambda: Names.tap(port_id) not in cloud.taps(), 10, 0.05, "the container's tap to go")
    # The container network made on the fly goes, and with it the Docker network.
    (cn,) = [n for n in zun.get("/networks").json()["networks"] if n["neutron_net_id"] == net["id"]]
    assert zun.delete(f"/networks/{cn['uuid']}").status_code == 204
    assert not daemon.client.networks.list(names=[net["id"]])
    cloud.ok(cloud.http.delete(f"/network/v2.0/networks/{net['id']}"), 204)


def test_zunclient_two_networks_a_users_port_and_network_delete(cloud: Cloud, daemon: dk.Dockerd, zun: Any) -> None:
    a, _ = cloud.network("zn-b1", "10.72.1.0/24")
    b, b_sub = cloud.network("zn-b2", "10.72.2.0/24")
    cn = zun.post("/networks", json={"name": "zn-b2", "neutron_net_id": b["id"], "neutron_subnet": b_sub["id"]})
    assert cn.status_code == 200, cn.text
    given = cloud.ok(cloud.http.post("/network/v2.0/ports", json={"port": {
        "network_id": b["id"], "fixed_ips": [{"subnet_id": b_sub["id"], "ip_address": "10.72.2.7"}]}}), 201)["port"]
    zc = zunclient(cloud.server)
    third: dict = {"id": "none"}
    made = zc.containers.run(name="zn-two", image=dk.IMAGE, command=["sleep", "600"],
                             nets=[{"network": a["name"]}, {"port": given["id"]}])
    c = wait_container(zun, made.uuid, "Running")
    try:
        assert set(c["addresses"]) == {a["id"], b["id"]}
        assert c["addresses"][b["id"]] == [{"addr": "10.72.2.7", "version": 4, "port": given["id"],
                                            "subnet_id": b_sub["id"], "preserve_on_delete": True}]
        dc = docker_container(daemon, c)
        # Docker names the interfaces in its own order: find each port by its MAC. Docker 20.10
        # gives a connected (second) endpoint a MAC of its own; the plugin moves the port to it.
        given = cloud.port(given["id"])
        assert iface(dc, iface_with(dc, given["mac_address"])) == (given["mac_address"], ["10.72.2.7/24"])
        made_port = cloud.port(c["addresses"][a["id"]][0]["port"])
        assert iface(dc, iface_with(dc, made_port["mac_address"]))[1] == [f"{made_port['fixed_ips'][0]['ip_address']}/24"]
        zun_error(zun.delete(f"/networks/{cn.json()['uuid']}"), 409, contains="is in use by container")
        shown = zc.containers.get("zn-two")
        assert shown.status == "Running" and shown.uuid == made.uuid
        zc.containers.stop(made.uuid, timeout=1)
        wait_container(zun, made.uuid, "Stopped")
        zc.containers.start(made.uuid)
        wait_container(zun, made.uuid, "Running")
        zc.containers.restart(made.uuid, timeout=1)
        c = wait_container(zun, made.uuid, "Running")
        dc = docker_container(daemon, c)
        nets = zc.containers.network_list(made.uuid)
        assert {n.net_id for n in nets} == {a["id"], b["id"]}
        # network attach / detach on the running container.
        third, _ = cloud.network("zn-b3", "10.72.3.0/24")
        zc.containers.network_attach(made.uuid, network=third["name"], fixed_ip="10.72.3.30")
        c = wait_container(zun, made.uuid, "Running")
        (att,) = c["addresses"][third["id"]]
        port3 = cloud.port(att["port"])
        assert att["addr"] == "10.72.3.30"
        assert iface(dc, iface_with(dc, port3["mac_address"]))[1] == ["10.72.3.30/24"]
        zun_error(zun.post(f"/containers/{made.uuid}/network_attach", params={"network": third["id"]}), 409,
                  contains="already connected")
        zc.containers.network_detach(made.uuid, network=a["name"])
        wait_for(lambda: a["id"] not in zun.get(f"/containers/{made.uuid}").json()["addresses"], 30, 0.1,
                 "the detach")
        assert cloud.http.get(f"/network/v2.0/ports/{made_port['id']}").status_code == 404
        code, out = sh(dc, "ip -o -4 addr")
        assert code == 0 and made_port["fixed_ips"][0]["ip_address"] not in out and "10.72.3.30" in out, out
    finally:
        zc.containers.delete(made.uuid, force=True)
    kept = cloud.port(given["id"])
    assert kept["device_id"] == "" and not kept["binding:host_id"]
    assert not daemon.client.containers.list(all=True, filters={"name": f"zun-{made.uuid}"})
    assert zun.delete(f"/networks/{cn.json()['uuid']}").status_code == 204
    cloud.ok(cloud.http.delete(f"/network/v2.0/ports/{given['id']}"), 204)
    for n in zun.get("/networks").json()["networks"]:
        zun.delete(f"/networks/{n['uuid']}")
    for n in (a, b, third):
        wait_for(lambda n=n: cloud.http.delete(f"/network/v2.0/networks/{n['id']}").status_code in (204, 404),
                 10, 0.2, "the network to go")


def test_an_image_docker_does_not_have_is_zuns_error(cloud: Cloud, daemon: dk.Dockerd, zun: Any) -> None:
    net, _ = cloud.network("zn-c", "10.73.0.0/24")
    c = zun.post("/containers?run=true", json={"image": "no-such-image:1", "nets": [{"network": net["id"]}]}).json()
    done = wait_container(zun, c["uuid"], "Error")
    assert "Docker internal error" in done["status_reason"] and "no-such-image" in done["status_reason"]
    assert zun.delete(f"/containers/{c['uuid']}").status_code == 204
    assert not cloud.ok(cloud.http.get("/network/v2.0/ports", params={"network_id": net["id"],
                                                                      "device_owner": "compute:netbay"}))["ports"]
    for n in zun.get("/networks").json()["networks"]:
        zun.delete(f"/networks/{n['uuid']}")
    cloud.ok(cloud.http.delete(f"/network/v2.0/networks/{net['id']}"), 204)


def test_netbay_cli_and_openstack_appcontainer(cloud: Cloud, daemon: dk.Dockerd, zun: Any) -> None:
    """The spec's workflow with netbay's CLI (container-network, container run/exec/delete)
    and the real ``openstack appcontainer`` (python-zunclient's OSC plugin)."""

    from clihelp import cli, ok

    net, subnet = cloud.network("zn-cli", "10.74.0.0/24")
    sb = cloud.sandbox("zn-cli-sb", networks=[net["id"]])
    out = ok(cli(cloud.server, "container-network", "create", "zn-cli-cn", "--neutron-net", net["name"],
                 "--neutron-subnet", subnet["id"]))
    assert "zn-cli-cn" in out
    assert "zn-cli-cn" in ok(cli(cloud.server, "container-network", "list"))
    out = ok(cli(cloud.server, "container", "run", "--name", "zn-cli-c", "--net", "network=zn-cli-cn,v4-fixed-ip=10.74.0.44",
                 dk.IMAGE, "--", "sleep", "600"))
    assert "Running" in out and "10.74.0.44" in out
    try:
        sb = cloud.wait_status(f"/netbay/v1/sandboxes/{sb['id']}", "ACTIVE")
        sb_ip = cloud.ip_of(sb["ports"][0]["port_id"])
        c = zun.get("/containers/zn-cli-c").json()
        cloud.wait_status(f"/network/v2.0/ports/{c['addresses'][net['id']][0]['port']}", "ACTIVE")
        r = cli(cloud.server, "container", "exec", "zn-cli-c", "--", "ping", "-c", "1", "-W", "2", sb_ip)
        assert r.returncode == 0 and "1 packets received" in r.stdout, r.stdout + r.stderr
        r = cli(cloud.server, "container", "exec", "zn-cli-c", "--", "ping", "-c", "1", "-W", "1", "10.74.0.250")
        assert r.returncode == 1, r.stdout  # nobody there: the command's own exit code
        r = cli(cloud.server, "container-network", "delete", "zn-cli-cn")
        assert r.returncode == 1 and "is in use by container" in r.stderr and "HTTP 409" in r.stderr
        # The openstack CLI with the Zun plugin (in this process: tests/osc.py).
        password = plugin_env(cloud.server)["OS_PASSWORD"]
        r = osc_as(cloud.server, "appcontainer", "list", "-f", "value", "-c", "name", "-c", "status",
                   password=password)
        assert r.returncode == 0 and "zn-cli-c Running" in r.stdout, r.stdout + r.stderr
        r = osc_as(cloud.server, "appcontainer", "show", "no-such", "-f", "json", password=password)
        assert r.returncode != 0 and "could not be found" in r.stderr, r.stdout + r.stderr
        # Zun's action records and this deployment's host, as the OSC plugin reads them.
        r = osc_as(cloud.server, "appcontainer", "action", "list", "zn-cli-c", "-f", "value", "-c", "Action",
                   password=password)
        assert r.returncode == 0 and r.stdout.split() == ["create"], r.stdout + r.stderr
        r = osc_as(cloud.server, "appcontainer", "host", "list", "-f", "value", "-c", "hostname",
                   password=password)
        assert r.returncode == 0 and r.stdout.strip() == c["host"], r.stdout + r.stderr
    finally:
        r = cli(cloud.server, "container", "delete", "--force", "zn-cli-c")
        cloud.delete_sandbox(sb["id"])
    assert r.returncode == 0, r.stderr
    ok(cli(cloud.server, "container-network", "delete", "zn-cli-cn"))
    assert "zn-cli-cn" not in ok(cli(cloud.server, "container-network", "list"))
    cloud.ok(cloud.http.delete(f"/network/v2.0/networks/{net['id']}"), 204)


def test_a_command_that_ends_is_stopped_and_can_start_again(cloud: Cloud, daemon: dk.Dockerd, zun: Any) -> None:
    """Docker's own changes reach Zun's status (the runner follows Docker's events)."""
    net, _ = cloud.network("zn-d", "10.75.0.0/24")
    c = zun.post("/containers?run=true", json={"image": dk.IMAGE, "command": ["sleep", "2"],
                                               "nets": [{"network": net["id"]}]}).json()
    try:
        wait_container(zun, c["uuid"], "Stopped", timeout=60)
        assert zun.post(f"/containers/{c['uuid']}/start").status_code == 202
        wait_container(zun, c["uuid"], "Running")
        wait_container(zun, c["uuid"], "Stopped", timeout=60)
    finally:
        assert zun.delete(f"/containers/{c['uuid']}?force=true").status_code == 204
    for n in zun.get("/networks").json()["networks"]:
        zun.delete(f"/networks/{n['uuid']}")
    cloud.ok(cloud.http.delete(f"/network/v2.0/networks/{net['id']}"), 204)


def test_concurrent_runs_on_a_new_network_all_get_their_port(cloud: Cloud, daemon: dk.Dockerd, zun: Any) -> None:
    """Six runs at once on a network no container used yet: one container network, one
    Docker network, six running containers each on its own port and reachable."""
    from concurrent.futures import ThreadPoolExecutor

    net, _ = cloud.network("zn-e", "10.76.0.0/24")
    token = cloud.server.token()

    def run(i: int) -> dict:
        client = zun_http(cloud.server, token)
        r = client.post("/containers?run=true", json={"name": f"zn-e{i}", "image": dk.IMAGE,
                                                      "command": ["sleep", "600"], "nets": [{"network": net["id"]}]})
        assert r.status_code == 202, r.text
        return r.json()

    with ThreadPoolExecutor(6) as pool:
        made = list(pool.map(run, range(6)))
    try:
        done = [wait_container(zun, c["uuid"], "Running", timeout=120) for c in made]
        addrs = {c["addresses"][net["id"]][0]["addr"] for c in done}
        assert len(addrs) == 6
        assert len([n for n in zun.get("/networks").json()["networks"] if n["neutron_net_id"] == net["id"]]) == 1
        assert len(daemon.client.networks.list(names=[net["id"]])) == 1
        first = docker_container(daemon, done[0])
        for c in done[1:]:
            code, out = sh(first, f"ping -c 1 -W 2 {c['addresses'][net['id']][0]['addr']}")
            assert code == 0, out
    finally:
        for c in made:
            zun.delete(f"/containers/{c['uuid']}?force=true")
    assert not cloud.ok(cloud.http.get("/network/v2.0/ports", params={"network_id": net["id"],
                                                                      "device_owner": "compute:netbay"}))["ports"]
    for n in zun.get("/networks").json()["networks"]:
        zun.delete(f"/networks/{n['uuid']}")
    cloud.ok(cloud.http.delete(f"/network/v2.0/networks/{net['id']}"), 204)
