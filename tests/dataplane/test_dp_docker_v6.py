"""The Docker driver over IPv6 alone and dual-stack (issue 28 item 1), on a real dockerd:
``docker network create --ipv6`` with an IPv6 ``--subnet`` (and an IPv4 one, or
``--ipv4=false``), IPv6 subnet pools through ``--ipam-opt netbay.subnetpool=``, the
endpoint's one port with both addresses and Docker's container with both gateways, and
packets between the container and a netbay sandbox over each family. Module fixtures
as in test_dp_docker.py (a private dockerd, the plugin as a child process).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

from . import dockerd as dk
from .agent_fixtures import Cloud, wait_for
from .docker_fixtures import PLUGIN, Plugin, endpoint_port, made_ports, netbay_network, run, sh
from .dp_helpers import fixed_ip, ping
from .docker_fixtures import daemon, plugin  # noqa: F401 - the module fixtures, shared

CLOUD_TAG = "dk"   # the shared `cloud` fixture (conftest.py), on test_dp_docker's prefix

pytestmark = pytest.mark.skipif(dk.available() is not None, reason=str(dk.available()))


def create(d: dk.Dockerd, name: str, *args: str) -> subprocess.CompletedProcess:
    return d.cli("network", "create", "-d", PLUGIN, "--ipam-driver", PLUGIN, *args, name)


@pytest.fixture
def networks(daemon: dk.Dockerd) -> Iterator[list[str]]:
    """Docker networks a test made: removed (with their containers) whatever happens."""
    names: list[str] = []
    yield names
    for c in daemon.client.containers.list(all=True, filters={"label": "netbay.test=v6"}):
        c.remove(force=True)
    for name in names:
        daemon.cli("network", "rm", name)


def talks_both_ways(cloud: Cloud, net: dict, container, port: dict, versions: tuple[int, ...]) -> None:
    """A netbay sandbox on ``net`` and the container ping each other over each family."""
    sb = cloud.sandbox("sb-v6", networks=[net["id"]])
    try:
        sb = cloud.wait_status(f"/netbay/v1/sandboxes/{sb['id']}", "ACTIVE", 30)
        ns = cloud.sandbox_ns(sb["id"])
        cloud.wait_status(f"/network/v2.0/ports/{port['id']}", "ACTIVE", 30)
        for version in versions:
            ip = fixed_ip(port, version)
            assert wait_for(lambda ip=ip: ping(ns, ip), 10, 0.05, f"sandbox -> container over IPv{version}")
            sb_ip = cloud.ip_of(sb["ports"][0]["port_id"], version)
            code, out = sh(container, f"ping -c 1 -W 3 {sb_ip}")
            assert code == 0, (version, out)
    finally:
        cloud.delete_sandbox(sb["id"])


def addresses(container) -> str:
    code, out = sh(container, "ip -o addr show eth0; ip route; ip -6 route")
    assert code == 0, out
    return out


def test_dual_stack_network(cloud: Cloud, daemon: dk.Dockerd, plugin: Plugin, networks: list[str]) -> None:
    """One IPv4 and one IPv6 pool: two subnets on one netbay network, one port per
    endpoint with an address of each, both gateways in the container."""
    networks.append("v6-dual")
    r = create(daemon, "v6-dual", "--ipv6", "--subnet", "10.66.0.0/24", "--subnet", "fd00:66::/64")
    assert r.returncode == 0, r.stderr
    net = netbay_network(cloud, daemon.client.networks.get("v6-dual"))
    subnets = {s["ip_version"]: s for s in cloud.ok(cloud.http.get("/network/v2.0/subnets",
                                                                   params={"network_id": net["id"]}))["subnets"]}
    assert {s["cidr"] for s in subnets.values()} == {"10.66.0.0/24", "fd00:66::/64"}
    c = run(daemon, "v6-dual", "v6-dual-c", labels={"netbay.test": "v6"})
    port = endpoint_port(cloud, c, "v6-dual")
    ip4, ip6 = fixed_ip(port, 4), fixed_ip(port, 6)
    shown = addresses(c)
    assert f"inet {ip4}/24" in shown and f"inet6 {ip6}/64" in shown, shown
    assert f"default via {subnets[4]['gateway_ip']}" in shown and f"default via {subnets[6]['gateway_ip']}" in shown
    c.reload()
    settings = c.attrs["NetworkSettings"]["Networks"]["v6-dual"]
    assert (settings["IPAddress"], settings["GlobalIPv6Address"]) == (ip4, ip6)
    assert (settings["Gateway"], settings["IPv6Gateway"]) == (subnets[4]["gateway_ip"], subnets[6]["gateway_ip"])
    talks_both_ways(cloud, net, c, port, (4, 6))
    c.remove(force=True)
    wait_for(lambda: not [p for p in made_ports(cloud) if p["network_id"] == net["id"]], 10, 0.05,
             "the endpoint's port to go")


def test_an_ipv6_subnet_alone_takes_ipv4_from_the_default_pool(cloud: Cloud, daemon: dk.Dockerd, plugin: Plugin,
                                                               networks: list[str]) -> None:
    """``docker network create --ipv6 --subnet <v6>``: Docker asks a remote driver for an
    IPv4 pool too (even with --ipv4=false); with an IPv4 subnet pool tagged
    ``netbay.docker.default`` (kuryr's default subnet pool) it comes from there."""
    pool = cloud.ok(cloud.http.post("/network/v2.0/subnetpools", json={"subnetpool": {
        "name": "v4-default", "prefixes": ["10.67.0.0/16"], "default_prefixlen": 24}}), 201)["subnetpool"]
    tag = f"/network/v2.0/subnetpools/{pool['id']}/tags/netbay.docker.default"
    cloud.ok(cloud.http.put(tag), 201)
    try:
        networks.append("v6-only")
        r = create(daemon, "v6-only", "--ipv6", "--subnet", "fd00:67::/64")
        assert r.returncode == 0, r.stderr
    finally:
        cloud.ok(cloud.http.delete(tag), 204)
    net = netbay_network(cloud, daemon.client.networks.get("v6-only"))
    subnets = cloud.ok(cloud.http.get("/network/v2.0/subnets", params={"network_id": net["id"]}))["subnets"]
    assert sorted((s["cidr"], s["subnetpool_id"]) for s in subnets) == [("10.67.0.0/24", pool["id"]),
                                                                       ("fd00:67::/64", None)]
    c = run(daemon, "v6-only", "v6-only-c", labels={"netbay.test": "v6"})
    port = endpoint_port(cloud, c, "v6-only")
    assert f"inet6 {fixed_ip(port, 6)}/64" in addresses(c)
    talks_both_ways(cloud, net, c, port, (6,))


def test_ipv6_subnet_pool(cloud: Cloud, daemon: dk.Dockerd, plugin: Plugin, networks: list[str]) -> None:
    """``--ipam-opt netbay.subnetpool=`` naming an IPv6 pool: the subnet is a /64 of it
    (the pool's default prefix length); an IPv4 --subnet beside it keeps its own pool."""
    pool = cloud.ok(cloud.http.post("/network/v2.0/subnetpools", json={"subnetpool": {
        "name": "v6-pool", "prefixes": ["fd00:68::/48"], "default_prefixlen": 64}}), 201)["subnetpool"]
    networks.append("v6-pool")
    r = create(daemon, "v6-pool", "--ipv6", "--subnet", "10.68.0.0/24", "--ipam-opt",
               f"netbay.subnetpool={pool['id']}")
    assert r.returncode == 0, r.stderr
    net = netbay_network(cloud, daemon.client.networks.get("v6-pool"))
    subnets = cloud.ok(cloud.http.get("/network/v2.0/subnets", params={"network_id": net["id"]}))["subnets"]
    by_version = {s["ip_version"]: s for s in subnets}
    assert by_version[6]["subnetpool_id"] == pool["id"] and by_version[6]["cidr"].startswith("fd00:68:")
    assert by_version[6]["cidr"].endswith("/64") and by_version[4]["subnetpool_id"] is None
    c = run(daemon, "v6-pool", "v6-pool-c", labels={"netbay.test": "v6"})
    port = endpoint_port(cloud, c, "v6-pool")
    assert {f["subnet_id"] for f in port["fixed_ips"]} == {s["id"] for s in subnets}
    talks_both_ways(cloud, net, c, port, (6,))


def test_refusals_name_the_family(cloud: Cloud, daemon: dk.Dockerd, plugin: Plugin, networks: list[str]) -> None:
    """No default pool: an IPv6 --subnet alone is refused naming IPv4 and the ways out;
    --ipv6 without an IPv6 pool names IPv6."""
    networks.extend(["v6-nov4", "v6-nov6"])
    r = create(daemon, "v6-nov4", "--ipv4=false", "--ipv6", "--subnet", "fd00:74::/64")
    assert r.returncode != 0 and "needs an IPv4 pool" in r.stderr and "netbay.docker.default" in r.stderr, r.stderr
    r = create(daemon, "v6-nov6", "--ipv6", "--subnet", "10.74.0.0/24")
    assert r.returncode != 0 and "--ipv6 needs an IPv6 pool" in r.stderr, r.stderr
    assert not [s for s in cloud.ok(cloud.http.get("/network/v2.0/subnets"))["subnets"]
                if s["cidr"] in ("fd00:74::/64", "10.74.0.0/24")]
