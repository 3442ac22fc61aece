"""The embedded executor against a real ``netbay up --no-agent``: a whole cluster
stack made through the APIs, rollback of a failed create, resume after a
simulated crash, scale, and a delete that leaves nothing.

No dataplane agent runs here, so nothing settles load balancers; ``lb_settler``
plays the realizer's part (``PUT /netbay/v1/status``), as test_loadbalancer_api does.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest
from sqlalchemy import select

from netbay.client import Api
from netbay.coe.compose import build
from netbay.coe.executor import Interrupted, Stack
from netbay.store.db import Store
from netbay.store.models import CoeStack, CoeStackResource
from tests.backendfix import agent_reports

pytestmark = pytest.mark.every_db   # the store's semantics: on SQLite and PostgreSQL (tests/conftest.py)

TEMPLATE = {"coe": "kubernetes", "network_driver": "flannel", "external_network_id": "public",
            "master_lb_enabled": True, "floating_ip_enabled": True, "labels": {"flannel_backend": "vxlan"}}
COLLECTIONS = {
    "/network/v2.0/networks": "networks", "/network/v2.0/subnets": "subnets", "/network/v2.0/ports": "ports",
    "/network/v2.0/routers": "routers", "/network/v2.0/security-groups": "security_groups",
    "/network/v2.0/floatingips": "floatingips", "/load-balancer/v2/lbaas/loadbalancers": "loadbalancers",
    "/load-balancer/v2/lbaas/listeners": "listeners", "/load-balancer/v2/lbaas/pools": "pools",
    "/load-balancer/v2/lbaas/healthmonitors": "healthmonitors", "/netbay/v1/sandboxes": "sandboxes",
}
# 1 master + 2 minions, master LB and floating IPs.
EXPECTED = {"networks": 1, "subnets": 1, "routers": 1, "security_groups": 3, "floatingips": 3,
            "loadbalancers": 2, "listeners": 2, "pools": 2, "healthmonitors": 2, "sandboxes": 3}


@pytest.fixture(scope="module")
def lb_settler(server) -> Iterator[None]:
    """A stand-in for the dataplane's load-balancer realizer: settles PENDING_* to ACTIVE."""
    halt = agent_reports(server)
    yield
    halt()


@pytest.fixture(scope="module")
def store(server) -> Iterator[Store]:
    s = Store(server.database_url)
    yield s
    s.dispose()


@pytest.fixture(scope="module")
def api(server) -> Iterator[Api]:
    a = Api(server.url, server.token)
    yield a
    a.close()


def snapshot(raw: httpx.Client) -> dict[str, set[str]]:
    out = {}
    for path, key in COLLECTIONS.items():
        r = raw.get(path)
        assert r.status_code == 200, r.text
        out[key] = {item["id"] for item in r.json()[key]}
    return out


def tagged(raw: httpx.Client, cluster_id: str) -> dict[str, list[dict]]:
    """Everything carrying the cluster's tag (sandboxes: its description)."""
    out = {}
    for path, key in COLLECTIONS.items():
        if key == "sandboxes":
            items = [b for b in raw.get(path).json()[key]
                     if b["description"].startswith(f"netbay-cluster={cluster_id} ")]
        else:
            items = raw.get(path, params={"tags": f"netbay-cluster={cluster_id}"}).json()[key]
        out[key] = items
    return out


def new_stack(store: Store, api: Api, cluster: dict, **kw) -> Stack:
    return Stack(store, api, cluster_id=cluster["uuid"], name=cluster["name"], lb_timeout=30, **kw)


def cluster(node_count: int = 2, **kw) -> dict:
    return {"name": "c" + uuid.uuid4().hex[:6], "uuid": str(uuid.uuid4()), "master_count": 1,
            "node_count": node_count, **kw}


def create(store: Store, api: Api, template: dict, c: dict, **kw):
    return new_stack(store, api, c, **kw).create(build(template, c), {"template": template, "cluster": c})


def created(store: Store, api: Api, template: dict, c: dict) -> None:
    """:func:`create`, which must complete (else its status and reason are the failure)."""
    outcome = create(store, api, template, c)
    assert outcome.status == "CREATE_COMPLETE", (outcome.status, outcome.status_reason)


def stack_rows(store: Store, cluster_id: str) -> list[CoeStackResource]:
    with store.read() as s:
        stack = s.scalars(select(CoeStack).where(CoeStack.cluster_id == cluster_id)).first()
        if stack is None:
            return []
        return list(s.scalars(select(CoeStackResource).where(CoeStackResource.stack_id == stack.id)))


def delete_and_check(store: Store, api: Api, raw: httpx.Client, c: dict, before: dict) -> None:
    outcome = new_stack(store, api, c).delete()
    assert outcome.status == "DELETE_COMPLETE", outcome.status_reason
    assert snapshot(raw) == before
    assert stack_rows(store, c["uuid"]) == []
    with store.read() as s:
        assert s.scalars(select(CoeStack).where(CoeStack.cluster_id == c["uuid"])).first() is None


# --- create and delete ------------------------------------------------------------------------------


def test_create_whole_cluster_then_delete(store, api, raw, lb_settler) -> None:
    before = snapshot(raw)
    c = cluster(2)
    seen: list[tuple[str, str, str]] = []
    started = time.monotonic()
    outcome = create(store, api, TEMPLATE, c, on_progress=lambda *e: seen.append(e))
    assert outcome.status == "CREATE_COMPLETE", outcome.status_reason
    assert time.monotonic() - started < 60
    graph = build(TEMPLATE, c)
    assert {(n, "CREATE", "COMPLETE") for n in graph.nodes} <= set(seen)

    made = tagged(raw, c["uuid"])
    for key, count in EXPECTED.items():
        assert len(made[key]) == count, (key, made[key])
    # 3 node ports + the 2 LB VIP ports (tagged: nodes only) — the VIPs belong to the LBs.
    assert len(made["ports"]) == 3
    name = c["name"]
    (net,) = made["networks"]
    assert net["name"] == f"{name}-fixed_network" and "netbay-resource=fixed_network" in net["tags"]
    (subnet,) = made["subnets"]
    assert subnet["cidr"] == "10.0.0.0/24" and subnet["network_id"] == net["id"]
    assert subnet["dns_nameservers"] == ["8.8.8.8"]
    public = raw.get("/network/v2.0/networks", params={"name": "public"}).json()["networks"][0]
    (router,) = made["routers"]
    assert router["external_gateway_info"]["network_id"] == public["id"]
    inside = raw.get("/network/v2.0/ports", params={"device_id": router["id"],
                                                     "device_owner": "network:router_interface"}).json()["ports"]
    assert [ip["subnet_id"] for p in inside for ip in p["fixed_ips"]] == [subnet["id"]]

    groups = {g["name"]: g for g in made["security_groups"]}
    assert set(groups) == {f"{name}-secgroup_base", f"{name}-secgroup_kube_master", f"{name}-secgroup_kube_minion"}

    def ingress(group: dict) -> set:
        return {(r["protocol"], r["port_range_min"], r["port_range_max"])
                for r in group["security_group_rules"] if r["direction"] == "ingress"}

    assert ingress(groups[f"{name}-secgroup_base"]) == {("icmp", None, None), ("tcp", 22, 22)}
    assert ingress(groups[f"{name}-secgroup_kube_master"]) == {
        ("tcp", 7080, 7080), ("tcp", 8080, 8080), ("tcp", 2379, 2379), ("tcp", 2380, 2380),
        ("tcp", 6443, 6443), ("tcp", 30000, 32767), ("udp", 8472, 8472)}
    assert ingress(groups[f"{name}-secgroup_kube_minion"]) == {("icmp", None, None), ("tcp", None, None),
                                                               ("udp", None, None)}

    ports = {p["name"]: p for p in made["ports"]}
    master_port = ports[f"{name}-kube_master_0_eth0"]
    assert set(master_port["security_groups"]) == {groups[f"{name}-secgroup_base"]["id"],
                                                   groups[f"{name}-secgroup_kube_master"]["id"]}
    assert master_port["network_id"] == net["id"]
    assert set(ports[f"{name}-kube_minion_1_eth0"]["security_groups"]) == {
        groups[f"{name}-secgroup_base"]["id"], groups[f"{name}-secgroup_kube_minion"]["id"]}

    lbs = {lb["name"]: lb for lb in made["loadbalancers"]}
    assert set(lbs) == {f"{name}-api_lb", f"{name}-etcd_lb"}
    assert all(lb["vip_subnet_id"] == subnet["id"] and lb["provisioning_status"] == "ACTIVE" for lb in lbs.values())
    assert sorted(li["protocol_port"] for li in made["listeners"]) == [2379, 6443]
    assert all(m["type"] == "TCP" and (m["delay"], m["max_retries"], m["timeout"]) == (5, 5, 5)
               for m in made["healthmonitors"])
    master_ip = master_port["fixed_ips"][0]["ip_address"]
    for pool in made["pools"]:
        assert pool["lb_algorithm"] == "ROUND_ROBIN" and pool["protocol"] == "TCP"
        members = raw.get(f"/load-balancer/v2/lbaas/pools/{pool['id']}/members").json()["members"]
        assert [m["address"] for m in members] == [master_ip]

    fips = {f["description"].split("netbay-resource=")[1]: f for f in made["floatingips"]}
    assert set(fips) == {"api_lb_floating", "kube_minion_0_floating", "kube_minion_1_floating"}
    assert fips["api_lb_floating"]["port_id"] == lbs[f"{name}-api_lb"]["vip_port_id"]
    assert fips["kube_minion_0_floating"]["port_id"] == ports[f"{name}-kube_minion_0_eth0"]["id"]
    assert all(f["floating_network_id"] == public["id"] for f in fips.values())

    boxes = {b["name"]: b for b in made["sandboxes"]}
    assert set(boxes) == {f"{name}-kube_master_0", f"{name}-kube_minion_0", f"{name}-kube_minion_1"}
    assert [p["port_id"] for p in boxes[f"{name}-kube_master_0"]["ports"]] == [master_port["id"]]

    assert outcome.outputs == {
        "api_address": f"https://{fips['api_lb_floating']['floating_ip_address']}:6443",
        "master_addresses": [master_ip],
        "node_addresses": [fips["kube_minion_0_floating"]["floating_ip_address"],
                           fips["kube_minion_1_floating"]["floating_ip_address"]],
    }
    rows = {r.name: r for r in stack_rows(store, c["uuid"])}
    assert set(rows) == set(graph.nodes)
    assert all(r.status == "CREATE_COMPLETE" and r.physical_id for r in rows.values())
    assert rows["flannel_network_config"].attributes["value"] == {
        "Network": "10.100.0.0/16", "Subnetlen": 24, "Backend": {"Type": "vxlan"}}
    assert rows["kube_minion_0"].attributes["metadata"]["network_config"]["Backend"] == {"Type": "vxlan"}

    # Creating again converges: nothing new.
    again = new_stack(store, api, c).create(graph)
    assert again.status == "CREATE_COMPLETE" and again.outputs == outcome.outputs
    assert {k: len(v) for k, v in tagged(raw, c["uuid"]).items()} == {k: len(v) for k, v in made.items()}

    seen.clear()
    delete_and_check(store, api, raw, c, before)


# --- failures roll back ---------------------------------------------------------------------------------


def test_api_failure_rolls_back_with_the_apis_message(store, api, raw, lb_settler) -> None:
    before = snapshot(raw)
    c = cluster(1)
    outcome = create(store, api, {**TEMPLATE, "dns_nameserver": "not-an-address"}, c)
    assert outcome.status == "CREATE_FAILED"
    assert outcome.status_reason.startswith("Resource CREATE failed: fixed_subnet (OS::Neutron::Subnet): ")
    assert "not-an-address" in outcome.status_reason, outcome.status_reason
    assert snapshot(raw) == before
    assert stack_rows(store, c["uuid"]) == []
    with store.read() as s:
        stack = s.scalars(select(CoeStack).where(CoeStack.cluster_id == c["uuid"])).one()
        assert stack.status == "CREATE_FAILED" and stack.status_reason == outcome.status_reason


def test_missing_external_network_fails_cleanly(store, api, raw, lb_settler) -> None:
    before = snapshot(raw)
    c = cluster(1)
    outcome = create(store, api, {**TEMPLATE, "external_network_id": "no-such-net"}, c)
    assert outcome.status == "CREATE_FAILED"
    assert "extrouter (OS::Neutron::Router): Unable to find network with name or id 'no-such-net'" \
        in outcome.status_reason
    assert snapshot(raw) == before


def test_failure_midway_rolls_back_everything_the_create_made(store, api, raw, lb_settler) -> None:
    before = snapshot(raw)
    c = cluster(2)

    def hook(name: str, action: str, status: str) -> None:
        if (name, action, status) == ("kube_minion_1", "CREATE", "IN_PROGRESS"):
            raise RuntimeError("injected: no capacity for kube_minion_1")

    outcome = create(store, api, TEMPLATE, c, hook=hook)
    assert outcome.status == "CREATE_FAILED"
    assert outcome.status_reason == ("Resource CREATE failed: kube_minion_1 (OS::Nova::Server): "
                                     "injected: no capacity for kube_minion_1")
    assert snapshot(raw) == before
    assert stack_rows(store, c["uuid"]) == []


def test_failed_scale_up_rolls_back_only_what_it_added(store, api, raw, lb_settler) -> None:
    before = snapshot(raw)
    c = cluster(1)
    created(store, api, TEMPLATE, c)
    made = {k: {i["id"] for i in v} for k, v in tagged(raw, c["uuid"]).items()}

    def hook(name: str, action: str, status: str) -> None:
        if (name, status) == ("kube_minion_2", "IN_PROGRESS"):
            raise RuntimeError("injected")

    outcome = new_stack(store, api, c, hook=hook).update(node_count=3)
    assert outcome.status == "UPDATE_FAILED" and "kube_minion_2" in outcome.status_reason
    assert {k: {i["id"] for i in v} for k, v in tagged(raw, c["uuid"]).items()} == made
    delete_and_check(store, api, raw, c, before)


# --- resume after a crash -------------------------------------------------------------------------------


@pytest.mark.parametrize("crash_at", ["after-10", "between-create-and-persist", "between-finish-and-persist"])
def test_resume_after_crash_makes_no_duplicates(store, api, raw, lb_settler, crash_at) -> None:
    before = snapshot(raw)
    c = cluster(2)
    completed: list[str] = []
    lock = threading.Lock()
    # Resources whose API call goes out but whose id is never written down.
    lost = {"secgroup_kube_master", "kube_minion_0_eth0", "kube_master_0", "extrouter_inside", "api_listener"}

    def hook(name: str, action: str, status: str) -> None:
        with lock:
            if crash_at == "after-10" and status == "COMPLETE":
                completed.append(name)
                if len(completed) >= 10:
                    raise Interrupted()
            if crash_at == "between-create-and-persist" and status == "MADE" and name in lost:
                raise Interrupted()
            # The group's rules went out, the row still holds the group as first made.
            if crash_at == "between-finish-and-persist" and status == "FINISHED" and name == "secgroup_kube_minion":
                raise Interrupted()

    with pytest.raises(Interrupted):
        create(store, api, TEMPLATE, c, hook=hook)
    rows = {r.name: r for r in stack_rows(store, c["uuid"])}
    if crash_at == "between-create-and-persist":
        crashed = [r for r in rows.values() if r.status == "CREATE_IN_PROGRESS" and r.physical_id is None]
        assert crashed, rows
    elif crash_at == "between-finish-and-persist":
        group = rows["secgroup_kube_minion"]
        assert group.status == "CREATE_IN_PROGRESS" and group.physical_id, group
        now = raw.get(f"/network/v2.0/security-groups/{group.physical_id}").json()["security_group"]
        assert len(group.attributes["security_group_rules"]) < len(now["security_group_rules"]), \
            "the row should predate the rules"
    else:
        assert 10 <= sum(r.status == "CREATE_COMPLETE" for r in rows.values()) < len(build(TEMPLATE, c).nodes)

    # A new executor (a restarted netbay) finishes the job.
    outcome = new_stack(store, api, c).resume()
    assert outcome is not None and outcome.status == "CREATE_COMPLETE", outcome
    made = tagged(raw, c["uuid"])
    for key, count in EXPECTED.items():
        assert len(made[key]) == count, (key, [i.get("name") for i in made[key]])
    assert len(made["ports"]) == 3
    for group in made["security_groups"]:  # rules completed, none twice
        keys = [(r["direction"], r["ethertype"], r["protocol"], r["port_range_min"])
                for r in group["security_group_rules"]]
        assert len(keys) == len(set(keys)), group["name"]
    assert len(made["security_groups"][0]["security_group_rules"]) > 2
    assert all(r.status == "CREATE_COMPLETE" for r in stack_rows(store, c["uuid"]))
    assert new_stack(store, api, c).resume() is None  # nothing left to do
    assert outcome.outputs["api_address"].startswith("https://172.24.4.")
    delete_and_check(store, api, raw, c, before)


# --- scale ---------------------------------------------------------------------------------------------------


def test_scale_2_4_1(store, api, raw, lb_settler) -> None:
    before = snapshot(raw)
    c = cluster(2)
    created(store, api, TEMPLATE, c)
    name = c["name"]

    def minions() -> list[str]:
        return sorted(b["name"] for b in tagged(raw, c["uuid"])["sandboxes"] if "minion" in b["name"])

    oldest = {b["name"]: b["id"] for b in tagged(raw, c["uuid"])["sandboxes"]}
    up = new_stack(store, api, c).update(node_count=4)
    assert up.status == "UPDATE_COMPLETE", up.status_reason
    assert minions() == [f"{name}-kube_minion_{i}" for i in range(4)]
    assert len(up.outputs["node_addresses"]) == 4 and None not in up.outputs["node_addresses"]
    assert len(tagged(raw, c["uuid"])["floatingips"]) == 5
    down = new_stack(store, api, c).update(node_count=1)
    assert down.status == "UPDATE_COMPLETE", down.status_reason
    assert minions() == [f"{name}-kube_minion_0"]  # the newest went first
    after = {b["name"]: b["id"] for b in tagged(raw, c["uuid"])["sandboxes"]}
    assert after[f"{name}-kube_minion_0"] == oldest[f"{name}-kube_minion_0"]
    made = tagged(raw, c["uuid"])
    assert (len(made["ports"]), len(made["floatingips"])) == (2, 2)
    assert len(down.outputs["node_addresses"]) == 1
    delete_and_check(store, api, raw, c, before)


# --- delete leaves nothing ---------------------------------------------------------------------------------------


def test_delete_sweeps_what_the_state_table_missed(store, api, raw, lb_settler) -> None:
    before = snapshot(raw)
    c = cluster(2)
    created(store, api, TEMPLATE, c)
    # A crash between create and persist: these rows never got written.
    with store.write() as s:
        for r in s.scalars(select(CoeStackResource).where(CoeStackResource.name.in_(
                ["kube_minion_1", "kube_minion_1_floating", "kube_minion_1_eth0", "etcd_lb", "extrouter_inside",
                 "secgroup_kube_minion"]))):
            s.delete(r)
    delete_and_check(store, api, raw, c, before)


def test_delete_is_idempotent_and_resumes(store, api, raw, lb_settler) -> None:
    before = snapshot(raw)
    c = cluster(1)
    created(store, api, TEMPLATE, c)
    count = [0]

    def hook(name: str, action: str, status: str) -> None:
        if action == "DELETE" and status == "COMPLETE":
            count[0] += 1
            if count[0] == 6:
                raise Interrupted()

    with pytest.raises(Interrupted):
        new_stack(store, api, c, hook=hook).delete()
    outcome = new_stack(store, api, c).resume()
    assert outcome is not None and outcome.status == "DELETE_COMPLETE", outcome
    assert snapshot(raw) == before
