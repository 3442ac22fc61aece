"""The container API's sandbox flow, exposure and recovery: real dockerd, real packets.

A Zun container is a sandbox (``zun-sandbox-<uuid>``, holding the network namespace on
the container's port) plus the app started with ``--net=container:<sandbox>``:
restarting or rebuilding the app keeps the address, the MAC and Docker's endpoint.
``exposed_ports`` opens the port through the ``zun-<uuid>`` group (an unexposed port's
packets are dropped), a floating IP reaches the container from the external network's
namespace, and a netbay server restart or a SIGKILLed plugin leaves containers networked.
Same fixtures as test_dp_containers.py (a module of their own: one dockerd, one server).
"""

from __future__ import annotations

import socket
import subprocess
import sys
from typing import Any

import pytest

from netbay.dataplane import netns
from zunhelp import zunclient

from . import dockerd as dk
from .agent_fixtures import Cloud, wait_for
from .docker_fixtures import Plugin, iface, made_ports, sh
from .zun_fixtures import cloud, daemon, docker_container, plugin, wait_container, zun  # noqa: F401
from tests import zygote

pytestmark = pytest.mark.skipif(dk.available() is not None, reason=str(dk.available()))

SANDBOX_IMAGE = "nbsandbox:1"   # the server's NETBAY_SANDBOX_IMAGE (a tag of the busybox image)
# Two web servers in the app: 8080 (exposed where a test says so) and 9090 (never).
WEB = ["sh", "-c", "httpd -p 9090 -h /etc; exec httpd -f -p 8080 -h /etc"]


@pytest.fixture(scope="module", autouse=True)
def sandbox_image(daemon: dk.Dockerd) -> None:
    daemon.client.api.tag(dk.IMAGE, *SANDBOX_IMAGE.split(":"))


def http_get(ns: str, host: str, port: int, timeout: float = 2.0) -> bytes:
    """``GET /hostname`` from inside ``ns`` (bounded); raises on a refused or silent peer."""
    with netns.entered(ns):
        s = socket.create_connection((host, port), timeout=timeout)
    with s:
        s.sendall(b"GET /hostname HTTP/1.0\r\n\r\n")
        data = b""
        for _ in range(100):
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        return data


def answers(ns: str, host: str, port: int) -> bool:
    try:
        return http_get(ns, host, port).split(b"\r\n")[0].endswith(b" 200 OK")
    except OSError:
        return False


def dropped(ns: str, host: str, port: int, timeout: float = 1.5) -> bool:
    """True when the SYN goes unanswered (a drop), not refused (a RST came back)."""
    try:
        http_get(ns, host, port, timeout)
    except TimeoutError:
        return True
    except OSError:
        return False
    return False


def sandbox_endpoint(daemon: dk.Dockerd, uuid: str) -> tuple[str, str]:
    """(sandbox's Docker id, its endpoint id on its one network)."""
    sb = daemon.client.api.inspect_container(f"zun-sandbox-{uuid}")
    (net,) = sb["NetworkSettings"]["Networks"].values()
    return sb["Id"], net["EndpointID"]


def cleanup_networks(cloud: Cloud, zun: Any, *nets: dict) -> None:
    for n in zun.get("/networks").json()["networks"]:
        zun.delete(f"/networks/{n['uuid']}")
    for n in nets:
        wait_for(lambda n=n: cloud.http.delete(f"/network/v2.0/networks/{n['id']}").status_code in (204, 404),
                 10, 0.2, "the network to go")


def test_restart_and_rebuild_keep_address_mac_and_endpoint(cloud: Cloud, daemon: dk.Dockerd, zun: Any) -> None:
    net, _ = cloud.network("zs-a", "10.81.0.0/24")
    sb = cloud.sandbox("zs-sb", networks=[net["id"]])
    zc = zunclient(cloud.server)
    made = zc.containers.run(name="zs-web", image=dk.IMAGE, command=WEB, hostname="zs-web",
                             nets=[{"network": net["id"], "v4-fixed-ip": "10.81.0.20"}])
    c = wait_container(zun, made.uuid, "Running")
    try:
        port = cloud.port(c["addresses"][net["id"]][0]["port"])
        app = docker_container(daemon, c)
        # The app shares the sandbox's namespace; the sandbox holds the port.
        assert app.attrs["HostConfig"]["NetworkMode"] == f"container:{sandbox_endpoint(daemon, made.uuid)[0]}"
        assert app.name == f"zun-{made.uuid}"
        assert daemon.client.api.inspect_container(f"zun-sandbox-{made.uuid}")["Config"]["Image"] == SANDBOX_IMAGE
        assert iface(app) == (port["mac_address"], ["10.81.0.20/24"])
        sandbox, endpoint = sandbox_endpoint(daemon, made.uuid)
        cloud.wait_status(f"/network/v2.0/ports/{port['id']}", "ACTIVE")
        sb = cloud.wait_status(f"/netbay/v1/sandboxes/{sb['id']}", "ACTIVE")
        ns = cloud.sandbox_ns(sb["id"])
        assert b"zs-web" in http_get(ns, "10.81.0.20", 8080)   # the hostname is the sandbox's

        zc.containers.restart(made.uuid, timeout=1)
        c = wait_container(zun, made.uuid, "Running")
        assert c["container_id"] == app.id
        assert sandbox_endpoint(daemon, made.uuid) == (sandbox, endpoint)  # Docker never left the network
        wait_for(lambda: answers(ns, "10.81.0.20", 8080), 15, 0.1, "the restarted app answering")

        # Replace the app (Zun's rebuild): a new Docker container, the same port and address.
        zc.containers.rebuild(made.uuid, image=dk.IMAGE)
        c = wait_container(zun, made.uuid, "Running")
        assert c["container_id"] != app.id and c["image"] == dk.IMAGE
        assert not daemon.client.containers.list(all=True, filters={"id": app.id})
        app = docker_container(daemon, c)
        assert iface(app) == (port["mac_address"], ["10.81.0.20/24"])
        assert sandbox_endpoint(daemon, made.uuid) == (sandbox, endpoint)
        assert c["addresses"][net["id"]][0]["port"] == port["id"]
        wait_for(lambda: answers(ns, "10.81.0.20", 8080), 15, 0.1, "the rebuilt app answering")
        code, out = sh(app, f"ping -c 1 -W 2 {cloud.ip_of(sb['ports'][0]['port_id'])}")
        assert code == 0, out

        # Stopped, then rebuilt: the new app is Created, not started; start brings it back.
        zc.containers.stop(made.uuid, timeout=1)
        wait_container(zun, made.uuid, "Stopped")
        zc.containers.rebuild(made.uuid)
        c = wait_container(zun, made.uuid, "Created")
        assert sandbox_endpoint(daemon, made.uuid) == (sandbox, endpoint)
        zc.containers.start(made.uuid)
        wait_container(zun, made.uuid, "Running")
        wait_for(lambda: answers(ns, "10.81.0.20", 8080), 15, 0.1, "the app answering after start")
        r = zun.post(f"/containers/{made.uuid}/rebuild", params={"image_driver": "glance"})
        assert r.status_code == 400 and "image_driver" in r.json()["errors"][0]["detail"], r.text
        # The sandbox killed behind netbay's back: started again, the app restarted into it.
        daemon.client.api.kill(sandbox)
        wait_for(lambda: daemon.client.api.inspect_container(sandbox)["State"]["Running"]
                 and answers(ns, "10.81.0.20", 8080), 30, 0.2, "the healed sandbox answering")
        assert iface(docker_container(daemon, c)) == (port["mac_address"], ["10.81.0.20/24"])
        assert wait_container(zun, made.uuid, "Running")["addresses"][net["id"]][0]["port"] == port["id"]
    finally:
        zun.delete(f"/containers/{made.uuid}?force=true")
        cloud.delete_sandbox(sb["id"])
    assert not daemon.client.containers.list(all=True, filters={"name": f"zun-sandbox-{made.uuid}"})
    assert not daemon.client.containers.list(all=True, filters={"name": f"zun-{made.uuid}"})
    assert cloud.http.get(f"/network/v2.0/ports/{port['id']}").status_code == 404
    cleanup_networks(cloud, zun, net)


def test_exposed_port_is_open_others_dropped_and_a_floating_ip_reaches_it(cloud: Cloud, daemon: dk.Dockerd,
                                                                         zun: Any) -> None:
    http = cloud.http
    net, subnet = cloud.network("zs-x", "10.82.0.0/24")
    public = cloud.ok(http.get("/network/v2.0/networks", params={"name": "public"}))["networks"][0]
    router = cloud.ok(http.post("/network/v2.0/routers", json={"router": {
        "name": "zs-r", "external_gateway_info": {"network_id": public["id"]}}}), 201)["router"]
    cloud.ok(http.put(f"/network/v2.0/routers/{router['id']}/add_router_interface", json={"subnet_id": subnet["id"]}))
    # The client is in a group of its own: the container's default group does not admit it.
    client_sg = cloud.ok(http.post("/network/v2.0/security-groups", json={"security_group": {
        "name": "zs-client"}}), 201)["security_group"]
    client_port = cloud.ok(http.post("/network/v2.0/ports", json={"port": {
        "network_id": net["id"], "security_groups": [client_sg["id"]]}}), 201)["port"]
    sb = cloud.sandbox("zs-client", ports=[client_port["id"]])
    uuid = zunclient(cloud.server).containers.run(name="zs-exposed", image=dk.IMAGE, command=WEB,
                                                  nets=[{"network": net["id"]}],
                                                  exposed_ports={"8080/tcp": {}}).uuid  # zun run --expose-port 8080
    fip = None
    try:
        c = wait_container(zun, uuid, "Running")
        assert c["ports"] == [8080]
        (group,) = cloud.ok(http.get("/network/v2.0/security-groups", params={"name": f"zun-{uuid}"}))["security_groups"]
        assert group["id"] in c["security_groups"]
        (att,) = c["addresses"][net["id"]]
        port = cloud.port(att["port"])
        assert group["id"] in port["security_groups"]
        ip = att["addr"]
        cloud.wait_status(f"/network/v2.0/ports/{port['id']}", "ACTIVE")
        cloud.wait_status(f"/netbay/v1/sandboxes/{sb['id']}", "ACTIVE")
        ns = cloud.sandbox_ns(sb["id"])
        app = docker_container(daemon, c)
        code, out = sh(app, "wget -q -O - http://127.0.0.1:9090/hostname")
        assert code == 0, out                       # 9090 listens: what stops it is the group
        wait_for(lambda: answers(ns, ip, 8080), 15, 0.1, "the exposed port answering")
        assert dropped(ns, ip, 9090), "the unexposed port's SYN must be dropped"
        # A floating IP: the outside world reaches the exposed port, not the other.
        fip = cloud.ok(http.post("/network/v2.0/floatingips", json={"floatingip": {
            "floating_network_id": public["id"], "port_id": port["id"]}}), 201)["floatingip"]
        cloud.wait_status(f"/network/v2.0/floatingips/{fip['id']}", "ACTIVE")
        outside = cloud.names.external(public["id"])
        address = fip["floating_ip_address"]
        wait_for(lambda: answers(outside, address, 8080), 15, 0.1, "the exposed port through the floating IP")
        assert dropped(outside, address, 9090), "the unexposed port through the floating IP must be dropped"
    finally:
        if fip is not None:
            http.delete(f"/network/v2.0/floatingips/{fip['id']}")
        assert zun.delete(f"/containers/{uuid}?force=true").status_code == 204
        cloud.delete_sandbox(sb["id"])
    assert not cloud.ok(http.get("/network/v2.0/security-groups", params={"name": f"zun-{uuid}"}))["security_groups"]
    assert not made_ports(cloud) and not cloud.ok(http.get("/network/v2.0/ports", params={
        "device_owner": "compute:netbay"}))["ports"]
    cloud.ok(http.delete(f"/network/v2.0/ports/{client_port['id']}"), 204)
    cloud.ok(http.delete(f"/network/v2.0/security-groups/{client_sg['id']}"), 204)
    cloud.ok(http.put(f"/network/v2.0/routers/{router['id']}/remove_router_interface",
                      json={"subnet_id": subnet["id"]}))
    cloud.ok(http.delete(f"/network/v2.0/routers/{router['id']}"), 204)
    cleanup_networks(cloud, zun, net)


def restart_server(cloud: Cloud, daemon: dk.Dockerd, plugin_name: str, while_down: Any = None) -> None:
    """Stop the server (TERM, by PID), run ``while_down``, start it again on the same port
    and database."""
    import os

    from conftest import ADMIN_PASSWORD, _wait_port  # tests/conftest.py

    srv = cloud.server
    srv.proc.terminate()
    srv.proc.wait(timeout=30)
    if while_down is not None:
        while_down()
    env = {**os.environ, "NETBAY_ADMIN_PASSWORD": ADMIN_PASSWORD, "NETBAY_LOG_LEVEL": "WARNING",
           "NETBAY_DOCKER_HOST": daemon.host, "NETBAY_DOCKER_DRIVER": plugin_name, "NETBAY_SANDBOX_IMAGE": SANDBOX_IMAGE}
    srv.proc = zygote.popen(
        [sys.executable, "-m", "netbay.cli.main", "up", "--port", str(srv.port), "--data-dir", str(srv.data_dir),
         "--database-url", srv.database_url, "--no-agent"],
        env=env, stdout=open(srv.data_dir / "server.log", "a"), stderr=subprocess.STDOUT)  # noqa: SIM115 - the child process writes it while it runs
    _wait_port(srv.port, 60, srv.proc)


def test_server_restart_and_plugin_sigkill_keep_containers_networked(cloud: Cloud, daemon: dk.Dockerd,
                                                                     plugin: Plugin, zun: Any) -> None:
    from .zun_fixtures import PLUGIN

    net, _ = cloud.network("zs-r", "10.83.0.0/24")
    sb = cloud.sandbox("zs-rsb", networks=[net["id"]])
    r = zun.post("/containers?run=true", json={"name": "zs-keep", "image": dk.IMAGE, "command": WEB,
                                               "nets": [{"network": net["id"]}]})
    uuid = r.json()["uuid"]
    later = None
    try:
        before = wait_container(zun, uuid, "Running")
        ip = before["addresses"][net["id"]][0]["addr"]
        sb = cloud.wait_status(f"/netbay/v1/sandboxes/{sb['id']}", "ACTIVE")
        ns = cloud.sandbox_ns(sb["id"])
        wait_for(lambda: answers(ns, ip, 8080), 15, 0.1, "the container answering")

        def half_way() -> None:
            """As if the server had died in the middle of an operation on the container."""
            import sqlalchemy as sa

            engine = sa.create_engine(cloud.server.database_url)
            with engine.begin() as db:
                db.execute(sa.text("UPDATE containers SET status = 'Creating', task_state = 'container_creating' "
                                   "WHERE id = :id"), {"id": uuid})
            engine.dispose()

        restart_server(cloud, daemon, PLUGIN, half_way)
        wait_container(zun, uuid, "Running", timeout=30)   # recovered from Docker's state
        listed = {c["uuid"]: c for c in zun.get("/containers").json()["containers"]}
        assert listed[uuid]["status"] == "Running" and listed[uuid]["addresses"] == before["addresses"]
        assert listed[uuid]["container_id"] == before["container_id"]
        assert answers(ns, ip, 8080), "the container's networking after the server restart"
        # The new server drives Docker: a reboot through the API, and networking stays.
        assert zun.post(f"/containers/{uuid}/reboot?timeout=1").status_code == 202
        wait_container(zun, uuid, "Running")
        wait_for(lambda: answers(ns, ip, 8080), 15, 0.1, "the container answering after a reboot")

        plugin.kill()
        assert answers(ns, ip, 8080), "the container's networking with the plugin dead"
        plugin.start()
        assert answers(ns, ip, 8080), "the container's networking after the plugin restart"
        later = zun.post("/containers?run=true", json={"name": "zs-later", "image": dk.IMAGE, "command": WEB,
                                                       "nets": [{"network": net["id"]}]}).json()["uuid"]
        done = wait_container(zun, later, "Running")
        wait_for(lambda: answers(ns, done["addresses"][net["id"]][0]["addr"], 8080), 15, 0.1,
                 "a container made after the plugin restart answering")
        assert {c["uuid"] for c in zun.get("/containers").json()["containers"]} >= {uuid, later}
    finally:
        for made in (uuid, later):
            if made:
                zun.delete(f"/containers/{made}?force=true")
        cloud.delete_sandbox(sb["id"])
    assert not cloud.ok(cloud.http.get("/network/v2.0/ports", params={"device_owner": "compute:netbay"}))["ports"]
    cleanup_networks(cloud, zun, net)
