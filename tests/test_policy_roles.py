"""Keystone's default roles and Octavia's load-balancer roles, honoured per API family.

``openstack loadbalancer …`` (python-octaviaclient) as member, reader, admin and
the ``load-balancer_*`` roles on every load-balancer object; the network and
container-infra APIs as reader (reads answer, writes are 403 in each API's own
error body); another project's objects stay out of sight.
"""

from __future__ import annotations

import json
import os
import subprocess

import httpx
import pytest
from conftest import ADMIN_PASSWORD, Server, unique
from tests.osc import openstack as run_openstack

pytestmark = pytest.mark.shared_server   # its tests make their own objects (tests/conftest.py)

DENIED = "Policy does not allow this request to be performed."


class User:
    """One account: its token, and the ``openstack`` CLI as it."""

    def __init__(self, server: Server, user: str, password: str, project: str) -> None:
        self.server, self.name, self.password, self.project = server, user, password, project
        self.token = server.token(user, password, project)

    def osc(self, *args: str) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}
        env.update(OS_AUTH_URL=self.server.auth_url, OS_USERNAME=self.name, OS_PASSWORD=self.password,
                   OS_PROJECT_NAME=self.project, OS_USER_DOMAIN_NAME="Default",
                   OS_PROJECT_DOMAIN_NAME="Default", OS_IDENTITY_API_VERSION="3")
        return run_openstack(*args, env=env)

    def ok(self, *args: str) -> object:
        r = self.osc(*args, "-f", "json")
        assert r.returncode == 0, f"openstack {' '.join(args)} as {self.name}:\n{r.stdout}\n{r.stderr}"
        return json.loads(r.stdout) if r.stdout.strip() else None

    def do(self, *args: str) -> None:
        """A command that prints nothing (``set``, ``delete``)."""
        r = self.osc(*args)
        assert r.returncode == 0, f"openstack {' '.join(args)} as {self.name}:\n{r.stdout}\n{r.stderr}"

    def refused(self, *args: str, status: int = 403, message: str = DENIED) -> None:
        r = self.osc(*args)
        assert r.returncode != 0, f"openstack {' '.join(args)} as {self.name} succeeded:\n{r.stdout}"
        assert f"HTTP {status}" in r.stderr and message in r.stderr, r.stderr

    def http(self, method: str, path: str, **kw: object) -> httpx.Response:
        return httpx.request(method, f"{self.server.url}{path}", headers={"X-Auth-Token": self.token},
                             timeout=30, **kw)


def as_role(server: Server, role: str, project: str | None = None) -> User:
    return User(server, *server.make_user(project=project, role=role))


@pytest.fixture(scope="module")
def people(server: Server) -> dict[str, User]:
    member = as_role(server, "member")
    out = {"member": member, "admin": User(server, "admin", ADMIN_PASSWORD, "admin")}
    for role in ("reader", "load-balancer_observer", "load-balancer_member"):
        out[role] = as_role(server, role, member.project)
    for role in ("member", "load-balancer_global_observer", "load-balancer_admin"):
        out["other " + role] = as_role(server, role)
    return out


def octavia_error(r: httpx.Response, status: int, message: str) -> None:
    assert r.status_code == status, r.text
    assert r.json() == {"faultcode": "Client", "faultstring": message, "debuginfo": None}


@pytest.fixture(scope="module")
def tree(server: Server, people: dict[str, User]) -> dict[str, str]:
    """A load balancer, listener, pool, member and monitor the member made (through the
    APIs: the CLI's commands as each role are what the tests below run)."""
    member, admin = people["member"], people["admin"]

    def settle(lb_id: str) -> None:
        r = admin.http("PUT", "/netbay/v1/status", json={"loadbalancers": {lb_id: "ACTIVE/ONLINE"}})
        assert r.status_code == 200, r.text

    def made(path: str, kind: str, body: dict) -> dict:
        r = member.http("POST", path, json={kind: body})
        assert r.status_code == 201, r.text
        return r.json()[kind]

    net = made("/network/v2.0/networks", "network", {"name": unique("rbac-net")})
    subnet = made("/network/v2.0/subnets", "subnet", {"network_id": net["id"], "cidr": "10.77.0.0/24",
                                                      "ip_version": 4, "name": unique("rbac-sub")})
    lbaas = "/load-balancer/v2/lbaas"
    lb = made(f"{lbaas}/loadbalancers", "loadbalancer", {"vip_subnet_id": subnet["id"], "name": unique("lb")})
    settle(lb["id"])
    listener = made(f"{lbaas}/listeners", "listener", {"protocol": "TCP", "protocol_port": 80,
                                                       "name": unique("l"), "loadbalancer_id": lb["id"]})
    settle(lb["id"])
    pool = made(f"{lbaas}/pools", "pool", {"protocol": "TCP", "lb_algorithm": "ROUND_ROBIN",
                                           "listener_id": listener["id"], "name": unique("p")})
    settle(lb["id"])
    mem = made(f"{lbaas}/pools/{pool['id']}/members", "member", {"address": "10.77.0.50", "protocol_port": 8080,
                                                                 "subnet_id": subnet["id"]})
    settle(lb["id"])
    hm = made(f"{lbaas}/healthmonitors", "healthmonitor", {"delay": 5, "timeout": 5, "max_retries": 3,
                                                           "type": "TCP", "pool_id": pool["id"]})
    settle(lb["id"])
    return {"lb": lb["id"], "listener": listener["id"], "pool": pool["id"], "member": mem["id"],
            "healthmonitor": hm["id"], "subnet": subnet["id"], "network": net["id"], "settle": settle}


def _objects(t: dict) -> list[tuple[list[str], list[str], list[str], str]]:
    """(show argv, list argv, set argv, API path) for every load-balancer object."""
    return [
        (["loadbalancer", "show", t["lb"]], ["loadbalancer", "list"],
         ["loadbalancer", "set", "--description", "x", t["lb"]], f"/lbaas/loadbalancers/{t['lb']}"),
        (["loadbalancer", "listener", "show", t["listener"]], ["loadbalancer", "listener", "list"],
         ["loadbalancer", "listener", "set", "--description", "x", t["listener"]],
         f"/lbaas/listeners/{t['listener']}"),
        (["loadbalancer", "pool", "show", t["pool"]], ["loadbalancer", "pool", "list"],
         ["loadbalancer", "pool", "set", "--description", "x", t["pool"]], f"/lbaas/pools/{t['pool']}"),
        (["loadbalancer", "member", "show", t["pool"], t["member"]], ["loadbalancer", "member", "list", t["pool"]],
         ["loadbalancer", "member", "set", "--weight", "3", t["pool"], t["member"]],
         f"/lbaas/pools/{t['pool']}/members/{t['member']}"),
        (["loadbalancer", "healthmonitor", "show", t["healthmonitor"]], ["loadbalancer", "healthmonitor", "list"],
         ["loadbalancer", "healthmonitor", "set", "--delay", "7", t["healthmonitor"]],
         f"/lbaas/healthmonitors/{t['healthmonitor']}"),
    ]


@pytest.mark.slow
def test_reader_reads_every_lb_object_and_writes_none(people, tree) -> None:
    reader = people["reader"]
    for show, listing, change, path in _objects(tree):
        shown = reader.ok(*show)
        assert shown["id"] in path
        assert shown["id"] in [row["id"] for row in reader.ok(*listing)]
        reader.refused(*change)
        octavia_error(reader.http("PUT", "/load-balancer/v2" + path, json={}), 403, DENIED)
        octavia_error(reader.http("DELETE", "/load-balancer/v2" + path), 403, DENIED)
    reader.refused("loadbalancer", "create", "--vip-subnet-id", tree["subnet"])
    reader.refused("loadbalancer", "delete", "--cascade", tree["lb"])
    assert reader.ok("loadbalancer", "show", tree["lb"])["provisioning_status"] == "ACTIVE"


def test_load_balancer_observer_reads_and_member_writes(people, tree) -> None:
    observer, lb_member = people["load-balancer_observer"], people["load-balancer_member"]
    assert observer.ok("loadbalancer", "show", tree["lb"])["id"] == tree["lb"]
    observer.refused("loadbalancer", "set", "--name", "nope", tree["lb"])
    # load-balancer_member alone (no Keystone member role) writes in its project.
    lb_member.do("loadbalancer", "pool", "set", "--description", "by lb member", tree["pool"])
    assert lb_member.ok("loadbalancer", "pool", "show", tree["pool"])["description"] == "by lb member"
    tree["settle"](tree["lb"])
    # ...but it reads nothing outside the load-balancer API.
    r = lb_member.http("GET", "/network/v2.0/networks")
    assert r.status_code == 403 and r.json()["NeutronError"]["type"] == "PolicyNotAuthorized", r.text


def test_member_and_admin_write(people, tree) -> None:
    member, admin = people["member"], people["admin"]
    for _, _, change, _ in _objects(tree):
        member.do(*change)
        tree["settle"](tree["lb"])
    assert member.ok("loadbalancer", "member", "show", tree["pool"], tree["member"])["weight"] == 3
    admin.do("loadbalancer", "set", "--description", "by admin", tree["lb"])
    tree["settle"](tree["lb"])
    assert member.ok("loadbalancer", "show", tree["lb"])["description"] == "by admin"


def test_other_projects_see_nothing_but_global_roles_do(people, tree) -> None:
    """Another project's objects are absent from its lists and refused by Octavia's
    policy check (403, as Octavia answers; issue 17) when named."""
    other = people["other member"]
    for argv in (["show", tree["lb"]], ["set", "--name", "mine", tree["lb"]]):
        r = other.osc("loadbalancer", *argv)
        # show asks for the id (403); set first looks the name up in the caller's list
        assert r.returncode != 0 and ("Policy does not allow this request" in r.stderr
                                      or f"Unable to locate {tree['lb']}" in r.stderr), r.stderr
    assert tree["lb"] not in [row["id"] for row in other.ok("loadbalancer", "list")]
    for _, _, _, path in _objects(tree):
        r = other.http("GET", "/load-balancer/v2" + path)
        assert r.status_code == 403 and r.json()["faultcode"] == "Client", r.text
    # A global observer reads every project's and writes nothing.
    watcher = people["other load-balancer_global_observer"]
    assert tree["lb"] in [row["id"] for row in watcher.ok("loadbalancer", "list")]
    assert watcher.ok("loadbalancer", "listener", "show", tree["listener"])["id"] == tree["listener"]
    watcher.refused("loadbalancer", "listener", "set", "--name", "x", tree["listener"])
    # A load-balancer admin is the admin of this API only.
    lb_admin = people["other load-balancer_admin"]
    lb_admin.do("loadbalancer", "set", "--description", "by lb admin", tree["lb"])
    tree["settle"](tree["lb"])
    assert people["member"].ok("loadbalancer", "show", tree["lb"])["description"] == "by lb admin"
    r = lb_admin.http("GET", f"/network/v2.0/networks/{tree['network']}")
    assert r.status_code == 403, r.text


def test_network_api_reader_reads_and_cannot_write(people, tree) -> None:
    reader = people["reader"]
    assert tree["network"] in [n["ID"] for n in reader.ok("network", "list")]
    assert reader.ok("subnet", "show", tree["subnet"])["cidr"] == "10.77.0.0/24"
    cases = [
        ("POST", "/networks", {"network": {"name": "x"}}, "create_network"),
        ("PUT", f"/networks/{tree['network']}", {"network": {"name": "x"}}, "update_network"),
        ("DELETE", f"/subnets/{tree['subnet']}", None, "delete_subnet"),
        ("POST", "/security-groups", {"security_group": {"name": "x"}}, "create_security_group"),
        ("PUT", f"/routers/{tree['network']}/add_router_interface", {"subnet_id": tree["subnet"]},
         "add_router_interface"),
        ("PUT", f"/networks/{tree['network']}/tags/red", None, "create_networks_tags"),
    ]
    for method, path, body, action in cases:
        r = reader.http(method, "/network/v2.0" + path, json=body)
        assert r.status_code == 403, (method, path, r.text)
        assert r.json() == {"NeutronError": {"type": "PolicyNotAuthorized",
                                             "message": f"rule:{action} is disallowed by policy",
                                             "detail": ""}}, r.text
    r = reader.osc("network", "create", unique("nope"))
    assert r.returncode != 0 and "rule:create_network is disallowed by policy" in r.stderr, r.stderr
    assert reader.ok("network", "show", tree["network"])["name"] != "x"


def test_container_infra_reader_reads_and_cannot_write(people) -> None:
    member, reader = people["member"], people["reader"]
    made = member.http("POST", "/container-infra/v1/clustertemplates",
                       json={"name": unique("ct"), "coe": "kubernetes"})
    assert made.status_code == 201, made.text
    uuid = made.json()["uuid"]
    r = reader.http("GET", "/container-infra/v1/clustertemplates")
    assert r.status_code == 200 and uuid in [t["uuid"] for t in r.json()["clustertemplates"]], r.text
    for method, path, body, action in [
        ("POST", "/v1/clustertemplates", {"name": "x", "coe": "kubernetes"}, "clustertemplate:create"),
        ("PATCH", f"/v1/clustertemplates/{uuid}", [{"op": "replace", "path": "/name", "value": "y"}],
         "clustertemplate:update"),
        ("DELETE", f"/v1/clustertemplates/{uuid}", None, "clustertemplate:delete"),
        ("POST", "/v1/clusters", {"cluster_template_id": uuid}, "cluster:create"),
    ]:
        r = reader.http(method, "/container-infra" + path, json=body)
        assert r.status_code == 403, r.text
        [err] = r.json()["errors"]
        assert err["status"] == 403 and err["code"] == "client", err
        assert err["detail"] == f"Policy doesn't allow {action} to be performed.", err
    # The conductor list is the admin's, as in Magnum.
    r = member.http("GET", "/container-infra/v1/mservices")
    assert r.status_code == 403 and "magnum-service:get_all" in r.json()["errors"][0]["detail"], r.text
    assert member.http("DELETE", f"/container-infra/v1/clustertemplates/{uuid}").status_code == 204


def test_token_roles_are_implied(server: Server, people) -> None:
    body = httpx.get(f"{server.auth_url}/auth/tokens",
                     headers={"X-Auth-Token": people["admin"].token,
                              "X-Subject-Token": people["member"].token}, timeout=10).json()
    assert {"member", "reader"} <= {r["name"] for r in body["token"]["roles"]}
    body = httpx.get(f"{server.auth_url}/auth/tokens",
                     headers={"X-Auth-Token": people["admin"].token,
                              "X-Subject-Token": people["reader"].token}, timeout=10).json()
    assert {r["name"] for r in body["token"]["roles"]} == {"reader"}
