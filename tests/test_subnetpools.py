"""Subnet pools: defaults, prefixes, bounds, defaults per IP family, allocation of subnets, errors.

Against netbay's API and a real Neutron alike (``neutron_api``, tests/backendfix.py)."""

from __future__ import annotations

import uuid

import httpx
import pytest
from conftest import neutron_error, unique

pytestmark = [pytest.mark.every_db,   # the store's semantics: on SQLite and PostgreSQL (tests/conftest.py)
              pytest.mark.shared_server]   # its tests make their own objects


@pytest.fixture(scope="module")
def server(neutron_api):
    """netbay's network API or a real Neutron's."""
    return neutron_api


@pytest.fixture(scope="module")
def other(server):
    user, password, project = server.make_user()
    return server.connect(user, password, project), server.http(server.token(user, password, project))


def allocation_status(server, netbay_status: int) -> int:
    """neutron-lib's SubnetAllocationError derives from no HTTP error, so Neutron answers it
    with a 500; netbay, which answers no client's request with a 5xx, with 409 (no room
    left) or 400 (outside the pool). The error's type and message are the same."""
    return 500 if server.kind == "openstack" else netbay_status


def network(conn):
    return conn.network.create_network(name=unique("pnet"))


def post_pool(http: httpx.Client, **pool) -> httpx.Response:
    return http.post("/subnetpools", json={"subnetpool": pool})


def post_subnet(http: httpx.Client, **subnet) -> httpx.Response:
    return http.post("/subnets", json={"subnet": subnet})


# --- pools ---------------------------------------------------------------------------------


def test_ipv4_pool_defaults(member):
    pool = member.network.create_subnet_pool(name=unique("pool"), prefixes=["10.100.0.0/16"])
    assert pool.prefixes == ["10.100.0.0/16"] and pool.ip_version == 4
    assert pool.minimum_prefix_length == 8 and pool.maximum_prefix_length == 32
    assert pool.default_prefix_length == 8  # the minimum, as in Neutron
    assert pool.is_shared is False and pool.is_default is False
    assert pool.default_quota is None and pool.address_scope_id is None
    assert pool.project_id == member.current_project_id and pool.revision_number == 0 and pool.tags == []
    assert member.network.get_subnet_pool(pool.id).to_dict() == pool.to_dict()
    member.network.delete_subnet_pool(pool)


def test_ipv6_pool_defaults_and_tags(member):
    pool = member.network.create_subnet_pool(name=unique("pool6"), prefixes=["2001:DB8:100::/48"])
    assert pool.prefixes == ["2001:db8:100::/48"] and pool.ip_version == 6
    assert (pool.minimum_prefix_length, pool.maximum_prefix_length, pool.default_prefix_length) == (64, 128, 64)
    tag = unique("t6")
    member.network.set_tags(pool, [tag])
    assert member.network.get_subnet_pool(pool.id).tags == [tag]
    assert [p.id for p in member.network.subnet_pools(tags=tag)] == [pool.id]


@pytest.mark.embedded_only("Neutron 29 (service_plugins = router) refuses tags in a subnet pool's POST "
                           "(\"Attribute 'tags' not allowed in POST\"); netbay takes them as for other resources")
def test_tags_in_pool_create(member):
    pool = member.network.create_subnet_pool(name=unique("pool6"), prefixes=["2001:db8:101::/48"], tags=["t6"])
    assert pool.tags == ["t6"] and pool.revision_number == 0
    assert member.network.get_subnet_pool(pool.id).tags == ["t6"]


def test_prefixes_are_normalized_and_merged(member_http):
    r = post_pool(member_http, name=unique("merge"), prefixes=[
        "10.101.1.0/24", "10.101.0.0/24", "10.101.0.128/25", "10.102.5.9/16"], default_prefixlen="24",
        min_prefixlen=20, max_prefixlen=28, default_quota=4096)
    assert r.status_code == 201, r.text
    pool = r.json()["subnetpool"]
    assert pool["prefixes"] == ["10.101.0.0/23", "10.102.0.0/16"]
    # Strings, as Neutron renders them.
    assert (pool["min_prefixlen"], pool["default_prefixlen"], pool["max_prefixlen"]) == ("20", "24", "28")
    assert pool["default_quota"] == 4096


OMIT = "(omitted)"   # an attribute left out of the request
NO_SCOPE = "5e0c2b8a-4d1f-4c3e-9a7b-0d6f1e2a3b4c"
POOL_ERRORS = [
    ({"prefixes": ["10.0.0.0/8", "2001:db8::/32"]}, 400, "PrefixVersionMismatch",
     "Cannot mix IPv4 and IPv6 prefixes in a subnet pool."),
    ({"prefixes": []}, 400, "EmptySubnetPoolPrefixList", "Empty subnet pool prefix list."),
    ({}, 400, "HTTPBadRequest", "Failed to parse request. Required attribute 'prefixes' not specified"),
    ({"name": OMIT, "prefixes": ["10.0.0.0/8"]}, 400, "HTTPBadRequest",
     "Failed to parse request. Required attribute 'name' not specified"),
    ({"name": None, "prefixes": ["10.0.0.0/8"]}, 400, "HTTPBadRequest",
     "Invalid input for name. Reason: 'None' is not a valid string."),
    ({"name": " ", "prefixes": ["10.0.0.0/8"]}, 400, "HTTPBadRequest",
     "Invalid input for name. Reason: ' ' Blank strings are not permitted."),
    ({"prefixes": ["10.0.0.0/8"], "min_prefixlen": 24, "max_prefixlen": 16}, 400, "IllegalSubnetPoolPrefixBounds",
     "Illegal prefix bounds: min_prefixlen=24, max_prefixlen=16."),
    ({"prefixes": ["10.0.0.0/8"], "max_prefixlen": 33}, 400, "IllegalSubnetPoolPrefixBounds",
     "Illegal prefix bounds: max_prefixlen=33, ip_version_max=32."),
    ({"prefixes": ["10.0.0.0/8"], "min_prefixlen": 16, "default_prefixlen": 12}, 400,
     "IllegalSubnetPoolPrefixBounds", "Illegal prefix bounds: default_prefixlen=12, min_prefixlen=16."),
    ({"prefixes": ["10.0.0.0/8"], "default_prefixlen": 30, "max_prefixlen": 28}, 400,
     "IllegalSubnetPoolPrefixBounds", "Illegal prefix bounds: default_prefixlen=30, max_prefixlen=28."),
    ({"prefixes": ["10.0.0.0/8"], "min_prefixlen": -1}, 400, "HTTPBadRequest",
     "Invalid input for min_prefixlen. Reason: '-1' should be non-negative."),
    ({"prefixes": ["10.0.0.0/8"], "min_prefixlen": "eight"}, 400, "InvalidInput",
     "Invalid input for operation: 'eight' is not an integer."),
    ({"prefixes": ["10.0.0.0/8"], "default_quota": -5}, 400, "HTTPBadRequest",
     "Invalid input for default_quota. Reason: '-5' should be non-negative."),
    ({"prefixes": ["bogus"]}, 400, "HTTPBadRequest", None),
    ({"prefixes": "10.0.0.0/8"}, 400, "HTTPBadRequest", None),
    ({"prefixes": ["10.0.0.0/8"], "ip_version": 4}, 400, "HTTPBadRequest",
     "Attribute 'ip_version' not allowed in POST"),
    ({"prefixes": ["10.0.0.0/8"], "shared": True}, 403, "PolicyNotAuthorized",
     "(rule:create_subnetpool and rule:create_subnetpool:shared) is disallowed by policy"),
    ({"prefixes": ["10.0.0.0/8"], "is_default": True}, 403, "PolicyNotAuthorized",
     "(rule:create_subnetpool and rule:create_subnetpool:is_default) is disallowed by policy"),
    ({"prefixes": ["10.0.0.0/8"], "address_scope_id": "f00"}, 400, "HTTPBadRequest",
     "Invalid input for address_scope_id. Reason: 'f00' is not a valid UUID."),
    ({"prefixes": ["10.0.0.0/8"], "address_scope_id": NO_SCOPE}, 404, "AddressScopeNotFound",
     f"Address scope {NO_SCOPE} could not be found."),
]


@pytest.mark.parametrize(("attrs", "status", "kind", "message"), POOL_ERRORS,
                         ids=[f"{i}-{e[2]}" for i, e in enumerate(POOL_ERRORS)])
def test_pool_create_errors(member, member_http, attrs, status, kind, message):
    name = unique("bad")
    body = {k: v for k, v in {"name": name, **attrs}.items() if v != OMIT}
    neutron_error(post_pool(member_http, **body), status, kind, message)
    assert list(member.network.subnet_pools(name=name)) == []


def test_update_pool(member, member_http):
    pool = member.network.create_subnet_pool(name=unique("upd"), prefixes=["10.103.0.0/24"],
                                             min_prefixlen=24, default_prefixlen=26)
    revision = pool.revision_number
    grown = member.network.update_subnet_pool(pool, name="grown", prefixes=["10.103.0.0/24", "10.103.1.0/24"],
                                              maximum_prefix_length=30, default_quota=1024)
    assert grown.name == "grown" and grown.prefixes == ["10.103.0.0/23"]
    assert (grown.minimum_prefix_length, grown.default_prefix_length, grown.maximum_prefix_length) == (24, 26, 30)
    assert grown.default_quota == 1024 and grown.revision_number == revision + 1
    url = f"/subnetpools/{pool.id}"
    neutron_error(member_http.put(url, json={"subnetpool": {"prefixes": ["10.103.0.0/24"]}}), 400,
                  "IllegalSubnetPoolPrefixUpdate",
                  "Illegal update to prefixes: Existing prefixes must be a subset of the new prefixes.")
    neutron_error(member_http.put(url, json={"subnetpool": {"prefixes": ["10.103.0.0/23", "2001:db8::/64"]}}),
                  400, "PrefixVersionMismatch")
    neutron_error(member_http.put(url, json={"subnetpool": {"default_prefixlen": 31}}), 400,
                  "IllegalSubnetPoolPrefixBounds", "Illegal prefix bounds: default_prefixlen=31, max_prefixlen=30.")
    neutron_error(member_http.put(url, json={"subnetpool": {"is_default": True}}), 403, "PolicyNotAuthorized",
                  "(rule:update_subnetpool and rule:update_subnetpool:is_default) is disallowed by policy")
    for attr, value in (("shared", True), ("ip_version", 6)):
        neutron_error(member_http.put(url, json={"subnetpool": {attr: value}}), 400, "HTTPBadRequest",
                      f"Cannot update read-only attribute {attr}")
    after = member.network.get_subnet_pool(pool.id)
    assert after.prefixes == ["10.103.0.0/23"] and after.default_prefix_length == 26 and not after.is_default


def test_one_default_pool_per_ip_family(admin, admin_http):
    v4 = admin.network.create_subnet_pool(name=unique("def4"), prefixes=["10.104.0.0/16"], is_default=True)
    assert v4.is_default is True
    msg = ("Invalid input for operation: A default subnetpool for this IP family has already been set. "
           "Only one default may exist per IP family.")
    neutron_error(post_pool(admin_http, name=unique("def4"), prefixes=["10.105.0.0/16"], is_default=True), 400,
                  "InvalidInput", msg)
    v6 = admin.network.create_subnet_pool(name=unique("def6"), prefixes=["2001:db8:104::/48"], is_default=True)
    assert v6.is_default is True
    plain = admin.network.create_subnet_pool(name=unique("plain"), prefixes=["10.106.0.0/16"])
    neutron_error(admin_http.put(f"/subnetpools/{plain.id}", json={"subnetpool": {"is_default": True}}), 400,
                  "InvalidInput", msg)
    assert [p.id for p in admin.network.subnet_pools(is_default=True, ip_version=4)] == [v4.id]
    # Moving the default: unset the old one, then set the new one.
    admin.network.update_subnet_pool(v4, is_default=False)
    assert admin.network.update_subnet_pool(plain, is_default=True).is_default is True
    for pool in (v4, v6, plain):
        admin.network.delete_subnet_pool(pool)


# --- allocating subnets ------------------------------------------------------------------------


def test_subnets_from_a_pool(server, member, member_http):
    pool = member.network.create_subnet_pool(name=unique("alloc"), prefixes=["10.110.0.0/16"],
                                             min_prefixlen=16, default_prefixlen=24, max_prefixlen=29)
    net = network(member)
    first = member.network.create_subnet(network_id=net.id, ip_version=4, subnet_pool_id=pool.id)
    assert first.cidr == "10.110.0.0/24" and first.subnet_pool_id == pool.id
    assert first.gateway_ip == "10.110.0.1"
    assert first.allocation_pools == [{"start": "10.110.0.2", "end": "10.110.0.254"}]
    second = member.network.create_subnet(network_id=net.id, ip_version=4, subnet_pool_id=pool.id)
    assert second.cidr == "10.110.1.0/24"
    # The smallest free block that fits is used first, as by Neutron.
    small = member.network.create_subnet(network_id=net.id, ip_version=4, subnet_pool_id=pool.id, prefix_length=28)
    assert small.cidr == "10.110.2.0/28"
    specific = member.network.create_subnet(network_id=net.id, ip_version=4, subnet_pool_id=pool.id,
                                            cidr="10.110.128.0/20")
    assert specific.cidr == "10.110.128.0/20" and specific.subnet_pool_id == pool.id
    # With a gateway and no cidr, the cidr is the gateway's /prefixlen.
    by_gateway = member.network.create_subnet(network_id=net.id, ip_version=4, subnet_pool_id=pool.id,
                                              gateway_ip="10.110.77.254", prefix_length=24)
    assert by_gateway.cidr == "10.110.77.0/24" and by_gateway.gateway_ip == "10.110.77.254"
    assert by_gateway.allocation_pools == [{"start": "10.110.77.1", "end": "10.110.77.253"}]
    assert sorted(s.id for s in member.network.subnets(subnet_pool_id=pool.id)) == sorted(
        [first.id, second.id, small.id, specific.id, by_gateway.id])

    def refused(status, kind, message=None, **attrs):
        r = post_subnet(member_http, network_id=net.id, ip_version=4, subnetpool_id=pool.id, **attrs)
        neutron_error(r, status, kind, message)

    taken = "Failed to allocate subnet: Cannot allocate requested subnet from the available set of prefixes."
    refused(allocation_status(server, 409), "SubnetAllocationError", taken, cidr="10.110.1.128/25")
    refused(allocation_status(server, 400), "SubnetAllocationError", taken, cidr="10.111.0.0/24")
    refused(400, "MaxPrefixSubnetAllocationError",
            "Unable to allocate subnet with prefix length 30, maximum allowed prefix is 29.", prefixlen=30)
    refused(400, "MinPrefixSubnetAllocationError",
            "Unable to allocate subnet with prefix length 12, minimum allowed prefix is 16.", cidr="10.96.0.0/12")
    # (Neutron's reason ends with a full stop and its template adds another.)
    refused(400, "BadRequest", "Bad subnets request: allocation_pools allowed only for specific subnet requests..",
            allocation_pools=[{"start": "10.110.9.2", "end": "10.110.9.9"}])
    r = post_subnet(member_http, network_id=net.id, ip_version=6, subnetpool_id=pool.id)
    neutron_error(r, 400, "BadRequest", "Bad subnets request: Cannot allocate IPv6 subnet from IPv4 subnet pool.")
    missing = str(uuid.uuid4())
    r = post_subnet(member_http, network_id=net.id, ip_version=4, subnetpool_id=missing)
    neutron_error(r, 404, "SubnetPoolNotFound", f"Subnet pool {missing} could not be found.")
    # The pool cannot go while it has subnets; once they are gone it can.
    neutron_error(member_http.delete(f"/subnetpools/{pool.id}"), 400, "SubnetPoolDeleteError",
                  "Unable to delete subnet pool: Subnet pool has existing allocations.")
    member.network.delete_network(net)
    assert member_http.delete(f"/subnetpools/{pool.id}").status_code == 204
    neutron_error(member_http.get(f"/subnetpools/{pool.id}"), 404, "SubnetPoolNotFound")


def test_pool_exhaustion_and_release(server, member, member_http):
    pool = member.network.create_subnet_pool(name=unique("tiny"), prefixes=["10.120.0.0/26"],
                                             default_prefixlen=27, min_prefixlen=26)
    net = network(member)
    a = member.network.create_subnet(network_id=net.id, ip_version=4, subnet_pool_id=pool.id)
    b = member.network.create_subnet(network_id=net.id, ip_version=4, subnet_pool_id=pool.id)
    assert sorted([a.cidr, b.cidr]) == ["10.120.0.0/27", "10.120.0.32/27"]
    r = post_subnet(member_http, network_id=net.id, ip_version=4, subnetpool_id=pool.id)
    neutron_error(r, allocation_status(server, 409), "SubnetAllocationError",
                  "Failed to allocate subnet: Insufficient prefix space to allocate subnet size /27.")
    # Another network of the same project draws from the same (full) pool.
    other_net = network(member)
    r = post_subnet(member_http, network_id=other_net.id, ip_version=4, subnetpool_id=pool.id)
    neutron_error(r, allocation_status(server, 409), "SubnetAllocationError")
    member.network.delete_subnet(a)
    again = member.network.create_subnet(network_id=other_net.id, ip_version=4, subnet_pool_id=pool.id)
    assert again.cidr == a.cidr


def test_growing_a_pool_makes_room(member):
    pool = member.network.create_subnet_pool(name=unique("grow"), prefixes=["10.121.0.0/24"],
                                             default_prefixlen=24, min_prefixlen=24)
    net = network(member)
    member.network.create_subnet(network_id=net.id, ip_version=4, subnet_pool_id=pool.id)
    member.network.update_subnet_pool(pool, prefixes=["10.121.0.0/24", "10.121.1.0/24"])
    assert member.network.create_subnet(network_id=net.id, ip_version=4,
                                        subnet_pool_id=pool.id).cidr == "10.121.1.0/24"


def test_quota_per_project(member, member_http):
    pool = member.network.create_subnet_pool(name=unique("quota"), prefixes=["10.122.0.0/16"],
                                             default_prefixlen=24, default_quota=512)
    net = network(member)
    for _ in range(2):
        member.network.create_subnet(network_id=net.id, ip_version=4, subnet_pool_id=pool.id)
    r = post_subnet(member_http, network_id=net.id, ip_version=4, subnetpool_id=pool.id)
    neutron_error(r, 409, "SubnetPoolQuotaExceeded", "Per-project subnet pool prefix quota exceeded.")
    r = post_subnet(member_http, network_id=net.id, ip_version=4, subnetpool_id=pool.id, prefixlen=32,
                    enable_dhcp=False)
    neutron_error(r, 409, "SubnetPoolQuotaExceeded")


def test_network_subnet_pool_affinity(member, member_http):
    pool = member.network.create_subnet_pool(name=unique("aff"), prefixes=["10.123.0.0/16"], default_prefixlen=24)
    net = network(member)
    member.network.create_subnet(network_id=net.id, ip_version=4, cidr="192.168.123.0/24")
    msg = "Subnets hosted on the same network must be allocated from the same subnet pool."
    r = post_subnet(member_http, network_id=net.id, ip_version=4, subnetpool_id=pool.id)
    neutron_error(r, 400, "NetworkSubnetPoolAffinityError", msg)
    pooled = network(member)
    member.network.create_subnet(network_id=pooled.id, ip_version=4, subnet_pool_id=pool.id)
    r = post_subnet(member_http, network_id=pooled.id, ip_version=4, cidr="192.168.124.0/24")
    neutron_error(r, 400, "NetworkSubnetPoolAffinityError", msg)
    # Another IP version on the same network is free to differ.
    assert member.network.create_subnet(network_id=pooled.id, ip_version=6, cidr="2001:db8:123::/64").id


def test_default_pool_and_sharing(server, admin, member, member_http, other):
    other_conn, other_http = other
    net = network(member)
    r = post_subnet(member_http, network_id=net.id, ip_version=4, use_default_subnetpool=True)
    neutron_error(r, 400, "BadRequest", "Bad subnets request: No default subnetpool found for IPv4.")
    shared = admin.network.create_subnet_pool(name=unique("shared"), prefixes=["10.124.0.0/16"],
                                              default_prefixlen=26, is_default=True, shared=True)
    try:
        # Every project sees a shared pool and allocates from it; only its owner changes it.
        subnet = member.network.create_subnet(network_id=net.id, ip_version=4, use_default_subnet_pool=True)
        assert subnet.cidr == "10.124.0.0/26" and subnet.subnet_pool_id == shared.id
        assert shared.id in [p.id for p in other_conn.network.subnet_pools(is_shared=True)]
        neutron_error(other_http.put(f"/subnetpools/{shared.id}", json={"subnetpool": {"name": "x"}}), 403,
                      "PolicyNotAuthorized", "rule:update_subnetpool is disallowed by policy")
        neutron_error(other_http.delete(f"/subnetpools/{shared.id}"), 403, "PolicyNotAuthorized",
                      "rule:delete_subnetpool is disallowed by policy")
        # A cidr given with use_default_subnetpool still comes from the default pool.
        second = member.network.create_subnet(network_id=net.id, ip_version=4, use_default_subnet_pool=True,
                                              cidr="10.124.1.0/24")
        assert second.subnet_pool_id == shared.id
        member.network.delete_network(net)
    finally:
        admin.network.delete_subnet_pool(shared)


def test_private_pools_are_invisible_to_other_projects(member, other):
    other_conn, other_http = other
    pool = member.network.create_subnet_pool(name=unique("priv"), prefixes=["10.125.0.0/16"], default_prefixlen=24)
    neutron_error(other_http.get(f"/subnetpools/{pool.id}"), 404, "SubnetPoolNotFound")
    neutron_error(other_http.put(f"/subnetpools/{pool.id}", json={"subnetpool": {"name": "x"}}), 404,
                  "SubnetPoolNotFound")
    neutron_error(other_http.delete(f"/subnetpools/{pool.id}"), 404, "SubnetPoolNotFound")
    assert pool.id not in [p.id for p in other_conn.network.subnet_pools()]
    net = other_conn.network.create_network(name=unique("onet"))
    r = post_subnet(other_http, network_id=net.id, ip_version=4, subnetpool_id=pool.id)
    neutron_error(r, 404, "SubnetPoolNotFound")
    assert list(other_conn.network.subnets(network_id=net.id)) == []


def test_list_filters(member, member_http):
    name = unique("flt")
    v4 = member.network.create_subnet_pool(name=name, prefixes=["10.126.0.0/16"])
    v6 = member.network.create_subnet_pool(name=name, prefixes=["2001:db8:126::/48"])
    assert [p.id for p in member.network.subnet_pools(name=name, ip_version=6)] == [v6.id]
    assert sorted(p.id for p in member.network.subnet_pools(name=name, is_shared=False)) == sorted([v4.id, v6.id])
    assert [p.id for p in member.network.subnet_pools(name=name, is_default=True)] == []
    r = member_http.get("/subnetpools", params={"name": name, "min_prefixlen": 64})
    assert [p["id"] for p in r.json()["subnetpools"]] == [v6.id]
    neutron_error(member_http.get("/subnetpools", params={"prefix": "x"}), 400, "HTTPBadRequest")


def test_empty_address_scope_filter_matches_no_pool(member, member_http):
    """As Neutron: ``address_scope_id=""`` is compared as a string, which no pool holds."""
    name = unique("flt")
    member.network.create_subnet_pool(name=name, prefixes=["10.128.0.0/16"])
    member.network.create_subnet_pool(name=name, prefixes=["2001:db8:128::/48"])
    r = member_http.get("/subnetpools", params={"name": name, "address_scope_id": ""})
    assert r.json()["subnetpools"] == []


def test_concurrent_allocations_never_overlap(server, member):
    """Eight subnets asked for at once from one pool, on two networks: all different, none overlapping."""
    import ipaddress
    from concurrent.futures import ThreadPoolExecutor

    pool = member.network.create_subnet_pool(name=unique("race"), prefixes=["10.127.0.0/24"],
                                             default_prefixlen=27, min_prefixlen=24)
    nets = [network(member).id for _ in range(2)]
    token = member.auth_token

    def create(i: int) -> httpx.Response:
        with httpx.Client(base_url=server.network_url, headers={"X-Auth-Token": token},
                          timeout=60) as c:
            return post_subnet(c, network_id=nets[i % 2], ip_version=4, subnetpool_id=pool.id)

    with ThreadPoolExecutor(max_workers=8) as executor:
        responses = list(executor.map(create, range(9)))
    made = [r.json()["subnet"]["cidr"] for r in responses if r.status_code == 201]
    refused = [r for r in responses if r.status_code != 201]
    # A /24 holds eight /27s: exactly one of the nine requests finds the pool full.
    assert len(made) == 8 and len(refused) == 1, [r.text for r in refused]
    neutron_error(refused[0], allocation_status(server, 409), "SubnetAllocationError")
    assert sorted(made, key=lambda c: ipaddress.ip_network(c)) == [f"10.127.0.{32 * i}/27" for i in range(8)]
