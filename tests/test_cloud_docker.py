"""Docker's network + IPAM driver through the backend seam: the same plugin, driven with
Docker 20.10's exact calls on its real Unix socket, on netbay's own network service
and on a real cloud's Neutron (Keystone and Neutron's API server from PyPI,
``tests/backendfix.py``'s session-wide ``cloud``).

Each backend runs the plugin as ``netbay libnetwork`` does in production (a process of
its own): ``embedded`` against a netbay server, ``openstack`` with ``--backend openstack
--os-cloud peer``. The checks are the same for both (one parametrized fixture), read
back through :class:`netbay.backends.NetworkBackend`; on the cloud also through a
client of its own clouds.yaml (:func:`tests.backendfix.cloud_snapshot`). That Neutron runs without agents (ML2, no mechanism drivers): a bound
port stays ``DOWN`` with ``binding:vif_type=binding_failed``, since wiring it is the
cloud's agent's job. So these tests assert API effects, never packets (the packets of
the embedded backend are tests/dataplane/test_dp_docker.py's).
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from conftest import ADMIN_PASSWORD, start_server, stop_server

import dockercalls
from netbay.dataplane import netns
from netbay.dataplane.names import Names
from tests.backendfix import BACKENDS, snapshot
from tests.backendfix import cloud_snapshot, openstack

pytestmark = pytest.mark.peers

OWNERS = {"embedded": "compute:netbay", "openstack": "kuryr:container"}
HOST = "docker-host-1"
MADE, BY = "netbay.docker.made", "netbay.docker.by:"
BOUND = 30.0
PLUGIN_DIR = Path("/run/docker/plugins")


@dataclass
class Driver:
    """One plugin process on one backend, and that backend seen through the seam."""

    kind: str
    name: str
    sock: Path
    seam: object
    proc: subprocess.Popen
    log: Path
    cli_env: dict[str, str] = field(default_factory=dict)   # the cloud's clouds.yaml (openstack only)

    def call(self, method: str, body: dict) -> httpx.Response:
        with httpx.Client(transport=httpx.HTTPTransport(uds=str(self.sock)), base_url="http://p", timeout=30) as c:
            return c.post(f"/{method}", json=body)

    def snapshot(self) -> dict:
        seen = snapshot(self.seam)
        if self.cli_env:
            seen["cli"] = cloud_snapshot(self.cli_env)
        return seen
def _serving(sock: Path, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + BOUND
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()[-3000:]
        if sock.is_socket():
            try:
                with httpx.Client(transport=httpx.HTTPTransport(uds=str(sock)), timeout=2) as c:
                    c.post("http://p/Plugin.Activate")
                return
            except httpx.HTTPError:
                pass
        time.sleep(0.05)
    raise TimeoutError(f"plugin socket {sock}: {log.read_text()[-3000:]}")


@pytest.fixture(scope="module", params=BACKENDS)
def driver(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Driver]:
    """``netbay libnetwork`` on one backend, its fabric under a prefix of this run's own."""
    work = tmp_path_factory.mktemp(f"docker-{request.param}")
    run = secrets.token_hex(3)
    prefix, name = f"nbt{run}-cd-", f"nbt{run}cd"
    sock = PLUGIN_DIR / f"{name}.sock"   # where dockerd finds plugins
    args = [sys.executable, "-m", "netbay.cli.main", "libnetwork", "--name", name, "--prefix", prefix,
            "--plugin-dir", str(PLUGIN_DIR), "--host", HOST, "--orphan-grace", "600"]
    server = None
    if request.param == "embedded":
        from netbay.agent.api import Credentials
        from netbay.client import Api
        from netbay.backends.http import HttpBackend

        server = start_server(f"sqlite:///{work / 'netbay.db'}", work)
        creds = Credentials(server.auth_url, "admin", ADMIN_PASSWORD, "admin")
        env = {**os.environ, "OS_AUTH_URL": creds.auth_url, "OS_USERNAME": "admin", "OS_PASSWORD": ADMIN_PASSWORD,
               "OS_PROJECT_NAME": "admin"}
        args += ["--url", server.url]
        seam, cli_env, conn = HttpBackend(Api(server.url, creds.token)), {}, None
    else:
        from netbay.backends.openstack import OpenStackBackend

        cli_env = request.getfixturevalue("cloud_env")
        env = {**os.environ, **cli_env}
        for k in ("OS_AUTH_URL", "OS_USERNAME", "OS_PASSWORD", "OS_PROJECT_NAME"):
            env.pop(k, None)   # the cloud is named, as clouds.yaml names it
        args += ["--backend", "openstack", "--os-cloud", cli_env["OS_CLOUD"], "--plug", "fabric"]  # no OVS here
        conn = request.getfixturevalue("cloud").connection()
        seam = OpenStackBackend(connection=conn)
    log = work / "plugin.log"
    proc = subprocess.Popen(args, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)
    try:
        _serving(sock, proc, log)
        seam.list("security_group")  # the project's default group appears on first use
        yield Driver(request.param, name, sock, seam, proc, log, cli_env)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        sock.unlink(missing_ok=True)
        netns.delete(Names(prefix).fabric)
        assert not netns.list(prefix)
        if conn is not None:
            conn.close()
        if server is not None:
            stop_server(server)


def wait_for(check, what: str):
    deadline = time.monotonic() + BOUND
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"not within {BOUND:.0f} s: {what}")


# --- tests -------------------------------------------------------------------------------------


@pytest.mark.parametrize("capture", dockercalls.NAMES)
def test_dockers_calls_make_the_port_and_leave_the_backend_as_it_was(driver: Driver, capture: str) -> None:
    """Docker's own sequence (create, run, stop, rm; connect, disconnect and its
    rollbacks): mid-way the endpoint's port is on the backend with the address and MAC
    Docker was told, the backend's owner convention, bound to this host and tagged with
    its endpoint; its network carries the Docker network's id. Afterwards the backend
    (and a client of the cloud's clouds.yaml) lists exactly what it listed before."""
    before = driver.snapshot()
    seen: dict[str, dict] = {}
    joined: list[str] = []

    def check(path: str, req: dict, body: dict) -> None:
        if path == "/IpamDriver.RequestAddress" and "com.docker.network.endpoint.macaddress" in req.get("Options", {}):
            seen[body["Address"].split("/")[0]] = {"mac": req["Options"]["com.docker.network.endpoint.macaddress"]}
        if path == "/NetworkDriver.CreateEndpoint":
            seen[req["Interface"]["Address"].split("/")[0]].update(eid=req["EndpointID"], nid=req["NetworkID"])
        if path == "/NetworkDriver.Join":
            joined.append(req["EndpointID"])
            ip, want = next((ip, w) for ip, w in seen.items() if w.get("eid") == req["EndpointID"])
            port = wait_for(lambda: next((p for p in driver.seam.list("port", tags=f"netbay.docker.ep:{want['eid']}")
                                          if p.get("binding:host_id") == HOST), None), "the binding")
            assert [f["ip_address"] for f in port["fixed_ips"]] == [ip]
            assert port["mac_address"] == want["mac"]
            assert port["device_owner"] == OWNERS[driver.kind]
            assert port["device_id"] == want["eid"]
            assert MADE in port["tags"] and any(t.startswith(BY) for t in port["tags"])
            nets = driver.seam.list("network", tags=f"netbay.docker.net:{want['nid']}")
            assert [n["id"] for n in nets] == [port["network_id"]]
            subnet = driver.seam.show("subnet", port["fixed_ips"][0]["subnet_id"])
            assert body["Gateway"] == subnet["gateway_ip"]

    answers = dockercalls.replay(driver.sock, capture, check)
    assert joined and "/NetworkDriver.DeleteNetwork" in [p for p, _ in answers]
    assert driver.snapshot() == before


def test_a_refusal_of_the_backend_reaches_docker_in_its_words_and_leaves_nothing(driver: Driver) -> None:
    """An address outside the subnet: the backend's own message is Docker's ``Err``,
    no port is left; the network Docker then removes leaves nothing either."""
    before = driver.snapshot()
    nid = secrets.token_hex(32)
    pool = driver.call("IpamDriver.RequestPool", {"AddressSpace": "netbay", "Pool": "10.93.0.0/24", "SubPool": "",
                                                  "Options": {}, "V6": False}).json()
    gw = driver.call("IpamDriver.RequestAddress", {"PoolID": pool["PoolID"], "Address": "", "Options": {
        "RequestAddressType": "com.docker.network.gateway"}}).json()
    r = driver.call("NetworkDriver.CreateNetwork", {"NetworkID": nid, "Options": {"com.docker.network.generic": {}},
                                                    "IPv4Data": [{"AddressSpace": "netbay", "Pool": "10.93.0.0/24",
                                                                  "Gateway": gw["Address"]}], "IPv6Data": []})
    assert r.status_code == 200, r.text
    try:
        r = driver.call("IpamDriver.RequestAddress", {"PoolID": pool["PoolID"], "Address": "10.94.0.5", "Options": {
            "com.docker.network.endpoint.macaddress": "02:42:0a:5d:00:05"}})
        assert r.status_code == 500 and "10.94.0.5" in r.json()["Err"], r.text
        assert not driver.seam.list("port", tags=MADE)
    finally:
        driver.call("IpamDriver.ReleasePool", {"PoolID": pool["PoolID"]})
        assert driver.call("NetworkDriver.DeleteNetwork", {"NetworkID": nid}).status_code == 200
    assert driver.snapshot() == before


def test_a_port_quota_on_the_cloud_is_neutrons_message_to_docker(driver: Driver) -> None:
    """The cloud refuses the port (a quota the project has used up): Docker gets
    Neutron's own text as ``Err`` and nothing is half-made."""
    if driver.kind != "openstack":
        pytest.skip("a quota of the cloud's Neutron")
    before = driver.snapshot()
    conn = driver.seam.conn
    used = len(list(conn.network.ports(project_id=conn.current_project_id)))
    nid = secrets.token_hex(32)
    pool = driver.call("IpamDriver.RequestPool", {"AddressSpace": "netbay", "Pool": "10.95.0.0/24", "SubPool": "",
                                                  "Options": {}, "V6": False}).json()
    assert driver.call("NetworkDriver.CreateNetwork", {
        "NetworkID": nid, "Options": {"com.docker.network.generic": {}},
        "IPv4Data": [{"AddressSpace": "netbay", "Pool": "10.95.0.0/24", "Gateway": "10.95.0.1/24"}],
        "IPv6Data": []}).status_code == 200
    openstack(driver.cli_env, "quota", "set", "--ports", str(used), conn.current_project_id)
    try:
        r = driver.call("IpamDriver.RequestAddress", {"PoolID": pool["PoolID"], "Address": "", "Options": {
            "com.docker.network.endpoint.macaddress": "02:42:0a:5f:00:02"}})
    finally:
        openstack(driver.cli_env, "quota", "set", "--ports", "-1", conn.current_project_id)
        driver.call("IpamDriver.ReleasePool", {"PoolID": pool["PoolID"]})
        driver.call("NetworkDriver.DeleteNetwork", {"NetworkID": nid})
    assert r.status_code == 500 and "Quota exceeded for resources: ['port']" in r.json()["Err"], r.text
    assert driver.snapshot() == before


def test_containers_on_a_cluster_are_netbays_own_and_refused_by_name_on_a_cloud(driver: Driver) -> None:
    if driver.kind != "openstack":
        pytest.skip("on netbay's own backend the option places containers (test_dp_docker_clusters.py)")
    before = driver.snapshot()
    r = driver.call("NetworkDriver.CreateNetwork", {
        "NetworkID": secrets.token_hex(32), "Options": {"com.docker.network.generic": {"netbay.cluster": "c1"}},
        "IPv4Data": [{"AddressSpace": "null", "Pool": "0.0.0.0/0"}], "IPv6Data": []})
    assert r.status_code == 500
    assert "-o netbay.cluster" in r.json()["Err"] and "openstack" in r.json()["Err"], r.text
    assert driver.snapshot() == before


def test_the_async_face_takes_tags_one_at_a_time_and_completes_a_creates_tags(clean_backend) -> None:
    """:class:`netbay.backends.aio.ThreadedBackend` over either backend: a create's tags are
    there even where the backend would not take them on POST (a cloud's networks), and one
    tag comes and goes without touching the others (another plugin's, on a shared network)."""
    import asyncio

    from netbay.backends.aio import ThreadedBackend
    from netbay.errors import NotFound

    face = ThreadedBackend(lambda: clean_backend, workers=2)

    async def run() -> None:
        net = await face.create("network", {"name": f"aio-{secrets.token_hex(3)}", "tags": ["a", "b"]})
        try:
            assert sorted(net["tags"]) == ["a", "b"]
            assert sorted((await face.show("network", net["id"]))["tags"]) == ["a", "b"]
            await face.add_tag("network", net["id"], "c")
            await face.remove_tag("network", net["id"], "a")
            assert sorted((await face.show("network", net["id"]))["tags"]) == ["b", "c"]
            assert [n["id"] for n in await face.list("network", tags="b,c")] == [net["id"]]
            with pytest.raises(NotFound):
                await face.remove_tag("network", net["id"], "a")
        finally:
            await face.delete("network", net["id"])

    try:
        asyncio.run(run())
    finally:
        face._pool.shutdown(wait=True)   # the backend is the fixture's: not closed here


@pytest.fixture(scope="module")
def daemon() -> Iterator:
    """A dockerd of this module's own, off the host's network (:mod:`netbay.runtime.dockerd`)."""
    from netbay.runtime import dockerd

    if (why := dockerd.available()) is not None:
        pytest.skip(why)
    yield from dockerd.running()


def test_docker_run_gets_the_backends_port_and_rm_leaves_nothing(driver: Driver, daemon) -> None:
    """A real dockerd: ``docker network create -d <driver> --ipam-driver <driver>``, ``docker
    run``: the container's eth0 has the MAC and address of the port the backend holds (owner
    and binding as the backend's convention says); ``rm`` and ``network rm`` leave the
    backend as it was."""
    from netbay.runtime.dockerd import IMAGE

    before = driver.snapshot()
    net = f"cd-{driver.kind}"
    r = daemon.cli("network", "create", "-d", driver.name, "--ipam-driver", driver.name, "--subnet", "10.96.0.0/24",
                   net)
    assert r.returncode == 0, r.stderr
    try:
        r = daemon.cli("run", "-d", "--name", f"c-{driver.kind}", "--net", net, IMAGE, "sleep", "600")
        assert r.returncode == 0, r.stderr
        r = daemon.cli("exec", f"c-{driver.kind}", "sh", "-c", "ip -o link show eth0; ip -o -4 addr show eth0")
        assert r.returncode == 0, r.stderr
        mac = r.stdout.split("link/ether", 1)[1].split()[0]
        addr = r.stdout.split(" inet ", 1)[1].split()[0]
        ports = driver.seam.list("port", mac_address=mac)
        assert len(ports) == 1, ports
        port = ports[0]
        assert [f["ip_address"] for f in port["fixed_ips"]] == [addr.split("/")[0]] and addr.endswith("/24")
        assert port["device_owner"] == OWNERS[driver.kind]
        wait_for(lambda: driver.seam.show("port", port["id"]).get("binding:host_id") == HOST, "the binding")
        docker_net = json.loads(daemon.cli("network", "inspect", net).stdout)[0]["Id"]
        assert [n["id"] for n in driver.seam.list("network", tags=f"netbay.docker.net:{docker_net}")] == \
            [port["network_id"]]
        assert daemon.cli("rm", "-f", f"c-{driver.kind}").returncode == 0
        assert not driver.seam.list("port", mac_address=mac)
    finally:
        daemon.cli("rm", "-f", f"c-{driver.kind}")
        daemon.cli("network", "rm", net)
    assert driver.snapshot() == before


def test_a_subnet_pool_gives_the_docker_network_its_subnet(driver: Driver) -> None:
    """``--ipam-opt netbay.subnetpool=<id>`` with no ``--subnet``: the driver takes a free
    prefix of the pool, the backend makes the subnet from that pool, an address comes from
    it; removing the Docker network removes the subnet and leaves the pool as it was."""
    seam = driver.seam
    before = driver.snapshot()
    pool = seam.create("subnetpool", {"name": f"cd-pool-{secrets.token_hex(3)}", "prefixes": ["10.97.0.0/16"],
                                      "default_prefixlen": 24})
    nid = secrets.token_hex(32)
    pool_id = ""
    try:
        r = driver.call("IpamDriver.RequestPool", {"AddressSpace": "netbay", "Pool": "", "SubPool": "",
                                                   "Options": {"netbay.subnetpool": pool["id"]}, "V6": False})
        assert r.status_code == 200, r.text
        pool_id, cidr = r.json()["PoolID"], r.json()["Pool"]
        assert cidr.startswith("10.97.") and cidr.endswith("/24"), cidr
        gw = driver.call("IpamDriver.RequestAddress", {"PoolID": pool_id, "Address": "", "Options": {
            "RequestAddressType": "com.docker.network.gateway"}}).json()["Address"]
        r = driver.call("NetworkDriver.CreateNetwork", {"NetworkID": nid, "Options": {"com.docker.network.generic": {}},
                                                        "IPv4Data": [{"AddressSpace": "netbay", "Pool": cidr,
                                                                      "Gateway": gw}], "IPv6Data": []})
        assert r.status_code == 200, r.text
        subnets = seam.list("subnet", subnetpool_id=pool["id"])
        assert [s["cidr"] for s in subnets] == [cidr]
        r = driver.call("IpamDriver.RequestAddress", {"PoolID": pool_id, "Address": "", "Options": {
            "com.docker.network.endpoint.macaddress": "02:42:0a:61:00:09"}})
        assert r.status_code == 200, r.text
        port = seam.list("port", mac_address="02:42:0a:61:00:09")[0]
        assert port["fixed_ips"][0]["subnet_id"] == subnets[0]["id"]
        assert driver.call("IpamDriver.ReleaseAddress", {"PoolID": pool_id, "Address": r.json()["Address"].split(
            "/")[0]}).status_code == 200
        assert not seam.list("port", mac_address="02:42:0a:61:00:09")
        assert driver.call("IpamDriver.ReleasePool", {"PoolID": pool_id}).status_code == 200
        assert driver.call("NetworkDriver.DeleteNetwork", {"NetworkID": nid}).status_code == 200
        assert not [t for t in seam.show("subnetpool", pool["id"])["tags"] if t.startswith("netbay.docker")]
    finally:
        if pool_id:
            driver.call("IpamDriver.ReleasePool", {"PoolID": pool_id})
        driver.call("NetworkDriver.DeleteNetwork", {"NetworkID": nid})
        left = seam.list("subnet", subnetpool_id=pool["id"])
        seam.delete("subnetpool", pool["id"])
    assert not left
    assert driver.snapshot() == before
