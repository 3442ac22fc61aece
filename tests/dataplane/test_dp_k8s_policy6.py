"""NetworkPolicy on a dual-stack calico cluster: enforced over IPv6 as over IPv4 (issue 27).

The calico lab of :mod:`.netpol_lab` with ``calico_ipv6pool`` (VXLAN, so each node holds
an IPv6 tunnel address of its own): every pod of x, y, z has an IPv4 and an IPv6
address and serves on both. Each case probes the 243 cells over IPv6 (and, where the
families differ, over IPv4) against its truth table: the nodes' ``ip6`` table must
isolate exactly what the ``ip`` one does — a policy that held for IPv4 only would leave
every isolated pod open over IPv6.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from netbay.dataplane.nft import Nft
from netbay.k8s.nodepolicy import TABLE

from .netpol_lab import Lab, build_calico, check, np, probe  # noqa: F401 - np: a fixture

LABELS = {"calico_ipv4pool_vxlan": "Always", "calico_ipv6pool": "fd00:36::/64"}
A = {"matchLabels": {"pod": "a"}}
BOTH = ("IPv4", "IPv6")


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    yield from build_calico(tmp_path_factory.mktemp("netpol6"), LABELS, tag="np6")


def ns_of(key: str) -> str:
    return key.split("/")[0]


def test_the_lab_is_dual_stack(lab: Lab) -> None:
    assert lab.families == BOTH and all(len(p.ips_of("IPv6")) == 1 for p in lab.pods.values())
    for family in BOTH:
        check(lab, lambda *_: True, family=family)


def test_deny_all_ingress_covers_both_families(lab: Lab, np: Any) -> None:
    np("x", "deny-ingress", {"podSelector": {}, "policyTypes": ["Ingress"]})
    for family in BOTH:   # x's pods answer nobody; y's and z's still everybody
        check(lab, lambda s, d, *_: ns_of(d) != "x", family=family)
    with Nft(lab.engine.node_of(lab.pods["x/a"])) as nft:   # x's pods' node
        assert {("ip", TABLE), ("ip6", TABLE)} <= set(nft.tables()), "a table per family"


def test_allow_from_selector_over_ipv6(lab: Lab, np: Any) -> None:
    np("x", "a-from-b", {"podSelector": A, "ingress": [{"from": [{"podSelector": {"matchLabels": {"pod": "b"}}}]}]})
    check(lab, lambda s, d, *_: d != "x/a" or s == "x/b", family="IPv6")


def test_ipv6_ip_block_with_except(lab: Lab, np: Any) -> None:
    """An IPv6 block (y's node block minus y/b) admits its pods over IPv6 only: nothing
    of the IPv4 family is in the policy, so x/a takes no IPv4 at all."""
    yb = lab.ip("y/b", "IPv6")
    np("x", "a-from-cidr6", {"podSelector": A, "ingress": [{"from": [{"ipBlock": {
        "cidr": lab.cidrs6["y"], "except": [f"{yb}/128"]}}]}]})
    check(lab, lambda s, d, *_: d != "x/a" or (ns_of(s) == "y" and s != "y/b"), family="IPv6")
    check(lab, lambda s, d, *_: d != "x/a", family="IPv4")


def test_egress_isolation_over_ipv6(lab: Lab, np: Any) -> None:
    np("x", "a-to-y", {"podSelector": A, "policyTypes": ["Egress"],
                       "egress": [{"to": [{"namespaceSelector": {"matchLabels": {"ns": "y"}}}],
                                   "ports": [{"port": 80, "protocol": "TCP"}]}]})
    check(lab, lambda s, d, proto, port: s != "x/a" or (ns_of(d) == "y" and (proto, port) == ("TCP", 80)),
          family="IPv6")


def test_the_node_reaches_isolated_pods_over_ipv6(lab: Lab, np: Any) -> None:
    """The master's own IPv6 address (its block's first, the VXLAN tunnel's) is a node
    address: always let through, as its IPv4 one is."""
    np("x", "deny-all", {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]})
    check(lab, lambda s, d, *_: ns_of(s) != "x" and ns_of(d) != "x", family="IPv6")
    cells = [("node", f"x/{p}", proto, port) for p in "abc" for proto, port in (("TCP", 80), ("UDP", 80))]
    got = probe(lab, cells, timeout=1.0, sources={"node": lab.node_ns}, family="IPv6")
    assert all(got.values()), got
