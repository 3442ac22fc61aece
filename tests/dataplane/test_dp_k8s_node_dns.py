"""Cluster DNS on flannel (vxlan) and calico clusters, with real packets (issue 27, item 4).

The resolver runs in a pod of the cluster (an address from its node's lease) behind
``kube-dns`` on the service range's 10th address, which every node answers for UDP
and TCP 53 (kube-proxy's maps). Clients are real: glibc's resolver (``getent``, through
resolv.conf's search list, in a process ``ip netns exec`` started in the pod, which
sees the pod's ``/etc/netns`` files), ``netbay k8s exec`` (resolv.conf and the Service
variables), and dnslib queries from inside the pod's namespace. Names outside the
cluster go to the template's ``dns_nameserver``: the test's own dnslib server in the
external network's namespace, reached from the resolver pod through its node's
outgoing NAT and the cluster's router. A name that exists nowhere is NXDOMAIN, not
REFUSED. Once the cluster's objects are gone, so are the resolver pod, its process
and files, and the pods' ``/etc/netns`` files; ``netbay k8s sweep`` spares a live
cluster's resolver, a killed one is started again by the next pass, and a cluster deleted with no controller running has it reaped by
the agent.
"""

from __future__ import annotations

import ipaddress
import os
import signal
import sys
from collections.abc import Iterator

import pytest
from dnslib import QTYPE, RCODE

from netbay.client import Api
from netbay.dataplane import netns
from netbay.k8s.controllers import open_controller
from netbay.k8s.dns.nodes import LABEL
from netbay.k8s.dns.podfiles import etc_dir
from netbay.k8s.dns.process import state_root
from netbay.k8s.nodecluster import NodeController
from netbay.k8s.objects import parse
from netbay.store.db import Store

from .agent_fixtures import Cloud, wait_for
from .cluster_net import Listener, tcp_read
from .cluster_pods import clusternet, make_cluster
from .dns_upstream import UPSTREAM_ADDRESS, UPSTREAM_NAME, Upstream, query, upstream_server
from .k8s_fixtures import getent, in_pod, netbay_exec
from tests import zygote

CLOUD_TAG = "kn"   # the shared `cloud` fixture (conftest.py): its namespace prefix
CLOUD_K8S = True   # ... with the Kubernetes mapping's host leftovers swept

MODES = {
    "flannel-vxlan": ("flannel", {"flannel_backend": "vxlan"}),
    "calico-direct": ("calico", {}),
}

APP = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, image: busybox, ports: [{name: http, containerPort: 8080}]}]}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec: {selector: {app: web}, ports: [{name: http, port: 80, targetPort: http}]}
---
apiVersion: v1
kind: Service
metadata: {name: db, namespace: shop}
spec: {clusterIP: None, selector: {app: web}, ports: [{name: sql, port: 5432}]}
---
apiVersion: v1
kind: Pod
metadata: {name: client, namespace: shop, labels: {app: client}}
spec: {containers: [{name: c, image: busybox}]}
"""


@pytest.fixture(scope="module")
def upstream(cloud: Cloud) -> Iterator[tuple[str, Upstream]]:
    with upstream_server(cloud) as found:
        yield found


@pytest.fixture(params=list(MODES))
def k8s(request: pytest.FixtureRequest, cloud: Cloud, upstream: tuple[str, Upstream]
        ) -> Iterator[tuple[NodeController, dict]]:
    driver, labels = MODES[request.param]
    cid = make_cluster(cloud, f"dns-{request.param}", labels, 2, driver, dns_nameserver=upstream[0])
    api, store = Api(cloud.server.url, cloud.server.token), Store(cloud.server.database_url)
    ctrl = open_controller(api, store, cid, cloud.names)
    try:
        assert isinstance(ctrl, NodeController)
        yield ctrl, clusternet(cloud, cid)
    finally:
        try:
            ctrl.delete_all()
        finally:
            ctrl.close()
            api.close()
            store.dispose()
            cloud.http.delete(f"/container-infra/v1/clusters/{cid}")


def test_cluster_dns_on_node_drivers(cloud: Cloud, k8s: tuple[NodeController, dict],
                                     upstream: tuple[str, Upstream]) -> None:
    ctrl, net = k8s
    report = ctrl.apply(parse(APP))
    assert not report.events, report.events
    found = ctrl.api.call("GET", "/netbay/v1/pods", cluster_id=ctrl.refs.cluster_id)["pods"]
    pods = {p["labels"]["netbay-k8s"]: p for p in found if "netbay-k8s" in p["labels"]}
    resolver = next(p for p in found if p["labels"].get(LABEL))
    assert resolver["status"] == "ACTIVE"   # CoreDNS' pod: an address from its node's lease
    assert ipaddress.ip_address(resolver["address"]) in ipaddress.ip_network(net["leases"][resolver["node"]])
    dns, vip = ctrl.dns.address, ctrl.vips[("shop", "web")]
    assert dns == "10.254.0.10"   # kube-dns' cluster IP: the service range's 10th address
    client = cloud.names.pod(pods["shop/client"]["id"])
    web = sorted(pods[f"shop/web-{i}"]["address"] for i in range(2))
    assert f"nameserver {dns}" in (etc_dir(client) / "resolv.conf").read_text()
    # Service names through glibc's resolver (the search list), over the nodes' kube-dns
    assert wait_for(lambda: getent(client, "web.shop.svc.cluster.local") == [vip], 15, 0.1)
    assert getent(client, "web") == [vip] and getent(client, "web.shop") == [vip]
    assert getent(client, "db.shop.svc.cluster.local") == web, "headless: the ready pods"
    # and over TCP too, by busybox nslookup, and the name connects to the Service
    assert [str(r.rdata) for r in query(client, dns, "web.shop.svc.cluster.local", "A", tcp=True).rr] == [vip]
    done = in_pod(client, "busybox", "nslookup", "web.shop.svc.cluster.local", dns)
    assert vip in done.stdout, done.stdout + done.stderr
    listeners = [Listener(cloud.names.pod(pods[f"shop/web-{i}"]["id"]), pods[f"shop/web-{i}"]["address"], 8080,
                          b"web") for i in range(2)]
    try:
        assert wait_for(lambda: tcp_read(client, getent(client, "web")[0], 80, 0.5) == b"web", 10, 0.05)
    finally:
        for s in listeners:
            s.close()
    srv = query(client, dns, "_http._tcp.web.shop.svc.cluster.local", "SRV")
    assert [(r.rdata.port, str(r.rdata.target).rstrip(".")) for r in srv.rr] == [(80, "web.shop.svc.cluster.local")]
    nx = query(client, dns, "nope.shop.svc.cluster.local", "A")
    assert nx.header.rcode == RCODE.NXDOMAIN and nx.auth and nx.auth[0].rtype == QTYPE.SOA
    # outside the cluster domain: the template's dns_nameserver answers, through the resolver pod
    assert wait_for(lambda: getent(client, UPSTREAM_NAME) == [UPSTREAM_ADDRESS], 15, 0.2)
    nowhere = query(client, dns, "nowhere.example.test", "A")
    assert nowhere.header.rcode == RCODE.NXDOMAIN, "as the upstream says, not REFUSED"
    assert in_pod(client, "getent", "hosts", "nowhere.example.test").returncode == 2
    assert not [n for n in upstream[1].asked if n.endswith("cluster.local")], "the cluster's names stay inside"
    # `netbay k8s exec`: resolv.conf and the Service variables of the pod's namespace
    shown = netbay_exec(cloud, ctrl, "shop/client", "sh", "-c", "echo $WEB_SERVICE_HOST; getent hosts web")
    assert shown.stdout.split()[:2] == [vip, vip], (shown.stdout, shown.stderr)
    # every object gone: the resolver pod, its process and files, the pods' /etc/netns files
    ctrl.delete(list(ctrl.keys()))
    assert not [p for p in ctrl.api.call("GET", "/netbay/v1/pods", cluster_id=ctrl.refs.cluster_id)["pods"]]
    assert not (state_root(cloud.names.prefix) / f"pod-{resolver['id']}").exists()
    assert wait_for(lambda: not etc_dir(client).exists(), 10, 0.05, "the client's /etc/netns files")


def test_sweep_spares_it_and_a_cluster_delete_stops_it(cloud: Cloud) -> None:
    """``netbay k8s sweep`` leaves a live cluster's resolver answering; the cluster's delete
    (no controller running, no sweep) takes its pod, and the agent then its process and files."""
    from .cluster_pods import ci, wait_cluster
    from .k8s_fixtures import cli_env

    cid = make_cluster(cloud, "dns-gone", {}, 1, "calico")
    api, store = Api(cloud.server.url, cloud.server.token), Store(cloud.server.database_url)
    ctrl = open_controller(api, store, cid, cloud.names)
    try:
        ctrl.apply(parse(APP))
        process = ctrl.dns.process
        assert process is not None and ctrl.dns.pod is not None
        pid, pod_ns = process.pid(), cloud.names.pod(ctrl.dns.pod["id"])
        assert pid is not None
        swept = zygote.run([sys.executable, "-m", "netbay.cli.main", "k8s", "sweep", "--url", cloud.server.url,
                            "--prefix", cloud.names.prefix], env=cli_env(cloud), capture_output=True,
                           text=True, timeout=120, check=False)
        assert swept.returncode == 0 and "resolver" not in swept.stdout, swept.stdout + swept.stderr
        assert process.serving() == pid, "a live cluster's resolver is no orphan"
        os.kill(pid, signal.SIGKILL)   # the resolver dies: the next (fast) pass starts it again
        assert wait_for(lambda: process.serving() is None, 10, 0.05, "the killed resolver gone")
        assert not ctrl.apply(parse(APP)).events
        pid = process.serving()
        assert pid is not None and process is ctrl.dns.process
        client = cloud.names.pod(next(p["id"] for p in api.call("GET", "/netbay/v1/pods", cluster_id=cid)["pods"]
                                      if p["labels"].get("netbay-k8s") == "shop/client"))
        assert wait_for(lambda: getent(client, "web") == [ctrl.vips[("shop", "web")]], 10, 0.1)
        ctrl.close()   # the controller is gone long before its cluster
        assert ci(cloud).delete(f"/clusters/{cid}").status_code == 204
        wait_cluster(ci(cloud), cid, ("GONE",))
        assert wait_for(lambda: process.pid() is None and not process.dir.exists() and not netns.exists(pod_ns),
                        15, 0.05, "the agent reaps the resolver of a deleted pod")
    finally:
        api.close()
        store.dispose()
