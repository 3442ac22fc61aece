"""Pods on clusters built by the conductor, wired by the agent, checked with real packets.

flannel vxlan (1 master, 2 minions, one pod per minion): ICMP and TCP between pods
on different nodes, a pod reaches another node's address; scale 2 → 3 (a pod on the
new node reaches the old ones) and back to 2 (no route, FDB or neighbour entry for
the removed node remains on any node). host-gw the same, smaller. A restart of the
server and the agent keeps every node's lease; a flannel network too small for the
cluster is a 400 at create, and a scale beyond it ends ``UPDATE_FAILED`` before the
stack changes.
"""

from __future__ import annotations

import ipaddress
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from conftest import start_server, stop_server  # tests/conftest.py
from netbay.dataplane import netns

from .agent_fixtures import Cloud, InProcessAgent, make_cloud, wait_for
from .cluster_net import tcp_exchange
from .dp_helpers import ping


@pytest.fixture(scope="module")
def cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cloud]:
    yield from make_cloud(tmp_path_factory.mktemp("pods"), "pc")


def ci(cloud: Cloud) -> httpx.Client:
    client = httpx.Client(base_url=f"{cloud.server.url}/container-infra/v1", headers=dict(cloud.http.headers),
                          timeout=30)
    cloud.server._clients.append(client)
    return client


def wait_cluster(c: httpx.Client, cid: str, done: tuple[str, ...], timeout: float = 90) -> dict:
    def check() -> dict | None:
        r = c.get(f"/clusters/{cid}")
        if r.status_code == 404:
            return {"status": "GONE"} if "GONE" in done else None
        return r.json() if r.json()["status"] in done else None
    return wait_for(check, timeout, 0.05, f"cluster {cid} to reach {done}")


def make_cluster(cloud: Cloud, name: str, labels: dict, nodes: int) -> str:
    c = ci(cloud)
    r = c.post("/clustertemplates", json={
        "name": name, "coe": "kubernetes", "network_driver": "flannel", "external_network_id": "public",
        "master_lb_enabled": False, "floating_ip_enabled": False, "labels": labels})
    assert r.status_code == 201, r.text
    r = c.post("/clusters", json={"name": name, "cluster_template_id": r.json()["uuid"], "node_count": nodes})
    assert r.status_code == 202, r.text
    cluster = wait_cluster(c, r.json()["uuid"], ("CREATE_COMPLETE", "CREATE_FAILED"))
    assert cluster["status"] == "CREATE_COMPLETE", cluster["status_reason"]
    return cluster["uuid"]


def scale(cloud: Cloud, cid: str, count: int, status: str = "UPDATE_COMPLETE") -> dict:
    c = ci(cloud)
    r = c.patch(f"/clusters/{cid}", json=[{"op": "replace", "path": "/node_count", "value": count}])
    assert r.status_code == 202, r.text
    cluster = wait_cluster(c, cid, ("UPDATE_COMPLETE", "UPDATE_FAILED"))
    assert cluster["status"] == status, cluster["status_reason"]
    return cluster


def clusternet(cloud: Cloud, cid: str) -> dict:
    state = cloud.ok(cloud.http.get("/netbay/v1/state"))
    return next(n for n in state["clusternets"] if n["id"] == cid)


def pod(cloud: Cloud, name: str, cid: str, node: str | None = None) -> dict:
    body = {"name": name, "cluster_id": cid, **({"node": node} if node else {})}
    made = cloud.ok(cloud.http.post("/netbay/v1/pods", json={"pod": body}), 201)["pod"]
    return cloud.wait_status(f"/netbay/v1/pods/{made['id']}", "ACTIVE", 30)


def pns(cloud: Cloud, p: dict) -> str:
    return cloud.names.pod(p["id"])


def reaches(cloud: Cloud, a: dict, b: dict) -> None:
    """ICMP and TCP from pod ``a`` to pod ``b``; b sees a's own address (no NAT)."""
    assert wait_for(lambda: ping(pns(cloud, a), b["address"], 0.5), 10, 0.05, f"{a['name']} → {b['name']}")
    seen, reply = tcp_exchange(pns(cloud, a), pns(cloud, b), b["address"])
    assert (seen, reply) == (a["address"], b"pong")


def peer_state(cloud: Cloud, net: dict) -> dict[str, str]:
    """Routes, FDB and neighbour entries of every node (iproute2's text)."""
    out = {}
    for n in net["nodes"]:
        ns = cloud.names.sandbox(n["sandbox_id"])
        text = [subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout for cmd in (
            ["ip", "-n", ns, "-4", "route", "show", "table", "all"], ["ip", "-n", ns, "-4", "neigh", "show"],
            ["bridge", "-n", ns, "fdb", "show"])]
        out[n["name"]] = "\n".join(text)
    return out


def check_cluster(cloud: Cloud, cid: str, backend: str) -> None:
    net = clusternet(cloud, cid)
    assert net["driver"] == "flannel" and net["config"]["backend"] == backend
    minions = [n for n in net["nodes"] if n["role"] == "minion"]
    assert len(minions) == 2 and len(net["leases"]) == 3
    p0, p1 = pod(cloud, f"{backend}-a", cid), pod(cloud, f"{backend}-b", cid)
    assert {p0["node"], p1["node"]} == {m["name"] for m in minions}  # one per minion
    for p in (p0, p1):
        lease = ipaddress.ip_network(net["leases"][p["node"]])
        assert ipaddress.ip_address(p["address"]) in lease and p["address"] != str(lease.network_address + 1)
    reaches(cloud, p0, p1)
    reaches(cloud, p1, p0)
    other = next(n for n in net["nodes"] if n["name"] == p1["node"])["address"].split("/")[0]
    assert wait_for(lambda: ping(pns(cloud, p0), other, 0.5), 10, 0.05, "a pod to another node's address")

    # Scale up: the new minion's pod reaches the old pods (and back).
    scale(cloud, cid, 3)
    grown = clusternet(cloud, cid)
    assert {k: v for k, v in grown["leases"].items() if k in net["leases"]} == net["leases"]   # kept
    new = next(n for n in grown["nodes"] if n["name"] not in net["leases"])
    new_ip = new["address"].split("/")[0]
    wait_for(lambda: all(new_ip in text for text in peer_state(cloud, grown).values()), 20, 0.1,
             "the new node programmed on every node")
    p2 = pod(cloud, f"{backend}-c", cid, node=new["name"])
    reaches(cloud, p2, p0)
    reaches(cloud, p1, p2)

    # Scale down: the new node goes (the highest minion), with its pod, from every peer.
    scale(cloud, cid, 2)
    wait_for(lambda: not netns.exists(pns(cloud, p2)), 20, 0.05, "the removed node's pod namespace to go")
    assert cloud.http.get(f"/netbay/v1/pods/{p2['id']}").status_code == 404
    gone_ip, gone_lease = new["address"].split("/")[0], new["lease"]
    gone_net = gone_lease.split("/")[0]

    def clean() -> bool:
        return all(gone_ip not in text and gone_lease not in text and f"{gone_net} " not in text
                   for text in peer_state(cloud, clusternet(cloud, cid)).values())
    assert wait_for(clean, 20, 0.1, "no trace of the removed node on any node"), peer_state(cloud, grown)
    reaches(cloud, p0, p1)


def test_flannel_vxlan_pods(cloud: Cloud) -> None:
    cid = make_cluster(cloud, "vx", {"flannel_backend": "vxlan"}, 2)
    check_cluster(cloud, cid, "vxlan")


def test_flannel_host_gw_pods(cloud: Cloud) -> None:
    cid = make_cluster(cloud, "hg", {"flannel_backend": "host-gw"}, 2)
    check_cluster(cloud, cid, "host-gw")


def test_leases_must_fit(cloud: Cloud) -> None:
    c = ci(cloud)
    r = c.post("/clustertemplates", json={
        "name": "tiny", "coe": "kubernetes", "network_driver": "flannel", "external_network_id": "public",
        "master_lb_enabled": False, "floating_ip_enabled": False,
        "labels": {"flannel_network_cidr": "10.200.0.0/22", "flannel_network_subnetlen": "24"}})
    assert r.status_code == 201, r.text
    tid = r.json()["uuid"]
    r = c.post("/clusters", json={"name": "too-big", "cluster_template_id": tid, "node_count": 3})
    assert r.status_code == 400 and "room for 3 node lease(s)" in r.text, r.text
    # 1 master + 2 minions fit in 3 leases; a third minion does not: UPDATE_FAILED, nothing made.
    r = c.post("/clusters", json={"name": "fits", "cluster_template_id": tid, "node_count": 2})
    assert r.status_code == 202, r.text
    cid = r.json()["uuid"]
    assert wait_cluster(c, cid, ("CREATE_COMPLETE", "CREATE_FAILED"))["status"] == "CREATE_COMPLETE"
    before = c.get(f"/clusters/{cid}/resources").json()["resources"]
    cluster = scale(cloud, cid, 3, "UPDATE_FAILED")
    assert "room for 3 node lease(s)" in cluster["status_reason"], cluster["status_reason"]
    assert c.get(f"/clusters/{cid}/resources").json()["resources"] == before
    assert len(clusternet(cloud, cid)["leases"]) == 3


def test_restart_keeps_leases(cloud: Cloud) -> None:
    """Last in the module: the server and agent it restarts are stopped here."""
    cid = make_cluster(cloud, "rs", {"flannel_backend": "vxlan", "flannel_network_subnetlen": "26"}, 2)
    leases = clusternet(cloud, cid)["leases"]
    a, b = pod(cloud, "rs-a", cid), pod(cloud, "rs-b", cid)
    reaches(cloud, a, b)
    cloud.agent.stop()
    stop_server(cloud.server)
    server = start_server(cloud.server.database_url, cloud.server.data_dir)
    runner = InProcessAgent(server, cloud.names)
    try:
        http = httpx.Client(base_url=server.url, headers={"X-Auth-Token": server.token()}, timeout=30)
        server._clients.append(http)
        cloud.server, cloud.http = server, http
        runner.start()
        assert clusternet(cloud, cid)["leases"] == leases
        reaches(cloud, a, b)                      # adopted, not rebuilt away
        scale(cloud, cid, 3)
        grown = clusternet(cloud, cid)["leases"]
        assert {k: grown[k] for k in leases} == leases
        c = pod(cloud, "rs-c", cid)               # the least-loaded node: the new one
        assert c["node"] not in leases
        reaches(cloud, c, a)
    finally:
        runner.stop()
        stop_server(server)
