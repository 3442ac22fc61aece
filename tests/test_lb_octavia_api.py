"""Octavia API details real clients depend on (issue 17), through python-octaviaclient
(``openstack loadbalancer …``) and openstacksdk: 501 for options the provider lacks,
403 for another project's objects, created_at order, stats, the status tree,
failover and member batch update.

Nothing realizes load balancers here: statuses are settled with
``PUT /netbay/v1/status`` and counters reported with ``PUT /netbay/v1/lbstats``,
as the agent does (tests/dataplane/test_dp_lb_octavia.py runs the real agent).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from typing import Any

import httpx
import openstack.exceptions as osexc
import pytest
from conftest import ADMIN_PASSWORD, unique

from lbhelp import make_net, octavia_error
from tests.osc import openstack as run_openstack

pytestmark = pytest.mark.shared_server   # its tests make their own objects (tests/conftest.py)

FORBIDDEN = "Policy does not allow this request to be performed."


# --- the real client ------------------------------------------------------------------------------


def osc(server, user: tuple[str, str, str] | None, *args: str) -> subprocess.CompletedProcess:
    """``openstack args`` as ``user`` (user, password, project), or as the admin."""
    name, password, project = user or ("admin", ADMIN_PASSWORD, "admin")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}
    env.update(OS_AUTH_URL=server.auth_url, OS_USERNAME=name, OS_PASSWORD=password, OS_PROJECT_NAME=project,
               OS_USER_DOMAIN_NAME="Default", OS_PROJECT_DOMAIN_NAME="Default", OS_IDENTITY_API_VERSION="3")
    return run_openstack(*args, env=env)


def osc_json(server, user, *args: str) -> Any:
    r = osc(server, user, *args, "-f", "json")
    assert r.returncode == 0, f"openstack {' '.join(args)}:\n{r.stdout}\n{r.stderr}"
    return json.loads(r.stdout)


def osc_fails(server, user, *args: str) -> str:
    r = osc(server, user, *args)
    assert r.returncode != 0, r.stdout
    return r.stderr


# --- fixtures -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def owner(server):
    return server.make_user()


@pytest.fixture(scope="module")
def intruder(server):
    return server.make_user()


@pytest.fixture(scope="module")
def owner_sdk(server, owner):
    return server.connect(*owner)


@pytest.fixture(scope="module")
def intruder_sdk(server, intruder):
    return server.connect(*intruder)


@pytest.fixture(scope="module")
def http(server, owner_sdk):
    client = httpx.Client(base_url=f"{server.url}/load-balancer/v2", timeout=30,
                          headers={"X-Auth-Token": owner_sdk.auth_token})
    server._clients.append(client)
    return client


@pytest.fixture(scope="module")
def tree(owner_sdk, settle):
    """A load balancer with a listener, its pool, a member and a monitor, all settled."""
    lbs = owner_sdk.load_balancer
    nets = make_net(owner_sdk, "o17")
    lb = lbs.create_load_balancer(vip_subnet_id=nets.subnet.id, name=unique("o17"))
    settle(lb.id)
    listener = lbs.create_listener(loadbalancer_id=lb.id, protocol="TCP", protocol_port=80)
    settle(lb.id)
    pool = lbs.create_pool(listener_id=listener.id, protocol="TCP", lb_algorithm="ROUND_ROBIN")
    settle(lb.id)
    member = lbs.create_member(pool.id, address=str(nets.cidr.network_address + 10), protocol_port=8080)
    settle(lb.id)
    monitor = lbs.create_health_monitor(pool_id=pool.id, type="TCP", delay=1, timeout=1, max_retries=1)
    settle(lb.id)
    return {"lb": lb, "listener": listener, "pool": pool, "member": member, "monitor": monitor, "nets": nets}


# --- 501: an option the provider does not offer ------------------------------------------------------


def test_an_option_not_offered_is_501_through_the_client(server, owner, http, tree):
    err = osc_fails(server, owner, "loadbalancer", "pool", "create", "--loadbalancer", tree["lb"].id,
                    "--protocol", "PROXY", "--lb-algorithm", "ROUND_ROBIN")
    assert "HTTP 501" in err and "Provider 'nftables' does not support a requested option" in err, err
    r = http.post("/lbaas/listeners", json={"listener": {
        "loadbalancer_id": tree["lb"].id, "protocol": "HTTPS", "protocol_port": 443}})
    message = octavia_error(r, 501)
    assert message.startswith("Provider 'nftables' does not support a requested option: protocol HTTPS")


# --- 403: another project's objects ---------------------------------------------------------------------


def test_another_projects_objects_are_403_as_octavias_policy_check(server, intruder, intruder_sdk, tree):
    err = osc_fails(server, intruder, "loadbalancer", "show", tree["lb"].id)
    assert "HTTP 403" in err and FORBIDDEN in err, err
    err = osc_fails(server, intruder, "loadbalancer", "listener", "show", tree["listener"].id)
    assert "HTTP 403" in err, err
    lbs = intruder_sdk.load_balancer
    for call in (lambda: lbs.get_pool(tree["pool"].id),
                 lambda: lbs.get_member(tree["member"].id, tree["pool"].id),
                 lambda: lbs.get_health_monitor(tree["monitor"].id),
                 lambda: lbs.update_listener(tree["listener"].id, name="mine"),
                 lambda: lbs.delete_pool(tree["pool"].id, ignore_missing=False),
                 lambda: lbs.get_load_balancer_statistics(tree["lb"].id)):
        with pytest.raises(osexc.ForbiddenException, match=FORBIDDEN):
            call()
    # Their lists do not show it, and what exists nowhere is still 404.
    assert tree["lb"].id not in [x.id for x in lbs.load_balancers()]
    with pytest.raises(osexc.NotFoundException):
        lbs.get_pool("6d2bb0c4-5c1c-4f5e-9a0d-9b1f3c1f0a11")


# --- list order ------------------------------------------------------------------------------------------


def test_lists_without_sort_come_in_created_at_then_id_order(server, owner, owner_sdk, http):
    nets = make_net(owner_sdk, "order")
    tag = unique("order")
    made = []
    for i in range(3):   # a second apart: created_at (second precision, as Octavia's) differs
        made.append(owner_sdk.load_balancer.create_load_balancer(vip_subnet_id=nets.subnet.id,
                                                                 name=f"{tag}-{i}", tags=[tag]).id)
        if i < 2:
            time.sleep(1.05)
    listed = osc_json(server, owner, "loadbalancer", "list", "--tags", tag)
    assert [x["id"] for x in listed] == made
    full = list(owner_sdk.load_balancer.load_balancers(tags=tag))
    assert [x.id for x in full] == [x.id for x in sorted(full, key=lambda x: (x.created_at, x.id))] == made
    # Pages follow the same order (the marker continues after created_at, id).
    paged, query = [], {"tags": tag, "limit": 1}
    for _ in range(5):
        page = http.get("/lbaas/loadbalancers", params=query).json()
        paged += [x["id"] for x in page["loadbalancers"]]
        nxt = [x["href"] for x in page["loadbalancers_links"] if x["rel"] == "next"]
        if not nxt:
            break
        query = dict(httpx.URL(nxt[0]).params)
    assert paged == made


# --- stats -------------------------------------------------------------------------------------------------


def test_stats_of_listeners_and_load_balancers(server, owner, owner_sdk, agent_http, tree):
    lb, listener = tree["lb"], tree["listener"]
    zero = {"bytes_in": 0, "bytes_out": 0, "active_connections": 0, "total_connections": 0, "request_errors": 0}
    assert osc_json(server, owner, "loadbalancer", "stats", "show", lb.id) == zero

    def report(epoch: str, bytes_in: int, bytes_out: int, active: int, total: int) -> None:
        r = agent_http.put("/lbstats", json={"listeners": {listener.id: {
            "epoch": epoch, "bytes_in": bytes_in, "bytes_out": bytes_out, "active_connections": active,
            "total_connections": total, "request_errors": 0}}})
        assert r.status_code == 200, r.text

    report("a", 1000, 5000, 2, 7)
    report("a", 1500, 6000, 1, 9)   # the same counters, grown
    got = osc_json(server, owner, "loadbalancer", "listener", "stats", "show", listener.id)
    assert got == {**zero, "bytes_in": 1500, "bytes_out": 6000, "active_connections": 1, "total_connections": 9}
    report("b", 100, 200, 0, 1)      # new counters (namespace rebuilt): totals keep growing
    stats = owner_sdk.load_balancer.get_load_balancer_statistics(lb.id)
    assert (stats.bytes_in, stats.bytes_out, stats.active_connections, stats.total_connections) == (
        1600, 6200, 0, 10)
    # Malformed reports are refused; reports for deleted listeners are skipped.
    r = agent_http.put("/lbstats", json={"listeners": {listener.id: {"epoch": "c", "bytes_in": -1}}})
    assert r.status_code == 400
    r = agent_http.put("/lbstats", json={"listeners": {"gone": {"epoch": "c"}}})
    assert r.status_code == 200 and r.json()["missing"] == ["gone"]
    r = httpx.put(f"{server.url}/netbay/v1/lbstats", json={"listeners": {}}, timeout=10,
                  headers={"X-Auth-Token": owner_sdk.auth_token})
    assert r.status_code == 403


# --- status tree and operating statuses --------------------------------------------------------------


def test_status_tree_through_the_client(server, owner, owner_sdk, settle, tree):
    r = osc(server, owner, "loadbalancer", "status", "show", tree["lb"].id)   # prints JSON itself
    assert r.returncode == 0, r.stderr
    lb = json.loads(r.stdout)["loadbalancer"]
    assert lb["id"] == tree["lb"].id and lb["provisioning_status"] == "ACTIVE"
    [listener] = lb["listeners"]
    [pool] = listener["pools"]
    assert pool["id"] == tree["pool"].id and pool["health_monitor"]["id"] == tree["monitor"].id
    assert [m["id"] for m in pool["members"]] == [tree["member"].id]
    # A pool with no listener (nothing realizes it) is OFFLINE, as Octavia shows it.
    lonely = owner_sdk.load_balancer.create_pool(loadbalancer_id=tree["lb"].id, protocol="TCP",
                                                 lb_algorithm="ROUND_ROBIN")
    settle(tree["lb"].id)
    assert owner_sdk.load_balancer.get_pool(lonely.id).operating_status == "OFFLINE"


# --- failover -----------------------------------------------------------------------------------------------


def test_failover_is_admins_and_waits_for_a_settled_load_balancer(server, owner, settle, agent_http, tree):
    lb_id = tree["lb"].id
    err = osc_fails(server, owner, "loadbalancer", "failover", lb_id)
    assert "HTTP 403" in err, err
    since = _latest(agent_http)
    r = osc(server, None, "loadbalancer", "failover", lb_id)
    assert r.returncode == 0, r.stderr
    show = osc_json(server, None, "loadbalancer", "show", lb_id)
    assert show["provisioning_status"] == "PENDING_UPDATE"
    assert ("loadbalancer", lb_id, "failover") in _changes(agent_http, since)
    err = osc_fails(server, None, "loadbalancer", "failover", lb_id)
    assert "HTTP 409" in err and f"Invalid state PENDING_UPDATE of loadbalancer resource {lb_id}" in err
    settle(lb_id)
    after = osc_json(server, None, "loadbalancer", "show", lb_id)
    assert (after["vip_address"], after["vip_port_id"]) == (tree["lb"].vip_address, tree["lb"].vip_port_id)


# --- member batch update --------------------------------------------------------------------------------------


def test_member_batch_update_in_one_transaction(http, agent_http, owner_sdk, settle):
    lbs = owner_sdk.load_balancer
    nets = make_net(owner_sdk, "batch")
    lb = lbs.create_load_balancer(vip_subnet_id=nets.subnet.id, name=unique("batch"))
    settle(lb.id)
    pool = lbs.create_pool(loadbalancer_id=lb.id, protocol="TCP", lb_algorithm="ROUND_ROBIN")
    settle(lb.id)
    base = nets.cidr.network_address
    path = f"/lbaas/pools/{pool.id}/members"

    def batch(addresses: list[int], **extra: Any) -> httpx.Response:
        return http.put(path, json={"members": [
            {"address": str(base + a), "protocol_port": 80, **extra} for a in addresses]})

    assert batch([11, 12, 13]).status_code == 202
    settle(lb.id)
    first = {m.address: m.id for m in lbs.members(pool.id)}
    assert set(first) == {str(base + a) for a in (11, 12, 13)}
    since = _latest(agent_http)
    r = batch([11, 12, 13, 14, 15], weight=5)
    assert r.status_code == 202 and r.content == b""
    changes = _changes(agent_http, since)
    assert sorted(a for kind, _, a in changes if kind == "member") == ["create"] * 2 + ["update"] * 3
    revisions = _revisions(agent_http, since)
    assert revisions == list(range(revisions[0], revisions[0] + len(revisions)))   # one transaction
    assert http.get(f"/lbaas/loadbalancers/{lb.id}").json()["loadbalancer"]["provisioning_status"] == \
        "PENDING_UPDATE"
    # The load balancer is claimed: another batch waits (409) until it settles.
    octavia_error(batch([11]), 409)
    settle(lb.id)
    members = {m.address: m for m in lbs.members(pool.id)}
    assert len(members) == 5 and {m.weight for m in members.values()} == {5}
    assert {members[a].id for a in first} == set(first.values())   # updated in place, same ids
    since = _latest(agent_http)
    assert batch([14, 15]).status_code == 202
    assert sorted(a for kind, _, a in _changes(agent_http, since) if kind == "member") == \
        ["delete"] * 3 + ["update"] * 2
    settle(lb.id)
    assert {m.address for m in lbs.members(pool.id)} == {str(base + 14), str(base + 15)}
    # A member twice in one request, or a bad one, changes nothing.
    octavia_error(batch([14, 14]), 400, "Validation failure: Member must be updated only once in the same request.")
    r = http.put(path, json={"members": [{"address": "nope", "protocol_port": 80}]})
    octavia_error(r, 400)
    r = http.put(path, json={"members": [{"address": str(base + 16), "protocol_port": 80, "vnic_type": "direct"}]})
    octavia_error(r, 501)
    assert {m.address for m in lbs.members(pool.id)} == {str(base + 14), str(base + 15)}
    # additive_only keeps the members not named.
    assert http.put(path, params={"additive_only": "true"}, json={"members": [
        {"address": str(base + 16), "protocol_port": 80}]}).status_code == 202
    settle(lb.id)
    assert len(list(lbs.members(pool.id))) == 3


# --- change stream helpers ---------------------------------------------------------------------------------


def _latest(agent_http) -> int:
    since = 0
    for _ in range(1000):
        batch = agent_http.get("/changes", params={"since": since}).json()
        if not batch["changes"]:
            return since
        since = batch["revision"]
    raise AssertionError("change stream does not end")


def _raw_changes(agent_http, since: int) -> list[dict]:
    out: list[dict] = []
    for _ in range(100):
        batch = agent_http.get("/changes", params={"since": since}).json()
        if not batch["changes"]:
            return out
        out += batch["changes"]
        since = batch["revision"]
    return out


def _changes(agent_http, since: int) -> list[tuple[str, str, str]]:
    return [(c["resource"], c["id"], c["action"]) for c in _raw_changes(agent_http, since)]


def _revisions(agent_http, since: int) -> list[int]:
    return [c["revision"] for c in _raw_changes(agent_http, since)]
