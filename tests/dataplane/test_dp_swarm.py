"""Swarm clusters with the ``docker`` network driver (Docker's overlay), end to end.

Built by the conductor, wired by the agent, checked with real packets: the cluster
gets a container network (it was none before: pod create answered 409), one
overlay subnet across its nodes; pods on two nodes share the subnet's prefix and
exchange ICMP and TCP (no NAT) through VXLAN; the masters' security group opens
UDP 4789.
"""

from __future__ import annotations

import ipaddress

import pytest

from netbay.dataplane import rtnl as kernel
from netbay.drivers.docker.driver import DEVICE

from .agent_fixtures import Cloud
from .cluster_pods import ci, clusternet, make_cluster, pod, pns, reaches, wait_cluster


CLOUD_TAG = "sw"   # the shared `cloud` fixture (conftest.py): its namespace prefix


@pytest.mark.parametrize("coe", ["swarm", "swarm-mode"])
def test_pods_on_two_swarm_nodes_share_the_overlay(cloud: Cloud, coe: str) -> None:
    cid = make_cluster(cloud, f"sw-{coe}", {"docker_overlay_cidr": "10.210.0.0/16"}, 2, driver=None, coe=coe)
    net = clusternet(cloud, cid)
    assert net["driver"] == "docker" and net["config"] == {"network": "10.210.0.0/16"}
    minions = [n for n in net["nodes"] if n["role"] == "minion"]
    a, b = (pod(cloud, f"{coe}-{i}", cid, node=m["name"]) for i, m in enumerate(minions))
    for p in (a, b):
        assert ipaddress.ip_address(p["address"]) in ipaddress.ip_network(net["leases"][p["node"]])
        eth0 = kernel.link_index(pns(cloud, p), "eth0")
        assert kernel.rtnl(pns(cloud, p)).addresses(eth0)[0] == f"{p['address']}/16"   # one subnet
    reaches(cloud, a, b)
    reaches(cloud, b, a)
    node_ns = cloud.names.sandbox(minions[0]["sandbox_id"])
    info = kernel.vxlan_info(node_ns, DEVICE)
    assert info is not None and (info.vni, info.port) == (4096, 4789)
    ci(cloud).delete(f"/clusters/{cid}")
    wait_cluster(ci(cloud), cid, ("GONE",))


def test_overlay_label_checked(cloud: Cloud) -> None:
    r = ci(cloud).post("/clustertemplates", json={"name": "bad", "coe": "swarm", "external_network_id": "public",
                                                  "labels": {"docker_overlay_cidr": "10.9.9.0/26"}})
    assert r.status_code == 400 and "docker_overlay_cidr" in r.text, r.text
