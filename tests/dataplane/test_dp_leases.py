"""Subnet leases (pure): stable, unique, inside the network, released, exhaustion says how many fit."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from netbay.drivers import leases
from netbay.drivers.flannel import FlannelConfig
from netbay.drivers.leases import LeaseError, LeasesExhausted, NetworkConfig

node_ids = st.lists(st.text("abcdefgh0123456789", min_size=1, max_size=6), max_size=40, unique=True)


@st.composite
def configs(draw) -> NetworkConfig:
    plen = draw(st.integers(8, 28))
    sub = draw(st.integers(plen + 1, min(30, plen + 8)))
    base = draw(st.integers(0, (1 << plen) - 1)) << (32 - plen)
    return NetworkConfig(f"{ipaddress.ip_address(base)}/{plen}", sub)


def _check(cfg: NetworkConfig, nodes: list[str], out: dict[str, str]) -> None:
    assert set(out) == set(nodes)
    nets = [ipaddress.ip_network(s) for s in out.values()]
    assert len(set(nets)) == len(nets)                      # unique
    for n in nets:
        assert n.prefixlen == cfg.subnet_len and n.subnet_of(cfg.net) and cfg.valid(str(n))


@settings(max_examples=200, deadline=None)
@given(configs(), node_ids, node_ids)
def test_allocate_is_unique_and_stable(cfg, first, second):
    try:
        a = leases.allocate(cfg, first, {})
    except LeasesExhausted as exc:
        assert exc.capacity == leases.capacity(cfg) < len(first)
        return
    _check(cfg, first, a)
    try:
        b = leases.allocate(cfg, second, a)
    except LeasesExhausted as exc:
        assert exc.capacity < len(second)
        return
    _check(cfg, second, b)
    for n in set(first) & set(second):
        assert b[n] == a[n]                                  # a node keeps its lease
    assert leases.allocate(cfg, second, b) == b              # restart: same set again


@settings(max_examples=100, deadline=None)
@given(configs(), node_ids)
def test_release_then_acquire_reuses(cfg, nodes):
    try:
        a = leases.allocate(cfg, nodes, {})
    except LeasesExhausted:
        return
    if not nodes:
        return
    gone = nodes[0]
    r = leases.release(a, gone)
    assert gone not in r and all(r[n] == a[n] for n in r)
    again = leases.acquire(cfg, r, "newcomer-node")
    assert again["newcomer-node"] == min(set(_all(cfg)) - set(r.values()), key=_key)


def _key(s: str) -> int:
    return int(ipaddress.ip_network(s).network_address)


def _all(cfg: NetworkConfig) -> list[str]:
    return [cfg.subnet(i) for i in range(cfg.first_index, cfg.last_index + 1)]


def test_flannel_defaults_skip_the_first_subnet():
    cfg = FlannelConfig().network_config
    assert leases.capacity(cfg) == 255
    assert leases.allocate(cfg, ["b", "a"], {}) == {"a": "10.100.1.0/24", "b": "10.100.2.0/24"}
    assert leases.gateway("10.100.1.0/24") == "10.100.1.1"
    assert leases.host("10.100.1.0/24", 2) == "10.100.1.2"


def test_exhaustion_says_how_many_fit_and_changes_nothing():
    cfg = NetworkConfig("10.100.0.0/22", 24)          # 4 subnets, the first kept free: 3
    current = leases.allocate(cfg, ["a", "b"], {})
    with pytest.raises(LeasesExhausted) as info:
        leases.allocate(cfg, ["a", "b", "c", "d"], current)
    assert info.value.capacity == 3 and info.value.needed == 4
    assert "room for 3" in str(info.value)
    assert current == {"a": "10.100.1.0/24", "b": "10.100.2.0/24"}


def test_invalid_leases_are_replaced_and_duplicates_resolved():
    cfg = NetworkConfig("10.100.0.0/16", 24)
    out = leases.allocate(cfg, ["a", "b", "c"], {"a": "10.100.7.0/24", "b": "10.100.7.0/24",
                                                 "c": "192.168.0.0/24"})
    assert out["a"] == "10.100.7.0/24"
    assert out["b"] != out["a"] and out["c"] != out["a"]
    _check(cfg, ["a", "b", "c"], out)


def test_calico_blocks_use_the_whole_pool():
    cfg = leases.block_config("192.168.0.0/16", 26)
    assert leases.capacity(cfg) == 1024
    assert leases.allocate(cfg, ["n0"], {}) == {"n0": "192.168.0.0/26"}


@pytest.mark.parametrize("network,sub", [("10.0.0.0/24", 24), ("10.0.0.0/24", 31),
                                         ("10.0.0.1/24", 26), ("fd00::/64", 64), ("fd00::/64", 127),
                                         ("nonsense", 24)])
def test_bad_configs(network, sub):
    with pytest.raises(LeaseError):
        NetworkConfig(network, sub)


def test_ipv6_leases_pair_with_the_ipv4_ones():
    """flannel's IPv6Network: a /64 per node, the one of the same number as its IPv4 lease."""
    v4, v6 = NetworkConfig("10.100.0.0/16", 24), NetworkConfig("fd00:10::/56", 64)
    assert leases.allocate(v6, ["m0", "n0"], {}) == {"m0": "fd00:10:0:1::/64", "n0": "fd00:10:0:2::/64"}
    assert leases.capacity(v6) == 255
    assert leases.paired(v6, v4, "10.100.7.0/24") == "fd00:10:0:7::/64"
    assert leases.host("fd00:10:0:7::/64", 5) == "fd00:10:0:7::5"
    assert not v6.valid("10.100.7.0/24") and not v4.valid("fd00:10:0:7::/64")
    with pytest.raises(LeaseError, match="no subnet number 255"):
        leases.paired(NetworkConfig("fd00:10::/60", 64), v4, "10.100.255.0/24")
