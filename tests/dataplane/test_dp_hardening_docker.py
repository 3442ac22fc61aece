"""Issue 25, the Docker driver's slice: racing and overlapping pools, IPv6-only
networks, malformed calls, and Docker's resend after the plugin was killed mid-call.

A real private dockerd (:mod:`netbay.runtime.dockerd`), the plugin as a child process
and a netbay server with an in-process agent, as in test_dp_docker.py (whose module
fixtures these are).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from netbay.plugins.libnetwork.server import journal_dir

from . import dockerd as dk
from .agent_fixtures import Cloud, wait_for
from .docker_fixtures import PLUGIN, Plugin, endpoint_port, iface, made_ports, netbay_network, run
from .dp_helpers import ping
from .docker_fixtures import daemon, plugin  # noqa: F401 - the module fixtures, shared

CLOUD_TAG = "dk"   # the shared `cloud` fixture (conftest.py), on test_dp_docker's prefix

pytestmark = pytest.mark.skipif(dk.available() is not None, reason=str(dk.available()))

PYTHON_WORDS = re.compile(r"Error:|Exception|Traceback|NoneType|object has no attribute|KeyError|TypeError|"
                          r"ValueError|AttributeError|\bdict\b|\bstr\b|\bint\b|'list'")


def create(d: dk.Dockerd, name: str, *args: str) -> subprocess.CompletedProcess:
    return d.cli("network", "create", "-d", PLUGIN, "--ipam-driver", PLUGIN, *args, name)


@pytest.fixture
def networks(daemon: dk.Dockerd) -> Iterator[list[str]]:
    """Names of Docker networks a test may have made: removed (with their containers) whatever happens."""
    names: list[str] = []
    yield names
    for c in daemon.client.containers.list(all=True, filters={"label": "netbay.test=hardening"}):
        c.remove(force=True)
    for name in names:
        daemon.cli("network", "rm", name)


def pool_subnets(cloud: Cloud, cidr: str) -> list[dict]:
    return [s for s in cloud.ok(cloud.http.get("/network/v2.0/subnets"))["subnets"]
            if s["cidr"] == cidr and any(t.startswith("netbay.docker.pool:") for t in s["tags"])]


# --- defect 4: racing creates of one subnet -----------------------------------------------------

def test_six_creates_of_one_subnet_at_once_one_wins(cloud: Cloud, daemon: dk.Dockerd, plugin: Plugin,
                                                   networks: list[str]) -> None:
    cidr = "10.81.0.0/24"
    names = [f"race{i}" for i in range(6)]
    networks.extend(names + ["race-late"])
    results: dict[str, subprocess.CompletedProcess] = {}
    start = threading.Barrier(len(names))

    def one(name: str) -> None:
        start.wait(timeout=30)
        results[name] = create(daemon, name, "--subnet", cidr)

    threads = [threading.Thread(target=one, args=(n,)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=90)
    won = [n for n, r in results.items() if r.returncode == 0]
    lost = [r.stderr for r in results.values() if r.returncode != 0]
    assert len(results) == 6 and len(won) == 1, {n: (r.returncode, r.stderr) for n, r in results.items()}
    refusal = f"pool {cidr} is the pool of another Docker network"
    assert all(refusal in e for e in lost), lost
    late = create(daemon, "race-late", "--subnet", cidr)  # one at a time: the same refusal
    assert late.returncode != 0 and refusal in late.stderr, late.stderr
    assert len(pool_subnets(cloud, cidr)) == 1

    # The winner works: a container gets its address and talks to a sandbox on the network.
    net = netbay_network(cloud, daemon.client.networks.get(won[0]))
    sb = cloud.sandbox("sb-race", networks=[net["id"]])
    try:
        c = run(daemon, won[0], "c-race", labels={"netbay.test": "hardening"})
        port = endpoint_port(cloud, c, won[0])
        ip = port["fixed_ips"][0]["ip_address"]
        assert iface(c)[1] == [f"{ip}/24"]
        cloud.wait_status(f"/network/v2.0/ports/{port['id']}", "ACTIVE", 30)
        ns = cloud.sandbox_ns(cloud.wait_status(f"/netbay/v1/sandboxes/{sb['id']}", "ACTIVE", 30)["id"])
        assert ping(ns, ip, count=3), "sandbox -> container on the winning network"
    finally:
        cloud.delete_sandbox(sb["id"])


# --- defect 9: overlapping pools, an IPv6 subnet alone, malformed calls ------------------------------------------

@pytest.mark.parametrize(("first", "second"), [("10.82.5.0/24", "10.82.0.0/16"), ("10.83.0.0/16", "10.83.7.0/24")])
def test_an_overlapping_subnet_is_refused_either_way(cloud: Cloud, daemon: dk.Dockerd, plugin: Plugin,
                                                     networks: list[str], first: str, second: str) -> None:
    networks.extend(["ov-first", "ov-second"])
    r = create(daemon, "ov-first", "--subnet", first)
    assert r.returncode == 0, r.stderr
    r = create(daemon, "ov-second", "--subnet", second)
    assert r.returncode != 0, "an overlapping pool was accepted"
    assert f"pool {second} overlaps the pool {first} of another Docker network" in r.stderr, r.stderr
    assert not pool_subnets(cloud, second)


def test_an_ipv6_subnet_alone_is_refused_naming_ipv4(cloud: Cloud, daemon: dk.Dockerd, plugin: Plugin,
                                                     networks: list[str]) -> None:
    """Docker asks a remote driver for an IPv4 pool too; with no default pool to take it
    from, the refusal says which family is missing (IPv6 itself: test_dp_docker_v6.py)."""
    networks.append("v6only")
    r = create(daemon, "v6only", "--ipv6", "--subnet", "2001:db8:81::/64")
    assert r.returncode != 0
    assert "this driver needs an IPv4 pool" in r.stderr, r.stderr
    assert not [s for s in cloud.ok(cloud.http.get("/network/v2.0/subnets"))["subnets"]
                if s["cidr"].startswith("2001:db8:81:")]


MALFORMED = [
    ("NetworkDriver.CreateNetwork", {}, "netbay: CreateNetwork: NetworkID is missing"),
    ("NetworkDriver.CreateNetwork", {"NetworkID": 42}, "netbay: CreateNetwork: NetworkID must be a string, not a number"),
    ("NetworkDriver.CreateNetwork", {"NetworkID": "ab" * 32, "IPv4Data": "10.0.0.0/24"},
     "netbay: CreateNetwork: IPv4Data must be a list, not a string"),
    ("NetworkDriver.CreateNetwork", {"NetworkID": "ab" * 32, "IPv4Data": [{"Pool": "ten/24"}]},
     "netbay: CreateNetwork: IPv4Data[0]: Pool 'ten/24' is not a CIDR"),
    ("NetworkDriver.CreateNetwork", {"NetworkID": "ab" * 32, "Options": {"com.docker.network.generic": "x"}},
     "must be an object"),
    ("NetworkDriver.CreateNetwork", [1, 2], "netbay: CreateNetwork: the body must be a JSON object, not a list"),
    ("NetworkDriver.DeleteNetwork", {"NetworkID": None}, "netbay: DeleteNetwork: NetworkID is missing"),
    ("NetworkDriver.CreateEndpoint", {"NetworkID": "ab" * 32, "EndpointID": "cd" * 32, "Interface": []},
     "netbay: CreateEndpoint: Interface must be an object, not a list"),
    ("NetworkDriver.Join", {"EndpointID": "cd" * 32}, "netbay: Join: NetworkID is missing"),
    ("NetworkDriver.DeleteEndpoint", {"NetworkID": "ab" * 32}, "netbay: DeleteEndpoint: EndpointID is missing"),
    ("IpamDriver.RequestPool", {"Pool": 10}, "netbay: RequestPool: Pool must be a string, not a number"),
    ("IpamDriver.RequestPool", {"Pool": "banana"}, "invalid pool 'banana'"),
    ("IpamDriver.RequestPool", {"Pool": "10.84.0.0/24", "V6": "no"}, "netbay: RequestPool: V6 must be true or false"),
    ("IpamDriver.RequestPool", {"Pool": "10.84.0.0/24", "Options": {"colour": "blue"}},
     "unknown --ipam-opt option 'colour'"),
    ("IpamDriver.RequestPool", "10.84.0.0/24", "netbay: RequestPool: the body must be a JSON object, not a string"),
    ("IpamDriver.RequestAddress", {"PoolID": "cidr:10.84.0.0/24", "Address": "nope",
                                   "Options": {"RequestAddressType": "com.docker.network.gateway"}},
     "netbay: RequestAddress: Address: 'nope' is not an IP address"),
    ("IpamDriver.RequestAddress", {"PoolID": "mine", "Address": "10.84.0.9"}, "unknown pool id 'mine'"),
    ("IpamDriver.RequestAddress", {"PoolID": "cidr:10.84.0.0/24", "Options": {}},
     "neither an endpoint's MAC nor an address was given"),
    ("IpamDriver.ReleasePool", {}, "netbay: ReleasePool: PoolID is missing"),
    ("IpamDriver.ReleaseAddress", {"PoolID": ["cidr:10.84.0.0/24"]},
     "netbay: ReleaseAddress: PoolID must be a string, not a list"),
]


def test_malformed_calls_get_errors_worded_for_docker(plugin: Plugin) -> None:
    with httpx.Client(transport=httpx.HTTPTransport(uds=str(plugin.sock)), base_url="http://p", timeout=30) as c:
        for method, body, wanted in MALFORMED:
            r = c.post(f"/{method}", json=body)
            err = r.json().get("Err", "")
            assert r.status_code in (400, 500) and wanted in err, (method, body, r.status_code, err)
            assert not PYTHON_WORDS.search(err), (method, body, err)
        r = c.post("/NetworkDriver.CreateNetwork", content=b"{not json")
        assert r.status_code == 400 and r.json()["Err"] == "netbay: CreateNetwork: the body is not JSON"
        assert plugin.proc is not None and plugin.proc.poll() is None  # still serving


# --- defect 9: killed mid-RequestAddress, Docker resends -----------------------------------------

def asked_api(pid: int, api_port: int) -> bool:
    """Whether process ``pid`` has a request waiting, unread, at the API on 127.0.0.1:``api_port``
    (the API is paused): its bytes sit in the receive queue of the API's end of the connection."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            link = os.readlink(fd)
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    rows = [ln.split() for ln in Path("/proc/net/tcp").read_text().splitlines()[1:]]
    port = lambda addr: int(addr.split(":")[1], 16)  # noqa: E731
    mine = {port(r[1]) for r in rows if r[9] in inodes and port(r[2]) == api_port}
    return any(port(r[1]) == api_port and port(r[2]) in mine and int(r[4].split(":")[1], 16) > 0 for r in rows)


def test_killed_mid_request_address_docker_resend_succeeds(cloud: Cloud, daemon: dk.Dockerd,
                                                           plugin: Plugin, networks: list[str]) -> None:
    """The netbay API is paused (SIGSTOP) while the plugin handles ``docker run``'s
    RequestAddress (seen in its journal), the plugin is SIGKILLed with the port create
    on its way, the API resumes (it makes the port: the half-made allocation) and the
    plugin restarts: dockerd's resend (which comes without its body) gets the address
    on that same port, and ``docker run`` succeeds."""
    networks.append("dk-kr")
    r = create(daemon, "dk-kr", "--subnet", "10.85.0.0/24")
    assert r.returncode == 0, r.stderr
    r = daemon.cli("run", "--rm", "--net", "dk-kr", dk.IMAGE, "true")  # the plugin knows the pool's subnet now:
    assert r.returncode == 0, r.stderr                                # RequestAddress goes straight to the port
    calls = journal_dir(PLUGIN)
    server = cloud.server.proc.pid
    docker_run = None
    os.kill(server, signal.SIGSTOP)
    try:
        docker_run = subprocess.Popen([dk.shutil.which("docker") or "docker", "run", "-d", "--name", "c-kr", "--label",
                                       "netbay.test=hardening", "--net", "dk-kr", dk.IMAGE, "sleep", "600"],
                                      env={**os.environ, "DOCKER_HOST": daemon.host}, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True)
        assert plugin.proc is not None
        wait_for(lambda: any(p.name.endswith("-IpamDriver.RequestAddress") for p in calls.glob("*"))
                 and asked_api(plugin.proc.pid, cloud.server.port), 30, 0.01,
                 "the plugin's port create to reach the paused API")
        plugin.kill()
    finally:
        os.kill(server, signal.SIGCONT)
    try:
        wait_for(lambda: len(made_ports(cloud)) == 1, 15, 0.05, "the killed call's port")
        half = made_ports(cloud)[0]
        assert not half["binding:host_id"]
        plugin.start()
        out, err = docker_run.communicate(timeout=90)
        assert docker_run.returncode == 0, err
        c = daemon.client.containers.get("c-kr")
        port = endpoint_port(cloud, c, "dk-kr")
        assert port["id"] == half["id"], "the resend finished the half-made allocation"
        mac, addrs = iface(c)
        assert mac == port["mac_address"] and addrs == [f"{port['fixed_ips'][0]['ip_address']}/24"]
        assert [p["id"] for p in made_ports(cloud)] == [half["id"]]
        assert "answering Docker's resend" in Path(plugin.log).read_text()
    finally:
        if docker_run is not None and docker_run.poll() is None:
            docker_run.kill()
            docker_run.communicate(timeout=10)
        if plugin.proc is None or plugin.proc.poll() is not None:
            plugin.start()  # the module's other tests need it
