"""Helpers for the dataplane tests of clusters the conductor builds (Magnum's API):
make, scale and wait for a cluster, its pods and their namespaces, whether one pod
reaches another (ICMP and TCP, no NAT), and every node's forwarding state.

Used by test_dp_pods_cluster.py and the modules of other cluster kinds (pods
outside, swarm, Docker and container clusters, Kubernetes).
"""

from __future__ import annotations

import subprocess

import httpx

from .agent_fixtures import Cloud, wait_for
from .cluster_net import tcp_exchange
from .dp_helpers import ping


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


def make_cluster(cloud: Cloud, name: str, labels: dict, nodes: int, driver: str | None = "flannel",
                 coe: str = "kubernetes", **template: object) -> str:
    """A cluster of a template of its own (``template``: more of the template's fields;
    ``driver`` None: the COE's default network driver)."""
    c = ci(cloud)
    if driver is not None:
        template["network_driver"] = driver
    r = c.post("/clustertemplates", json={
        "name": name, "coe": coe, "external_network_id": "public",
        "master_lb_enabled": False, "floating_ip_enabled": False, "labels": labels, **template})
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


def ip_of(node: dict) -> str:
    return node["address"].split("/")[0]
