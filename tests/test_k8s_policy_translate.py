"""NetworkPolicy → security groups, the pure translation (no kernel, no server).

The packets are checked in tests/dataplane/test_dp_k8s_policy.py; here the shape of
the groups: who is isolated, which group a peer becomes, what a named port, an
``ipBlock`` with ``except`` or a Service's cluster IP turn into, and bad input.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st
from lightkube import codecs

from netbay.client import Api
from netbay.k8s.policy import (Cluster, ContainerPort, Namespace, Pod, PolicyEngine, Service, ServicePort,
                               load_policies, translate)
from netbay.k8s.policy.translate import NODES, OPEN_EGRESS, OPEN_INGRESS, Rule, ip_block


def np(ns: str, name: str, spec: dict):
    return codecs.from_dict({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                             "metadata": {"name": name, "namespace": ns}, "spec": spec})


def pods(**named: int) -> list[Pod]:
    out = []
    for i, n in enumerate("xyz"):
        for j, p in enumerate("abc"):
            ports = tuple(ContainerPort(k, v) for k, v in named.items()) if p != "c" else \
                tuple(ContainerPort(k, v + 1000) for k, v in named.items())
            out.append(Pod(n, p, f"port-{n}{p}", f"10.{i + 1}.0.{j + 10}", {"pod": p}, ports))
    return out


def cluster(*policies, services=(), **named: int) -> Cluster:
    return Cluster.of([Namespace(n, {"ns": n}) for n in "xyz"], pods(**named), policies, services,
                      nodes=["10.9.0.2"])


A = {"matchLabels": {"pod": "a"}}


def test_no_policy_leaves_every_pod_open() -> None:
    d = translate(cluster())
    assert all(m == {OPEN_INGRESS, OPEN_EGRESS, NODES} for m in d.members.values())
    assert Rule("ingress", "IPv4", remote_ip_prefix="10.9.0.2/32") in d.groups[NODES]
    assert Rule("egress", "IPv4", remote_ip_prefix="10.9.0.2/32") in d.groups[NODES]


def test_policy_types_default_to_ingress_plus_egress_when_egress_rules_exist() -> None:
    ingress_only = translate(cluster(np("x", "p", {"podSelector": A, "ingress": [{}]})))
    assert OPEN_INGRESS not in ingress_only.members["x/a"] and OPEN_EGRESS in ingress_only.members["x/a"]
    both = translate(cluster(np("x", "p", {"podSelector": A, "egress": [{}]})))
    assert OPEN_INGRESS not in both.members["x/a"] and OPEN_EGRESS not in both.members["x/a"]
    assert both.members["x/b"] >= {OPEN_INGRESS, OPEN_EGRESS}  # not selected: untouched


def test_empty_ingress_list_denies_and_empty_rule_allows_all() -> None:
    deny = translate(cluster(np("x", "p", {"podSelector": {}, "policyTypes": ["Ingress"]})))
    assert deny.groups["policy:x/p"] == frozenset()
    allow = translate(cluster(np("x", "p", {"podSelector": {}, "ingress": [{}]})))
    assert allow.groups["policy:x/p"] == {Rule("ingress", "IPv4"), Rule("ingress", "IPv6")}


def test_peer_selectors_become_remote_groups_with_the_matching_pods() -> None:
    d = translate(cluster(np("x", "p", {"podSelector": A, "ingress": [{"from": [
        {"namespaceSelector": {"matchExpressions": [{"key": "ns", "operator": "In", "values": ["y", "z"]}]},
         "podSelector": {"matchLabels": {"pod": "c"}}},
        {"podSelector": {"matchExpressions": [{"key": "pod", "operator": "NotIn", "values": ["a"]}]}}]}]})))
    remotes = sorted(r.remote for r in d.groups["policy:x/p"])
    members = {g: sorted(k for k, m in d.members.items() if g in m) for g in remotes}
    assert sorted(members.values()) == [["x/b", "x/c"], ["y/c", "z/c"]]


def test_equal_selectors_share_one_peer_group() -> None:
    peer = {"from": [{"namespaceSelector": {"matchLabels": {"ns": "y"}}}]}
    d = translate(cluster(np("x", "p1", {"podSelector": A, "ingress": [peer]}),
                          np("z", "p2", {"podSelector": {}, "ingress": [peer]})))
    assert len([k for k in d.groups if k.startswith("peer:")]) == 1


def test_label_changes_move_memberships_and_leave_rules_alone() -> None:
    c = cluster(np("x", "p", {"podSelector": A, "ingress": [{"from": [{"namespaceSelector": {
        "matchLabels": {"ns": "y"}}}]}]}))
    before = translate(c)
    c.namespaces["z"] = Namespace("z", {"ns": "y"})
    c.pods["x/b"] = replace(c.pods["x/b"], labels={"pod": "a"})
    after = translate(c)
    assert after.groups == before.groups
    assert {k for k in after.members if after.members[k] != before.members[k]} == {"z/a", "z/b", "z/c", "x/b"}


def test_exists_and_does_not_exist() -> None:
    d = translate(cluster(np("x", "p", {"podSelector": {"matchExpressions": [
        {"key": "pod", "operator": "Exists"}, {"key": "tier", "operator": "DoesNotExist"}]}, "ingress": []})))
    assert all("policy:x/p" in d.members[f"x/{p}"] for p in "abc")


def test_ip_block_except_splits_the_block() -> None:
    assert ip_block("10.0.0.0/24", ["10.0.0.0/25", "10.0.0.128/26"]) == ["10.0.0.192/26"]
    assert ip_block("10.0.0.0/30", ["10.0.0.1/32"]) == ["10.0.0.0/32", "10.0.0.2/31"]
    with pytest.raises(ValueError, match="not inside"):
        ip_block("10.0.0.0/24", ["10.1.0.0/32"])


def test_named_ingress_port_resolves_per_selected_pod() -> None:
    d = translate(cluster(np("x", "p", {"podSelector": {}, "ingress": [{"ports": [{"port": "http"}]}]}), http=8080))
    sub = {k for k in d.groups if k.startswith("policy:x/p:")}
    assert sub == {"policy:x/p:TCP:http=8080", "policy:x/p:TCP:http=9080"}
    assert "policy:x/p:TCP:http=9080" in d.members["x/c"] and "policy:x/p:TCP:http=8080" in d.members["x/a"]
    assert {(r.protocol, r.port_min) for r in d.groups["policy:x/p:TCP:http=9080"]} == {("tcp", 9080)}


def test_named_egress_port_resolves_per_destination() -> None:
    d = translate(cluster(np("x", "p", {"podSelector": A, "policyTypes": ["Egress"],
                                        "egress": [{"ports": [{"port": "http"}]}]}), http=8080))
    rules = d.groups["policy:x/p"]
    assert {(r.port_min, r.remote is not None) for r in rules} == {(8080, True), (9080, True)}
    by_port = {r.port_min: r.remote for r in rules}
    assert {k for k, m in d.members.items() if by_port[9080] in m} == {"x/c", "y/c", "z/c"}


def test_end_port_and_protocols() -> None:
    d = translate(cluster(np("x", "p", {"podSelector": A, "ingress": [{"ports": [
        {"port": 80, "endPort": 90}, {"port": 53, "protocol": "UDP"}, {"protocol": "SCTP"}]}]})))
    got = {(r.protocol, r.port_min, r.port_max) for r in d.groups["policy:x/p"]}
    assert got == {("tcp", 80, 90), ("udp", 53, 53), ("sctp", None, None)}


def test_egress_to_pods_allows_their_service_cluster_ip() -> None:
    svc = Service("y", "web", "10.96.0.10", {"pod": "b"}, (ServicePort(8000, 80), ServicePort(9000, "http")))
    other = Service("z", "db", "10.96.0.11", {"pod": "a"}, (ServicePort(5432, 5432),))
    d = translate(cluster(np("x", "p", {"podSelector": A, "policyTypes": ["Egress"], "egress": [{
        "to": [{"namespaceSelector": {"matchLabels": {"ns": "y"}}}], "ports": [{"port": 80}]}]}),
        services=[svc, other]))
    vip = {(r.remote_ip_prefix, r.port_min) for r in d.groups["policy:x/p"] if r.remote_ip_prefix}
    assert vip == {("10.96.0.10/32", 8000)}


def test_bad_input_is_refused_before_anything_changes() -> None:
    engine = PolicyEngine(Api("http://127.0.0.1:9", lambda: "no-token"))  # never called: refused first
    with pytest.raises(ValueError, match="operator"):
        engine.on_policy(np("x", "p", {"podSelector": {"matchExpressions": [
            {"key": "a", "operator": "Near"}]}}))
    with pytest.raises(ValueError, match="protocol"):
        engine.on_policy(np("x", "p", {"podSelector": {}, "ingress": [{"ports": [{"protocol": "ICMP"}]}]}))
    with pytest.raises(ValueError, match="not inside"):
        engine.on_policy(np("x", "p", {"podSelector": {}, "ingress": [{"from": [{"ipBlock": {
            "cidr": "10.0.0.0/8", "except": ["192.168.0.0/16"]}}]}]}))
    assert engine.cluster.policies == {}


def test_manifests_parse_through_lightkube() -> None:
    got = load_policies("""
apiVersion: v1
kind: Namespace
metadata: {name: x}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: deny, namespace: x}
spec: {podSelector: {}, policyTypes: [Ingress, Egress]}
""")
    assert [p.metadata.name for p in got] == ["deny"]
    d = translate(cluster(*got))
    assert d.members["x/a"] == {NODES, "policy:x/deny"}


def test_a_label_change_moves_only_that_pods_groups_as_a_whole_translation_would() -> None:
    """relabel() (the engine's path for label changes, O(policies)) against translate()."""
    import random

    from netbay.k8s.policy.translate import relabel
    c = cluster(
        np("x", "deny", {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}),
        np("x", "a-from", {"podSelector": A, "ingress": [{"from": [
            {"namespaceSelector": {"matchLabels": {"ns": "y"}}, "podSelector": {"matchLabels": {"pod": "b"}}},
            {"podSelector": {"matchExpressions": [{"key": "pod", "operator": "In", "values": ["c", "d"]}]}}]}]}),
        np("y", "egress", {"podSelector": {"matchLabels": {"pod": "c"}}, "policyTypes": ["Egress"],
                           "egress": [{"to": [{"namespaceSelector": {}, "podSelector": {"matchLabels": {"pod": "a"}}}]}]}))
    d = translate(c)
    assert not d.pod_dependent
    rng = random.Random(12)
    for _ in range(60):
        key = rng.choice(sorted(c.pods))
        c.pods[key] = replace(c.pods[key], labels={"pod": rng.choice("abcd")})
        fast, full = relabel(c, d, c.pods[key]), translate(c)
        assert fast is not None
        assert fast.members == full.members and fast.groups == full.groups
        d = fast
    named = cluster(np("x", "p", {"podSelector": {}, "ingress": [{"ports": [{"port": "http"}]}]}), http=80)
    assert translate(named).pod_dependent and relabel(named, translate(named), named.pods["x/a"]) is None
    with_svc = cluster(np("x", "p", {"podSelector": A, "egress": [{"to": [{"podSelector": {}}]}]}),
                       services=[Service("x", "s", "10.96.0.1", {"pod": "b"}, (ServicePort(80, 80),))])
    assert translate(with_svc).pod_dependent


def test_a_policy_change_moves_only_the_pods_it_concerns_as_a_whole_translation_would() -> None:
    """repolicy() (the engine's path for policy changes: rules without pods, memberships
    of the pods concerned) against translate(), over random adds, replacements, deletes."""
    import random

    from netbay.k8s.policy.index import PodIndex
    from netbay.k8s.policy.translate import repolicy
    specs = [
        {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]},
        {"podSelector": A, "ingress": [{"from": [
            {"namespaceSelector": {"matchLabels": {"ns": "y"}}, "podSelector": {"matchLabels": {"pod": "b"}}}]}]},
        {"podSelector": {"matchLabels": {"pod": "b"}}, "ingress": [{"from": [{"podSelector": {"matchExpressions": [
            {"key": "pod", "operator": "In", "values": ["c", "d"]}]}}], "ports": [{"port": 80, "endPort": 90}]}]},
        {"podSelector": {"matchLabels": {"pod": "c"}}, "policyTypes": ["Egress"],
         "egress": [{"to": [{"namespaceSelector": {}, "podSelector": A}, {"ipBlock": {"cidr": "10.0.0.0/8"}}]}]},
        {"podSelector": {}, "ingress": [{"from": [{"namespaceSelector": {}}]}]},
    ]
    c = cluster()
    d = translate(c)
    index = PodIndex()
    rng = random.Random(7)
    for _ in range(80):
        ns, name = rng.choice("xyz"), rng.choice(["p", "q", "r"])
        old = c.policies.get(f"{ns}/{name}")
        if old is not None and rng.random() < 0.3:
            del c.policies[f"{ns}/{name}"]
            changed = [old]
        else:
            new = np(ns, name, rng.choice(specs))
            c.policies[f"{ns}/{name}"] = new
            changed = [p for p in (old, new) if p is not None]
        if rng.random() < 0.3:  # pods relabelled meanwhile: the engine's index must follow
            key = rng.choice(sorted(c.pods))
            c.pods[key] = replace(c.pods[key], labels={"pod": rng.choice("abcd")})
            d = translate(c)
        index.sync(c.pods)
        found, full = repolicy(c, d, changed, index), translate(c)
        assert found is not None
        fast, affected = found
        assert fast.members == full.members and fast.groups == full.groups and fast.peers == full.peers
        assert {k for k in c.pods if d.members.get(k) != full.members[k]} <= affected
        d = fast
    named = cluster(np("x", "p", {"podSelector": {}, "ingress": [{"ports": [{"port": "http"}]}]}), http=80)
    assert repolicy(named, translate(cluster(http=80)), list(named.policies.values())) is None


class _AnsweringNet:
    """A network service that accepts every call at once (the engine's own bookkeeping
    is under test, not the service's)."""

    def __init__(self) -> None:
        self.n = 0

    def _id(self) -> str:
        self.n += 1
        return f"id-{self.n}"

    def batch(self, ops: list) -> list:
        out = []
        for op in ops:
            body = op.get("body") or {}
            if op["method"] == "POST":
                out.append({"security_group_rules": [{"id": self._id(), **r} for r in body["security_group_rules"]]})
            else:
                out.append(body if op["path"].startswith("ports/") else {})
        return out

    def create(self, member: str, body: dict) -> dict:
        return {"id": self._id(), "security_group_rules": [], **body}

    def update(self, member: str, obj_id: str, body: dict) -> dict:
        return body

    def delete(self, member: str, obj_id: str) -> None:
        return None

    def list(self, member: str, **filters: object) -> list:
        return []

    def show(self, member: str, obj_id: str) -> dict:
        return {"id": obj_id, "security_groups": []}


def test_the_engine_keeps_its_pod_index_in_step_with_each_event() -> None:
    """The engine follows pod events in its index one pod at a time (not a scan of every
    pod per policy change): after any sequence of events, and a refused one, it is the
    index of the cluster's pods, and a policy change still moves who a translation would."""
    import random

    from netbay.k8s.policy.index import PodIndex

    def shape(ix: PodIndex) -> tuple:
        return (ix._pods, {k: v for k, v in ix._by_ns.items() if v}, {k: v for k, v in ix._by_label.items() if v})

    engine = PolicyEngine(_AnsweringNet(), spares=0)
    engine.sync(cluster())
    rng = random.Random(3)
    for i in range(120):
        ns, name = rng.choice("xyz"), rng.choice("abcdef")
        step = rng.random()
        if step < 0.4:
            old = engine.cluster.pods.get(f"{ns}/{name}")
            ip = old.ip if old else f"10.{'xyz'.index(ns) + 1}.1.{i % 250}"
            engine.on_pod(Pod(ns, name, old.port_id if old else f"port-{i}", ip, {"pod": rng.choice("abcd")}))
        elif step < 0.55:
            engine.on_pod_deleted(ns, name)
        elif step < 0.6:
            engine.on_namespace_deleted(ns)
            engine.on_namespace(Namespace(ns, {"ns": ns}))
        elif step < 0.9:
            engine.on_policy(np(ns, rng.choice("pq"), {"podSelector": {"matchLabels": {"pod": rng.choice("abcd")}},
                                                     "ingress": [{"from": [{"podSelector": A}]}]}))
        else:
            with pytest.raises(ValueError, match="operator"):  # refused: nothing changes
                engine.on_policy(np(ns, "bad", {"podSelector": {"matchExpressions": [
                    {"key": "pod", "operator": "Bogus", "values": ["a"]}]}}))
        assert shape(engine.index) == shape(PodIndex(engine.cluster.pods.values()))
        assert engine.desired.members == translate(engine.cluster).members


_labels = st.dictionaries(st.sampled_from("abc"), st.sampled_from("uvw"), max_size=3)


@given(pods=st.lists(st.tuples(st.sampled_from("xyz"), _labels), max_size=12),
       match=_labels, exprs=st.lists(st.tuples(st.sampled_from("abc"), st.sampled_from(
           ["In", "NotIn", "Exists", "DoesNotExist"]), st.lists(st.sampled_from("uvw"), min_size=1, max_size=2)),
           max_size=2), scope=st.sets(st.sampled_from("xyz")), dropped=st.sets(st.integers(0, 11)))
def test_the_pod_index_never_misses_a_pod_a_selector_matches(pods, match, exprs, scope, dropped) -> None:
    """The index only narrows: every pod in scope that the selector matches is a candidate,
    also after pods were relabelled and deleted (sync)."""
    from lightkube.models.meta_v1 import LabelSelector, LabelSelectorRequirement

    from netbay.k8s.policy.index import PodIndex
    from netbay.k8s.policy.selectors import Selector

    made = {f"{ns}/p{i}": Pod(ns, f"p{i}", f"port{i}", f"10.0.0.{i}", labels) for i, (ns, labels) in enumerate(pods)}
    index = PodIndex(Pod(p.namespace, p.name, p.port_id, p.ip, {"a": "u"}) for p in made.values())
    now = {k: p for i, (k, p) in enumerate(made.items()) if i not in dropped}
    index.sync(now)
    sel = Selector.of(LabelSelector(matchLabels=match, matchExpressions=[
        LabelSelectorRequirement(key=k, operator=op, values=v) for k, op, v in exprs]))
    want = {p.key for p in now.values() if p.namespace in scope and sel.matches(p.labels)}
    got = {p.key for p in index.candidates(scope, sel)}
    assert want <= got
    assert all(now[k].namespace in scope for k in got)


def test_dual_stack_rules_naming_pods_cover_both_families_and_ipv6_blocks_stay_ipv6() -> None:
    """On a dual-stack cluster (issue 28) a peer selector allows both families, an IPv6
    ipBlock becomes IPv6 prefixes, and egress to pods allows every cluster IP of their Service."""
    svc = Service("y", "web", "10.96.0.10", {"pod": "b"}, (ServicePort(8000, 80),), ("fd00:96::10",))
    policy = np("x", "p", {"podSelector": A, "policyTypes": ["Ingress", "Egress"],
                           "ingress": [{"from": [{"podSelector": {}},
                                                 {"ipBlock": {"cidr": "fd00:1::/64", "except": ["fd00:1::/65"]}}]}],
                           "egress": [{"to": [{"namespaceSelector": {"matchLabels": {"ns": "y"}}}],
                                       "ports": [{"port": 80}]}]})
    base = cluster(policy, services=[svc])
    single = translate(base)
    dual = translate(replace(base, families=("IPv4", "IPv6")))
    ingress = {(r.ethertype, r.remote_ip_prefix, r.remote is not None) for r in dual.groups["policy:x/p"]
               if r.direction == "ingress"}
    assert ingress == {("IPv4", None, True), ("IPv6", None, True), ("IPv6", "fd00:1:0:0:8000::/65", False)}
    assert {r.ethertype for r in single.groups["policy:x/p"] if r.remote is not None} == {"IPv4"}
    vips = {(r.ethertype, r.remote_ip_prefix) for r in dual.groups["policy:x/p"] if r.direction == "egress"
            and r.remote_ip_prefix}
    assert vips == {("IPv4", "10.96.0.10/32"), ("IPv6", "fd00:96::10/128")}
