"""Dual-stack and SCTP Services on flannel (vxlan, host-gw) and calico (VXLAN, direct
routes) clusters, with packets.

A cluster of a master and two minions whose template sets the driver's IPv6 pod network
and IPv6 service range (``flannel_service_cidr_ipv6``, ``calico_service_cidr_ipv6``);
``netbay k8s``'s node controller applies a Deployment of two replicas (one per minion)
and dual-stack Services in front of them:

* both replicas answer a client pod at the Service's IPv6 cluster IP (from the IPv6
  service range; the nodes' ``ip6`` table, backends the pods' IPv6 addresses) and still at
  its IPv4 one; a replica reaches itself and the other through the IPv6 one (hairpin);
* the cluster resolver answers the Service's name with both cluster IPs (A and AAAA);
* the NodePort Service answers at one minion's IPv6 address (the clusternet's ``address6``
  of the node: flannel's ``cni0`` gateway, calico's IPv6 block's first address — the VXLAN
  tunnel's, or with direct routes a /128 on the node's ``lo``) from another node and from
  a pod, both replicas; a node port no Service has is not answered there;
* a Service's IPv6 ``externalIPs`` address is answered by both replicas, from a pod (its
  node's prerouting) and from another node's own namespace (its output hook), by the
  ``externals`` rules of the nodes' ``ip6`` table — masqueraded to the node's IPv6 address,
  on every mode;
* an SCTP Service answers an INIT with an INIT ACK (:func:`netbay.dataplane.sctp.check`
  from the client pod) at both its cluster IPs — a responder on a raw socket in each
  replica, as this kernel has no SCTP stack (its conntrack and NAT do SCTP);
* on calico, a NetworkPolicy isolating the replicas holds on both families (the nodes'
  ``ip`` and ``ip6`` policy tables, :mod:`netbay.k8s.nodepolicy`): the client is refused at
  a replica's IPv4 and IPv6 addresses and at the IPv6 cluster IP, while another node
  still reaches it (IPv4, and IPv6 where the node has an IPv6 address);
* a Service asking for IPv6 on an IPv4-only cluster is refused by name.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
from collections.abc import Iterator

import pytest

from netbay.client import Api
from netbay.dataplane.nft import Nft
from netbay.drivers import registry
from netbay.k8s.controllers import open_controller
from netbay.k8s.families import FamilyError
from netbay.k8s.kubeproxy import TABLE
from netbay.k8s.nodecluster import NodeController
from netbay.k8s.objects import parse
from netbay.store.db import Store

from .agent_fixtures import Cloud, wait_for
from .cluster_net import Listener, tcp_read
from .cluster_pods import clusternet, make_cluster
from .dns_upstream import query
from .k8s_fixtures import node_pods, policy_quota
from .sctp_fixtures import SCTP_PORT, SctpResponder, sctp_answers

CLOUD_TAG = "ks"

SERVICES6 = "fd00:254::/108"
MODES = {
    "flannel-vxlan": ("flannel", {"flannel_backend": "vxlan", "flannel_ipv6_network_cidr": "fd00:30::/56",
                                  "flannel_service_cidr_ipv6": SERVICES6}),
    "calico-vxlan": ("calico", {"calico_ipv4pool_vxlan": "Always", "calico_ipv6pool": "fd00:31::/64",
                                "calico_service_cidr_ipv6": SERVICES6}),
    # unencapsulated: IPv6 routed via the peers' link-local addresses
    "flannel-host-gw": ("flannel", {"flannel_backend": "host-gw", "flannel_ipv6_network_cidr": "fd00:34::/56",
                                    "flannel_service_cidr_ipv6": SERVICES6}),
    "calico-direct": ("calico", {"calico_ipv6pool": "fd00:35::/64", "calico_service_cidr_ipv6": SERVICES6}),
}
EXTERNAL6 = "2001:db8:ee::9"

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
spec: {ipFamilyPolicy: PreferDualStack, selector: {app: web}, ports: [{port: 80, targetPort: http}]}
---
apiVersion: v1
kind: Service
metadata: {name: web-np, namespace: shop}
spec: {type: NodePort, ipFamilyPolicy: RequireDualStack, selector: {app: web},
       ports: [{port: 81, targetPort: 8080, nodePort: 30081}]}
---
apiVersion: v1
kind: Service
metadata: {name: diameter, namespace: shop}
spec: {ipFamilyPolicy: PreferDualStack, selector: {app: web}, ports: [{port: 3868, protocol: SCTP}]}
---
apiVersion: v1
kind: Service
metadata: {name: ext, namespace: shop}
spec: {ipFamilyPolicy: PreferDualStack, externalIPs: ["2001:db8:ee::9"], selector: {app: web},
       ports: [{port: 82, targetPort: 8080}]}
---
apiVersion: v1
kind: Pod
metadata: {name: client, namespace: shop, labels: {app: client}}
spec: {containers: [{name: c, image: busybox}]}
"""

FRIENDS_ONLY = """
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: web-from-friends, namespace: shop}
spec: {podSelector: {matchLabels: {app: web}}, ingress: [{from: [{podSelector: {matchLabels: {app: friend}}}]}]}
"""

SIX_ONLY = """
apiVersion: v1
kind: Service
metadata: {name: six, namespace: shop}
spec: {ipFamilies: [IPv6], selector: {app: web}, ports: [{port: 80}]}
"""


def answers(ns: str, ip: str, port: int, want: set[bytes], timeout: float = 20) -> set[bytes]:
    """Ask until every answer in ``want`` was seen (bounded); the answers seen."""
    seen: set[bytes] = set()

    def done() -> bool:
        got = tcp_read(ns, ip, port, 0.5)
        if got:
            seen.add(got)
        return want <= seen
    wait_for(done, timeout, 0.02, f"{sorted(want)} from [{ip}]:{port} in {ns}")
    return seen


def node_address6(mode: str, net: dict, node: dict) -> str:
    """A node's own IPv6 address as the cluster network reports it (``address6``): its IPv6
    lease's gateway (flannel's ``cni0``) or first address (calico's: the VXLAN tunnel's, or
    with direct routes a /128 on ``lo``)."""
    lease6 = ipaddress.ip_network(registry.loaded(MODES[mode][0], net["config"]).lease6(node["lease"]))
    assert node["address6"] == str(lease6.network_address + (1 if mode.startswith("flannel") else 0)), node
    return str(node["address6"])


def route_like(ns: str, dst: str, like: str) -> None:
    """In ``ns``, route ``dst`` as ``like`` is routed (the same next hop and device): the
    outside world's route to an address a node answers beyond its own."""
    out = subprocess.run(["ip", "-j", "-6", "-n", ns, "route", "get", like], capture_output=True, text=True,
                         check=True, timeout=30)
    hop = json.loads(out.stdout)[0]
    via = ["via", hop["gateway"], "onlink"] if hop.get("gateway") else []   # flannel.1's next hops are onlink
    subprocess.run(["ip", "-6", "-n", ns, "route", "replace", f"{dst}/128", *via, "dev", hop["dev"]],
                   check=True, timeout=30)


def ip6_externals(ns: str) -> str:
    """The external-backends elements of node ``ns``'s ``ip6`` proxy table, as JSON text."""
    with Nft(ns) as nft:
        objs = nft.list_ruleset()
    return json.dumps([o["map"].get("elem") for o in objs if "map" in o and o["map"].get("table") == TABLE
                       and o["map"].get("family") == "ip6" and o["map"]["name"] == "external-backends"])


@pytest.fixture(params=list(MODES))
def k8s(request: pytest.FixtureRequest, cloud: Cloud) -> Iterator[tuple[str, NodeController, dict]]:
    policy_quota(cloud)
    mode = request.param
    driver, labels = MODES[mode]
    cid = make_cluster(cloud, f"k6-{mode}", labels, 2, driver)
    api, store = Api(cloud.server.url, cloud.server.token), Store(cloud.server.database_url)
    ctrl = open_controller(api, store, cid, cloud.names)
    try:
        assert isinstance(ctrl, NodeController)
        yield mode, ctrl, clusternet(cloud, cid)
    finally:
        try:
            ctrl.delete_all()
        finally:
            ctrl.close()
            api.close()
            store.dispose()
            cloud.http.delete(f"/container-infra/v1/clusters/{cid}")


def test_dual_stack_and_sctp_services_on_node_drivers(cloud: Cloud, k8s: tuple[str, NodeController, dict]) -> None:
    mode, ctrl, net = k8s
    report = ctrl.apply(parse(APP))
    assert not report.events, report.events
    pods = node_pods(ctrl)
    web = [pods["shop/web-0"], pods["shop/web-1"]]
    assert {p["node"] for p in web} == {n["name"] for n in net["nodes"] if n["role"] == "minion"}
    assert all(p.get("address6") for p in web), "dual-stack pods"
    servers = [Listener(cloud.names.pod(p["id"]), "::", 8080, p["name"].encode()) for p in web]
    responders = [SctpResponder(cloud.names.pod(p["id"])) for p in web]
    try:
        names = {p["name"].encode() for p in web}
        client = cloud.names.pod(pods["shop/client"]["id"])
        v4, v6 = ctrl.cluster_ips[("shop", "web")]
        assert ipaddress.ip_address(v6) in ipaddress.ip_network(SERVICES6) and ctrl.vips[("shop", "web")] == v4
        assert answers(client, v6, 80, names) == names, "both replicas through the IPv6 cluster IP"
        assert answers(client, v4, 80, names) == names, "and through the IPv4 one"
        own = cloud.names.pod(web[0]["id"])   # a replica through its own Service: itself (hairpin) and the other
        assert answers(own, v6, 80, names) == names
        # the cluster resolver (kube-dns) answers the Service's name in both families
        name = "web.shop.svc.cluster.local"
        aaaa = wait_for(lambda: query(client, ctrl.dns.address, name, "AAAA").rr or None, 20, 0.1, f"AAAA {name}")
        assert [str(r.rdata) for r in aaaa] == [v6]
        assert [str(r.rdata) for r in query(client, ctrl.dns.address, name, "A").rr] == [v4]
        # the IPv6 node port of one minion, from the master (another node): both replicas
        master = next(n for n in net["nodes"] if n["role"] == "master")
        node = next(n for n in net["nodes"] if n["name"] == web[0]["node"])
        master_ns = cloud.names.sandbox(master["sandbox_id"])
        node6 = node_address6(mode, net, node)
        assert answers(master_ns, node6, 30081, names) == names
        assert answers(client, node6, 30081, names) == names, "and from a pod"
        assert tcp_read(master_ns, node6, 30082, 0.5) is None, "a node port no Service has"
        # the IPv6 externalIP: from a pod (its node's prerouting) and from the master (its output hook),
        # masqueraded like a node port (to the node's IPv6 address)
        assert EXTERNAL6 in ip6_externals(cloud.names.sandbox(node["sandbox_id"]))
        assert answers(client, EXTERNAL6, 82, names) == names
        route_like(master_ns, EXTERNAL6, node6)
        assert answers(master_ns, EXTERNAL6, 82, names) == names
        assert tcp_read(client, EXTERNAL6, 80, 0.5) is None, "only the Service's own port"
        # SCTP: an INIT to either cluster IP gets its INIT ACK from a replica
        for ip in ctrl.cluster_ips[("shop", "diameter")]:
            wait_for(lambda ip=ip: sctp_answers(client, ip, SCTP_PORT, 0.5), 20, 0.05, f"SCTP at [{ip}]:{SCTP_PORT}")
        assert not sctp_answers(client, v6, SCTP_PORT, 0.5), "the TCP Service's cluster IP has no SCTP port"
        if MODES[mode][0] == "calico":   # NetworkPolicy on both families (issue 27)
            assert not ctrl.apply(parse(FRIENDS_ONLY)).events
            mine = web[0]["name"].encode()
            for ip in (web[0]["address"], web[0]["address6"], v6):
                assert tcp_read(client, ip, 8080 if ip != v6 else 80, 0.5) is None, f"client refused at {ip}"
            assert answers(master_ns, web[0]["address"], 8080, {mine}) == {mine}, "a node still reaches it"
            if node6 is not None:
                assert answers(master_ns, web[0]["address6"], 8080, {mine}) == {mine}, "over IPv6 too"
    finally:
        for r in responders:
            r.close()
        for s in servers:
            s.close()


def test_ipv6_services_refused_by_name_on_an_ipv4_cluster(cloud: Cloud) -> None:
    cid = make_cluster(cloud, "k6-v4only", {"calico_ipv6pool": "fd00:32::/64"}, 1, "calico")
    api, store = Api(cloud.server.url, cloud.server.token), Store(cloud.server.database_url)
    ctrl = open_controller(api, store, cid, cloud.names)
    try:
        assert isinstance(ctrl, NodeController) and ctrl.families == ("IPv4",)
        with pytest.raises(FamilyError, match="calico_service_cidr_ipv6"):
            ctrl.refuse(parse(SIX_ONLY.replace("ipFamilies: [IPv6]", "ipFamilyPolicy: RequireDualStack")))
        with pytest.raises(FamilyError, match="IPv6"):
            ctrl.refuse(parse(SIX_ONLY))
    finally:
        try:
            ctrl.delete_all()
        finally:
            ctrl.close()
            api.close()
            store.dispose()
            cloud.http.delete(f"/container-infra/v1/clusters/{cid}")
