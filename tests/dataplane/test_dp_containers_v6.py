"""The container API (Zun-compatible) on dual-stack networks (issue 28 item 3): each
container's port has an address of each family, ``addresses`` lists both, and
containers talk to each other and to a netbay sandbox over IPv6 as over IPv4. The
module fixtures of test_dp_containers.py (a private dockerd, the plugin, a server
told where Docker is).
"""

from __future__ import annotations

from typing import Any

import pytest

from zunhelp import zun_error

from . import dockerd as dk
from .agent_fixtures import Cloud
from .docker_fixtures import sh
from .dp_helpers import fixed_ip, ping
from .zun_fixtures import cloud, daemon, docker_container, plugin, wait_container, zun  # noqa: F401 - fixtures

pytestmark = pytest.mark.skipif(dk.available() is not None, reason=str(dk.available()))

SLEEP = ["sh", "-c", "trap 'exit 0' TERM; sleep 600 & wait"]


def test_containers_on_a_dual_stack_network(cloud: Cloud, daemon: dk.Dockerd, zun: Any) -> None:
    net, sub4 = cloud.network("zn6-dual", "10.75.0.0/24")
    sub6 = cloud.subnet6(net["id"], "fd00:75::/64")
    sb = cloud.sandbox("zn6-sb", networks=[net["id"]])
    made = []
    try:
        for name, nets in (("zn6-a", [{"network": net["name"]}]),
                           ("zn6-b", [{"network": net["name"], "v6-fixed-ip": "fd00:75::99"}])):
            r = zun.post("/containers?run=true", json={"name": name, "image": dk.IMAGE, "command": SLEEP,
                                                       "nets": nets})
            assert r.status_code == 202, r.text
            made.append(r.json()["uuid"])
        a, b = (wait_container(zun, uuid, "Running") for uuid in made)
        for c in (a, b):   # Zun's addresses: one entry per address, both families, one port
            addrs = c["addresses"][net["id"]]
            assert sorted((x["version"], x["subnet_id"]) for x in addrs) == [(4, sub4["id"]), (6, sub6["id"])]
            assert len({x["port"] for x in addrs}) == 1
        assert next(x["addr"] for x in b["addresses"][net["id"]] if x["version"] == 6) == "fd00:75::99"
        port_a, port_b = (cloud.port(c["addresses"][net["id"]][0]["port"]) for c in (a, b))
        da = docker_container(daemon, a)
        code, out = sh(da, "ip -o addr show eth0; ip -6 route")
        assert code == 0 and f"inet6 {fixed_ip(port_a, 6)}/64" in out, out
        assert f"default via {sub6['gateway_ip']}" in out, out
        for port in (port_a, port_b):
            cloud.wait_status(f"/network/v2.0/ports/{port['id']}", "ACTIVE")
        sb = cloud.wait_status(f"/netbay/v1/sandboxes/{sb['id']}", "ACTIVE")
        ns = cloud.sandbox_ns(sb["id"])
        for version in (4, 6):   # container <-> container, sandbox -> container
            code, out = sh(da, f"ping -c 1 -W 3 {fixed_ip(port_b, version)}")
            assert code == 0, (version, out)
            assert ping(ns, fixed_ip(port_a, version), count=3), f"sandbox -> container over IPv{version}"
    finally:
        for uuid in made:
            zun.delete(f"/containers/{uuid}?force=true")
        cloud.delete_sandbox(sb["id"])


def test_an_ipv6_only_network_is_refused_naming_why(cloud: Cloud, zun: Any) -> None:
    net, _ = cloud.network6("zn6-only", "fd00:76::/64")
    r = zun.post("/containers?run=true", json={"name": "zn6-only", "image": dk.IMAGE, "command": SLEEP,
                                               "nets": [{"network": net["name"]}]})
    zun_error(r, 400, f"Neutron network {net['id']} has no IPv4 subnet: containers run through Docker, which "
                      "needs an IPv4 pool beside an IPv6 one (IPv6-only networks are not supported by the "
                      "container API).")
