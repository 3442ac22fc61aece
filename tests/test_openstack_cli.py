"""python-openstackclient, typed as a user types it, against a real netbay.

Every ``openstack`` call is a fresh shell of the client, run in this process
(``tests/osc.py``: the process start cost 1-2 s of CPU a call); this is one
scenario of about twenty calls: network, subnet, ports, router with a
gateway and an interface, a floating IP associated and disassociated, lists,
and deleting all of it again.
"""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
from typing import Any

import pytest
from conftest import ADMIN_PASSWORD, Server, unique
from tests.osc import openstack as run_openstack

pytestmark = pytest.mark.shared_server   # its tests make their own objects (tests/conftest.py)


def _env(server: Server) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}
    env.update(OS_AUTH_URL=server.auth_url, OS_USERNAME="admin", OS_PASSWORD=ADMIN_PASSWORD,
               OS_PROJECT_NAME="admin", OS_USER_DOMAIN_NAME="Default", OS_PROJECT_DOMAIN_NAME="Default",
               OS_IDENTITY_API_VERSION="3")
    return env


def _run(server: Server, *args: str) -> subprocess.CompletedProcess:
    return run_openstack(*args, env=_env(server))


def osc(server: Server, *args: str) -> Any:
    """Run ``openstack args -f json`` (or without -f for commands that print nothing)."""
    json_out = args[-1] != "--no-output"
    argv = [*args, "-f", "json"] if json_out else list(args[:-1])
    r = _run(server, *argv)
    assert r.returncode == 0, f"openstack {' '.join(argv)} failed:\n{r.stdout}\n{r.stderr}"
    if not json_out:
        return None
    return json.loads(r.stdout)


def _maybe_json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def _in(cidr: str, address: str) -> bool:
    return ipaddress.ip_address(address) in ipaddress.ip_network(cidr)


@pytest.mark.slow
def test_openstack_cli_scenario(server: Server) -> None:
    net_name, subnet_name, router_name = unique("cli-net"), unique("cli-subnet"), unique("cli-router")

    net = osc(server, "network", "create", net_name)
    assert net["name"] == net_name and net["admin_state_up"] is True

    subnet = osc(server, "subnet", "create", "--network", net_name, "--subnet-range", "10.0.0.0/24", subnet_name)
    assert subnet["cidr"] == "10.0.0.0/24"
    assert subnet["gateway_ip"] == "10.0.0.1"
    assert subnet["network_id"] == net["id"]

    port = osc(server, "port", "create", "--network", net_name, unique("cli-port"))
    ips = _maybe_json(port["fixed_ips"])
    assert len(ips) == 1 and ips[0]["subnet_id"] == subnet["id"]
    port_ip = ips[0]["ip_address"]
    assert _in("10.0.0.0/24", port_ip) and port_ip not in {"10.0.0.0", "10.0.0.1", "10.0.0.255"}

    fixed = osc(server, "port", "create", "--network", net_name,
                "--fixed-ip", f"subnet={subnet_name},ip-address=10.0.0.50", unique("cli-port"))
    assert _maybe_json(fixed["fixed_ips"]) == [{"subnet_id": subnet["id"], "ip_address": "10.0.0.50"}]

    # The same address again: the CLI reports Neutron's error and exits non-zero.
    clash = _run(server, "port", "create", "--network", net_name,
                 "--fixed-ip", f"subnet={subnet_name},ip-address=10.0.0.50", unique("cli-port"))
    assert clash.returncode != 0
    assert "10.0.0.50" in clash.stderr and "already allocated" in clash.stderr, clash.stderr

    router = osc(server, "router", "create", router_name)
    assert router["name"] == router_name
    osc(server, "router", "set", "--external-gateway", "public", router_name, "--no-output")
    osc(server, "router", "add", "subnet", router_name, subnet_name, "--no-output")
    shown = osc(server, "router", "show", router_name)
    gateway = _maybe_json(shown["external_gateway_info"])
    public_net = gateway["network_id"]
    gw_ips = [ip["ip_address"] for ip in gateway["external_fixed_ips"]]
    assert len(gw_ips) == 1 and _in("172.24.4.0/24", gw_ips[0])
    interfaces = _maybe_json(shown.get("interfaces_info") or [])
    assert any(i.get("ip_address") == "10.0.0.1" and i.get("subnet_id") == subnet["id"] for i in interfaces), shown

    fip = osc(server, "floating", "ip", "create", "public")
    fip_address = fip["floating_ip_address"]
    assert _in("172.24.4.0/24", fip_address) and fip_address != gw_ips[0]
    assert fip["floating_network_id"] == public_net
    assert fip["port_id"] is None and fip["fixed_ip_address"] is None

    osc(server, "floating", "ip", "set", "--port", port["id"], fip["id"], "--no-output")
    associated = osc(server, "floating", "ip", "show", fip_address)
    assert associated["id"] == fip["id"]
    assert associated["port_id"] == port["id"]
    assert associated["fixed_ip_address"] == port_ip
    assert associated["router_id"] == router["id"]

    osc(server, "floating", "ip", "unset", "--port", fip["id"], "--no-output")
    listed = {f["ID"]: f for f in osc(server, "floating", "ip", "list")}
    assert listed[fip["id"]]["Floating IP Address"] == fip_address
    assert listed[fip["id"]]["Port"] is None and listed[fip["id"]]["Fixed IP Address"] is None

    ports = osc(server, "port", "list", "--network", net_name)
    by_id = {p["ID"]: [ip["ip_address"] for ip in _maybe_json(p["Fixed IP Addresses"])] for p in ports}
    assert by_id[port["id"]] == [port_ip]
    assert by_id[fixed["id"]] == ["10.0.0.50"]
    assert ["10.0.0.1"] in by_id.values()  # the router interface
    assert len(ports) == 3

    osc(server, "floating", "ip", "delete", fip["id"], "--no-output")
    osc(server, "router", "remove", "subnet", router_name, subnet_name, "--no-output")
    osc(server, "router", "delete", router_name, "--no-output")
    osc(server, "port", "delete", port["id"], fixed["id"], "--no-output")
    osc(server, "subnet", "delete", subnet_name, "--no-output")
    osc(server, "network", "delete", net_name, "--no-output")

    remaining = {n["Name"]: n for n in osc(server, "network", "list")}
    assert net_name not in remaining
    assert "public" in remaining and remaining["public"]["ID"] == public_net
