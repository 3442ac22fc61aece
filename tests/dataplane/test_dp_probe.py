"""netbay.dataplane.probe: in-process ICMP from inside namespaces, many cells at once.

Two namespaces joined by a veth (10.9.7.1 and 10.9.7.2): echo replies are matched
to their cell, an address nobody holds and an address with no route are False,
traffic dropped by nftables in the target is False while the reverse direction
still answers, a missing namespace is None, and the whole run is bounded by
``count × timeout`` however many cells fail.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from netbay.dataplane import links, netns, nft, probe

from .dp_helpers import ifname, ping


@pytest.fixture
def pair(make_ns: Callable[[str], str]) -> tuple[str, str]:
    a, b = make_ns("pra"), make_ns("prb")
    links.veth_pair(a, ifname("pa"), b, ifname("pb"))
    for ns, dev, cidr in ((a, ifname("pa"), "10.9.7.1/24"), (b, ifname("pb"), "10.9.7.2/24")):
        links.add_address(ns, dev, cidr)
        links.set_up(ns, dev)
        links.set_up(ns, "lo")
    # A new veth carries packets only once the kernel's link watch has run (up to ~1 s).
    for _ in range(50):
        if probe.run([probe.Probe(a, "10.9.7.2"), probe.Probe(b, "10.9.7.1")], timeout=0.2) == [True, True]:
            break
    else:
        pytest.fail("the veth between the two namespaces never carried an echo")
    return a, b


def test_matrix_cells(pair: tuple[str, str], make_ns: Callable[[str], str]) -> None:
    a, b = pair
    cells = [probe.Probe(a, "10.9.7.2"), probe.Probe(b, "10.9.7.1"), probe.Probe(a, "10.9.7.1"),
             probe.Probe(a, "10.9.7.99"),          # on-link, nobody answers ARP
             probe.Probe(b, "192.0.2.1"),          # no route at all: sendto fails
             probe.Probe(f"{a}-missing", "10.9.7.2")]
    got = probe.run(cells, timeout=0.5, count=2)
    assert got == [True, True, True, False, False, None]
    # The tests' own helper is the product's probe.
    assert ping(a, "10.9.7.2", 0.5) and not ping(a, "10.9.7.99", 0.3)
    with pytest.raises(netns.NetnsError):
        probe.ping(f"{a}-missing", "10.9.7.2")


def test_a_drop_is_false_and_only_that_cell(pair: tuple[str, str]) -> None:
    """An nftables rule in ``b`` drops echo requests from ``a``: a→b is False, b→a
    still True (b's requests leave; a's kernel answers)."""
    a, b = pair
    with nft.Nft(b) as rules:
        rules.run("add table inet probe")
        rules.run("add chain inet probe in { type filter hook input priority 0; policy accept; }")
        rules.run("add rule inet probe in ip saddr 10.9.7.1 icmp type echo-request drop")
    assert probe.run([probe.Probe(a, "10.9.7.2"), probe.Probe(b, "10.9.7.1")], timeout=0.5) == [False, True]


def test_bounded_whatever_fails(pair: tuple[str, str]) -> None:
    a, _b = pair
    cells = [probe.Probe(a, f"10.9.7.{i}") for i in range(100, 140)]   # 40 silent cells
    start = time.monotonic()
    assert probe.run(cells, timeout=0.3, count=2) == [False] * 40
    assert time.monotonic() - start < 10   # 2 rounds x 0.3 s, with a wide margin for a busy host
    with pytest.raises(ValueError):
        probe.run([probe.Probe(a, "10.9.7.2")] * 40000, count=2)
