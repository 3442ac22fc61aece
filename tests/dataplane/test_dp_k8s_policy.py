"""NetworkPolicy with Kubernetes semantics, checked with real packets the upstream way.

For each case (after the upstream e2e list, ``test/e2e/network/netpol``) the policies
go through :class:`netbay.k8s.policy.PolicyEngine` into netbay security groups, the
dataplane agent enforces them, and all 81 (pod, pod) pairs of namespaces x, y, z ×
pods a, b, c are probed on TCP/80, TCP/81 and UDP/80 against the expected truth table
(:mod:`.netpol_lab`). Pods are labelled ``pod=<name>``, namespaces ``ns=<name>``.

Every case runs on two labs: ``kuryr`` (security groups on pod ports) and ``calico``
(the same translation enforced in the nodes' nftables, :mod:`netbay.k8s.nodepolicy`);
what only security groups have (API call counts, adopted groups, a load balancer's
VIP) is checked on kuryr only.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from netbay.backends.batch import has_batch
from netbay.k8s.policy import Namespace, PolicyEngine, Service, ServicePort, load_policies
from netbay.k8s.policy.neutron import group_name

from .netpol_lab import NAMESPACES, Lab, build, build_calico, check, np, probe  # noqa: F401 - np: a fixture


@pytest.fixture(scope="module", params=["kuryr", "calico"])
def lab(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    make = build if request.param == "kuryr" else build_calico
    yield from make(tmp_path_factory.mktemp(f"netpol-{request.param}"))


def kuryr_only(lab: Lab, why: str) -> None:
    if lab.kind != "kuryr":
        pytest.skip(f"{lab.kind}: {why}")


def ns_of(key: str) -> str:
    return key.split("/")[0]


def pod_of(key: str) -> str:
    return key.split("/")[1]


ALL: dict = {}
DENY_INGRESS = {"podSelector": {}, "policyTypes": ["Ingress"]}
A = {"matchLabels": {"pod": "a"}}


def only_from(dst: str, allowed: Any) -> Any:
    """Truth: traffic to ``dst`` only when ``allowed(src, proto, port)``; the rest flows."""
    return lambda s, d, proto, port: allowed(s, proto, port) if d == dst else True


# --- the cases ---------------------------------------------------------------------------

def test_default_allows_everything(lab: Lab, np: Any) -> None:
    check(lab, lambda *_: True)


def test_deny_all_ingress(lab: Lab, np: Any) -> None:
    np("x", "deny-ingress", DENY_INGRESS)
    check(lab, lambda s, d, *_: ns_of(d) != "x")


def test_the_method_sees_a_wrong_table(lab: Lab, np: Any) -> None:
    """The probes discriminate: after deny-all ingress in x, an all-allow table is refused
    on exactly the (9 - 1) × 3 pairs into x × 3 probes."""
    np("x", "deny-ingress", DENY_INGRESS)
    check(lab, lambda s, d, *_: ns_of(d) != "x")  # applied (the agent works asynchronously)
    with pytest.raises(AssertionError, match=r"^72 of 243 cells differ"):
        check(lab, lambda *_: True, rounds=2)


def test_deny_all_egress(lab: Lab, np: Any) -> None:
    np("x", "deny-egress", {"podSelector": {}, "policyTypes": ["Egress"]})
    check(lab, lambda s, d, *_: ns_of(s) != "x")


def test_deny_all_ingress_and_egress(lab: Lab, np: Any) -> None:
    np("x", "deny-all", {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]})
    check(lab, lambda s, d, *_: ns_of(s) != "x" and ns_of(d) != "x")


def test_allow_all_ingress_rule(lab: Lab, np: Any) -> None:
    np("x", "deny-ingress", DENY_INGRESS)
    np("x", "allow-all", {"podSelector": {}, "ingress": [{}]})
    check(lab, lambda *_: True)


def test_allow_from_pod_in_same_namespace(lab: Lab, np: Any) -> None:
    np("x", "a-from-b", {"podSelector": A, "ingress": [{"from": [{"podSelector": {"matchLabels": {"pod": "b"}}}]}]})
    check(lab, only_from("x/a", lambda s, *_: s == "x/b"))


def test_allow_from_namespace(lab: Lab, np: Any) -> None:
    np("x", "a-from-y", {"podSelector": A, "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"ns": "y"}}}]}]})
    check(lab, only_from("x/a", lambda s, *_: ns_of(s) == "y"))


def test_allow_from_namespace_by_name_label(lab: Lab, np: Any) -> None:
    np("x", "a-from-z", {"podSelector": A, "ingress": [{"from": [{"namespaceSelector": {
        "matchLabels": {"kubernetes.io/metadata.name": "z"}}}]}]})
    check(lab, only_from("x/a", lambda s, *_: ns_of(s) == "z"))


def test_namespace_and_pod_selector_together(lab: Lab, np: Any) -> None:
    np("x", "a-from-yz-c", {"podSelector": A, "ingress": [{"from": [{
        "namespaceSelector": {"matchExpressions": [{"key": "ns", "operator": "In", "values": ["y", "z"]}]},
        "podSelector": {"matchLabels": {"pod": "c"}}}]}]})
    check(lab, only_from("x/a", lambda s, *_: s in ("y/c", "z/c")))


def test_namespace_or_pod_selector_apart(lab: Lab, np: Any) -> None:
    np("x", "a-from-y-or-b", {"podSelector": A, "ingress": [{"from": [
        {"namespaceSelector": {"matchLabels": {"ns": "y"}}}, {"podSelector": {"matchLabels": {"pod": "b"}}}]}]})
    check(lab, only_from("x/a", lambda s, *_: ns_of(s) == "y" or s == "x/b"))


def test_namespace_selector_not_in(lab: Lab, np: Any) -> None:
    np("x", "a-not-from-x", {"podSelector": A, "ingress": [{"from": [{"namespaceSelector": {
        "matchExpressions": [{"key": "ns", "operator": "NotIn", "values": ["x"]}]}}]}]})
    check(lab, only_from("x/a", lambda s, *_: ns_of(s) != "x"))


def test_pod_selector_match_expressions(lab: Lab, np: Any) -> None:
    np("x", "a-from-bc", {"podSelector": A, "ingress": [{"from": [{"podSelector": {
        "matchExpressions": [{"key": "pod", "operator": "In", "values": ["b", "c"]}]}}]}]})
    check(lab, only_from("x/a", lambda s, *_: s in ("x/b", "x/c")))


def test_all_namespaces_selector(lab: Lab, np: Any) -> None:
    np("x", "a-from-all", {"podSelector": A, "ingress": [{"from": [{"namespaceSelector": {}}]}]})
    check(lab, lambda *_: True)


def test_ingress_on_port_81_only(lab: Lab, np: Any) -> None:
    np("x", "a-81", {"podSelector": A, "ingress": [{"ports": [{"port": 81}]}]})
    check(lab, only_from("x/a", lambda s, proto, port: (proto, port) == ("TCP", 81)))


def test_ingress_on_named_port(lab: Lab, np: Any) -> None:
    np("x", "a-named", {"podSelector": A, "ingress": [{"ports": [{"port": "serve-80-tcp"}]}]})
    check(lab, only_from("x/a", lambda s, proto, port: (proto, port) == ("TCP", 80)))


def test_ingress_on_named_udp_port(lab: Lab, np: Any) -> None:
    np("x", "a-named-udp", {"podSelector": A, "ingress": [{"ports": [{"port": "serve-80-udp", "protocol": "UDP"}]}]})
    check(lab, only_from("x/a", lambda s, proto, port: (proto, port) == ("UDP", 80)))


def test_ingress_port_range_end_port(lab: Lab, np: Any) -> None:
    np("x", "a-80-81", {"podSelector": A, "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"ns": "y"}}}],
                                                       "ports": [{"port": 80, "endPort": 81}]}]})
    check(lab, only_from("x/a", lambda s, proto, port: ns_of(s) == "y" and proto == "TCP"))


def test_ingress_from_ip_block_with_except(lab: Lab, np: Any) -> None:
    yb = lab.pods["y/b"].ip
    np("x", "a-from-cidr", {"podSelector": A, "ingress": [{"from": [{"ipBlock": {
        "cidr": lab.cidrs["y"], "except": [f"{yb}/32"]}}]}]})
    check(lab, only_from("x/a", lambda s, *_: ns_of(s) == "y" and s != "y/b"))


def test_egress_to_namespace_only(lab: Lab, np: Any) -> None:
    np("x", "a-to-y", {"podSelector": A, "policyTypes": ["Egress"],
                       "egress": [{"to": [{"namespaceSelector": {"matchLabels": {"ns": "y"}}}]}]})
    check(lab, lambda s, d, *_: s != "x/a" or ns_of(d) == "y")


def test_egress_deny_with_dns_allowed(lab: Lab, np: Any) -> None:
    np("x", "a-dns-only", {"podSelector": A, "policyTypes": ["Egress"],
                           "egress": [{"ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]}]})
    check(lab, lambda s, d, *_: s != "x/a")
    rules = {(r.protocol, r.port_min) for r in lab.engine.desired.groups["policy:x/a-dns-only"]}
    assert rules == {("udp", 53), ("tcp", 53)}
    # a DNS answer on UDP/53 still reaches x/a's resolver from y/b (egress allowed on 53)
    import socket
    from netbay.dataplane import netns
    with netns.entered(lab.ns_of["y/b"]):
        dns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with netns.entered(lab.ns_of["x/a"]):
        cli = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        dns.bind((lab.pods["y/b"].ip, 53))
        dns.settimeout(2)
        cli.settimeout(2)
        cli.sendto(b"query", (lab.pods["y/b"].ip, 53))
        data, addr = dns.recvfrom(64)
        dns.sendto(b"answer", addr)
        assert data == b"query" and cli.recv(64) == b"answer"
    finally:
        dns.close()
        cli.close()


def test_egress_to_ip_block_with_except(lab: Lab, np: Any) -> None:
    ya = lab.pods["y/a"].ip
    np("x", "a-to-cidr", {"podSelector": A, "policyTypes": ["Egress"], "egress": [{"to": [{"ipBlock": {
        "cidr": lab.cidrs["y"], "except": [f"{ya}/32"]}}]}]})
    check(lab, lambda s, d, *_: s != "x/a" or (ns_of(d) == "y" and d != "y/a"))


def test_egress_on_named_port(lab: Lab, np: Any) -> None:
    np("x", "a-to-81", {"podSelector": A, "policyTypes": ["Egress"],
                        "egress": [{"ports": [{"port": "serve-81-tcp"}]}]})
    check(lab, lambda s, d, proto, port: s != "x/a" or (proto, port) == ("TCP", 81))


def test_policies_are_additive(lab: Lab, np: Any) -> None:
    np("x", "a-from-yb", {"podSelector": A, "ingress": [{"from": [{"namespaceSelector": {}, "podSelector": {
        "matchLabels": {"pod": "b"}}}]}]})
    np("x", "a-from-z", {"podSelector": A, "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"ns": "z"}}}],
                                                        "ports": [{"port": 81}]}]})
    check(lab, only_from("x/a", lambda s, proto, port: pod_of(s) == "b"
                         or (ns_of(s) == "z" and (proto, port) == ("TCP", 81))))


def test_ingress_and_egress_together(lab: Lab, np: Any) -> None:
    np("x", "a-both", {"podSelector": A, "policyTypes": ["Ingress", "Egress"],
                       "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"ns": "y"}}}]}],
                       "egress": [{"to": [{"namespaceSelector": {"matchLabels": {"ns": "z"}}}]}]})
    check(lab, lambda s, d, *_: (d != "x/a" or ns_of(s) == "y") and (s != "x/a" or ns_of(d) == "z"))


def test_egress_type_only_leaves_ingress_open(lab: Lab, np: Any) -> None:
    np("x", "a-egress-only", {"podSelector": A, "policyTypes": ["Egress"],
                              "ingress": [{"from": [{"podSelector": {"matchLabels": {"pod": "nobody"}}}]}],
                              "egress": [{}]})
    check(lab, lambda *_: True)


def test_policy_updated(lab: Lab, np: Any) -> None:
    np("x", "a-from", {"podSelector": A, "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"ns": "y"}}}]}]})
    check(lab, only_from("x/a", lambda s, *_: ns_of(s) == "y"))
    np("x", "a-from", {"podSelector": A, "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"ns": "z"}}}]}]})
    check(lab, only_from("x/a", lambda s, *_: ns_of(s) == "z"))


def test_policy_deleted(lab: Lab, np: Any) -> None:
    np("x", "deny-ingress", DENY_INGRESS)
    check(lab, lambda s, d, *_: ns_of(d) != "x")
    lab.engine.on_policy_deleted("x", "deny-ingress")
    check(lab, lambda *_: True)


def test_pod_label_change_joins_a_peer(lab: Lab, np: Any) -> None:
    np("x", "a-from-b", {"podSelector": A, "ingress": [{"from": [{"podSelector": {"matchLabels": {"pod": "b"}}}]}]})
    check(lab, only_from("x/a", lambda s, *_: s == "x/b"))
    before = lab.engine.desired.groups
    xc = lab.pods["x/c"] = replace(lab.pods["x/c"], labels={"pod": "b"})
    calls = lab.engine.on_pod(xc)
    if lab.kind == "kuryr":
        assert calls == 1, "a label change is one port update, not a rule rewrite"
    assert lab.engine.desired.groups == before
    check(lab, only_from("x/a", lambda s, *_: s in ("x/b", "x/c")))


def test_selected_pod_label_change_leaves_the_policy(lab: Lab, np: Any) -> None:
    np("x", "deny-a", {"podSelector": A, "policyTypes": ["Ingress"]})
    check(lab, only_from("x/a", lambda *_: False))
    lab.pods["x/a"] = replace(lab.pods["x/a"], labels={"pod": "renamed"})
    lab.engine.on_pod(lab.pods["x/a"])
    check(lab, lambda *_: True)


def test_namespace_label_change(lab: Lab, np: Any) -> None:
    np("x", "a-from-y", {"podSelector": A, "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"ns": "y"}}}]}]})
    check(lab, only_from("x/a", lambda s, *_: ns_of(s) == "y"))
    rules = lab.engine.desired.groups
    calls = lab.engine.on_namespace(Namespace("z", {"ns": "y"}))
    assert lab.engine.desired.groups == rules, "no rule changes: z's pods join the peer group"
    if lab.kind == "kuryr":   # z's three ports join it in one batch (one transaction)
        assert calls == 1 and has_batch(lab.engine.groups.net), "the embedded network API takes batches"
    check(lab, only_from("x/a", lambda s, *_: ns_of(s) in ("y", "z")))


def test_node_always_reaches_isolated_pods(lab: Lab, np: Any) -> None:
    np("x", "deny-all", {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]})
    check(lab, lambda s, d, *_: ns_of(s) != "x" and ns_of(d) != "x")
    cells = [("node", f"x/{p}", proto, port) for p in "abc" for proto, port in (("TCP", 80), ("UDP", 80))]
    got = probe(lab, cells, timeout=1.0, sources={"node": lab.node_ns})
    assert all(got.values()), got


def test_manifest_with_several_policies(lab: Lab, np: Any) -> None:
    """Real YAML through lightkube's codecs: deny-all in y plus an allow from x/a."""
    for policy in load_policies("""
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: deny, namespace: y}
spec: {podSelector: {}}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: from-xa, namespace: y}
spec:
  podSelector: {}
  ingress:
  - from:
    - namespaceSelector: {matchLabels: {ns: x}}
      podSelector: {matchLabels: {pod: a}}
"""):
        lab.engine.on_policy(policy)
    try:
        check(lab, lambda s, d, *_: ns_of(d) != "y" or s == "x/a")
    finally:
        lab.engine.on_policy_deleted("y", "deny")
        lab.engine.on_policy_deleted("y", "from-xa")


def test_pod_label_change_leaves_a_peer(lab: Lab, np: Any) -> None:
    np("x", "a-from-b", {"podSelector": A, "ingress": [{"from": [{"podSelector": {"matchLabels": {"pod": "b"}}}]}]})
    check(lab, only_from("x/a", lambda s, *_: s == "x/b"))
    lab.pods["x/b"] = replace(lab.pods["x/b"], labels={"pod": "none"})
    calls = lab.engine.on_pod(lab.pods["x/b"])
    assert calls == 1 or lab.kind != "kuryr", "one port update"   # calico: the nodes holding the peer set
    check(lab, only_from("x/a", lambda *_: False))


def test_restart_adopts_what_exists_and_deletes_what_nothing_wants(lab: Lab, np: Any) -> None:
    kuryr_only(lab, "no security groups to adopt; a node's table is rebuilt whole")
    np("x", "a-from-y", {"podSelector": A, "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"ns": "y"}}}]}]})
    truth = only_from("x/a", lambda s, *_: ns_of(s) == "y")
    check(lab, truth)
    http, tag = lab.cloud.http, lab.engine.groups.tag
    stale = lab.cloud.ok(http.post("/network/v2.0/security-groups", json={"security_group": {
        "name": "k8s-np-left-by-a-crash", "tags": [tag]}}), 201)["security_group"]
    before = dict(lab.engine.groups.ids)
    cluster = lab.cluster()
    cluster.policies = dict(lab.engine.cluster.policies)
    lab.engine.close()  # (waits for its spare-group thread)
    fresh = PolicyEngine(lab.engine.groups.net, tag=tag)  # a new process: knows nothing
    fresh.sync(cluster)
    lab.engine = fresh
    assert fresh.groups.ids == before, "the groups made before the restart are adopted, not re-made"
    assert fresh._refiller is None, "the spares were adopted too"
    tagged = lab.cloud.ok(http.get("/network/v2.0/security-groups", params={"tags": tag}))["security_groups"]
    assert {g["id"] for g in tagged} == set(before.values()) | set(fresh.groups.spares)
    assert stale["id"] not in {g["id"] for g in tagged} and len(fresh.groups.spares) == 4
    assert fresh.sync(cluster) == 0, "a second resync changes nothing"
    check(lab, truth)


def test_restart_before_a_taken_spare_is_named(lab: Lab, np: Any) -> None:
    """A change takes a spare group at no cost and names it just after; an engine that
    stops in between leaves a port in a group still named like a spare (with no rules:
    a deny policy). The next engine must not reuse it as a spare, but replace it."""
    kuryr_only(lab, "no spare security groups")
    groups, http = lab.engine.groups, lab.cloud.http
    groups.refill = lambda: 0  # this engine stops before naming what it takes
    np("x", "deny-a", {"podSelector": A, "policyTypes": ["Ingress"]})
    check(lab, only_from("x/a", lambda *_: False))
    taken = groups.ids["policy:x/deny-a"]
    shown = lab.cloud.ok(http.get(f"/network/v2.0/security-groups/{taken}"))["security_group"]
    assert shown["name"] == "k8s-np-spare" and not shown["security_group_rules"]
    cluster = lab.cluster()
    cluster.policies = dict(lab.engine.cluster.policies)
    fresh = PolicyEngine(groups.net, tag=groups.tag)
    fresh.sync(cluster)
    lab.engine = fresh
    fresh.wait_spares()
    assert taken not in fresh.groups.spares
    assert http.get(f"/network/v2.0/security-groups/{taken}").status_code == 404, "replaced, then deleted"
    named = lab.cloud.ok(http.get(f"/network/v2.0/security-groups/{fresh.groups.ids['policy:x/deny-a']}"))
    assert named["security_group"]["name"] == group_name("policy:x/deny-a")
    check(lab, only_from("x/a", lambda *_: False))


def _connects(ns: str, ip: str, port: int, timeout: float = 0.3) -> bool:
    import socket
    from netbay.dataplane import netns
    with netns.entered(ns):
        s = socket.socket()
    try:
        s.settimeout(timeout)
        s.connect((ip, port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def _eventually(cond: Any, seconds: float = 10.0) -> bool:
    import time
    deadline = time.monotonic() + seconds
    for _ in range(10_000):
        if cond():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return False


def test_egress_to_pods_reaches_their_service_cluster_ip(lab: Lab, np: Any) -> None:
    """A ClusterIP = a netbay load balancer's VIP on the service subnet, y/b its member."""
    kuryr_only(lab, "cluster IPs are the nodes' (test_dp_k8s_drivers), no load balancer")
    from .agent_fixtures import wait_for
    cloud, lb_api = lab.cloud, "/load-balancer/v2/lbaas"

    def active(lb_id: str) -> None:
        wait_for(lambda: cloud.ok(cloud.http.get(f"{lb_api}/loadbalancers/{lb_id}"))["loadbalancer"][
            "provisioning_status"] == "ACTIVE", 30, 0.05, "load balancer ACTIVE")

    lb = cloud.ok(cloud.http.post(f"{lb_api}/loadbalancers", json={"loadbalancer": {
        "name": "svc-web", "vip_subnet_id": lab.subnets["svc"]["id"]}}), 201)["loadbalancer"]
    try:
        active(lb["id"])
        listener = cloud.ok(cloud.http.post(f"{lb_api}/listeners", json={"listener": {
            "loadbalancer_id": lb["id"], "protocol": "TCP", "protocol_port": 8080}}), 201)["listener"]
        active(lb["id"])
        pool = cloud.ok(cloud.http.post(f"{lb_api}/pools", json={"pool": {
            "listener_id": listener["id"], "protocol": "TCP", "lb_algorithm": "ROUND_ROBIN"}}), 201)["pool"]
        active(lb["id"])
        cloud.ok(cloud.http.post(f"{lb_api}/pools/{pool['id']}/members", json={"member": {
            "address": lab.pods["y/b"].ip, "protocol_port": 80, "subnet_id": lab.subnets["y"]["id"]}}), 201)
        active(lb["id"])
        vip = lb["vip_address"]
        assert _eventually(lambda: _connects(lab.ns_of["x/a"], vip, 8080)), "the VIP answers before any policy"
        np("x", "a-to-yb", {"podSelector": A, "policyTypes": ["Egress"], "egress": [{
            "to": [{"namespaceSelector": {"matchLabels": {"ns": "y"}}, "podSelector": {"matchLabels": {"pod": "b"}}}],
            "ports": [{"port": 80}]}]})
        check(lab, lambda s, d, proto, port: s != "x/a" or (d == "y/b" and (proto, port) == ("TCP", 80)))
        assert not _connects(lab.ns_of["x/a"], vip, 8080), "no Service known: its cluster IP is not a pod"
        lab.engine.on_service(Service("y", "web", vip, {"pod": "b"}, (ServicePort(8080, 80),)))
        assert _eventually(lambda: _connects(lab.ns_of["x/a"], vip, 8080)), "egress to y/b allows its Service"
        lab.engine.on_service(Service("y", "web", vip, {"pod": "c"}, (ServicePort(8080, 80),)))
        assert _eventually(lambda: not _connects(lab.ns_of["x/a"], vip, 8080, 0.2)), \
            "a Service in front of pods the policy does not reach stays closed"
    finally:
        lab.engine.on_service_deleted("y", "web")
        cloud.http.delete(f"{lb_api}/loadbalancers/{lb['id']}", params={"cascade": "true"})
