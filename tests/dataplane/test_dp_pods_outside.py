"""Pods reach the outside of their cluster (issue 13, item 2), checked with real packets.

A cluster (1 master + 2 minions, floating IPs on) with flannel (vxlan) and with calico
(direct routes), ip-masq / natOutgoing at their default (on). A sandbox on another
network behind the cluster's router, and the external network's namespace:

* a pod pings the sandbox and opens TCP to it: the sandbox sees the pod's node's
  address (masqueraded in the node, routed by the router without SNAT);
* a pod opens TCP to a listener in the external network's namespace: the listener
  sees the node's floating IP (masqueraded in the node, then the router's 1:1 SNAT
  of the node's fixed IP) — replies come back both ways;
* pod → pod across nodes keeps the pod's own source address;
* the masquerade is what makes it work: with the node's table removed the pod's
  echo to the sandbox gets no answer (the router has no route to the pod network);
* ``netbay cluster connectivity`` shows the sandbox and the external network as
  columns every node and pod reaches;
* nothing of it is in the root namespace (the package's host guard checks nft).
"""

from __future__ import annotations

import json

import pytest
from clihelp import cli, ok

from netbay.drivers import masq

from .agent_fixtures import Cloud, wait_for
from .cluster_net import tcp_exchange
from .dp_helpers import ping
from .cluster_pods import ci, clusternet, ip_of, pns, pod, reaches, wait_cluster


CLOUD_TAG = "po"   # the shared `cloud` fixture (conftest.py): its namespace prefix


def build(cloud: Cloud, name: str, driver: str, labels: dict) -> str:
    c = ci(cloud)
    r = c.post("/clustertemplates", json={
        "name": name, "coe": "kubernetes", "network_driver": driver, "external_network_id": "public",
        "master_lb_enabled": False, "floating_ip_enabled": True, "labels": labels})
    assert r.status_code == 201, r.text
    r = c.post("/clusters", json={"name": name, "cluster_template_id": r.json()["uuid"], "node_count": 2})
    assert r.status_code == 202, r.text
    cluster = wait_cluster(c, r.json()["uuid"], ("CREATE_COMPLETE", "CREATE_FAILED"))
    assert cluster["status"] == "CREATE_COMPLETE", cluster["status_reason"]
    return cluster["uuid"]


def resource(cloud: Cloud, cid: str, kind: str) -> list[dict]:
    rows = ci(cloud).get(f"/clusters/{cid}/resources").json()["resources"]
    return [r for r in rows if r["type"] == kind]


def sandbox_behind(cloud: Cloud, router_id: str, tag: str) -> tuple[dict, str, list[str]]:
    """A sandbox on a new network attached to ``router_id``, its security group open to
    ICMP and TCP. Returns (sandbox, its address, what to delete afterwards)."""
    net, sub = cloud.network(f"other-{tag}", "10.77.0.0/24")
    cloud.ok(cloud.http.put(f"/network/v2.0/routers/{router_id}/add_router_interface",
                            json={"subnet_id": sub["id"]}))
    sg = cloud.ok(cloud.http.post("/network/v2.0/security-groups", json={"security_group": {
        "name": f"open-{tag}"}}), 201)["security_group"]
    for proto in ("icmp", "tcp"):
        cloud.ok(cloud.http.post("/network/v2.0/security-group-rules", json={"security_group_rule": {
            "security_group_id": sg["id"], "direction": "ingress", "ethertype": "IPv4", "protocol": proto}}), 201)
    port = cloud.ok(cloud.http.post("/network/v2.0/ports", json={"port": {
        "network_id": net["id"], "security_groups": [sg["id"]]}}), 201)["port"]
    sb = cloud.sandbox(f"vm-{tag}", ports=[port["id"]])
    cloud.wait_status(f"/network/v2.0/ports/{port['id']}", "ACTIVE")
    return sb, port["fixed_ips"][0]["ip_address"], [net["id"], sub["id"], sg["id"], port["id"]]


CASES = {"flannel-vxlan": ("flannel", {"flannel_backend": "vxlan"}), "calico-direct": ("calico", {})}


@pytest.mark.parametrize("case", list(CASES))
def test_pods_reach_other_networks_and_the_outside(cloud: Cloud, case: str) -> None:
    driver, labels = CASES[case]
    cid = build(cloud, case, driver, labels)
    net = clusternet(cloud, cid)
    assert net["config"].get("ip_masq" if driver == "flannel" else "nat_outgoing") is True
    minion, other = (n for n in net["nodes"] if n["role"] == "minion")
    a, b = pod(cloud, f"{case}-a", cid, node=minion["name"]), pod(cloud, f"{case}-b", cid, node=other["name"])
    node_ns = cloud.names.sandbox(minion["sandbox_id"])
    pod_net = net["config"]["network" if driver == "flannel" else "pool"]
    assert masq.networks(node_ns) == {pod_net}

    router = resource(cloud, cid, "OS::Neutron::Router")[0]["physical_id"]
    sb, sb_ip, made = sandbox_behind(cloud, router, case)
    sb_ns = cloud.sandbox_ns(sb["id"])
    try:
        # Another network behind the cluster's router: ICMP, and TCP seen from the node's address.
        assert wait_for(lambda: ping(pns(cloud, a), sb_ip, 0.5), 15, 0.05, "pod -> sandbox on another network")
        seen, reply = tcp_exchange(pns(cloud, a), sb_ns, sb_ip)
        assert (seen, reply) == (ip_of(minion), b"pong")

        # The external network's namespace: TCP seen from the node's floating IP.
        public = cloud.ok(cloud.http.get("/network/v2.0/networks", params={"name": "public"}))["networks"][0]
        outside = cloud.names.external(public["id"])
        fip = next(f for f in cloud.ok(cloud.http.get("/network/v2.0/floatingips"))["floatingips"]
                   if f["fixed_ip_address"] == ip_of(minion))
        cloud.wait_status(f"/network/v2.0/floatingips/{fip['id']}", "ACTIVE")
        assert wait_for(lambda: ping(pns(cloud, a), "172.24.4.1", 0.5), 15, 0.05, "pod -> external network")
        seen, reply = tcp_exchange(pns(cloud, a), outside, "172.24.4.1")
        assert (seen, reply) == (fip["floating_ip_address"], b"pong")

        # Pod to pod (across nodes, both ways) keeps the pod's own source.
        reaches(cloud, a, b)
        reaches(cloud, b, a)

        # The connectivity matrix's columns beyond the cluster: the sandbox and the external network.
        r = cli(cloud.server, "cluster", "connectivity", case, "--prefix", cloud.names.prefix, "--json")
        doc = json.loads(r.stdout)
        assert r.returncode == 0, r.stdout + r.stderr
        assert {(o["kind"], o["name"], o["address"]) for o in doc["outside"]} == {
            ("sandbox", f"vm-{case}", sb_ip), ("external", "public", "172.24.4.1")}
        assert len(doc["outside_cells"]) == 2 * 5 and all(c["reachable"] for c in doc["outside_cells"])
        assert doc["summary"]["outside"] == {"cells": 10, "probed": 10, "reachable": 10}
        text = ok(cli(cloud.server, "cluster", "connectivity", case, "--prefix", cloud.names.prefix))
        assert f"outside vm-{case}" in text and "external public" in text and "10/10 cells reachable" in text

        # Without the node's masquerade the echo leaves with the pod's address and no answer
        # comes back (the router has no route to the pod network); with it back, it does.
        masq.remove(node_ns)
        assert not ping(pns(cloud, a), sb_ip, 0.5, count=2)
        masq.ensure(node_ns, [pod_net])
        assert wait_for(lambda: ping(pns(cloud, a), sb_ip, 0.5), 15, 0.05, "pod -> sandbox again")
    finally:
        cloud.delete_sandbox(sb["id"])
        net_id, sub_id, sg_id, port_id = made
        cloud.ok(cloud.http.put(f"/network/v2.0/routers/{router}/remove_router_interface",
                                json={"subnet_id": sub_id}))
        cloud.http.delete(f"/network/v2.0/ports/{port_id}")
        cloud.http.delete(f"/network/v2.0/networks/{net_id}")
        cloud.http.delete(f"/network/v2.0/security-groups/{sg_id}")
    ci(cloud).delete(f"/clusters/{cid}")
    wait_cluster(ci(cloud), cid, ("GONE",))
