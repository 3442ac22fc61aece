"""Sandboxes as a first-class object: /netbay/v1/sandboxes, status write-back, the CLI.

API behaviour runs against the shared ``server`` fixture (``netbay up --no-agent``,
on SQLite: the store's semantics are the ``every_db`` modules'); the CLI test starts an agent with this run's prefix so that
``netbay sandbox exec`` has a namespace to enter.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import httpx
import pytest
from conftest import ADMIN_PASSWORD, Server, unique

from netbay.agent import Agent, Api, Credentials
from netbay.dataplane.names import Names

from .agent_fixtures import sweep_prefix, wait_for
from .dp_helpers import PREFIX
from tests import zygote


@pytest.fixture(scope="module")
def api(raw: httpx.Client) -> httpx.Client:
    """Any of the server's APIs as admin: conftest's ``raw``."""
    return raw


@pytest.fixture(scope="module")
def member_api(server: Server) -> httpx.Client:
    user, password, project = server.make_user()
    client = httpx.Client(base_url=server.url, headers={"X-Auth-Token": server.token(user, password, project)},
                          timeout=30)
    server._clients.append(client)
    return client


def _ok(r: httpx.Response, status: int = 200) -> dict:
    assert r.status_code == status, f"{r.request.method} {r.request.url}: {r.status_code} {r.text}"
    return r.json() if r.content else {}


def _error(r: httpx.Response, status: int, kind: str) -> str:
    assert r.status_code == status, r.text
    body = r.json()["NeutronError"]
    assert body["type"] == kind, body
    return body["message"]


def _network(client: httpx.Client, cidr: str = "10.5.0.0/24") -> dict:
    net = _ok(client.post("/network/v2.0/networks", json={"network": {"name": unique("sbnet")}}), 201)["network"]
    _ok(client.post("/network/v2.0/subnets", json={"subnet": {
        "network_id": net["id"], "cidr": cidr, "ip_version": 4}}), 201)
    return net


def _port(client: httpx.Client, network_id: str) -> dict:
    return _ok(client.post("/network/v2.0/ports", json={"port": {"network_id": network_id}}), 201)["port"]


def _sandboxes(client: httpx.Client, **params: str) -> list[dict]:
    return _ok(client.get("/netbay/v1/sandboxes", params=params))["sandboxes"]


def _revision(client: httpx.Client) -> int:
    return _ok(client.get("/netbay/v1/state"))["revision"]


# --- the API ---------------------------------------------------------------------------------


def test_create_show_list_delete(api: httpx.Client) -> None:
    n1, n2 = _network(api), _network(api, "10.6.0.0/24")
    name = unique("sb")
    sb = _ok(api.post("/netbay/v1/sandboxes", json={"sandbox": {
        "name": name, "networks": [n1["id"], n2["id"]]}}), 201)["sandbox"]
    assert sb["status"] == "BUILD" and sb["host"]
    assert [(p["interface"], p["network_id"], p["auto_delete"]) for p in sb["ports"]] == [
        ("eth0", n1["id"], True), ("eth1", n2["id"], True)]
    for p in sb["ports"]:
        port = _ok(api.get(f"/network/v2.0/ports/{p['port_id']}"))["port"]
        assert port["device_owner"] == "netbay:sandbox" and port["device_id"] == sb["id"]
        assert port["binding:host_id"] == sb["host"] and port["status"] == "DOWN"
        assert port["security_groups"]  # the project's default group, as for any port
    assert _ok(api.get(f"/netbay/v1/sandboxes/{sb['id']}"))["sandbox"] == sb
    assert [s["id"] for s in _sandboxes(api, name=name)] == [sb["id"]]
    assert _ok(api.get(f"/netbay/v1/sandboxes/{sb['id']}", params={"fields": "name"}))["sandbox"] == {"name": name}

    _ok(api.delete(f"/netbay/v1/sandboxes/{sb['id']}"), 204)
    msg = _error(api.get(f"/netbay/v1/sandboxes/{sb['id']}"), 404, "SandboxNotFound")
    assert sb["id"] in msg
    _error(api.delete(f"/netbay/v1/sandboxes/{sb['id']}"), 404, "SandboxNotFound")
    for p in sb["ports"]:  # the ports it made went with it
        _error(api.get(f"/network/v2.0/ports/{p['port_id']}"), 404, "PortNotFound")
    for n in (n1, n2):
        _ok(api.delete(f"/network/v2.0/networks/{n['id']}"), 204)


def test_binding_a_bound_port_is_refused_and_nothing_is_half_made(api: httpx.Client) -> None:
    net = _network(api)
    p, q = _port(api, net["id"]), _port(api, net["id"])
    first = _ok(api.post("/netbay/v1/sandboxes", json={"sandbox": {"name": "first", "ports": [p["id"]]}}),
                201)["sandbox"]
    assert first["ports"] == [{"port_id": p["id"], "network_id": net["id"], "interface": "eth0",
                               "auto_delete": False}]
    ports_before = len(_ok(api.get("/network/v2.0/ports", params={"network_id": net["id"]}))["ports"])
    sandboxes_before = len(_sandboxes(api))
    since = _revision(api)
    r = api.post("/netbay/v1/sandboxes", json={"sandbox": {
        "name": "second", "ports": [q["id"], p["id"]], "networks": [net["id"]]}})
    msg = _error(r, 409, "PortInUse")
    assert p["id"] in msg and first["id"] in msg
    # Nothing of the refused request remains: q unbound, no port made, no sandbox, no change.
    assert _ok(api.get(f"/network/v2.0/ports/{q['id']}"))["port"]["device_id"] == ""
    assert len(_ok(api.get("/network/v2.0/ports", params={"network_id": net["id"]}))["ports"]) == ports_before
    assert len(_sandboxes(api)) == sandboxes_before
    assert _revision(api) == since
    # Deleting the sandbox unbinds the port it was given and keeps it.
    _ok(api.delete(f"/netbay/v1/sandboxes/{first['id']}"), 204)
    kept = _ok(api.get(f"/network/v2.0/ports/{p['id']}"))["port"]
    assert (kept["device_id"], kept["device_owner"], kept["binding:host_id"]) == ("", "", "")
    for port in (p, q):
        _ok(api.delete(f"/network/v2.0/ports/{port['id']}"), 204)
    _ok(api.delete(f"/network/v2.0/networks/{net['id']}"), 204)


@pytest.mark.parametrize("body, status, kind, words", [
    ({"sandbox": {"name": "x", "ports": ["not-a-uuid"]}}, 400, "HTTPBadRequest", "is not a valid UUID"),
    ({"sandbox": {"name": "x", "color": "red"}}, 400, "HTTPBadRequest", "Unrecognized attribute(s) 'color'"),
    ({"sandbox": {"id": "x"}}, 400, "HTTPBadRequest", "Attribute 'id' not allowed in POST"),
    ({"sandbox": "x"}, 400, "HTTPBadRequest", "expected a JSON object"),
    ({"sandboxes": []}, 400, "HTTPBadRequest", "Unable to find 'sandbox' in request body"),
    ({"sandbox": {"ports": ["6d1c2a5e-0000-4000-8000-000000000001"] * 2}}, 400, "HTTPBadRequest", "Duplicate"),
    ({"sandbox": {"ports": ["6d1c2a5e-0000-4000-8000-000000000001"]}}, 404, "PortNotFound", "could not be found"),
    ({"sandbox": {"networks": ["6d1c2a5e-0000-4000-8000-000000000002"]}}, 404, "NetworkNotFound",
     "could not be found"),
])
def test_bad_requests_get_neutron_errors(api: httpx.Client, body: dict, status: int, kind: str, words: str) -> None:
    assert words in _error(api.post("/netbay/v1/sandboxes", json=body), status, kind)


def test_projects_see_and_touch_only_their_own(api: httpx.Client, member_api: httpx.Client) -> None:
    admin_net = _network(api)
    admin_port = _port(api, admin_net["id"])
    admin_sb = _ok(api.post("/netbay/v1/sandboxes", json={"sandbox": {"name": "adm"}}), 201)["sandbox"]
    mine = _network(member_api, "10.7.0.0/24")
    sb = _ok(member_api.post("/netbay/v1/sandboxes", json={"sandbox": {
        "name": "mine", "networks": [mine["id"]]}}), 201)["sandbox"]
    assert sb["project_id"] != admin_sb["project_id"]
    assert [s["id"] for s in _sandboxes(member_api)] == [sb["id"]]
    _error(member_api.get(f"/netbay/v1/sandboxes/{admin_sb['id']}"), 404, "SandboxNotFound")
    _error(member_api.delete(f"/netbay/v1/sandboxes/{admin_sb['id']}"), 404, "SandboxNotFound")
    _error(member_api.post("/netbay/v1/sandboxes", json={"sandbox": {"networks": [admin_net["id"]]}}),
           404, "NetworkNotFound")
    _error(member_api.post("/netbay/v1/sandboxes", json={"sandbox": {"ports": [admin_port["id"]]}}),
           404, "PortNotFound")
    _error(member_api.post("/netbay/v1/sandboxes", json={"sandbox": {"host": "elsewhere"}}),
           403, "HTTPForbidden")
    assert sb["id"] in {s["id"] for s in _sandboxes(api)}  # admin sees every project's
    _ok(api.delete(f"/netbay/v1/sandboxes/{sb['id']}"), 204)  # and may delete them
    _ok(api.delete(f"/netbay/v1/sandboxes/{admin_sb['id']}"), 204)
    _ok(member_api.delete(f"/network/v2.0/networks/{mine['id']}"), 204)
    _ok(api.delete(f"/network/v2.0/ports/{admin_port['id']}"), 204)
    _ok(api.delete(f"/network/v2.0/networks/{admin_net['id']}"), 204)


def test_sandboxes_are_in_the_change_stream_and_the_state(api: httpx.Client, member_api: httpx.Client) -> None:
    since = _revision(api)
    sb = _ok(api.post("/netbay/v1/sandboxes", json={"sandbox": {"name": "streamed"}}), 201)["sandbox"]
    _ok(api.delete(f"/netbay/v1/sandboxes/{sb['id']}"), 204)
    changes = [c for c in _ok(api.get("/netbay/v1/changes", params={"since": since}))["changes"]
               if c["resource"] == "sandbox"]
    assert [(c["action"], c["id"]) for c in changes] == [("create", sb["id"]), ("delete", sb["id"])]
    assert changes[0]["data"]["name"] == "streamed" and changes[1]["data"] is None
    kept = _ok(api.post("/netbay/v1/sandboxes", json={"sandbox": {"name": "in-state"}}), 201)["sandbox"]
    state = _ok(api.get("/netbay/v1/state"))
    assert kept["id"] in {s["id"] for s in state["sandboxes"]}
    assert state["security_groups"] == state["security-groups"] and state["security_groups"]
    _error(member_api.get("/netbay/v1/state"), 403, "HTTPForbidden")
    _ok(api.delete(f"/netbay/v1/sandboxes/{kept['id']}"), 204)


def test_status_write_back(api: httpx.Client, member_api: httpx.Client) -> None:
    net = _network(api)
    port = _port(api, net["id"])
    sb = _ok(api.post("/netbay/v1/sandboxes", json={"sandbox": {"name": "st"}}), 201)["sandbox"]
    body = {"ports": {port["id"]: "ACTIVE", "6d1c2a5e-0000-4000-8000-00000000dead": "ACTIVE"},
            "sandboxes": {sb["id"]: "ACTIVE"}}
    _error(member_api.put("/netbay/v1/status", json=body), 403, "HTTPForbidden")
    since = _revision(api)
    out = _ok(api.put("/netbay/v1/status", json=body))
    assert out["updated"] == {"ports": [port["id"]], "sandboxes": [sb["id"]]}  # the unknown id is skipped
    assert _ok(api.get(f"/network/v2.0/ports/{port['id']}"))["port"]["status"] == "ACTIVE"
    assert _ok(api.get(f"/netbay/v1/sandboxes/{sb['id']}"))["sandbox"]["status"] == "ACTIVE"
    changes = _ok(api.get("/netbay/v1/changes", params={"since": since}))["changes"]
    assert {(c["resource"], c["id"], c["data"]["status"]) for c in changes} == {
        ("port", port["id"], "ACTIVE"), ("sandbox", sb["id"], "ACTIVE")}
    # The same report again changes nothing (no new revision).
    assert _ok(api.put("/netbay/v1/status", json=body))["updated"] == {"ports": [], "sandboxes": []}
    assert _revision(api) == changes[-1]["revision"]
    _error(api.put("/netbay/v1/status", json={"ports": {port["id"]: "GREEN"}}), 400, "HTTPBadRequest")
    _error(api.put("/netbay/v1/status", json={"gadgets": {}}), 400, "HTTPBadRequest")
    _error(api.put("/netbay/v1/status", json={"ports": ["x"]}), 400, "HTTPBadRequest")
    _ok(api.delete(f"/netbay/v1/sandboxes/{sb['id']}"), 204)
    _ok(api.delete(f"/network/v2.0/ports/{port['id']}"), 204)
    _ok(api.delete(f"/network/v2.0/networks/{net['id']}"), 204)


# --- the CLI, with an agent ---------------------------------------------------------------------


@pytest.fixture
def agent(server: Server):
    prefix = f"{PREFIX}cli-"
    the_agent = Agent(Api(server.url, Credentials(server.auth_url, "admin", ADMIN_PASSWORD, "admin").token),
                      Names(prefix), wait=2.0)
    stop = threading.Event()
    thread = threading.Thread(target=the_agent.run, args=(stop,), daemon=True)
    thread.start()
    try:
        assert the_agent.ready.wait(20)
        yield the_agent
    finally:
        stop.set()
        thread.join(timeout=15)
        sweep_prefix(prefix)


def _cli(server: Server, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OS_AUTH_URL": server.auth_url, "OS_USERNAME": "admin", "OS_PASSWORD": ADMIN_PASSWORD,
           "OS_PROJECT_NAME": "admin", "OS_USER_DOMAIN_NAME": "Default", "OS_PROJECT_DOMAIN_NAME": "Default",
           "OS_IDENTITY_API_VERSION": "3", "COLUMNS": "250"}
    env.pop("OS_CLOUD", None)
    return zygote.run([sys.executable, "-m", "netbay.cli.main", *args], env=env, capture_output=True,
                      text=True, timeout=120)


def test_cli_create_list_exec_delete(server: Server, api: httpx.Client, agent: Agent) -> None:
    net = _network(api, "10.8.0.0/24")
    netname = _ok(api.get(f"/network/v2.0/networks/{net['id']}"))["network"]["name"]
    port = _ok(api.post("/network/v2.0/ports", json={"port": {"network_id": net["id"], "name": unique("cliport")}}),
               201)["port"]
    name = unique("clisb")
    r = _cli(server, "sandbox", "create", name, "--network", netname, "--port", port["name"])
    assert r.returncode == 0, r.stdout + r.stderr
    sb = _sandboxes(api, name=name)[0]
    assert [p["port_id"] for p in sb["ports"]][0] == port["id"]  # given ports first, then networks
    assert [p["network_id"] for p in sb["ports"]] == [net["id"], net["id"]]
    r = _cli(server, "sandbox", "list")
    assert r.returncode == 0 and name in r.stdout and sb["id"] in r.stdout, r.stdout + r.stderr
    wait_for(lambda: _ok(api.get(f"/netbay/v1/sandboxes/{sb['id']}"))["sandbox"]["status"] == "ACTIVE", 20,
             what="the sandbox ACTIVE")
    ip = port["fixed_ips"][0]["ip_address"]
    r = _cli(server, "sandbox", "exec", name, "--prefix", agent.names.prefix, "--", "ip", "-o", "-4", "addr")
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"{ip}/24" in r.stdout and "eth1" in r.stdout and "eth0" in r.stdout
    r = _cli(server, "sandbox", "exec", name, "--prefix", agent.names.prefix, "--", "sh", "-c", "exit 7")
    assert r.returncode == 7
    r = _cli(server, "sandbox", "create", unique("bad"), "--network", "no-such-network")
    assert r.returncode == 1 and "no-such-network" in r.stderr
    r = _cli(server, "sandbox", "delete", name)
    assert r.returncode == 0, r.stdout + r.stderr
    assert _sandboxes(api, name=name) == []
    assert _ok(api.get(f"/network/v2.0/ports/{port['id']}"))["port"]["device_id"] == ""
    wait_for(lambda: not os.path.exists(f"/run/netns/{agent.names.sandbox(sb['id'])}"), 10,
             what="the sandbox namespace removed")
    _ok(api.delete(f"/network/v2.0/ports/{port['id']}"), 204)
    _ok(api.delete(f"/network/v2.0/networks/{net['id']}"), 204)
