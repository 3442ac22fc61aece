"""Helpers of the load-balancer API tests (test_loadbalancer_api.py, test_lb_octavia_api.py,
test_lb_providers_api.py, test_lb_amphora_api.py): Octavia's error body, a network and
subnet of a module's own for VIPs, the ``openstack loadbalancer`` CLI as admin."""

from __future__ import annotations

import ipaddress
import itertools
import json
import os
import time
from types import SimpleNamespace

import httpx
from conftest import ADMIN_PASSWORD, unique

from netbay import errors
from netbay.lbaas.common import not_offered
from tests.osc import openstack as run_openstack

# Octavia's ProviderUnsupportedOptionError: whatever status netbay.lbaas.common answers it with.
UNSUPPORTED = not_offered("x").status

_octets = itertools.count(1)


def next_octet() -> int:
    """A number no other network of this process's load-balancer tests has used (CIDRs)."""
    return next(_octets)


def octavia_error(r: httpx.Response, status: int, message: str | None = None) -> str:
    """Assert Octavia's error body; returns the faultstring."""
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"faultcode", "faultstring", "debuginfo"}, body
    assert body["faultcode"] == ("Server" if status >= 500 else "Client")
    assert body["debuginfo"] is None
    if message is not None:
        assert body["faultstring"] == message, body
    return body["faultstring"]


def make_net(conn, prefix: str = "lbnet"):
    net = conn.network.create_network(name=unique(prefix))
    subnet = conn.network.create_subnet(network_id=net.id, cidr=f"10.{100 + next_octet()}.0.0/24",
                                        ip_version=4)
    return SimpleNamespace(net=net, subnet=subnet, cidr=ipaddress.ip_network(subnet.cidr))


def osc(server, *args: str, output: bool = True) -> object:
    """``openstack <args> -f json`` as admin (python-octaviaclient's commands)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}
    env.update(OS_AUTH_URL=server.auth_url, OS_USERNAME="admin", OS_PASSWORD=ADMIN_PASSWORD,
               OS_PROJECT_NAME="admin", OS_USER_DOMAIN_NAME="Default", OS_PROJECT_DOMAIN_NAME="Default",
               OS_IDENTITY_API_VERSION="3")
    argv = [*args, "-f", "json"] if output else list(args)
    r = run_openstack(*argv, env=env)
    assert r.returncode == 0, f"openstack {' '.join(args)}:\n{r.stdout}\n{r.stderr}"
    return json.loads(r.stdout) if r.stdout.strip() else None


def gone(backend, lb_id: str, seconds: float = 60.0) -> None:
    """Wait (bounded) until a load-balancer backend no longer shows ``lb_id``: not found,
    or ``DELETED`` (Octavia keeps a deleted row a while, unlisted)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            lb = backend.show("loadbalancer", lb_id)
        except errors.NotFound:
            return
        if lb["provisioning_status"] == "DELETED":
            return
        assert time.monotonic() < deadline, f"{lb_id} still {lb['provisioning_status']}"
        time.sleep(0.1)
