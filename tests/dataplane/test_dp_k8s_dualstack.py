"""A dual-stack kuryr cluster, checked with real packets (issue 28 item 4).

The cluster's labels ``kuryr_pod_subnet_pool_ipv6`` / ``kuryr_service_cidr_ipv6``
make its builder add an IPv6 pod pool and an IPv6 service subnet. Checked: a
namespace's network has one subnet of each family, from the cluster's pools; a pod's
port has an address of each and its ``eth0`` both, with a default route per family;
pods of two namespaces reach each other over IPv6 through the router; a Service with
``ipFamilyPolicy: RequireDualStack`` gets a cluster IP of each family (one load
balancer each, members of that family) and its name answers A and AAAA at the
cluster resolver; an IPv6 cluster IP spreads connections over pods on two nodes; a
NetworkPolicy's pod selector admits its pods over both families and an IPv6 ``ipBlock``
that block, the rest dropped over IPv6 as over IPv4.
"""

from __future__ import annotations

import ipaddress
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from dnslib import QTYPE, DNSRecord

from netbay.client import LB, NET
from netbay.dataplane import netns
from netbay.dataplane.rtnl import rtnl
from netbay.k8s.controller import Controller
from netbay.k8s.objects import parse

from .agent_fixtures import Cloud, wait_for
from .cluster_net import Listener, tcp_read
from .cluster_pods import make_cluster
from .k8s_fixtures import ctrl, lb, lb_tree, pod_ns, policy_quota, port_of  # noqa: F401 - ctrl: a fixture

CLOUD_TAG = "k6"   # the shared `cloud` fixture (conftest.py): its namespace prefix
CLOUD_K8S = True   # ... with the Kubernetes mapping's host leftovers swept

POOL6, SERVICES6 = "fd00:10::/56", "fd00:96::/112"


@pytest.fixture(scope="module")
def cluster(cloud: Cloud) -> str:
    policy_quota(cloud)
    return make_cluster(cloud, "dual1", {"kuryr_pod_subnet_pool": "10.10.0.0/16",
                                         "kuryr_pod_subnet_pool_ipv6": POOL6,
                                         "kuryr_service_cidr_ipv6": SERVICES6}, 1, driver="kuryr")


WEB = """
apiVersion: v1
kind: Pod
metadata: {name: web-N, namespace: shop, labels: {app: web}}
spec: {nodeName: NODE, containers: [{name: c, image: busybox, ports: [{name: http, containerPort: 8080}]}]}
---"""
APP = """
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  ipFamilyPolicy: RequireDualStack
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: http}]
---
apiVersion: v1
kind: Pod
metadata: {name: client, namespace: other}
spec: {containers: [{name: c, image: busybox}]}
"""


def addresses(port: dict) -> dict[int, str]:
    """{4: the IPv4 address, 6: the IPv6 one} of a port."""
    return {ipaddress.ip_address(f["ip_address"]).version: f["ip_address"] for f in port["fixed_ips"]}


def APP_NODES(ctrl: Controller) -> str:  # noqa: N802 - a manifest, named like APP
    """APP with one web pod on each node (the master and the minion)."""
    nodes = ctrl.refs.nodes
    assert len(nodes) == 2, nodes
    return "".join(WEB.replace("web-N", f"web-{i}").replace("NODE", node) for i, node in enumerate(nodes)) + APP


@pytest.fixture
def app(ctrl: Controller) -> Iterator[Controller]:
    ctrl.apply(parse(APP_NODES(ctrl)))
    servers = [Listener(pod_ns(ctrl, "shop", n), "::", 8080, n.encode()) for n in ("web-0", "web-1")]
    try:
        yield ctrl
    finally:
        for s in servers:
            s.close()


def test_namespaces_get_a_subnet_of_each_family_and_pods_both_addresses(cloud: Cloud, app: Controller) -> None:
    ctrl = app
    port = port_of(ctrl, "shop", "web-0")
    subnets = ctrl.api.call("GET", f"{NET}/subnets", network_id=port["network_id"])["subnets"]
    by_version = {s["ip_version"]: s for s in subnets}
    assert sorted(by_version) == [4, 6], subnets
    assert by_version[4]["subnetpool_id"] == ctrl.refs.pool_id
    assert by_version[6]["subnetpool_id"] == ctrl.refs.pool6_id
    assert ipaddress.ip_network(by_version[6]["cidr"]).subnet_of(ipaddress.ip_network(POOL6))
    assert ipaddress.ip_network(by_version[6]["cidr"]).prefixlen == 64
    ips = addresses(port)
    assert sorted(ips) == [4, 6] and ipaddress.ip_address(ips[6]) in ipaddress.ip_network(by_version[6]["cidr"])
    # Inside the pod: both addresses on eth0, a default route of each family.
    ns = pod_ns(ctrl, "shop", "web-0")
    inside = rtnl(ns)
    eth = inside.link("eth0")
    assert eth is not None
    have = {a.split("/")[0] for a in inside.addresses(eth.index)}
    assert {ips[4], ips[6]} <= have, have
    cloud.wait_status(f"/network/v2.0/ports/{port['id']}", "ACTIVE")
    # Pod to pod over IPv6 across namespaces, through the cluster's router.
    client = pod_ns(ctrl, "other", "client")
    assert wait_for(lambda: tcp_read(client, addresses(port_of(ctrl, "shop", "web-1"))[6], 8080), 15, 0.2) == b"web-1"
    assert tcp_read(client, addresses(port_of(ctrl, "shop", "web-1"))[4], 8080) == b"web-1"


def query(ns: str, server: str, name: str, qtype: str, tcp: bool = False) -> DNSRecord:
    with netns.entered(ns):
        raw = DNSRecord.question(name, qtype).send(server, 53, tcp=tcp, timeout=2, ipv6=":" in server)
    return DNSRecord.parse(raw)


def test_require_dual_stack_service_gets_both_cluster_ips_and_aaaa(app: Controller) -> None:
    ctrl = app
    v4, v6 = lb(ctrl, "shop/web"), lb(ctrl, "shop/web@IPv6")
    assert ipaddress.ip_address(v4["vip_address"]) in ipaddress.ip_network("10.96.0.0/16")
    assert ipaddress.ip_address(v6["vip_address"]) in ipaddress.ip_network(SERVICES6)
    pods6 = sorted(addresses(port_of(ctrl, "shop", n))[6] for n in ("web-0", "web-1"))
    assert lb_tree(ctrl, v6) == {"TCP:80": [(ip, 8080) for ip in pods6]}
    assert ctrl.cluster_ips[("shop", "web")] == (v4["vip_address"], v6["vip_address"])
    # The cluster resolver answers both families for the Service's name.
    client = pod_ns(ctrl, "other", "client")
    dns = ctrl.discovery.resolver.address
    name = "web.shop.svc.cluster.local"
    a = wait_for(lambda: [str(r.rdata) for r in query(client, dns, name, "A").rr] or None, 10, 0.2)
    assert a == [v4["vip_address"]]
    aaaa = query(client, dns, name, "AAAA")
    assert [(r.rtype, str(r.rdata)) for r in aaaa.rr] == [(QTYPE.AAAA, v6["vip_address"])]
    # ... on its IPv6 address too (the 10th of the IPv6 service range), UDP and TCP.
    dns6 = ctrl.discovery.resolver.address6
    assert dns6 == str(ipaddress.ip_network(SERVICES6)[10])
    for tcp in (False, True):
        aaaa6 = query(client, dns6, name, "AAAA", tcp)
        assert [(r.rtype, str(r.rdata)) for r in aaaa6.rr] == [(QTYPE.AAAA, v6["vip_address"])]
    # Pods are told both (a dual-stack kube-dns), IPv4 first; glibc in a pod that has only
    # the IPv6 one resolves through it.
    conf = Path(f"/etc/netns/{client}/resolv.conf").read_text()
    assert [line for line in conf.splitlines() if line.startswith("nameserver")] == [
        f"nameserver {dns}", f"nameserver {dns6}"]
    Path(f"/etc/netns/{client}/resolv.conf").write_text(conf.replace(f"nameserver {dns}\n", ""))
    try:
        got = subprocess.run(["ip", "netns", "exec", client, "getent", "ahostsv6", "web.shop"],
                             capture_output=True, text=True, timeout=10)
        assert got.returncode == 0 and v6["vip_address"] in got.stdout, got
    finally:
        Path(f"/etc/netns/{client}/resolv.conf").write_text(conf)


def test_ipv6_cluster_ip_spreads_over_pods_on_two_nodes(cloud: Cloud, app: Controller) -> None:
    ctrl = app
    v6 = lb(ctrl, "shop/web@IPv6")
    status = wait_for(lambda: (s := ctrl.api.call("GET", f"{LB}/loadbalancers/{v6['id']}")["loadbalancer"]
                               ["provisioning_status"]) in ("ACTIVE", "ERROR") and s, 20, 0.2)
    assert status == "ACTIVE"   # the nftables provider's ``ip6 netbay-lb`` table
    nodes = {port_of(ctrl, "shop", n)["description"] for n in ("web-0", "web-1")}
    assert len(nodes) == 2, nodes   # one pod on each node
    client = pod_ns(ctrl, "other", "client")
    seen: set = set()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not {b"web-0", b"web-1"} <= seen:
        seen.add(tcp_read(client, v6["vip_address"], 80))
    assert {b"web-0", b"web-1"} <= seen, seen


POLICY = """
apiVersion: v1
kind: Pod
metadata: {name: friend, namespace: other, labels: {role: friend}}
spec: {containers: [{name: c, image: busybox}]}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: friends-only, namespace: shop}
spec:
  podSelector: {matchLabels: {app: web}}
  ingress:
  - from: [{namespaceSelector: {}, podSelector: {matchLabels: {role: friend}}}]
  - from: [{ipBlock: {cidr: 'IPV6_BLOCK'}}]
    ports: [{port: 8080}]
"""


def test_network_policy_isolates_over_ipv6_too(app: Controller) -> None:
    """A pod selector allows its pods over both families; an IPv6 ipBlock allows that
    block; everything else is dropped over IPv6 as over IPv4."""
    ctrl = app
    web = addresses(port_of(ctrl, "shop", "web-0"))
    ctrl.apply(parse(APP_NODES(ctrl) + "---" + POLICY.replace("IPV6_BLOCK", "fd00:ffff::/64")))
    friend, client = pod_ns(ctrl, "other", "friend"), pod_ns(ctrl, "other", "client")
    assert wait_for(lambda: tcp_read(friend, web[6], 8080), 15, 0.2) == b"web-0"
    assert tcp_read(friend, web[4], 8080) == b"web-0"
    assert wait_for(lambda: tcp_read(client, web[6], 8080, timeout=0.5) is None, 15, 0.2)
    assert tcp_read(client, web[4], 8080, timeout=0.5) is None
    # The client's own IPv6 address as the ipBlock: it gets in over IPv6 only.
    mine = addresses(port_of(ctrl, "other", "client"))
    ctrl.apply(parse(APP_NODES(ctrl) + "---" + POLICY.replace("IPV6_BLOCK", f"{mine[6]}/128")))
    assert wait_for(lambda: tcp_read(client, web[6], 8080), 15, 0.2) == b"web-0"
    assert tcp_read(client, web[4], 8080, timeout=0.5) is None
