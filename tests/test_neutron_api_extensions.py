"""Neutron's API-only extensions (issue 29, item 4): each listed in /v2.0/extensions
and behaving as Neutron's API tests expect, through openstacksdk and raw HTTP."""

from __future__ import annotations

import httpx
import openstack.exceptions
import pytest
from conftest import neutron_error, unique

pytestmark = pytest.mark.shared_server   # its tests make their own objects (tests/conftest.py)

@pytest.fixture(scope="module")
def other_member(server):
    user, password, project = server.make_user()
    return server.connect(user, password, project)


ADDED = {"ip-substring-filtering", "tag-ports-during-bulk-creation", "default-subnetpools",
         "subnetpool-prefix-ops", "network-ip-availability", "quota-check-limit-default", "address-scope",
         "subnet-service-types", "extra_dhcp_opt"}


def test_listed(admin_http: httpx.Client) -> None:
    aliases = [e["alias"] for e in admin_http.get("/extensions").json()["extensions"]]
    assert set(aliases) >= ADDED and len(aliases) == len(set(aliases))


def test_ip_substring_filter_and_bulk_tags(member, member_http: httpx.Client) -> None:
    net = member.network.create_network(name=unique("substr"))
    subnet = member.network.create_subnet(network_id=net.id, cidr="10.66.0.0/24", ip_version=4)
    r = member_http.post("/ports", json={"ports": [
        {"network_id": net.id, "tags": ["red", "blue"], "fixed_ips": [{"ip_address": "10.66.0.123"}]},
        {"network_id": net.id, "tags": ["green"], "fixed_ips": [{"ip_address": "10.66.0.45"}]}]})
    assert r.status_code == 201, r.text
    made = r.json()["ports"]
    assert [sorted(p["tags"]) for p in made] == [["blue", "red"], ["green"]]
    assert {p.id for p in member.network.ports(tags="green")} == {made[1]["id"]}
    found = member_http.get("/ports", params={"fixed_ips": "ip_address_substr=0.12"}).json()["ports"]
    assert [p["id"] for p in found] == [made[0]["id"]]
    found = member_http.get("/ports", params=[("fixed_ips", "ip_address_substr=10.66.0"),
                                               ("fixed_ips", f"subnet_id={subnet.id}")]).json()["ports"]
    assert {p["id"] for p in found} == {p["id"] for p in made}


def test_default_subnetpool_and_prefix_ops(admin, admin_http: httpx.Client) -> None:
    pool = admin.network.create_subnet_pool(name=unique("pool"), prefixes=["10.200.0.0/24"],
                                            default_prefixlen=26, is_default=True, shared=True)
    try:
        net = admin.network.create_network(name=unique("pooled"))
        r = admin_http.post("/subnets", json={"subnet": {"network_id": net.id, "ip_version": 4,
                                                          "use_default_subnetpool": True}})
        assert r.status_code == 201, r.text
        subnet = r.json()["subnet"]
        assert subnet["subnetpool_id"] == pool.id and subnet["cidr"] == "10.200.0.0/26"

        add = admin_http.put(f"/subnetpools/{pool.id}/add_prefixes", json={"prefixes": ["10.201.0.0/24"]})
        assert add.status_code == 200, add.text
        assert add.json() == {"prefixes": ["10.200.0.0/24", "10.201.0.0/24"]}
        assert admin.network.get_subnet_pool(pool.id).prefixes == ["10.200.0.0/24", "10.201.0.0/24"]
        r = admin_http.put(f"/subnetpools/{pool.id}/add_prefixes", json={"prefixes": ["2001:db8::/64"]})
        neutron_error(r, 400, "PrefixVersionMismatch")
        r = admin_http.put(f"/subnetpools/{pool.id}/remove_prefixes", json={"prefixes": ["10.200.0.0/25"]})
        neutron_error(r, 400, "IllegalSubnetPoolPrefixUpdate",
                      "Illegal update to prefixes: One or more the prefixes to be removed is in use by a subnet.")
        r = admin_http.put(f"/subnetpools/{pool.id}/remove_prefixes", json={"prefixes": ["10.201.0.128/25"]})
        assert r.json() == {"prefixes": ["10.200.0.0/24", "10.201.0.0/25"]}
        r = admin_http.put(f"/subnetpools/{pool.id}/remove_prefixes", json={"prefixes": ["192.0.2.0/24"]})
        assert r.json() == {"prefixes": ["10.200.0.0/24", "10.201.0.0/25"]}   # none of its own: no-op
        r = admin_http.put(f"/subnetpools/{pool.id}/add_prefixes", json={"prefix": "x"})
        neutron_error(r, 400, "InvalidInput")
        admin.network.delete_subnet(subnet["id"])
    finally:
        admin.network.delete_subnet_pool(pool)


def test_network_ip_availability(admin, member, admin_http: httpx.Client, member_http: httpx.Client) -> None:
    net = admin.network.create_network(name=unique("avail"))
    v4 = admin.network.create_subnet(network_id=net.id, cidr="10.67.0.0/24", ip_version=4,
                                     allocation_pools=[{"start": "10.67.0.10", "end": "10.67.0.19"}])
    bare = admin.network.create_network(name=unique("bare"))
    got = admin.network.get_network_ip_availability(net.id)
    assert (got.network_name, got.total_ips, got.used_ips) == (net.name, 10, 0)
    for _ in range(3):
        admin.network.create_port(network_id=net.id)
    got = admin_http.get(f"/network-ip-availabilities/{net.id}").json()["network_ip_availability"]
    details = {"total_ips_in_subnet": 254, "total_ips_in_allocation_pool": 10, "used_ips_in_subnet": 3,
               "used_ips_in_allocation_pool": 3}   # network-ip-availability-details
    assert got == {"network_id": net.id, "network_name": net.name, "tenant_id": net.project_id,
                   "project_id": net.project_id, "total_ips": 10, "used_ips": 3, "ip_availability_details": details,
                   "subnet_ip_availability": [{"subnet_id": v4.id, "subnet_name": v4.name, "cidr": "10.67.0.0/24",
                                               "ip_version": 4, "total_ips": 10, "used_ips": 3,
                                               "ip_availability_details": details}]}
    listed = {a.network_id: a for a in admin.network.network_ip_availabilities(ip_version=4)}
    assert net.id in listed and bare.id not in listed
    everything = admin_http.get("/network-ip-availabilities", params={"network_name": bare.name}).json()
    assert everything["network_ip_availabilities"][0]["subnet_ip_availability"] == []
    only = admin_http.get(f"/network-ip-availabilities/{net.id}", params={"fields": "used_ips"}).json()
    assert only == {"network_ip_availability": {"used_ips": 3}}
    neutron_error(admin_http.get("/network-ip-availabilities/5d1f3d5e-0000-4000-8000-000000000000"), 404,
                  "NetworkNotFound")
    # Admins only, as Neutron 29 answers others: an empty list, and not found.
    assert member_http.get("/network-ip-availabilities").json() == {"network_ip_availabilities": []}
    neutron_error(member_http.get(f"/network-ip-availabilities/{net.id}"), 404, "HTTPNotFound",
                  "The resource could not be found.")
    with pytest.raises(openstack.exceptions.NotFoundException):
        member.network.get_network_ip_availability(net.id)


def test_address_scopes(admin, member, other_member, member_http: httpx.Client) -> None:
    scope = member.network.create_address_scope(name=unique("scope"), ip_version=4)
    assert (scope.ip_version, scope.is_shared, scope.project_id) == (4, False, member.current_project_id)
    raw = member_http.get(f"/address-scopes/{scope.id}").json()["address_scope"]
    assert set(raw) == {"id", "name", "project_id", "tenant_id", "shared", "ip_version"}
    assert scope.id not in {s.id for s in other_member.network.address_scopes()}
    neutron_error(member_http.post("/address-scopes", json={"address_scope": {"name": "x", "ip_version": 5}}),
                  400, "HTTPBadRequest", "Invalid input for ip_version. Reason: 5 is not in valid_values.")
    neutron_error(member_http.post("/address-scopes", json={"address_scope": {"ip_version": 4, "shared": True}}),
                  403, "PolicyNotAuthorized")
    member.network.update_address_scope(scope, name="renamed")
    assert member.network.get_address_scope(scope.id).name == "renamed"

    pool = member.network.create_subnet_pool(name=unique("p"), prefixes=["10.210.0.0/16"],
                                              address_scope_id=scope.id, default_prefixlen=24)
    assert pool.address_scope_id == scope.id
    assert [p.id for p in member.network.subnet_pools(address_scope_id=scope.id)] == [pool.id]
    r = member_http.post("/subnetpools", json={"subnetpool": {"name": "clash", "prefixes": ["10.210.8.0/24"],
                                                              "address_scope_id": scope.id}})
    neutron_error(r, 409, "AddressScopePrefixConflict")
    r = member_http.post("/subnetpools", json={"subnetpool": {"name": "v6", "prefixes": ["2001:db8:5::/48"],
                                                              "address_scope_id": scope.id}})
    neutron_error(r, 400, "IllegalSubnetPoolIpVersionAssociationToAddressScope")
    free = member.network.create_subnet_pool(name=unique("p"), prefixes=["10.211.0.0/16"])
    member.network.update_subnet_pool(free, address_scope_id=scope.id)
    assert member.network.get_subnet_pool(free.id).address_scope_id == scope.id
    # a network shows the scope of its subnets' pool
    net = member.network.create_network(name=unique("scoped"))
    member.network.create_subnet(network_id=net.id, subnetpool_id=pool.id, ip_version=4)
    assert member.network.get_network(net.id).ipv4_address_scope_id == scope.id
    listed = member_http.get("/networks", params={"id": net.id}).json()["networks"][0]
    assert (listed["ipv4_address_scope"], listed["ipv6_address_scope"]) == (scope.id, None)

    neutron_error(member_http.delete(f"/address-scopes/{scope.id}"), 409, "AddressScopeInUse")
    member.network.update_subnet_pool(free, address_scope_id=None)
    shared = admin.network.create_address_scope(name=unique("shared"), ip_version=6, shared=True)
    assert shared.id in {s.id for s in other_member.network.address_scopes()}
    r = admin.network.put(f"/address-scopes/{shared.id}", json={"address_scope": {"shared": False}})
    neutron_error(r, 400, "AddressScopeUpdateError")
    admin.network.delete_address_scope(shared)
    with pytest.raises(openstack.exceptions.NotFoundException):
        admin.network.get_address_scope(shared.id)


def test_subnet_service_types(member, member_http: httpx.Client) -> None:
    net = member.network.create_network(name=unique("svc"))
    typed = member.network.create_subnet(network_id=net.id, cidr="10.68.0.0/24", ip_version=4,
                                         service_types=["compute:nova"])
    assert typed.service_types == ["compute:nova"]
    vm = member.network.create_port(network_id=net.id, device_owner="compute:nova")
    assert vm.fixed_ips[0]["subnet_id"] == typed.id
    r = member_http.post("/ports", json={"port": {"network_id": net.id, "device_owner": "network:dhcp"}})
    neutron_error(r, 400, "IpAddressGenerationFailureNoMatchingSubnet",
                  f"No valid service subnet for the given device owner, network {net.id}, service type network:dhcp.")
    plain = member.network.create_subnet(network_id=net.id, cidr="10.69.0.0/24", ip_version=4)
    assert plain.service_types == []
    port = member.network.create_port(network_id=net.id)
    assert [ip["subnet_id"] for ip in port.fixed_ips] == [plain.id]
    assert [s.id for s in member.network.subnets(network_id=net.id) if s.service_types] == [typed.id]
    updated = member.network.update_subnet(plain, service_types=["network:floatingip"])
    assert updated.service_types == ["network:floatingip"]
    r = member_http.post("/subnets", json={"subnet": {"network_id": net.id, "cidr": "10.70.0.0/24",
                                                      "ip_version": 4, "service_types": ["nova"]}})
    neutron_error(r, 400, "InvalidInput", "Invalid input for operation: Subnet service type nova does not "
                                          "correspond to a valid device owner.")


def test_extra_dhcp_opts(member, member_http: httpx.Client) -> None:
    net = member.network.create_network(name=unique("dhcpopt"))
    opts = [{"opt_name": "bootfile-name", "opt_value": "pxelinux.0"},
            {"opt_name": "tftp-server", "opt_value": "192.0.2.10", "ip_version": 4},
            {"opt_name": "dns-server", "opt_value": None}]
    r = member_http.post("/ports", json={"port": {"network_id": net.id, "extra_dhcp_opts": opts}})
    assert r.status_code == 201, r.text
    port = r.json()["port"]
    assert port["extra_dhcp_opts"] == [{"opt_name": "bootfile-name", "opt_value": "pxelinux.0", "ip_version": 4},
                                       {"opt_name": "tftp-server", "opt_value": "192.0.2.10", "ip_version": 4}]
    r = member_http.put(f"/ports/{port['id']}", json={"port": {"extra_dhcp_opts": [
        {"opt_name": "bootfile-name", "opt_value": "ipxe.efi"}, {"opt_name": "tftp-server", "opt_value": None},
        {"opt_name": "domain-search", "opt_value": "example.org", "ip_version": 6}]}})
    assert r.status_code == 200, r.text
    shown = member.network.get_port(port["id"]).extra_dhcp_opts
    assert shown == [{"opt_name": "bootfile-name", "opt_value": "ipxe.efi", "ip_version": 4},
                     {"opt_name": "domain-search", "opt_value": "example.org", "ip_version": 6}]
    r = member_http.post("/ports", json={"port": {"network_id": net.id, "extra_dhcp_opts": [
        {"opt_name": "x", "opt_value": "y", "ip_version": 5}]}})
    neutron_error(r, 400, "HTTPBadRequest", "Invalid input for extra_dhcp_opts. Reason: 5 is not in [4, 6].")
    plain = member.network.create_port(network_id=net.id)
    assert plain.extra_dhcp_opts == []
