"""Properties of the pure IPAM functions: addresses of a subnet and prefixes of a pool.

Small random CIDRs and pools, random sequences of allocations and releases,
each checked against a brute-force model of what the answer must be.
"""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from netbay.errors import BadRequest, Conflict
from netbay.network import ipam
from netbay.network.subnetpools import available, compact, next_prefix, prefix_free

pytestmark = pytest.mark.shared_server   # its tests make their own objects (tests/conftest.py)

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _addr(net, value: int) -> str:
    return str(type(net.network_address)(value))


@st.composite
def small_subnets(draw):
    """An IPv4 /24../32 or IPv6 /120../128 subnet, anywhere in the space."""
    version = draw(st.sampled_from([4, 6]))
    bits = 32 if version == 4 else 128
    prefixlen = draw(st.integers(bits - 8, bits))
    base = draw(st.integers(0, 2**bits - 1))
    return ipaddress.ip_network((base, prefixlen), strict=False)


@st.composite
def subnets_with_gateway(draw):
    net = draw(small_subnets())
    first, last = ipam.usable_range(net)
    choice = draw(st.sampled_from(["default", "none", "any"]))
    if choice == "default":
        gateway = ipam.default_gateway(str(net))
    elif choice == "none":
        gateway = None
    else:
        gateway = _addr(net, draw(st.integers(first, last)))
    return net, gateway


def _pool_set(pools: list[dict[str, str]]) -> set[int]:
    return set(ipam.pool_addresses(pools))


# --- addresses ----------------------------------------------------------------------------


@SETTINGS
@given(subnets_with_gateway())
def test_default_pools_are_the_usable_range_minus_the_gateway(case):
    net, gateway = case
    pools = ipam.default_pools(str(net), gateway)
    first, last = ipam.usable_range(net)
    expected = set(range(first, last + 1)) - ({int(ipaddress.ip_address(gateway))} if gateway else set())
    assert _pool_set(pools) == expected
    # The defaults always pass validation, with the gateway they were made for.
    assert ipam.validate_pools(str(net), gateway, pools) == pools


@SETTINGS
@given(small_subnets())
def test_default_gateway_is_valid_and_first_usable(net):
    gateway = ipam.default_gateway(str(net))
    first, last = ipam.usable_range(net)
    if last == first:
        assert gateway is None
    else:
        assert gateway is not None and int(ipaddress.ip_address(gateway)) == first
        assert ipam.gateway_valid(str(net), gateway)


@SETTINGS
@given(small_subnets(), st.integers(0, 2**128 - 1))
def test_gateway_valid_means_inside_and_not_network_or_broadcast(net, raw):
    address = _addr(net, raw % (2 ** net.max_prefixlen))
    ip = ipaddress.ip_address(address)
    valid = ipam.gateway_valid(str(net), address)
    if ip not in net or net.version == 4 and net.prefixlen < 31 and ip in (net.network_address, net.broadcast_address):
        assert not valid
    else:
        assert valid


@SETTINGS
@given(subnets_with_gateway(), st.lists(st.tuples(st.booleans(), st.integers(0, 10**6)), max_size=80))
def test_allocations_and_releases_never_hand_out_a_taken_or_foreign_address(case, steps):
    """What ``allocate`` does: first_free over the pools, with the gateway counted as taken."""
    net, gateway = case
    pools = ipam.default_pools(str(net), gateway)
    in_pools = _pool_set(pools)
    gw = {int(ipaddress.ip_address(gateway))} if gateway else set()
    held: set[int] = set()
    for allocate, pick in steps:
        if allocate or not held:
            found = ipam.first_free(pools, held | gw)
            if found is None:
                assert in_pools <= held | gw, "refused while the pools still had room"
            else:
                assert found not in held and found not in gw
                assert found in in_pools and type(net.network_address)(found) in net
                assert found == min(in_pools - held - gw), "not the lowest free address"
                held.add(found)
        else:
            held.discard(sorted(held)[pick % len(held)])


@st.composite
def pool_requests(draw):
    """A subnet, a gateway and a list of raw ranges: some reversed, out of range or overlapping."""
    net, gateway = draw(subnets_with_gateway())
    lo = int(net.network_address) - 2
    hi = int(net.broadcast_address) + 2
    ranges = draw(st.lists(st.tuples(st.integers(lo, hi), st.integers(lo, hi)), max_size=4))
    size = 2 ** net.max_prefixlen
    pools = [{"start": _addr(net, a % size), "end": _addr(net, b % size)} for a, b in ranges]
    return net, gateway, pools


def _expected_kind(net, gateway, pools) -> str | None:
    """A brute-force model of Neutron's pool checks, in Neutron's order."""
    first, last = ipam.usable_range(net)
    spans = []
    for pool in pools:
        start, end = int(ipaddress.ip_address(pool["start"])), int(ipaddress.ip_address(pool["end"]))
        if start > end:
            return "InvalidAllocationPool"
        if start < first or end > last:
            return "OutOfBoundsAllocationPool"
        spans.append(set(range(start, end + 1)))
    for i, a in enumerate(spans):
        if any(a & b for b in spans[i + 1:]):
            return "OverlappingAllocationPools"
    if gateway is not None and any(int(ipaddress.ip_address(gateway)) in s for s in spans):
        return "GatewayConflictWithAllocationPools"
    return None


@SETTINGS
@given(pool_requests())
def test_validate_pools_accepts_exactly_the_in_range_non_overlapping_sets(case):
    net, gateway, pools = case
    expected = _expected_kind(net, gateway, pools)
    if expected is None:
        result = ipam.validate_pools(str(net), gateway, pools)
        assert _pool_set(result) == _pool_set(pools)
        starts = [int(ipaddress.ip_address(p["start"])) for p in result]
        assert starts == sorted(starts)
    else:
        with pytest.raises((BadRequest, Conflict)) as caught:
            ipam.validate_pools(str(net), gateway, pools)
        assert caught.value.kind == expected
        assert caught.value.status == (409 if expected in {"OverlappingAllocationPools",
                                                           "GatewayConflictWithAllocationPools"} else 400)


@SETTINGS
@given(small_subnets(), st.sampled_from([{"start": "x", "end": "10.0.0.1"}, {"start": "10.0.0.1"}, {}, None,
                                         {"start": "2001:db8::1", "end": "10.0.0.1"}]))
def test_validate_pools_refuses_malformed_pools(net, pool):
    with pytest.raises(BadRequest) as caught:
        ipam.validate_pools(str(net), None, [pool])
    assert caught.value.kind == "InvalidAllocationPool"


# --- prefixes of a subnet pool -----------------------------------------------------------


@st.composite
def pools_and_requests(draw):
    """A pool of a few prefixes inside 10.0.0.0/20 and a sequence of prefix requests."""
    prefixes = draw(st.lists(
        st.builds(lambda n, p: ipaddress.ip_network((0x0A000000 + (n << 8), p), strict=False),
                  st.integers(0, 15), st.integers(22, 26)),
        min_size=1, max_size=4))
    steps = draw(st.lists(st.tuples(st.booleans(), st.integers(21, 28), st.integers(0, 10**6)), max_size=25))
    return prefixes, steps


def _blocks(net, prefixlen: int):
    return list(net.subnets(new_prefix=prefixlen)) if prefixlen >= net.prefixlen else []


@SETTINGS
@given(pools_and_requests())
def test_prefix_allocation_never_overlaps_and_fails_only_when_full(case):
    prefixes, steps = case
    space = compact(prefixes)
    held: list = []
    for allocate, prefixlen, pick in steps:
        if allocate or not held:
            found = next_prefix(prefixes, held, prefixlen)
            candidates = [b for p in space for b in _blocks(p, prefixlen)
                          if not any(b.overlaps(h) for h in held)]
            if found is None:
                assert candidates == [], "refused while an aligned free block existed"
                continue
            assert found.prefixlen == prefixlen
            assert any(p.supernet_of(found) for p in space), "outside the pool"
            assert not any(found.overlaps(h) for h in held), "overlaps an allocation"
            assert prefix_free(prefixes, held, found)
            held.append(found)
            assert not prefix_free(prefixes, held, found)
        else:
            held.pop(pick % len(held))
        # The free space and the allocations partition the pool.
        free = available(prefixes, held)
        assert sum(f.num_addresses for f in free) + sum(h.num_addresses for h in held) == \
            sum(p.num_addresses for p in space)
        assert not any(f.overlaps(h) for f in free for h in held)


def _union_size(nets) -> int:
    """Addresses covered by ``nets``, counted by merging their intervals."""
    spans = sorted((int(n.network_address), int(n.broadcast_address)) for n in nets)
    total, end = 0, -1
    for lo, hi in spans:
        if hi > end:
            total += hi - max(lo, end + 1) + 1
            end = hi
    return total


@SETTINGS
@given(st.lists(st.builds(lambda n, p: ipaddress.ip_network((0x0A000000 + (n << 8), p), strict=False),
                          st.integers(0, 255), st.integers(16, 28)), min_size=1, max_size=6))
def test_compact_covers_the_same_addresses_without_overlap(prefixes):
    merged = compact(prefixes)
    assert all(any(m.supernet_of(p) for m in merged) for p in prefixes)
    assert sum(m.num_addresses for m in merged) == _union_size(prefixes)
    assert not any(a.overlaps(b) for i, a in enumerate(merged) for b in merged[i + 1:])
    assert compact(merged) == merged
