"""Pods on clusters built by the conductor, wired by the agent, checked with real packets.

For flannel vxlan, flannel host-gw, calico with direct routes and calico with VXLAN
(1 master, 2 minions, one pod per minion): ICMP and TCP between pods on different
nodes, a pod reaches another node's address; scale 2 → 4 (pods on the new nodes
reach the old ones) and back to 2 (no route, FDB or neighbour entry for a removed
node remains on any node). Calico IP-in-IP where the kernel has it (here: refused at
the API naming the feature, and skipped). Two clusters on the same flannel network
stay apart. A restart of the server and the agent keeps every node's lease; a
flannel network too small for the cluster is a 400 at create, and a scale beyond it
ends ``UPDATE_FAILED`` before the stack changes.
"""

from __future__ import annotations

import ipaddress

import httpx
import pytest

from conftest import start_server, stop_server  # tests/conftest.py
from netbay.dataplane import netns

from .agent_fixtures import Cloud, InProcessAgent, wait_for
from .cluster_net import Listener, tcp_read
from .cluster_pods import ci, clusternet, ip_of, make_cluster, peer_state, pns, pod, reaches, scale, wait_cluster
from .dp_helpers import ping

CLOUD_TAG = "pc"   # the shared `cloud` fixture (conftest.py): its namespace prefix


# (driver, labels, what the cluster network must say about itself)
MODES = {
    "flannel-vxlan": ("flannel", {"flannel_backend": "vxlan"}, {"backend": "vxlan"}),
    "flannel-host-gw": ("flannel", {"flannel_backend": "host-gw"}, {"backend": "host-gw"}),
    "calico-direct": ("calico", {}, {"vxlan": "Never", "ipip": "Off"}),
    "calico-vxlan": ("calico", {"calico_ipv4pool_vxlan": "Always"}, {"vxlan": "Always"}),
    "calico-ipip": ("calico", {"calico_ipv4pool_ipip": "Always"}, {"ipip": "Always"}),
}


def refused_here(cloud: Cloud, mode: str) -> None:
    """Skip ``mode`` with the reason if this kernel cannot realize it, after checking that
    the API refuses it, naming the missing feature."""
    from netbay.dataplane import features

    if mode != "calico-ipip":
        return
    found = features.detect(only={"ipip"}).get("ipip")
    if found is not None and found.available:
        return
    driver, labels, _ = MODES[mode]
    r = ci(cloud).post("/clustertemplates", json={
        "name": f"{mode}-refused", "coe": "kubernetes", "network_driver": driver,
        "external_network_id": "public", "labels": labels})
    assert r.status_code == 400 and "kernel feature ipip" in r.text, r.text
    pytest.skip(f"calico IP-in-IP: this host's kernel lacks ipip ({found.detail if found else 'not detected'})")


@pytest.mark.parametrize("mode", list(MODES))
def test_pods_across_nodes(cloud: Cloud, mode: str) -> None:
    """Pods on different minions talk (ICMP, TCP, no NAT) and reach another node;
    scale 2 → 4: pods on the new nodes reach the old ones; back to 2: the removed nodes
    leave no route, FDB or neighbour entry on any node."""
    refused_here(cloud, mode)
    driver, labels, config = MODES[mode]
    cid = make_cluster(cloud, mode, labels, 2, driver)
    net = clusternet(cloud, cid)
    assert net["driver"] == driver and {k: net["config"][k] for k in config} == config
    minions = [n for n in net["nodes"] if n["role"] == "minion"]
    assert len(minions) == 2 and len(net["leases"]) == 3
    p0, p1 = pod(cloud, f"{mode}-a", cid), pod(cloud, f"{mode}-b", cid)
    assert {p0["node"], p1["node"]} == {m["name"] for m in minions}  # one per minion
    for p in (p0, p1):
        lease = ipaddress.ip_network(net["leases"][p["node"]])
        assert ipaddress.ip_address(p["address"]) in lease and p["address"] != str(lease.network_address + 1)
    reaches(cloud, p0, p1)
    reaches(cloud, p1, p0)
    other = ip_of(next(n for n in net["nodes"] if n["name"] == p1["node"]))
    assert wait_for(lambda: ping(pns(cloud, p0), other, 0.5), 10, 0.05, "a pod to another node's address")

    # Scale up 2 -> 4: both new minions are programmed on every node; their pods reach the old ones.
    scale(cloud, cid, 4)
    grown = clusternet(cloud, cid)
    assert {k: v for k, v in grown["leases"].items() if k in net["leases"]} == net["leases"]   # kept
    new = [n for n in grown["nodes"] if n["name"] not in net["leases"]]
    assert len(new) == 2 and all(n["role"] == "minion" for n in new)
    wait_for(lambda: all(ip_of(n) in text for n in new for name, text in peer_state(cloud, grown).items()
                         if name != n["name"]), 20, 0.1, "the new nodes programmed on every node")
    p2, p3 = (pod(cloud, f"{mode}-{i}", cid, node=n["name"]) for i, n in enumerate(new))
    for a, b in ((p2, p0), (p3, p1), (p1, p2), (p2, p3)):
        reaches(cloud, a, b)

    # Scale down 4 -> 2: the new nodes go (the highest minions first), with their pods, from every peer.
    scale(cloud, cid, 2)
    for p in (p2, p3):
        wait_for(lambda p=p: not netns.exists(pns(cloud, p)), 20, 0.05, "a removed node's pod namespace to go")
        assert cloud.http.get(f"/netbay/v1/pods/{p['id']}").status_code == 404
    after = clusternet(cloud, cid)
    assert after["leases"] == net["leases"]
    traces = [s for n in new for s in (ip_of(n), n["lease"], n["lease"].split("/")[0] + " ")]

    def clean() -> bool:
        return all(t not in text for text in peer_state(cloud, after).values() for t in traces)
    assert wait_for(clean, 20, 0.1, "no trace of the removed nodes on any node"), peer_state(cloud, after)
    reaches(cloud, p0, p1)
    ci(cloud).delete(f"/clusters/{cid}")
    wait_cluster(ci(cloud), cid, ("GONE",))
    for p in (p0, p1):
        assert wait_for(lambda p=p: not netns.exists(pns(cloud, p)), 20, 0.05, "pods to go with the cluster")


def test_same_flannel_network_stays_isolated(cloud: Cloud) -> None:
    """Two clusters on the default flannel_network_cidr get the same leases and pod
    addresses; each cluster's pods reach only their own."""
    a, b = (make_cluster(cloud, name, {"flannel_backend": "vxlan"}, 2) for name in ("iso-a", "iso-b"))
    assert clusternet(cloud, a)["leases"] == clusternet(cloud, b)["leases"]
    a0, a1 = pod(cloud, "a0", a), pod(cloud, "a1", a)
    b0, b1 = pod(cloud, "b0", b, node=a0["node"]), pod(cloud, "b1", b, node=a1["node"])
    only_b = pod(cloud, "b2", b, node=a0["node"])
    assert (a0["address"], a1["address"]) == (b0["address"], b1["address"])
    reaches(cloud, a0, a1)
    reaches(cloud, b0, b1)
    port = 47_001
    listeners = [Listener(pns(cloud, p), p["address"], port, tag) for p, tag in ((a1, b"A"), (b1, b"B"))]
    try:
        # The same address from each cluster's side answers with that cluster's pod.
        assert tcp_read(pns(cloud, a0), a1["address"], port) == b"A"
        assert tcp_read(pns(cloud, b0), b1["address"], port) == b"B"
    finally:
        for listener in listeners:
            listener.close()
    # An address only cluster b has is unreachable from cluster a, on its node and across nodes.
    assert wait_for(lambda: ping(pns(cloud, b1), only_b["address"], 0.5), 10, 0.05, "b1 -> b2")
    assert not ping(pns(cloud, a0), only_b["address"], 1.0)
    assert not ping(pns(cloud, a1), only_b["address"], 1.0)
    for cid in (a, b):
        ci(cloud).delete(f"/clusters/{cid}")
    for cid in (a, b):
        wait_cluster(ci(cloud), cid, ("GONE",))


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
