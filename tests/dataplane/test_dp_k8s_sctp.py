"""An SCTP Service on a kuryr cluster, with packets: its load balancer's SCTP listener and
pool (netbay's nftables provider, as the amphora's LVS forwards SCTP) take an INIT to the
cluster IP to a pod on either node, whose INIT ACK comes back to a client pod of another
namespace — the node drivers' kube-proxy path is test_dp_k8s_node_dualstack.py's."""

from __future__ import annotations

import pytest

from netbay.k8s.controller import Controller
from netbay.k8s.objects import parse

from .agent_fixtures import Cloud, wait_for
from .cluster_pods import make_cluster
from .k8s_fixtures import ctrl, lb, lb_tree, pod_ns, port_of  # noqa: F401 - ctrl: a fixture
from .sctp_fixtures import SCTP_PORT, SctpResponder, sctp_answers

CLOUD_TAG = "kt"
CLOUD_K8S = True


@pytest.fixture(scope="module")
def cluster(cloud: Cloud) -> str:
    return make_cluster(cloud, "sctp1", {"kuryr_pod_subnet_pool": "10.12.0.0/16"}, 1, driver="kuryr")


APP = """
apiVersion: v1
kind: Service
metadata: {name: diameter, namespace: shop}
spec: {selector: {app: diameter}, ports: [{port: 3868, protocol: SCTP}]}
---
apiVersion: v1
kind: Pod
metadata: {name: client, namespace: other}
spec: {containers: [{name: c, image: busybox}]}
"""
SERVER = """
apiVersion: v1
kind: Pod
metadata: {name: d-N, namespace: shop, labels: {app: diameter}}
spec: {nodeName: NODE, containers: [{name: c, image: busybox}]}
---"""


def test_an_sctp_service_answers_through_its_load_balancer(ctrl: Controller) -> None:
    servers = "".join(SERVER.replace("d-N", f"d-{i}").replace("NODE", node) for i, node in enumerate(ctrl.refs.nodes))
    report = ctrl.apply(parse(servers + APP))
    assert not report.events, report.events
    found = lb(ctrl, "shop/diameter")
    members = lb_tree(ctrl, found)
    assert list(members) == [f"SCTP:{SCTP_PORT}"], members   # an SCTP listener and pool
    pods = [f"d-{i}" for i in range(len(ctrl.refs.nodes))]
    assert sorted(a for a, _ in members[f"SCTP:{SCTP_PORT}"]) == \
        sorted(port_of(ctrl, "shop", p)["fixed_ips"][0]["ip_address"] for p in pods)
    responders = [SctpResponder(pod_ns(ctrl, "shop", p)) for p in pods]
    try:
        client, vip = pod_ns(ctrl, "other", "client"), found["vip_address"]
        wait_for(lambda: sctp_answers(client, vip, SCTP_PORT, 0.5), 20, 0.05, f"SCTP at {vip}:{SCTP_PORT}")
        assert not sctp_answers(client, vip, SCTP_PORT + 1, 0.5), "only the Service's port"
    finally:
        for r in responders:
            r.close()
