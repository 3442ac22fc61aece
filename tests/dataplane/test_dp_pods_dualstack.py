"""A dual-stack flannel cluster through the whole product (issue 28.5), with packets.

The template's ``flannel_ipv6_network_cidr`` is accepted and stored in the cluster's
typed config; the agent's realizer drives the flannel driver, which gives every node
its IPv6 lease (paired with its IPv4 one) and every pod its IPv6 address beside the
IPv4 one: pods on two minions talk over both families, each seeing the other's own
address (no NAT between pods); the pods API shows each pod's ``address6``.
"""

from __future__ import annotations

from netbay.dataplane import rtnl as kernel
from netbay.drivers import registry
from netbay.drivers.node import Node

from .agent_fixtures import Cloud
from .cluster_net import tcp_exchange
from .cluster_pods import clusternet, make_cluster, pns, pod, reaches

CLOUD_TAG = "p6"   # the shared `cloud` fixture (conftest.py): its namespace prefix


def test_pods_of_a_dual_stack_flannel_cluster_talk_over_both_families(cloud: Cloud) -> None:
    cid = make_cluster(cloud, "dual", {"flannel_ipv6_network_cidr": "fd00:10::/56"}, 2)
    net = clusternet(cloud, cid)
    assert net["config"]["network6"] == "fd00:10::/56"
    driver = registry.make("flannel", net["config"])
    minion, other = (n for n in net["nodes"] if n["role"] == "minion")
    a, b = pod(cloud, "dual-a", cid, node=minion["name"]), pod(cloud, "dual-b", cid, node=other["name"])
    reaches(cloud, a, b)

    def address6(p: dict, n: dict) -> str:
        return driver.address6(Node(cloud.names.sandbox(n["sandbox_id"]), n["address"], n["lease"]), p["address"])

    a6, b6 = address6(a, minion), address6(b, other)
    assert a6.startswith("fd00:10:") and b6.startswith("fd00:10:") and a6 != b6
    assert (a["address6"], b["address6"]) == (a6, b6)     # the pods API shows them
    pod_a = kernel.rtnl(pns(cloud, a))
    assert f"{a6}/64" in pod_a.addresses(pod_a.link("eth0").index)
    assert tcp_exchange(pns(cloud, a), pns(cloud, b), b6) == (a6, b"pong")
    assert tcp_exchange(pns(cloud, b), pns(cloud, a), a6) == (b6, b"pong")
