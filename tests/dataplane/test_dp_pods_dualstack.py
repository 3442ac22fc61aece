"""Dual-stack flannel and calico clusters through the whole product (issue 28.5), with packets.

The template's IPv6 label (``flannel_ipv6_network_cidr``, ``calico_ipv6pool``) is
accepted and stored in the cluster's typed config; the agent's realizer drives the
driver, which gives every node its IPv6 lease (paired with its IPv4 one) and every pod
its IPv6 address beside the IPv4 one: pods on two minions talk over both families,
each seeing the other's own address (no NAT between pods); the pods API shows each
pod's ``address6``.
"""

from __future__ import annotations

import pytest

from netbay.dataplane import rtnl as kernel
from netbay.drivers import registry

from .agent_fixtures import Cloud
from .cluster_net import tcp_exchange
from .cluster_pods import clusternet, make_cluster, pns, pod, reaches
from .k8s_fixtures import policy_quota

CLOUD_TAG = "p6"   # the shared `cloud` fixture (conftest.py): its namespace prefix

# Encapsulated over the nodes' IPv4 network (flannel vxlan, calico VXLAN) and unencapsulated
# (flannel host-gw, calico direct: routed via the peers' link-local addresses, so the node
# ports' neighbour discovery and the minions' group's IPv6 rules carry them).
CASES = {"flannel": {"flannel_ipv6_network_cidr": "fd00:10::/56"},
         "calico": {"calico_ipv6pool": "fd00:20::/64", "calico_ipv4pool_vxlan": "Always"},
         "flannel-host-gw": {"flannel_ipv6_network_cidr": "fd00:11::/56", "flannel_backend": "host-gw"},
         "calico-direct": {"calico_ipv6pool": "fd00:21::/64"}}


@pytest.mark.parametrize("driver", list(CASES))
def test_pods_of_a_dual_stack_cluster_talk_over_both_families(cloud: Cloud, driver: str) -> None:
    policy_quota(cloud)      # four clusters' groups in one project: past Neutron's default 10
    cid = make_cluster(cloud, f"dual-{driver}", CASES[driver], 2, driver=driver.split("-")[0])
    net = clusternet(cloud, cid)
    config = registry.loaded(driver.split("-")[0], net["config"])
    minion, other = (n for n in net["nodes"] if n["role"] == "minion")
    a = pod(cloud, f"dual-{driver}-a", cid, node=minion["name"])
    b = pod(cloud, f"dual-{driver}-b", cid, node=other["name"])
    reaches(cloud, a, b)
    a6, b6 = config.pod_address6(minion["lease"], a["address"]), config.pod_address6(other["lease"], b["address"])
    assert a6.startswith("fd00:") and b6.startswith("fd00:") and a6 != b6
    assert (a["address6"], b["address6"]) == (a6, b6)     # the pods API shows them
    pod_a = kernel.rtnl(pns(cloud, a))
    assert any(cidr.startswith(f"{a6}/") for cidr in pod_a.addresses(pod_a.link("eth0").index))
    assert tcp_exchange(pns(cloud, a), pns(cloud, b), b6) == (a6, b"pong")
    assert tcp_exchange(pns(cloud, b), pns(cloud, a), a6) == (b6, b"pong")
