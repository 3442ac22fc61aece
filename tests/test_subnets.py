"""Subnets: defaults, IPv4 and IPv6, pools, DNS, routes, updates, deletes, visibility and errors.

Against netbay's API and a real Neutron alike (``neutron_api``, tests/backendfix.py)."""

from __future__ import annotations

import ipaddress
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
    """A member of yet another project: (openstacksdk connection, raw client)."""
    user, password, project = server.make_user()
    return server.connect(user, password, project), server.http(server.token(user, password, project))


def network(conn, **kwargs):
    return conn.network.create_network(name=unique("snet"), **kwargs)


def post_subnet(http: httpx.Client, **subnet) -> httpx.Response:
    return http.post("/subnets", json={"subnet": subnet})


# --- create and show ------------------------------------------------------------------------


def test_ipv4_subnet_defaults(member):
    net = network(member)
    subnet = member.network.create_subnet(network_id=net.id, ip_version=4, cidr="10.1.0.0/24", name="s4",
                                          description="first")
    assert subnet.cidr == "10.1.0.0/24" and subnet.ip_version == 4
    assert subnet.gateway_ip == "10.1.0.1"
    assert subnet.allocation_pools == [{"start": "10.1.0.2", "end": "10.1.0.254"}]
    assert subnet.is_dhcp_enabled is True
    assert subnet.dns_nameservers == [] and subnet.host_routes == []
    assert subnet.ipv6_ra_mode is None and subnet.ipv6_address_mode is None
    assert subnet.subnet_pool_id is None and subnet.segment_id is None and subnet.service_types == []
    assert subnet.project_id == member.current_project_id and subnet.revision_number == 0
    assert subnet.name == "s4" and subnet.description == "first" and subnet.tags == []
    assert subnet.created_at and subnet.updated_at
    shown = member.network.get_subnet(subnet.id)
    assert shown.to_dict() == subnet.to_dict()
    assert member.network.get_network(net.id).subnet_ids == [subnet.id]


def test_cidr_with_host_bits_is_normalized(member):
    net = network(member)
    subnet = member.network.create_subnet(network_id=net.id, ip_version=4, cidr="10.2.0.77/24")
    assert subnet.cidr == "10.2.0.0/24" and subnet.gateway_ip == "10.2.0.1"


def test_ipv6_subnet_with_slaac(member):
    net = network(member)
    subnet = member.network.create_subnet(network_id=net.id, ip_version=6, cidr="2001:DB8:1::/64",
                                          ipv6_ra_mode="slaac", ipv6_address_mode="slaac",
                                          dns_nameservers=["2001:4860:4860::8888"])
    assert subnet.cidr == "2001:db8:1::/64" and subnet.ip_version == 6
    assert subnet.ipv6_ra_mode == "slaac" and subnet.ipv6_address_mode == "slaac"
    assert subnet.dns_nameservers == ["2001:4860:4860::8888"]
    # A dual-stack network: an IPv4 subnet next to it does not overlap.
    v4 = member.network.create_subnet(network_id=net.id, ip_version=4, cidr="10.3.0.0/24")
    assert sorted(member.network.get_network(net.id).subnet_ids) == sorted([subnet.id, v4.id])


@pytest.mark.embedded_only("Neutron 29 gives a SLAAC subnet 2001:db8:1::/64 the gateway 2001:db8:1:: (its "
                            "first address) and a pool from ::1; netbay the gateway ::1, the pool from ::2, as for IPv4")
def test_ipv6_default_gateway_is_the_first_host(member):
    net = network(member)
    subnet = member.network.create_subnet(network_id=net.id, ip_version=6, cidr="2001:db8:1::/64",
                                          ipv6_ra_mode="slaac", ipv6_address_mode="slaac")
    assert subnet.gateway_ip == "2001:db8:1::1"
    assert subnet.allocation_pools == [{"start": "2001:db8:1::2", "end": "2001:db8:1:0:ffff:ffff:ffff:ffff"}]


def test_gateway_null_means_no_gateway_and_a_pool_over_everything(member_http, member):
    net = network(member)
    r = post_subnet(member_http, network_id=net.id, ip_version=4, cidr="10.4.0.0/24", gateway_ip=None)
    assert r.status_code == 201, r.text
    subnet = r.json()["subnet"]
    assert subnet["gateway_ip"] is None
    assert subnet["allocation_pools"] == [{"start": "10.4.0.1", "end": "10.4.0.254"}]


ROUTES = [{"destination": "192.168.0.0/16", "nexthop": "10.5.0.254"},
          {"destination": "0.0.0.0/0", "nexthop": "10.5.0.1"}]


def test_explicit_gateway_pools_dns_and_routes(member):
    net = network(member)
    subnet = member.network.create_subnet(
        network_id=net.id, ip_version=4, cidr="10.5.0.0/24", gateway_ip="10.5.0.254",
        allocation_pools=[{"start": "10.5.0.100", "end": "10.5.0.110"},
                          {"start": "10.5.0.10", "end": "10.5.0.20"}],
        dns_nameservers=["8.8.8.8", "1.1.1.1"],
        host_routes=ROUTES)
    assert subnet.gateway_ip == "10.5.0.254"
    assert subnet.allocation_pools == [{"start": "10.5.0.10", "end": "10.5.0.20"},
                                       {"start": "10.5.0.100", "end": "10.5.0.110"}]
    assert subnet.dns_nameservers == ["8.8.8.8", "1.1.1.1"]  # order is kept: it is resolver order
    assert sorted(subnet.host_routes, key=str) == sorted(ROUTES, key=str)
    # Ports get addresses from the pools only.
    port = member.network.create_port(network_id=net.id)
    [fixed] = port.fixed_ips
    assert fixed["subnet_id"] == subnet.id and any(
        ipaddress.ip_address(p["start"]) <= ipaddress.ip_address(fixed["ip_address"]) <= ipaddress.ip_address(p["end"])
        for p in subnet.allocation_pools)
    member.network.delete_port(port)


@pytest.mark.embedded_only("Neutron gives a port a free pool address at random (10.5.0.15); netbay the lowest")
def test_a_port_gets_the_lowest_free_pool_address(member):
    net = network(member)
    subnet = member.network.create_subnet(network_id=net.id, ip_version=4, cidr="10.5.0.0/24",
                                          allocation_pools=[{"start": "10.5.0.100", "end": "10.5.0.110"},
                                                            {"start": "10.5.0.10", "end": "10.5.0.20"}])
    port = member.network.create_port(network_id=net.id)
    assert port.fixed_ips == [{"subnet_id": subnet.id, "ip_address": "10.5.0.10"}]
    member.network.delete_port(port)


@pytest.mark.embedded_only("Neutron returns host_routes in an order of its own (0.0.0.0/0 first), not as given")
def test_host_routes_keep_their_order(member):
    net = network(member)
    subnet = member.network.create_subnet(network_id=net.id, ip_version=4, cidr="10.5.0.0/24", host_routes=ROUTES)
    assert subnet.host_routes == ROUTES


def test_default_gateway_with_pools_that_cover_it_conflicts(member_http, member):
    net = network(member)
    r = post_subnet(member_http, network_id=net.id, ip_version=4, cidr="10.6.0.0/24",
                    allocation_pools=[{"start": "10.6.0.1", "end": "10.6.0.100"}])
    neutron_error(r, 409, "GatewayConflictWithAllocationPools",
                  "Gateway ip 10.6.0.1 conflicts with allocation pool 10.6.0.1-10.6.0.100.")


@pytest.mark.embedded_only("Neutron gives a /32 (10.7.0.9/32) the gateway 10.7.0.10, outside it; netbay none")
def test_tiny_subnets(member_http, member):
    net = network(member)
    r = post_subnet(member_http, network_id=net.id, ip_version=4, cidr="10.7.0.9/32", enable_dhcp=False)
    assert r.status_code == 201, r.text
    host = r.json()["subnet"]
    assert host["cidr"] == "10.7.0.9/32" and host["gateway_ip"] is None
    assert host["allocation_pools"] == [{"start": "10.7.0.9", "end": "10.7.0.9"}]
    r = post_subnet(member_http, network_id=net.id, ip_version=4, cidr="10.7.1.0/31", enable_dhcp=False)
    assert r.status_code == 201, r.text
    link = r.json()["subnet"]
    assert link["gateway_ip"] == "10.7.1.0"
    assert link["allocation_pools"] == [{"start": "10.7.1.1", "end": "10.7.1.1"}]
    # The single address of a /32 can be given to a port.
    port = member.network.create_port(network_id=net.id, fixed_ips=[{"subnet_id": host["id"]}])
    assert port.fixed_ips == [{"subnet_id": host["id"], "ip_address": "10.7.0.9"}]
    member.network.delete_port(port)
    # With DHCP (the default) a /31 or /32 is refused, as by Neutron.
    r = post_subnet(member_http, network_id=net.id, ip_version=4, cidr="10.7.2.0/31")
    neutron_error(r, 400, "InvalidInput", "Invalid input for operation: Subnet has a prefix length that is "
                  "incompatible with DHCP service enabled.")


@pytest.mark.embedded_only("the peer Neutron refuses tags in a subnet POST: 400 Attribute 'tags' not allowed in POST")
def test_tags_on_create_and_bulk_create(member, member_http):
    net = network(member)
    r = member_http.post("/subnets", json={"subnets": [
        {"network_id": net.id, "ip_version": 4, "cidr": "10.8.0.0/24", "tags": ["b", "a"]},
        {"network_id": net.id, "ip_version": 4, "cidr": "10.8.1.0/24"},
    ]})
    assert r.status_code == 201, r.text
    first, second = r.json()["subnets"]
    assert first["tags"] == ["a", "b"] and first["revision_number"] == 0 and second["tags"] == []
    assert [s.id for s in member.network.subnets(tags="a")] == [first["id"]]
    # Bulk is all or nothing: the second overlaps the first, so neither is made.
    r = member_http.post("/subnets", json={"subnets": [
        {"network_id": net.id, "ip_version": 4, "cidr": "10.8.2.0/24"},
        {"network_id": net.id, "ip_version": 4, "cidr": "10.8.2.128/25"},
    ]})
    neutron_error(r, 400, "InvalidInput")
    assert sorted(s.cidr for s in member.network.subnets(network_id=net.id)) == ["10.8.0.0/24", "10.8.1.0/24"]


# --- errors on create ----------------------------------------------------------------------------

NET = "{net}"

CREATE_ERRORS = [
    ({"cidr": "10.9.0.0/24", "ip_version": 6}, 400, "InvalidInput",
     "Invalid input for operation: cidr '10.9.0.0/24' does not match the ip_version '6'."),
    ({"cidr": "10.9.0.0/24", "ip_version": 4, "gateway_ip": "10.9.0.255"}, 400, "InvalidInput",
     "Invalid input for operation: Gateway is not valid on subnet."),
    ({"cidr": "10.9.0.0/24", "ip_version": 4, "gateway_ip": "2001:db8::1"}, 400, "InvalidInput",
     "Invalid input for operation: gateway_ip '2001:db8::1' does not match the ip_version '4'."),
    ({"cidr": "10.9.0.0/24", "ip_version": 4, "allocation_pools": [{"start": "10.9.0.2", "end": "10.9.1.5"}]},
     400, "OutOfBoundsAllocationPool",
     "The allocation pool 10.9.0.2-10.9.1.5 spans beyond the subnet cidr 10.9.0.0/24."),
    ({"cidr": "10.9.0.0/24", "ip_version": 4, "allocation_pools": [{"start": "10.9.0.0", "end": "10.9.0.5"}]},
     400, "OutOfBoundsAllocationPool", None),
    ({"cidr": "10.9.0.0/24", "ip_version": 4, "allocation_pools": [
        {"start": "10.9.0.2", "end": "10.9.0.20"}, {"start": "10.9.0.10", "end": "10.9.0.30"}]},
     409, "OverlappingAllocationPools",
     "Found overlapping allocation pools: 10.9.0.2-10.9.0.20 10.9.0.10-10.9.0.30 for subnet 10.9.0.0/24."),
    ({"cidr": "10.9.0.0/24", "ip_version": 4, "gateway_ip": "10.9.0.5",
      "allocation_pools": [{"start": "10.9.0.2", "end": "10.9.0.20"}]},
     409, "GatewayConflictWithAllocationPools",
     "Gateway ip 10.9.0.5 conflicts with allocation pool 10.9.0.2-10.9.0.20."),
    ({"cidr": "10.9.0.0/24", "ip_version": 4, "allocation_pools": [{"start": "10.9.0.2"}]},
     400, "HTTPBadRequest", None),
    ({"cidr": "10.9.0.0/24", "ip_version": 4, "dns_nameservers": ["8.8.8.8", "8.8.8.8"]}, 400, "HTTPBadRequest",
     "Invalid input for dns_nameservers. Reason: Duplicate nameserver '8.8.8.8'."),
    ({"cidr": "10.9.0.0/24", "ip_version": 4, "dns_nameservers": ["dns.example"]}, 400, "HTTPBadRequest", None),
    ({"cidr": "10.9.0.0/24", "ip_version": 4, "dns_nameservers": [f"10.0.0.{i}" for i in range(1, 7)]},
     400, "DNSNameServersExhausted",
     "Unable to complete operation for new subnet. The number of DNS nameservers exceeds the limit 5."),
    ({"cidr": "10.9.0.0/24", "ip_version": 4, "dns_nameservers": ["2001:4860:4860::8888"]}, 400, "InvalidInput",
     "Invalid input for operation: dns_nameserver '2001:4860:4860::8888' does not match the ip_version '4'."),
    ({"cidr": "10.9.0.0/24", "ip_version": 4,
      "host_routes": [{"destination": "2001:db8::/64", "nexthop": "10.9.0.1"}]}, 400, "InvalidInput",
     "Invalid input for operation: destination '2001:db8::/64' does not match the ip_version '4'."),
    ({"cidr": "10.9.0.0/24", "ip_version": 4, "host_routes": [{"destination": "1.0.0.0/8", "nexthop": "x"}]},
     400, "HTTPBadRequest", None),
    ({"cidr": "10.9.0.0/24", "ip_version": 4,
      "host_routes": [{"destination": "1.0.0.0/8", "nexthop": "10.9.0.1"}] * 2}, 400, "HTTPBadRequest", None),
    ({"cidr": "10.9.0.0/24", "ip_version": 4,
      "host_routes": [{"destination": f"1.0.{i}.0/24", "nexthop": "10.9.0.1"} for i in range(21)]},
     400, "HostRoutesExhausted",
     "Unable to complete operation for new subnet. The number of host routes exceeds the limit 20."),
    ({"cidr": "0.0.0.0/0", "ip_version": 4, "enable_dhcp": False}, 400, "InvalidInput",
     "Invalid input for operation: 0 is not allowed as CIDR prefix length."),
    ({"cidr": "127.0.0.0/8", "ip_version": 4}, 400, "InvalidInput",
     "Invalid input for operation: Loopback IP subnet is not supported if enable_dhcp is True."),
    ({"cidr": "10.9.0.0/24", "ip_version": 4, "ipv6_ra_mode": "slaac"}, 400, "InvalidInput",
     "Invalid input for operation: ipv6_ra_mode is not valid when ip_version is 4."),
    ({"cidr": "2001:db8:9::/64", "ip_version": 6, "ipv6_ra_mode": "slaac",
      "ipv6_address_mode": "dhcpv6-stateful"}, 400, "InvalidInput", None),
    ({"cidr": "2001:db8:9::/80", "ip_version": 6, "ipv6_address_mode": "slaac"}, 400, "InvalidInput",
     "Invalid input for operation: Invalid CIDR 2001:db8:9::/80 for IPv6 address mode. OpenStack uses the "
     "EUI-64 address format, which requires the prefix to be /64."),
    ({"cidr": "2001:db8:9::/64", "ip_version": 6, "ipv6_ra_mode": "slaac", "enable_dhcp": False},
     400, "InvalidInput", "Invalid input for operation: ipv6_ra_mode or ipv6_address_mode cannot be set when "
     "enable_dhcp is set to False."),
    ({"cidr": "2001:db8:9::/64", "ip_version": 6, "ipv6_ra_mode": "radvd"}, 400, "HTTPBadRequest", None),
    ({"cidr": "10.9.0.0/24"}, 400, "HTTPBadRequest",
     "Failed to parse request. Required attribute 'ip_version' not specified"),
    ({"ip_version": 4}, 400, "BadRequest",
     "Bad subnets request: a subnetpool must be specified in the absence of a cidr."),
    ({"cidr": "10.9.0.0/24", "ip_version": 4, "prefixlen": 24}, 400, "BadRequest",
     "Bad subnets request: cidr and prefixlen must not be supplied together."),
    ({"cidr": "10.9.0.0/24", "ip_version": 4, "id": str(uuid.uuid4())}, 400, "HTTPBadRequest",
     "Attribute 'id' not allowed in POST"),
    ({"cidr": "10.9.0.0/24", "ip_version": 4, "colour": "blue"}, 400, "HTTPBadRequest",
     "Unrecognized attribute(s) 'colour'"),
    ({"cidr": "10.9.0.0/24", "ip_version": 4, "enable_dhcp": "maybe"}, 400, "InvalidInput",
     "Invalid input for operation: 'maybe' cannot be converted to boolean."),
]

# What Neutron 29 refuses otherwise, or takes (see the reason below).
NETBAY_CREATE_ERRORS = [
    ({"cidr": "10.9.0.0/24", "ip_version": 4, "gateway_ip": "10.9.1.1"}, 400, "InvalidInput",
     "Invalid input for operation: Gateway is not valid on subnet."),
    ({"cidr": "10.9.0.0/24", "ip_version": 4, "allocation_pools": [{"start": "10.9.0.9", "end": "10.9.0.5"}]},
     400, "InvalidAllocationPool", "The allocation pool 10.9.0.9-10.9.0.5 is not valid."),
    ({"cidr": "10.9.0.0/24", "ip_version": 5}, 400, "HTTPBadRequest",
     "Invalid input for ip_version. Reason: 5 is not in [4, 6]."),
    ({"cidr": "not-a-cidr", "ip_version": 4}, 400, "HTTPBadRequest", None),
    ({"cidr": "10.9.0.0/24", "ip_version": 4, "subnetpool_id": "x", "use_default_subnetpool": True},
     400, "BadRequest", "Bad subnets request: subnetpool_id and use_default_subnetpool cannot both be specified."),
]


@pytest.fixture(scope="module")
def error_net(member):
    return network(member)


@pytest.mark.parametrize(("attrs", "status", "kind", "message"), CREATE_ERRORS,
                         ids=[f"{i}-{e[2]}" for i, e in enumerate(CREATE_ERRORS)])
def test_create_errors(member, member_http, error_net, attrs, status, kind, message):
    r = post_subnet(member_http, network_id=error_net.id, **attrs)
    neutron_error(r, status, kind, message)
    assert list(member.network.subnets(network_id=error_net.id)) == []


@pytest.mark.embedded_only(
    "Neutron takes a gateway outside the subnet (201); words a reversed pool as \"The allocation pool "
    "{'start': '10.9.0.9', 'end': '10.9.0.5'} is not valid.\" and ip_version 5 as \"not in valid_values\"; "
    "refuses not-a-cidr as InvalidInput; and checks subnetpool_id 'x' is a UUID "
    "(HTTPBadRequest) before the subnetpool_id/use_default_subnetpool conflict")
@pytest.mark.parametrize(("attrs", "status", "kind", "message"), NETBAY_CREATE_ERRORS,
                         ids=[f"{i}-{e[2]}" for i, e in enumerate(NETBAY_CREATE_ERRORS)])
def test_create_errors_worded_by_netbay(member, member_http, error_net, attrs, status, kind, message):
    test_create_errors(member, member_http, error_net, attrs, status, kind, message)


def test_create_needs_a_network(member_http):
    neutron_error(post_subnet(member_http, ip_version=4, cidr="10.10.0.0/24"), 400, "HTTPBadRequest",
                  "Failed to parse request. Required attribute 'network_id' not specified")
    missing = str(uuid.uuid4())
    neutron_error(post_subnet(member_http, network_id=missing, ip_version=4, cidr="10.10.0.0/24"),
                  404, "NetworkNotFound", f"Network {missing} could not be found.")


def test_overlapping_subnets_on_one_network_are_refused(member, member_http):
    net = network(member)
    member.network.create_subnet(network_id=net.id, ip_version=4, cidr="10.11.0.0/16")
    r = post_subnet(member_http, network_id=net.id, ip_version=4, cidr="10.11.5.0/24")
    neutron_error(r, 400, "InvalidInput", f"Invalid input for operation: Requested subnet with cidr: "
                  f"10.11.5.0/24 for network: {net.id} overlaps with another subnet.")
    # The same range on another network is fine (overlapping IPs across networks are allowed).
    other_net = network(member)
    assert member.network.create_subnet(network_id=other_net.id, ip_version=4, cidr="10.11.5.0/24").id


# --- update ------------------------------------------------------------------------------------


def test_update_attributes(member):
    net = network(member)
    subnet = member.network.create_subnet(network_id=net.id, ip_version=4, cidr="10.12.0.0/24")
    revision = subnet.revision_number
    updated = member.network.update_subnet(
        subnet, name="renamed", description="d", dns_nameservers=["9.9.9.9"], is_dhcp_enabled=False,
        host_routes=[{"destination": "10.99.0.0/16", "nexthop": "10.12.0.9"}],
        allocation_pools=[{"start": "10.12.0.100", "end": "10.12.0.200"}])
    assert updated.name == "renamed" and updated.description == "d"
    assert updated.dns_nameservers == ["9.9.9.9"] and updated.is_dhcp_enabled is False
    assert updated.host_routes == [{"destination": "10.99.0.0/16", "nexthop": "10.12.0.9"}]
    assert updated.allocation_pools == [{"start": "10.12.0.100", "end": "10.12.0.200"}]
    assert updated.revision_number == revision + 1
    assert updated.cidr == "10.12.0.0/24" and updated.gateway_ip == "10.12.0.1"
    # The gateway moves to an address outside the pools; then it goes away, pools unchanged.
    moved = member.network.update_subnet(subnet, gateway_ip="10.12.0.254")
    assert moved.gateway_ip == "10.12.0.254"
    assert member.network.get_subnet(subnet.id).gateway_ip == "10.12.0.254"


def test_update_gateway_to_null_and_errors(member, member_http):
    net = network(member)
    subnet = member.network.create_subnet(network_id=net.id, ip_version=4, cidr="10.13.0.0/24")
    url = f"/subnets/{subnet.id}"
    r = member_http.put(url, json={"subnet": {"gateway_ip": None}})
    assert r.status_code == 200, r.text
    assert r.json()["subnet"]["gateway_ip"] is None
    assert r.json()["subnet"]["allocation_pools"] == [{"start": "10.13.0.2", "end": "10.13.0.254"}]
    # Back to .1, outside the pools: fine. Into the pools: Neutron's 409.
    assert member_http.put(url, json={"subnet": {"gateway_ip": "10.13.0.1"}}).status_code == 200
    neutron_error(member_http.put(url, json={"subnet": {"gateway_ip": "10.13.0.50"}}), 409,
                  "GatewayConflictWithAllocationPools",
                  "Gateway ip 10.13.0.50 conflicts with allocation pool 10.13.0.2-10.13.0.254.")
    neutron_error(member_http.put(url, json={"subnet": {"allocation_pools": [
        {"start": "10.13.0.1", "end": "10.13.0.9"}]}}), 409, "GatewayConflictWithAllocationPools")
    neutron_error(member_http.put(url, json={"subnet": {"dns_nameservers": ["::1"]}}), 400, "InvalidInput")
    neutron_error(member_http.put(url, json={"subnet": {"dns_nameservers": [f"10.0.0.{i}" for i in range(9)]}}),
                  400, "DNSNameServersExhausted",
                  f"Unable to complete operation for {subnet.id}. The number of DNS nameservers exceeds the limit 5.")
    for attr, value in (("cidr", "10.13.0.0/16"), ("ip_version", 6), ("network_id", net.id),
                        ("subnetpool_id", None), ("ipv6_ra_mode", "slaac")):
        neutron_error(member_http.put(url, json={"subnet": {attr: value}}), 400, "HTTPBadRequest",
                      f"Cannot update read-only attribute {attr}")
    # Nothing of the refused updates stuck.
    after = member.network.get_subnet(subnet.id)
    assert after.gateway_ip == "10.13.0.1" and after.dns_nameservers == [] and after.cidr == "10.13.0.0/24"
    assert after.allocation_pools == [{"start": "10.13.0.2", "end": "10.13.0.254"}]


@pytest.mark.embedded_only("Neutron takes a gateway outside the subnet (200); netbay refuses it as Neutron "
                            "did with force_gateway_on_subnet")
def test_update_gateway_outside_the_subnet_is_refused(member, member_http):
    net = network(member)
    subnet = member.network.create_subnet(network_id=net.id, ip_version=4, cidr="10.13.0.0/24")
    neutron_error(member_http.put(f"/subnets/{subnet.id}", json={"subnet": {"gateway_ip": "10.14.0.1"}}), 400,
                  "InvalidInput", "Invalid input for operation: Gateway is not valid on subnet.")
    assert member.network.get_subnet(subnet.id).gateway_ip == "10.13.0.1"


def test_enabling_dhcp_checks_the_prefix_and_ipv6_modes_pin_dhcp(member, member_http):
    net = network(member)
    r = post_subnet(member_http, network_id=net.id, ip_version=4, cidr="10.15.0.0/31", enable_dhcp=False,
                    gateway_ip=None)
    assert r.status_code == 201, r.text
    tiny = r.json()["subnet"]
    neutron_error(member_http.put(f"/subnets/{tiny['id']}", json={"subnet": {"enable_dhcp": True}}), 400,
                  "InvalidInput")
    v6 = member.network.create_subnet(network_id=net.id, ip_version=6, cidr="2001:db8:15::/64",
                                      ipv6_ra_mode="dhcpv6-stateful", ipv6_address_mode="dhcpv6-stateful")
    neutron_error(member_http.put(f"/subnets/{v6.id}", json={"subnet": {"enable_dhcp": False}}), 400,
                  "InvalidInput", "Invalid input for operation: Cannot disable enable_dhcp with ipv6 attributes set.")


def test_gateway_held_by_a_router_interface_cannot_move(member, member_http):
    net = network(member)
    subnet = member.network.create_subnet(network_id=net.id, ip_version=4, cidr="10.16.0.0/24")
    router = member.network.create_router(name=unique("r"))
    member.network.add_interface_to_router(router, subnet_id=subnet.id)
    [port] = list(member.network.ports(device_id=router.id))
    r = member_http.put(f"/subnets/{subnet.id}", json={"subnet": {"gateway_ip": "10.16.0.254"}})
    neutron_error(r, 409, "GatewayIpInUse",
                  f"Current gateway ip 10.16.0.1 already in use by port {port.id}. Unable to update.")
    neutron_error(member_http.delete(f"/subnets/{subnet.id}"), 409, "SubnetInUse")
    member.network.remove_interface_from_router(router, subnet_id=subnet.id)
    moved = member.network.update_subnet(subnet, gateway_ip="10.16.0.254",
                                         allocation_pools=[{"start": "10.16.0.2", "end": "10.16.0.200"}])
    assert moved.gateway_ip == "10.16.0.254"
    member.network.delete_router(router)


# --- delete ----------------------------------------------------------------------------------


def test_delete_refused_while_a_port_has_an_address(member, member_http):
    net = network(member)
    subnet = member.network.create_subnet(network_id=net.id, ip_version=4, cidr="10.17.0.0/24")
    port = member.network.create_port(network_id=net.id)
    neutron_error(member_http.delete(f"/subnets/{subnet.id}"), 409, "SubnetInUse",
                  f"Unable to complete operation on subnet {subnet.id}: One or more ports have an IP "
                  "allocation from this subnet.")
    assert member.network.get_subnet(subnet.id).id == subnet.id
    member.network.delete_port(port)
    assert member_http.delete(f"/subnets/{subnet.id}").status_code == 204
    neutron_error(member_http.get(f"/subnets/{subnet.id}"), 404, "SubnetNotFound",
                  f"Subnet {subnet.id} could not be found.")
    neutron_error(member_http.delete(f"/subnets/{subnet.id}"), 404, "SubnetNotFound")
    assert member.network.get_network(net.id).subnet_ids == []


def test_subnets_go_with_their_network(member, member_http):
    net = network(member)
    a = member.network.create_subnet(network_id=net.id, ip_version=4, cidr="10.18.0.0/24")
    member.network.set_tags(a, ["x"])
    b = member.network.create_subnet(network_id=net.id, ip_version=6, cidr="2001:db8:18::/64")
    member.network.delete_network(net)
    for subnet in (a, b):
        neutron_error(member_http.get(f"/subnets/{subnet.id}"), 404, "SubnetNotFound")
    assert list(member.network.subnets(tags="x")) == []


def test_network_revision_follows_its_subnets(member):
    net = network(member)
    before = member.network.get_network(net.id).revision_number
    subnet = member.network.create_subnet(network_id=net.id, ip_version=4, cidr="10.19.0.0/24")
    after_create = member.network.get_network(net.id)
    assert after_create.revision_number == before + 1 and after_create.subnet_ids == [subnet.id]
    member.network.delete_subnet(subnet)
    after_delete = member.network.get_network(net.id)
    assert after_delete.revision_number == before + 2 and after_delete.subnet_ids == []


@pytest.mark.embedded_only("/netbay/v1/changes is netbay's own change log; Neutron has none")
def test_change_log_follows_a_networks_subnets(server, member):
    net = network(member)
    token = server.token()

    def changes(since: int) -> dict:
        r = httpx.get(f"{server.url}/netbay/v1/changes", params={"since": since},
                      headers={"X-Auth-Token": token}, timeout=10)
        assert r.status_code == 200, r.text
        return r.json()

    head = 0
    for _ in range(1000):  # page to the end of the stream
        page = changes(head)
        if not page["changes"]:
            break
        head = page["revision"]
    subnet = member.network.create_subnet(network_id=net.id, ip_version=4, cidr="10.19.0.0/24")
    member.network.delete_subnet(subnet)
    mine = [(c["resource"], c["action"], c["data"] and c["data"].get("subnets"))
            for c in changes(head)["changes"] if c["id"] in {net.id, subnet.id}]
    assert mine == [("subnet", "create", None), ("network", "update", [subnet.id]),
                    ("subnet", "delete", None), ("network", "update", [])]


# --- list and filters ---------------------------------------------------------------------------


def test_list_filters_and_sorting(member, member_http):
    net = network(member)
    name = unique("flt")
    a = member.network.create_subnet(network_id=net.id, ip_version=4, cidr="10.20.1.0/24", name=name)
    b = member.network.create_subnet(network_id=net.id, ip_version=4, cidr="10.20.0.0/24", name=name,
                                     is_dhcp_enabled=False, gateway_ip=None)
    c = member.network.create_subnet(network_id=net.id, ip_version=6, cidr="2001:db8:20::/64", name=name,
                                     ipv6_ra_mode="slaac", ipv6_address_mode="slaac")

    def ids(**query) -> list[str]:
        return sorted(s.id for s in member.network.subnets(**query))

    assert ids(network_id=net.id) == sorted([a.id, b.id, c.id])
    assert ids(name=name, ip_version=4) == sorted([a.id, b.id])
    assert ids(network_id=net.id, cidr="10.20.1.0/24") == [a.id]
    assert ids(network_id=net.id, is_dhcp_enabled=False) == [b.id]
    assert ids(network_id=net.id, gateway_ip="10.20.1.1") == [a.id]
    assert ids(network_id=net.id, ipv6_ra_mode="slaac") == [c.id]
    assert ids(network_id=net.id, project_id=member.current_project_id) == sorted([a.id, b.id, c.id])
    r = member_http.get("/subnets", params={"network_id": net.id, "ip_version": 4, "sort_key": "cidr",
                                            "sort_dir": "asc", "fields": ["id", "cidr"]})
    assert r.json()["subnets"] == [{"id": b.id, "cidr": "10.20.0.0/24"}, {"id": a.id, "cidr": "10.20.1.0/24"}]
    r = member_http.get("/subnets", params={"network_id": net.id, "limit": 2, "sort_key": "cidr", "sort_dir": "asc"})
    assert len(r.json()["subnets"]) == 2 and r.json()["subnets_links"][0]["rel"] == "next"
    neutron_error(member_http.get("/subnets", params={"shape": "round"}), 400, "HTTPBadRequest")


def test_filter_of_the_wrong_type(member_http):
    neutron_error(member_http.get("/subnets", params={"ip_version": "four"}), 400, "InvalidInput",
                  "Invalid input for operation: 'four' is not an integer.")


def test_sort_key_needs_a_sort_dir(member_http):
    neutron_error(member_http.get("/subnets", params={"limit": 1, "sort_key": "cidr"}), 400, "HTTPBadRequest",
                  "The number of sort_keys and sort_dirs must be same")


@pytest.mark.embedded_only('Neutron matches gateway_ip="" and subnetpool_id="" against nothing; netbay takes '
                           'them for null (no gateway, no pool)')
def test_empty_filters_match_null(member, member_http):
    net = network(member)
    a = member.network.create_subnet(network_id=net.id, ip_version=4, cidr="10.20.1.0/24")
    b = member.network.create_subnet(network_id=net.id, ip_version=4, cidr="10.20.0.0/24",
                                     is_dhcp_enabled=False, gateway_ip=None)
    r = member_http.get("/subnets", params={"network_id": net.id, "gateway_ip": ""})
    assert [s["id"] for s in r.json()["subnets"]] == [b.id]
    assert sorted(s.id for s in member.network.subnets(network_id=net.id, subnet_pool_id="")) == sorted([a.id, b.id])


# --- visibility and ownership ----------------------------------------------------------------


def test_other_projects_see_nothing_and_cannot_touch(member, other):
    other_conn, other_http = other
    net = network(member)
    subnet = member.network.create_subnet(network_id=net.id, ip_version=4, cidr="10.21.0.0/24")
    neutron_error(other_http.get(f"/subnets/{subnet.id}"), 404, "SubnetNotFound")
    neutron_error(other_http.put(f"/subnets/{subnet.id}", json={"subnet": {"name": "x"}}), 404, "SubnetNotFound")
    neutron_error(other_http.delete(f"/subnets/{subnet.id}"), 404, "SubnetNotFound")
    assert subnet.id not in [s.id for s in other_conn.network.subnets()]
    assert member.network.get_subnet(subnet.id).name == subnet.name


@pytest.mark.embedded_only("Neutron refuses a subnet on another project's network as 403 PolicyNotAuthorized "
                           "(rule:create_subnet); netbay as 404 NetworkNotFound")
def test_no_subnet_on_a_network_one_cannot_see(member, other):
    _, other_http = other
    net = network(member)
    neutron_error(post_subnet(other_http, network_id=net.id, ip_version=4, cidr="10.21.1.0/24"),
                  404, "NetworkNotFound", f"Network {net.id} could not be found.")
    assert list(member.network.subnets(network_id=net.id)) == []


def test_shared_and_external_networks(admin, member, member_http):
    shared = admin.network.create_network(name=unique("shared"), shared=True)
    subnet = admin.network.create_subnet(network_id=shared.id, ip_version=4, cidr="10.22.0.0/24")
    # Visible to every project, but only the network's owner (or admin) adds or changes subnets.
    assert member.network.get_subnet(subnet.id).cidr == "10.22.0.0/24"
    neutron_error(post_subnet(member_http, network_id=shared.id, ip_version=4, cidr="10.22.1.0/24"),
                  403, "PolicyNotAuthorized", "rule:create_subnet is disallowed by policy")
    neutron_error(member_http.put(f"/subnets/{subnet.id}", json={"subnet": {"name": "mine"}}), 403,
                  "PolicyNotAuthorized", "rule:update_subnet is disallowed by policy")
    neutron_error(member_http.delete(f"/subnets/{subnet.id}"), 403, "PolicyNotAuthorized",
                  "rule:delete_subnet is disallowed by policy")
    # The external public network's subnet is visible too.
    public = admin.network.find_network("public")
    assert [s.id for s in member.network.subnets(network_id=public.id)] == public.subnet_ids
    admin.network.delete_network(shared)


@pytest.mark.embedded_only("Neutron 29 does not list to a network's owner a subnet an admin made on it "
                            "for the admin's project; netbay does (admin_or_network_owner)")
def test_admin_subnet_on_a_members_network(admin, member, member_http):
    net = network(member)
    subnet = admin.network.create_subnet(network_id=net.id, ip_version=4, cidr="10.23.0.0/24")
    assert subnet.project_id != member.current_project_id
    # The network's owner sees it, changes it and deletes it (Neutron's admin_or_network_owner).
    assert [s.id for s in member.network.subnets(network_id=net.id)] == [subnet.id]
    assert member.network.update_subnet(subnet, name="owned-by-net").name == "owned-by-net"
    assert member_http.delete(f"/subnets/{subnet.id}").status_code == 204
    # A member may not create a subnet for another project.
    r = post_subnet(member_http, network_id=net.id, ip_version=4, cidr="10.23.1.0/24", project_id="someone")
    neutron_error(r, 400, "HTTPBadRequest")
    # Admin may, for the network owner's project.
    made = admin.network.create_subnet(network_id=net.id, ip_version=4, cidr="10.23.2.0/24",
                                       project_id=member.current_project_id)
    assert made.project_id == member.current_project_id
