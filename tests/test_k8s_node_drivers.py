"""Kubernetes on flannel and calico clusters, without packets: what the drivers declare,
the cluster IPs and Service ports the nodes answer, kube-proxy's nftables diff, and the
calico policy tables (the packet tests: tests/dataplane/test_dp_k8s_drivers.py and the
calico lab of test_dp_k8s_policy.py)."""

from __future__ import annotations

from lightkube import codecs

from netbay.drivers import registry
from netbay.k8s.kubeproxy import SLOTS, ServicePortRule, commands, elements, whole
from netbay.k8s.nodecluster import cluster_ips, policy_status, proxy_rules
from netbay.k8s.nodepolicy import ruleset
from netbay.k8s.objects import desired, parse
from netbay.k8s.policy import Cluster, Namespace, Pod
from netbay.k8s.policy.translate import translate

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
spec: {type: NodePort, selector: {app: web}, ports: [{port: 80, targetPort: http, nodePort: 30080}]}
---
apiVersion: v1
kind: Service
metadata: {name: fixed, namespace: shop}
spec: {clusterIP: 10.254.0.77, selector: {app: none}, ports: [{port: 53, protocol: UDP}]}
---
apiVersion: v1
kind: Service
metadata: {name: headless, namespace: shop}
spec: {clusterIP: None, selector: {app: web}, ports: [{port: 80}]}
"""


def test_drivers_declare_who_answers_services_and_enforces_policy() -> None:
    kuryr, flannel, calico, docker = (registry.get(n) for n in ("kuryr", "flannel", "calico", "docker"))
    assert kuryr and flannel and calico and docker
    assert (kuryr.services, kuryr.policy) == ("load-balancers", "security-groups")
    assert (calico.services, calico.policy) == ("nodes", "nodes") and calico.enforces_policy
    assert (flannel.services, flannel.policy) == ("nodes", "") and not flannel.enforces_policy
    assert not docker.takes_k8s
    status = policy_status(flannel)["conditions"][0]
    assert (status["status"], status["reason"]) == ("False", "NotEnforced")
    assert "not enforced by flannel" in status["message"]
    assert policy_status(calico)["conditions"][0]["status"] == "True"


def test_cluster_ips_and_service_ports() -> None:
    want = desired(parse(APP))
    vips = cluster_ips(want)
    assert vips[("shop", "fixed")] == "10.254.0.77" and ("shop", "headless") not in vips
    assert vips[("shop", "web")].startswith("10.254.") and vips == cluster_ips(want), "stable"
    rules = {r.key: r for r in proxy_rules(want, vips, {("shop", "web-0"): "10.100.1.2",
                                                         ("shop", "web-1"): "10.100.2.2"})}
    web = rules["shop/web/TCP/80"]
    assert web.backends == (("10.100.1.2", 8080), ("10.100.2.2", 8080)) and web.node_port == 30080
    assert rules["shop/fixed/UDP/53"].backends == ()


def test_a_change_sends_only_what_changed() -> None:
    t = "element ip netbay-k8s-proxy"
    a = ServicePortRule("s/a/TCP/80", "10.254.0.20", "TCP", 80, (("10.1.0.2", 80),))
    b = ServicePortRule("s/b/TCP/80", "10.254.0.21", "TCP", 80, (("10.1.0.3", 80),), 30001)
    made = whole({a.key: a})
    assert made[:3] == ["add table ip netbay-k8s-proxy", "delete table ip netbay-k8s-proxy",
                         "add table ip netbay-k8s-proxy"]
    assert len(elements(b)) == 2 * SLOTS   # every slot, on the cluster IP and on the node port
    added = commands({a.key: a}, {a.key: a, b.key: b})
    assert [c.split(" {")[0] for c in added] == [f"add {t} hairpin", f"add {t} nodeport-backends",
                                                 f"add {t} service-backends"]
    assert "10.254.0.21 . tcp . 80 . 63 : 10.1.0.3 . 80" in added[2] and "10.254.0.20" not in added[2]
    # a second backend: only the slots it takes change (delete, then add with the new value)
    moved = ServicePortRule(b.key, b.cluster_ip, "TCP", 80, (("10.1.0.3", 80), ("10.1.0.4", 80)), 30001)
    change = commands({a.key: a, b.key: b}, {a.key: a, b.key: moved})
    assert [c.split(" {")[0] for c in change] == [f"delete {t} nodeport-backends", f"delete {t} service-backends",
                                                  f"add {t} hairpin", f"add {t} nodeport-backends",
                                                  f"add {t} service-backends"]
    assert "10.254.0.21 . tcp . 80 . 1 : 10.1.0.4 . 80" in change[4] and ". 0 :" not in change[4]
    gone = commands({a.key: a, b.key: b}, {a.key: a})
    assert all(c.startswith("delete") and "10.254.0.20" not in c for c in gone)
    assert commands({a.key: a}, {a.key: a}) == []
    # a backend two Service ports share stays in the hairpin set until the last one goes
    twin = ServicePortRule("s/twin/TCP/81", "10.254.0.22", "TCP", 81, a.backends)
    assert not any("hairpin" in x for x in commands({a.key: a}, {a.key: a, twin.key: twin}))
    assert not any("hairpin" in x for x in commands({a.key: a, twin.key: twin}, {twin.key: twin}))
    assert f"delete {t} hairpin {{ 10.1.0.2 . 10.1.0.2 }}" in commands({twin.key: twin}, {})
    # a cluster IP given up and taken in one change: deleted before it is added again
    a2 = ServicePortRule(a.key, "10.254.0.99", "TCP", 80, a.backends)
    c = ServicePortRule("s/c/TCP/80", a.cluster_ip, "TCP", 80, (("10.1.0.5", 80),))
    swap = commands({a.key: a}, {a.key: a2, c.key: c})
    assert swap[0].startswith(f"delete {t} service-backends") and "10.254.0.20 . tcp . 80 . 0" in swap[0]
    assert all(x.startswith("add") for x in swap[1:])
    # no ready backend: the cluster IP drops what it gets
    empty = ServicePortRule("s/d/UDP/53", "10.254.0.30", "UDP", 53, ())
    assert elements(empty) == {("no-endpoints", "10.254.0.30 . udp . 53"): None}


def test_calico_policy_table_holds_only_the_nodes_isolated_pods() -> None:
    pods = [Pod("x", "a", "p1", "192.168.0.66", {"pod": "a"}), Pod("x", "b", "p2", "192.168.0.67", {"pod": "b"}),
            Pod("y", "a", "p3", "192.168.0.130", {"pod": "a"})]
    policy = codecs.from_dict({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                               "metadata": {"name": "a-from-b", "namespace": "x"},
                               "spec": {"podSelector": {"matchLabels": {"pod": "a"}},
                                        "ingress": [{"from": [{"podSelector": {"matchLabels": {"pod": "b"}}}],
                                                     "ports": [{"port": 80}]}]}})
    cluster = Cluster.of([Namespace("x"), Namespace("y")], pods, [policy], nodes=["10.0.0.2/32"])
    text = ruleset(translate(cluster), cluster, ["x/a", "x/b"])
    assert "ip daddr vmap { 192.168.0.66 : goto" in text, "x/a isolated for ingress on its node"
    assert "192.168.0.67 : goto" not in text, "x/b is open: no entry"
    assert "ip saddr vmap" not in text, "nobody isolated for egress"
    assert "tcp dport 80 accept" in text and "{ 192.168.0.67 }" in text   # the peer set: x/b
    assert "ip saddr 10.0.0.2/32 accept" in text                           # the node always reaches its pods
    other = ruleset(translate(cluster), cluster, ["y/a"])
    assert "vmap" not in other, "a node without isolated pods filters nothing"


def test_calico_policy_on_a_dual_stack_cluster_has_a_table_per_family() -> None:
    """Every policy holds on both families: the ``ip6`` table keys the same chains on the
    pods' IPv6 addresses, peers are IPv6 sets there, an ``ipBlock`` goes to its family's
    table only, the nodes' IPv6 addresses pass; an IPv4 cluster has no ``ip6`` table."""
    pods = [Pod("x", "a", "p1", "192.168.0.66", {"pod": "a"}, (), ("fd00:31::42",)),
            Pod("x", "b", "p2", "192.168.0.67", {"pod": "b"}, (), ("fd00:31::43",))]
    policy = codecs.from_dict({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                               "metadata": {"name": "a", "namespace": "x"},
                               "spec": {"podSelector": {"matchLabels": {"pod": "a"}}, "ingress": [{"from": [
                                   {"podSelector": {"matchLabels": {"pod": "b"}}},
                                   {"ipBlock": {"cidr": "fd00:99::/120", "except": ["fd00:99::/121"]}},
                                   {"ipBlock": {"cidr": "10.9.0.0/24"}}]}]}})
    nodes = ["10.0.0.2/32", "fd00:31::/128"]
    dual = Cluster.of([Namespace("x")], pods, [policy], nodes=nodes, families=("IPv4", "IPv6"))
    text = ruleset(translate(dual), dual, ["x/a", "x/b"])
    v4, v6 = text.split("add table ip6 ", 1)
    assert "ip daddr vmap { 192.168.0.66 : goto" in v4 and "ip saddr 10.9.0.0/24 accept" in v4
    assert "fd00" not in v4, "nothing of IPv6 in the ip table"
    assert "ip6 daddr vmap { fd00:31::42 : goto" in v6 and "fd00:31::43 : goto" not in v6
    assert "type ipv6_addr" in v6 and "{ fd00:31::43 }" in v6, "x/b's IPv6 address is the peer set"
    assert "ip6 saddr fd00:99::80/121 accept" in v6 and "fd00:99::/121" not in v6, "the block minus its except"
    assert "10.9.0.0" not in v6 and "ip6 saddr fd00:31::/128 accept" in v6
    single = Cluster.of([Namespace("x")], pods, [policy], nodes=nodes)
    assert "ip6" not in ruleset(translate(single), single, ["x/a"]), "an IPv4 cluster: the ip table alone"


def test_a_dual_stack_calico_clusters_nodes_and_pods_in_the_policy_model() -> None:
    """The node controller's policy model: pods with both addresses, Services with both
    cluster IPs, and each node's IPv6 block's first two addresses as node addresses."""
    from types import SimpleNamespace

    from netbay.k8s.nodecluster import NodeController
    from netbay.k8s.nodepolicy import policy_cluster
    from netbay.k8s.noderefs import NodeClusterRefs

    calico = registry.get("calico")
    config = registry.stored(calico.parse({"calico_ipv6pool": "fd00:31::/64"}))
    leases = {"m0": "192.168.0.0/26", "n0": "192.168.0.64/26"}
    refs = NodeClusterRefs("c", calico, ({"name": "n0", "address": "10.0.0.5/24"},), leases, config=config)
    assert refs.leases6 == ["fd00:31::/122", "fd00:31::40/122"]
    assert NodeClusterRefs("c", calico, (), leases, config=registry.stored(calico.parse({}))).leases6 == []
    addresses = NodeController.node_addresses(SimpleNamespace(refs=refs), refs.leases6)
    assert {"10.0.0.5/32", "192.168.0.64/32", "192.168.0.65/32", "fd00:31::40/128", "fd00:31::41/128"} \
        <= set(addresses)
    want = desired(parse(APP))
    pods = {("shop", "web-0"): {"id": "p0", "address": "192.168.0.66", "address6": "fd00:31::42"},
            ("shop", "web-1"): {"id": "p1", "address": "192.168.0.67"}}
    model = policy_cluster(want, pods, {("shop", "web"): ("10.254.0.9", "fd00:254::9")}, addresses,
                           ("IPv4", "IPv6"))
    assert model.families == ("IPv4", "IPv6") and model.pods["shop/web-0"].ips_of("IPv6") == ("fd00:31::42",)
    assert model.pods["shop/web-1"].ips_of("IPv6") == () and model.services["shop/web"].more_ips == ("fd00:254::9",)


def test_a_pass_reuses_what_did_not_change() -> None:
    """The node controller's pass costs what changed: an unchanged Service body is not
    parsed again, and its rules are the same objects (the proxy's diff skips them); a
    changed body, or a change in the pods the rules came from, is worked out afresh."""
    from netbay.k8s.proxyrules import RulesMemo
    from netbay.k8s.objects import Memo

    bodies = parse(APP)
    memo: Memo = {}
    first = desired(bodies, (), memo)
    again = desired(bodies, (), memo)
    assert again.services[("shop", "web")] is first.services[("shop", "web")]
    assert again.services == desired(bodies).services and again.pods == desired(bodies).pods
    changed = [b if b["metadata"]["name"] != "fixed" else {**b, "spec": {**b["spec"], "clusterIP": "10.254.0.78"}}
               for b in bodies]
    third = desired(changed, (), memo)
    assert third.services[("shop", "fixed")].cluster_ip == "10.254.0.78"
    assert third.services[("shop", "web")] is first.services[("shop", "web")]
    assert len(memo) == len(changed), "the memo holds only the bodies of the last pass"

    addresses = {("shop", "web-0"): "10.100.1.2", ("shop", "web-1"): "10.100.2.2"}
    rules = RulesMemo()
    vips = cluster_ips(third)
    one = {r.key: r for r in proxy_rules(third, vips, addresses, rules)}
    two = {r.key: r for r in proxy_rules(desired(changed, (), memo), vips, addresses, rules)}
    assert all(two[k] is one[k] for k in one), "unchanged: the same rules"
    moved = {**addresses, ("shop", "web-1"): "10.100.2.9"}
    three = {r.key: r for r in proxy_rules(third, vips, moved, rules)}
    assert three["shop/web/TCP/80"].backends == (("10.100.1.2", 8080), ("10.100.2.9", 8080))
    assert three == {r.key: r for r in proxy_rules(third, vips, moved)}, "as without the memo"


def test_external_ips_and_a_load_balancer_address_are_answered_like_the_cluster_ip() -> None:
    """On a node cluster kube-proxy answers a Service's externalIPs and a LoadBalancer
    Service's loadBalancerIP on every node (masqueraded: node-port marks)."""
    from netbay.k8s.kubeproxy import NODEPORT_MARK

    text = """
apiVersion: v1
kind: Service
metadata: {name: lb, namespace: shop}
spec: {type: LoadBalancer, loadBalancerIP: 203.0.113.7, externalIPs: [198.51.100.9], selector: {app: web},
       ports: [{port: 80, targetPort: 8080}]}
"""
    want = desired(parse(text))
    [rule] = proxy_rules(want, cluster_ips(want), {})
    assert rule.external == ("198.51.100.9", "203.0.113.7") and rule.node_port
    assert set(elements(rule)) == {("no-endpoints", f"{ip} . tcp . 80") for ip in
                                   (rule.cluster_ip, "198.51.100.9", "203.0.113.7")}
    served = ServicePortRule(rule.key, rule.cluster_ip, "TCP", 80, (("10.1.0.2", 8080),), None, rule.external)
    ext = {k: v for (name, k), v in elements(served).items() if name == "external-backends"}
    assert len(ext) == 2 * SLOTS and ext[f"203.0.113.7 . tcp . 80 . {NODEPORT_MARK:#x}"] == "10.1.0.2 . 8080"
    assert any("jump externals" in c for c in whole({served.key: served}))


def test_a_load_balancer_services_status_names_the_address_the_nodes_answer() -> None:
    """As a cloud provider writes it: ``ingress`` the loadBalancerIP (what every node
    answers); without one, an empty ``loadBalancer`` (kubectl's <pending>); other types none."""
    from netbay.k8s.svcstatus import on_node_cluster

    lb = {"spec": {"type": "LoadBalancer", "loadBalancerIP": "203.0.113.7"}}
    assert on_node_cluster(lb) == {"loadBalancer": {"ingress": [{"ip": "203.0.113.7"}]}}
    assert on_node_cluster({"spec": {"type": "LoadBalancer"}}) == {"loadBalancer": {}}
    assert on_node_cluster({"spec": {"type": "NodePort", "externalIPs": ["198.51.100.9"]}}) is None
    assert on_node_cluster({"spec": {}}) is None


DUAL = """
apiVersion: v1
kind: Service
metadata: {name: both, namespace: shop}
spec: {type: NodePort, ipFamilyPolicy: PreferDualStack, selector: {app: web},
       ports: [{port: 80, targetPort: 8080, nodePort: 30080}]}
---
apiVersion: v1
kind: Service
metadata: {name: six, namespace: shop}
spec: {ipFamilies: [IPv6], selector: {app: web}, ports: [{port: 9, protocol: SCTP}]}
---
apiVersion: v1
kind: Service
metadata: {name: four, namespace: shop}
spec: {selector: {app: web}, ports: [{port: 81, targetPort: 8080}]}
"""


def test_dual_stack_services_on_a_node_cluster() -> None:
    """With ``<driver>_service_cidr_ipv6`` a Service gets a cluster IP of each family it
    asks for (Kubernetes' rules), the IPv6 one answered by the ``ip6`` table with the pods'
    IPv6 addresses behind it and the same node port; without it, IPv6 is refused by name."""
    import pytest

    from netbay.k8s.families import FamilyError
    from netbay.k8s.nodeips import allocate, families_of, pinned, ranges_of, service_families

    config = {"service6": "fd00:254::/108"}
    assert families_of(config) == ("IPv4", "IPv6") and families_of({}) == ("IPv4",)
    want = desired(parse(DUAL))
    ips = allocate(want, ranges_of(config))
    both, six, four = ips[("shop", "both")], ips[("shop", "six")], ips[("shop", "four")]
    assert both[0].startswith("10.254.") and both[1].startswith("fd00:254::") and len(both) == 2
    assert six[0].startswith("fd00:254::") and len(six) == 1 and len(four) == 1 and "." in four[0]
    assert ips == allocate(want, ranges_of(config)), "stable"
    assert pinned({"clusterIP": None}, both) == {"clusterIP": both[0], "clusterIPs": list(both)}
    # pinned, they stay what they were
    again = desired(parse(DUAL.replace("ipFamilyPolicy: PreferDualStack",
                                       f"ipFamilyPolicy: PreferDualStack, clusterIPs: [{both[0]}, '{both[1]}']")))
    assert allocate(again, ranges_of(config))[("shop", "both")] == both

    addresses = {("shop", "web-0"): "10.100.1.2", ("shop", "web-1"): "10.100.2.2"}
    addresses6 = {("shop", "web-0"): "fd00:10:0:1::2", ("shop", "web-1"): "fd00:10:0:2::2"}
    pods = desired(parse(APP))
    want.pods.update(pods.pods)
    vips = {k: v[0] for k, v in ips.items()}
    rules = {r.key: r for r in proxy_rules(want, vips, addresses, more_ips=ips, addresses6=addresses6)}
    v6 = rules["shop/both/TCP/80@IPv6"]
    assert v6.cluster_ip == both[1] and v6.node_port == rules["shop/both/TCP/80"].node_port == 30080
    assert v6.backends == (("fd00:10:0:1::2", 8080), ("fd00:10:0:2::2", 8080))
    assert rules["shop/both/TCP/80"].backends == (("10.100.1.2", 8080), ("10.100.2.2", 8080))
    sctp = rules["shop/six/SCTP/9@IPv6"]
    assert sctp.cluster_ip == six[0] and sctp.protocol == "SCTP" and len(sctp.backends) == 2
    text = "\n".join(whole(rules, ipv6=True))
    assert "add table ip6 netbay-k8s-proxy" in text and "dnat ip6 to ip6 daddr" in text
    assert "add element ip6 netbay-k8s-proxy service-backends {" in text
    assert f"{both[1]} . tcp . 80 . 0 : fd00:10:0:1::2 . 8080" in text
    assert not any(":" in line.split("{")[1].split(" . ")[0] for line in text.splitlines()
                   if line.startswith("add element ip netbay-k8s-proxy service-backends")), "IPv6 only in ip6"
    assert f"{six[0]} . sctp . 9 . 0 :" in text
    assert "add table ip6" not in "\n".join(whole({}))   # an IPv4 cluster: no ip6 table

    with pytest.raises(FamilyError, match="flannel_service_cidr_ipv6"):
        service_families(want.services[("shop", "both")].__class__(
            "shop", "x", "ClusterIP", None, (), None, ip_family_policy="RequireDualStack"), ("IPv4",),
            "flannel_service_cidr_ipv6")
    assert ("shop", "six") not in allocate(want, ranges_of({})), "IPv6 only, on an IPv4 cluster: none"


def test_the_ipv6_service_range_label_is_checked() -> None:
    from netbay.drivers.labelspec import LabelError

    flannel, calico = registry.get("flannel"), registry.get("calico")
    assert flannel and calico
    ok = flannel.parse({"flannel_ipv6_network_cidr": "fd00:10::/56", "flannel_service_cidr_ipv6": "fd00:254::/108"})
    assert ok.service6 == "fd00:254::/108"
    assert calico.parse({"calico_ipv6pool": "fd00:20::/64", "calico_service_cidr_ipv6": "fd00:255::/112"}).service6
    assert flannel.parse({}).service6 == "" and calico.parse({}).service6 == ""
    for labels, why in [({"flannel_service_cidr_ipv6": "fd00:254::/108"}, "set flannel_ipv6_network_cidr too"),
                        ({"flannel_ipv6_network_cidr": "fd00:10::/56", "flannel_service_cidr_ipv6": "fd00:254::/64"},
                         "too large"),
                        ({"flannel_ipv6_network_cidr": "fd00:10::/56", "flannel_service_cidr_ipv6": "fd00:10::/108"},
                         "overlap")]:
        try:
            flannel.parse(labels)
        except LabelError as exc:
            assert why in str(exc)
        else:
            raise AssertionError(f"{labels} accepted")
