"""Cluster DNS and Docker-runtime pods on flannel and calico clusters, without packets:
kube-dns' address and rules, the records from netbay pods, the pods as DockerPods reads
them, and the agent reaping a resolver whose pod is gone (the packet tests:
tests/dataplane/test_dp_k8s_node_dns.py, test_dp_k8s_node_pods.py)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from netbay.dataplane.names import Names
from netbay.k8s.dns import records
from netbay.k8s.dns.nodes import NodeResolver, dns_address, pod_ports
from netbay.k8s.dns.reaper import ResolverReaper
from netbay.k8s.nodecluster import cluster_ips
from netbay.k8s.nodedocker import as_ports
from netbay.k8s.objects import desired, parse

APP = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, image: busybox}]}
---
apiVersion: v1
kind: Service
metadata: {name: db, namespace: shop}
spec: {clusterIP: None, selector: {app: web}, ports: [{name: sql, port: 5432}]}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec: {selector: {app: web}, ports: [{name: http, port: 80}]}
"""

PODS = {("shop", "web-0"): {"id": "p0", "address": "10.100.1.2", "status": "ACTIVE", "node": "m0"},
        ("shop", "web-1"): {"id": "p1", "address": "10.100.2.2", "status": "BUILD", "node": "m1", "runtime": "docker"}}


def test_kube_dns_is_the_tenth_address_and_no_service_takes_it() -> None:
    want = desired(parse(APP))
    assert dns_address("10.254.0.0/16") == "10.254.0.10"
    assert "10.254.0.10" not in cluster_ips(want).values()
    resolver = NodeResolver(None, Names("t-"), "c", ("192.0.2.1",), "10.254.0.0/16")  # type: ignore[arg-type]
    assert [(r.protocol, r.port, r.backends) for r in resolver.rules()] == [("UDP", 53, ()), ("TCP", 53, ())]
    resolver.pod = {"id": "r", "address": "10.100.1.3", "status": "ACTIVE"}
    assert {r.cluster_ip for r in resolver.rules()} == {"10.254.0.10"}
    assert {r.backends for r in resolver.rules()} == {(("10.100.1.3", 53),)}


def test_records_from_netbay_pods() -> None:
    """A headless Service's endpoints are its plugged (ACTIVE) pods; names go upstream."""
    want = desired(parse(APP))
    built = records.build(want, pod_ports(PODS), cluster_ips(want), upstream=("192.0.2.1",))
    assert built["A"]["db.shop.svc.cluster.local"] == ["10.100.1.2"]
    assert built["A"]["web.shop.svc.cluster.local"] == [cluster_ips(want)[("shop", "web")]]
    assert built["upstream"] == ["192.0.2.1"]


def test_docker_pods_as_ports_on_their_node_lease() -> None:
    ports, segments = as_ports(PODS, {"m0": "10.100.1.0/24", "m1": "10.100.2.0/24"})
    assert ports[("shop", "web-1")]["id"] == "p1" and ports[("shop", "web-1")]["network_id"] == "node/m1"
    assert segments["node/m1"][1] == {"id": "node/m1", "cidr": "10.100.2.0/24", "gateway_ip": "10.100.2.1"}
    assert as_ports(PODS, {})[0] == {}, "a pod whose node has no lease (yet) is left for the next pass"


def test_the_agent_reaps_a_resolver_whose_pod_is_gone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NETBAY_STATE_DIR", str(tmp_path))
    root = tmp_path / "t-k8s-dns"
    for name in ("pod-live", "pod-gone", "port-live"):
        (root / name).mkdir(parents=True)
    reaper = ResolverReaper(Names("t-"))
    state = SimpleNamespace(ports={"port-live": {}}, table=lambda c: {"live": {}} if c == "pods" else {})
    reaper.before_snapshot()
    reaper.resync(state, None, {})
    assert sorted(p.name for p in root.iterdir()) == ["pod-live", "port-live"]
    state = SimpleNamespace(ports={"port-live": {}}, table=lambda c: {})   # the pod deleted: a change
    reaper.apply(state, None, {"pods": {"live"}}, {})
    assert sorted(p.name for p in root.iterdir()) == ["port-live"]
