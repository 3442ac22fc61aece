"""The Port API: addresses, MACs, security groups, updates, filters, visibility and errors.

Against netbay's API and a real Neutron alike (``neutron_api``, tests/backendfix.py)."""

from __future__ import annotations

import ipaddress

import httpx
import pytest
from conftest import unique
from openstack import exceptions as os_exc

pytestmark = [pytest.mark.every_db,   # the store's semantics: on SQLite and PostgreSQL (tests/conftest.py)
              pytest.mark.shared_server]   # its tests make their own objects


@pytest.fixture(scope="module")
def server(neutron_api):
    """netbay's network API or a real Neutron's."""
    return neutron_api


@pytest.fixture(scope="module")
def other(server):
    """A second project: (openstacksdk, raw HTTP, project id)."""
    user, password, project = server.make_user()
    conn = server.connect(user, password, project)
    return conn, server.http(conn.auth_token), conn.current_project_id


@pytest.fixture(scope="module")
def net(member):
    """The member's network with one IPv4 /24."""
    network = member.network.create_network(name=unique("net"))
    subnet = member.network.create_subnet(network_id=network.id, ip_version=4, cidr="10.20.0.0/24",
                                          name=unique("sub"))
    return network, subnet


def _error(r: httpx.Response, status: int, kind: str) -> str:
    assert r.status_code == status, r.text
    error = r.json()["NeutronError"]
    assert error["type"] == kind, error
    return error["message"]


def _network(conn, cidrs: list[str], **attrs):
    network = conn.network.create_network(name=unique("net"), **attrs)
    subnets = [conn.network.create_subnet(network_id=network.id, cidr=c, name=unique("sub"),
                                          ip_version=ipaddress.ip_network(c).version) for c in cidrs]
    return network, subnets


# --- create -------------------------------------------------------------------------------


def test_create_without_fixed_ips_renders_neutron_fields(member, member_http, admin_http, net):
    network, subnet = net
    port = member.network.create_port(network_id=network.id, name="p1", description="first")
    assert port.name == "p1" and port.description == "first"
    assert port.project_id == member.current_project_id
    assert port.status == "DOWN" and port.is_admin_state_up is True
    assert port.mac_address.startswith("fa:16:3e:")
    assert len(port.fixed_ips) == 1 and port.fixed_ips[0]["subnet_id"] == subnet.id
    assert ipaddress.ip_address(port.fixed_ips[0]["ip_address"]) in ipaddress.ip_network(subnet.cidr)
    assert port.fixed_ips[0]["ip_address"] != subnet.gateway_ip
    body = member_http.get(f"/ports/{port.id}").json()["port"]
    assert body["tenant_id"] == body["project_id"] == member.current_project_id
    # Neutron's policy: the binding details are admin-only; the vNIC type is not.
    assert body["binding:vnic_type"] == "normal"
    assert not {"binding:vif_type", "binding:host_id", "binding:vif_details", "binding:profile"} & set(body)
    listed = member_http.get("/ports", params={"id": port.id}).json()["ports"][0]
    assert "binding:host_id" not in listed and listed["binding:vnic_type"] == "normal"
    as_admin = admin_http.get(f"/ports/{port.id}").json()["port"]
    assert as_admin["binding:vif_type"] == "unbound" and as_admin["binding:host_id"] == ""
    assert as_admin["binding:vif_details"] == {} and as_admin["binding:profile"] == {}
    assert body["extra_dhcp_opts"] == [] and body["allowed_address_pairs"] == []
    assert body["port_security_enabled"] is True and body["revision_number"] == 1
    assert body["device_id"] == "" and body["device_owner"] == ""
    assert body["created_at"].endswith("Z") and body["tags"] == []


@pytest.mark.embedded_only('Neutron returns fixed_ips in an order of its own, not as asked')
def test_requested_subnet_and_address(member, net):
    network, subnet = net
    on_subnet = member.network.create_port(network_id=network.id, fixed_ips=[{"subnet_id": subnet.id}])
    assert [ip["subnet_id"] for ip in on_subnet.fixed_ips] == [subnet.id]
    exact = member.network.create_port(network_id=network.id, fixed_ips=[{"ip_address": "10.20.0.200"}])
    assert exact.fixed_ips == [{"subnet_id": subnet.id, "ip_address": "10.20.0.200"}]
    both = member.network.create_port(
        network_id=network.id,
        fixed_ips=[{"subnet_id": subnet.id, "ip_address": "10.20.0.201"}, {"subnet_id": subnet.id}])
    assert both.fixed_ips[0]["ip_address"] == "10.20.0.201"  # in the order asked for
    assert len({ip["ip_address"] for ip in both.fixed_ips}) == 2
    none = member.network.create_port(network_id=network.id, fixed_ips=[])
    assert none.fixed_ips == []


def test_dual_stack_network_gives_one_address_of_each_version(member):
    network, (v4, v6) = _network(member, ["10.21.0.0/24", "fd00:21::/64"])
    port = member.network.create_port(network_id=network.id)
    by_subnet = {ip["subnet_id"]: ip["ip_address"] for ip in port.fixed_ips}
    assert set(by_subnet) == {v4.id, v6.id}
    assert ipaddress.ip_address(by_subnet[v6.id]).version == 6


@pytest.mark.embedded_only('Neutron refuses an address on a SLAAC subnet as AllocationOnAutoAddressSubnet; netbay as InvalidInput')
def test_slaac_subnet_gives_the_eui64_address(member, admin, member_http):
    network = member.network.create_network(name=unique("net"))
    v6 = member.network.create_subnet(network_id=network.id, ip_version=6, cidr="fd00:22::/64",
                                      ipv6_address_mode="slaac", ipv6_ra_mode="slaac")
    port = member.network.create_port(network_id=network.id, mac_address="fa:16:3e:12:34:56")
    assert port.fixed_ips == [{"subnet_id": v6.id, "ip_address": "fd00:22::f816:3eff:fe12:3456"}]
    r = member_http.post("/ports", json={"port": {"network_id": network.id,
                                                  "fixed_ips": [{"ip_address": "fd00:22::5"}]}})
    _error(r, 400, "InvalidInput")
    moved = admin.network.update_port(port.id, mac_address="fa:16:3e:00:00:07")
    assert moved.fixed_ips == [{"subnet_id": v6.id, "ip_address": "fd00:22::f816:3eff:fe00:7"}]


@pytest.mark.embedded_only('Neutron takes a multicast MAC (01:00:00:00:00:01); netbay refuses it')
def test_given_mac_and_mac_in_use(member, member_http, net):
    network, _ = net
    port = member.network.create_port(network_id=network.id, mac_address="FA:16:3E:AA:BB:01")
    assert port.mac_address == "fa:16:3e:aa:bb:01"
    r = member_http.post("/ports", json={"port": {"network_id": network.id, "mac_address": "fa:16:3e:aa:bb:01"}})
    msg = _error(r, 409, "MacAddressInUse")
    assert "fa:16:3e:aa:bb:01" in msg and network.id in msg
    # The same MAC on another network is fine.
    other_net, _ = _network(member, ["10.23.0.0/24"])
    assert member.network.create_port(network_id=other_net.id, mac_address="fa:16:3e:aa:bb:01").id
    r = member_http.post("/ports", json={"port": {"network_id": network.id, "mac_address": "01:00:00:00:00:01"}})
    _error(r, 400, "HTTPBadRequest")


@pytest.mark.embedded_only("Neutron makes a project's default group when an admin lists groups filtered on that project; netbay does not")
def test_default_security_group_is_made_on_first_use(admin):
    project = unique("proj")  # a project nothing has happened in yet
    assert list(admin.network.security_groups(project_id=project)) == []
    network, _ = _network(admin, ["10.24.0.0/24"])
    first = admin.network.create_port(network_id=network.id, project_id=project)
    second = admin.network.create_port(network_id=network.id, project_id=project)
    assert len(first.security_group_ids) == 1
    assert first.security_group_ids == second.security_group_ids
    (group,) = admin.network.security_groups(project_id=project)
    assert group.id == first.security_group_ids[0]
    assert group.name == "default" and group.project_id == project
    # Ports netbay itself owns get no group.
    service = admin.network.create_port(network_id=network.id, device_owner="network:dhcp")
    assert service.security_group_ids == []


def test_explicit_groups_and_their_visibility(member, member_http, other, net):
    network, _ = net
    web = member.network.create_security_group(name=unique("web"))
    db = member.network.create_security_group(name=unique("db"))
    port = member.network.create_port(network_id=network.id, security_group_ids=[web.id, db.id])
    assert sorted(port.security_group_ids) == sorted([web.id, db.id])
    none = member.network.create_port(network_id=network.id, security_group_ids=[])
    assert none.security_group_ids == []
    foreign = other[0].network.create_security_group(name=unique("theirs"))
    r = member_http.post("/ports", json={"port": {"network_id": network.id, "security_groups": [foreign.id]}})
    assert foreign.id in _error(r, 404, "SecurityGroupNotFound")
    r = member_http.post("/ports", json={"port": {"network_id": network.id, "security_groups": ["nope"]}})
    _error(r, 400, "HTTPBadRequest")


def test_port_security_disabled(member, member_http, net):
    network, _ = net
    port = member.network.create_port(network_id=network.id, is_port_security_enabled=False)
    assert port.is_port_security_enabled is False and port.security_group_ids == []
    group = member.network.create_security_group(name=unique("sg"))
    r = member_http.post("/ports", json={"port": {"network_id": network.id, "port_security_enabled": False,
                                                  "security_groups": [group.id]}})
    _error(r, 400, "PortSecurityAndIPRequiredForSecurityGroups")
    r = member_http.post("/ports", json={"port": {"network_id": network.id, "port_security_enabled": False,
                                                  "allowed_address_pairs": [{"ip_address": "10.9.9.9"}]}})
    _error(r, 409, "AddressPairAndPortSecurityRequired")


@pytest.mark.embedded_only('Neutron returns allowed_address_pairs in an order of its own, not as asked')
def test_allowed_address_pairs(member, member_http, net):
    network, _ = net
    pairs = [{"ip_address": "10.30.0.0/24"}, {"ip_address": "10.30.1.7", "mac_address": "fa:16:3e:01:02:03"}]
    port = member.network.create_port(network_id=network.id, allowed_address_pairs=pairs)
    assert port.allowed_address_pairs == [
        {"ip_address": "10.30.0.0/24", "mac_address": port.mac_address},
        {"ip_address": "10.30.1.7", "mac_address": "fa:16:3e:01:02:03"},
    ]
    for bad in ([{"ip_address": "not-an-ip"}], [{"mac_address": "fa:16:3e:01:02:03"}]):
        r = member_http.post("/ports", json={"port": {"network_id": network.id, "allowed_address_pairs": bad}})
        _error(r, 400, "HTTPBadRequest")
    r = member_http.post("/ports", json={"port": {"network_id": network.id,
                                                  "allowed_address_pairs": [{"ip_address": "10.1.1.1"}] * 2}})
    _error(r, 400, "DuplicateAddressPairInRequest")


@pytest.mark.parametrize("body, status, kind", [
    ({"fixed_ips": [{"ip_address": "10.99.0.5"}]}, 400, "InvalidIpForNetwork"),
    ({"fixed_ips": [{"ip_address": "banana"}]}, 400, "HTTPBadRequest"),
    ({"fixed_ips": [{"ip_address": "10.20.0.9"}, {"ip_address": "10.20.0.9"}]}, 400, "HTTPBadRequest"),
    ({"mac_address": "zz:zz"}, 400, "HTTPBadRequest"),
    ({"status": "ACTIVE"}, 400, "HTTPBadRequest"),
    ({"bogus": 1}, 400, "HTTPBadRequest"),
    ({"name": None}, 400, "HTTPBadRequest"),
    ({"admin_state_up": "maybe"}, 400, "InvalidInput"),
])
def test_create_errors(member_http, net, body, status, kind):
    network, _ = net
    r = member_http.post("/ports", json={"port": {"network_id": network.id, **body}})
    _error(r, status, kind)


@pytest.mark.embedded_only("Neutron answers these 404 SubnetNotFound and InvalidInput")
@pytest.mark.parametrize("body, status, kind", [
    ({"fixed_ips": [{"subnet_id": "00000000-0000-4000-8000-000000000000"}]}, 400, "InvalidInput"),
    ({"fixed_ips": [{}]}, 400, "HTTPBadRequest"),
])
def test_create_errors_worded_by_netbay(member_http, net, body, status, kind):
    test_create_errors(member_http, net, body, status, kind)


def test_create_needs_a_visible_network(member_http, other):
    r = member_http.post("/ports", json={"port": {"name": "x"}})
    assert "network_id" in _error(r, 400, "HTTPBadRequest")
    r = member_http.post("/ports", json={"port": {"network_id": "00000000-0000-4000-8000-000000000000"}})
    _error(r, 404, "NetworkNotFound")
    theirs, _ = _network(other[0], ["10.25.0.0/24"])
    r = member_http.post("/ports", json={"port": {"network_id": theirs.id}})
    _error(r, 404, "NetworkNotFound")


@pytest.mark.embedded_only("Neutron gives a port the subnet's gateway address when asked for it; netbay refuses (409)")
def test_subnet_full_and_taken_address(member, member_http):
    network, (subnet,) = _network(member, ["10.26.0.0/29"])  # .2-.6 allocatable, .1 the gateway
    ports = [member.network.create_port(network_id=network.id) for _ in range(5)]
    assert sorted(p.fixed_ips[0]["ip_address"] for p in ports) == [f"10.26.0.{i}" for i in range(2, 7)]
    r = member_http.post("/ports", json={"port": {"network_id": network.id}})
    _error(r, 409, "IpAddressGenerationFailure")
    r = member_http.post("/ports", json={"port": {"network_id": network.id,
                                                  "fixed_ips": [{"ip_address": "10.26.0.3"}]}})
    assert "10.26.0.3" in _error(r, 409, "IpAddressAlreadyAllocated")
    r = member_http.post("/ports", json={"port": {"network_id": network.id,
                                                  "fixed_ips": [{"ip_address": subnet.gateway_ip}]}})
    _error(r, 409, "IpAddressAlreadyAllocated")
    # A failed create leaves nothing behind.
    assert len(list(member.network.ports(network_id=network.id))) == 5
    member.network.delete_port(ports[0])
    again = member.network.create_port(network_id=network.id)
    assert again.fixed_ips[0]["ip_address"] == ports[0].fixed_ips[0]["ip_address"]


@pytest.mark.embedded_only('its refused item asks for the gateway address, which Neutron gives (see test_subnet_full_and_taken_address)')
def test_bulk_create_is_all_or_nothing(member, member_http, net):
    network, _ = net
    r = member_http.post("/ports", json={"ports": [{"network_id": network.id, "name": "b1"},
                                                   {"network_id": network.id, "name": "b2"}]})
    assert r.status_code == 201, r.text
    made = r.json()["ports"]
    assert [p["name"] for p in made] == ["b1", "b2"]
    assert made[0]["fixed_ips"][0]["ip_address"] != made[1]["fixed_ips"][0]["ip_address"]
    name = unique("bulk")
    r = member_http.post("/ports", json={"ports": [
        {"network_id": network.id, "name": name},
        {"network_id": network.id, "name": name, "fixed_ips": [{"ip_address": "10.20.0.1"}]}]})
    _error(r, 409, "IpAddressAlreadyAllocated")
    assert list(member.network.ports(name=name)) == []


# --- update ---------------------------------------------------------------------------------


def test_update_plain_fields(member, admin, net):
    network, _ = net
    port = member.network.create_port(network_id=network.id, name="before")
    revision, stamp = port.revision_number, port.updated_at
    updated = member.network.update_port(port.id, name="after", description="d", is_admin_state_up=False,
                                         device_id="vm-1", device_owner="compute:nova")
    assert (updated.name, updated.description, updated.is_admin_state_up) == ("after", "d", False)
    assert (updated.device_id, updated.device_owner) == ("vm-1", "compute:nova")
    assert updated.revision_number == revision + 1
    assert updated.updated_at >= stamp
    bound = admin.network.update_port(port, binding_host_id="host-1")
    assert bound.binding_host_id == "host-1" and bound.binding_vif_type != "unbound"
    fetched = member.network.get_port(port.id)
    assert fetched.name == "after" and fetched.binding_host_id is None  # admin-only attribute
    assert admin.network.get_port(port.id).binding_host_id == "host-1"


@pytest.mark.embedded_only("the peer's ML2 binds nothing (no mechanism drivers), so no PortBound")
def test_update_mac_only_while_unbound(admin, admin_http, member, member_http, net):
    network, _ = net
    port = member.network.create_port(network_id=network.id)
    r = member_http.put(f"/ports/{port.id}", json={"port": {"mac_address": "fa:16:3e:00:11:22"}})
    _error(r, 403, "PolicyNotAuthorized")  # Neutron: update_port:mac_address is admin only
    moved = admin.network.update_port(port, mac_address="fa:16:3e:00:11:22")
    assert moved.mac_address == "fa:16:3e:00:11:22"
    taken = member.network.create_port(network_id=network.id)
    r = admin_http.put(f"/ports/{port.id}", json={"port": {"mac_address": taken.mac_address}})
    _error(r, 409, "MacAddressInUse")
    admin.network.update_port(port, binding_host_id="host-2")
    r = admin_http.put(f"/ports/{port.id}", json={"port": {"mac_address": "fa:16:3e:00:11:33"}})
    assert "bound" in _error(r, 409, "PortBound")
    r = member_http.put(f"/ports/{port.id}", json={"port": {"binding:host_id": "elsewhere"}})
    assert _error(r, 403, "PolicyNotAuthorized") == \
        "(rule:update_port and rule:update_port:binding:host_id) is disallowed by policy"


def test_update_fixed_ips_releases_the_old_address(member, member_http):
    network, (subnet,) = _network(member, ["10.27.0.0/24"])
    port = member.network.create_port(network_id=network.id, fixed_ips=[{"ip_address": "10.27.0.10"}])
    moved = member.network.update_port(port, fixed_ips=[{"ip_address": "10.27.0.11"}])
    assert moved.fixed_ips == [{"subnet_id": subnet.id, "ip_address": "10.27.0.11"}]
    other = member.network.create_port(network_id=network.id, fixed_ips=[{"ip_address": "10.27.0.10"}])
    assert other.fixed_ips[0]["ip_address"] == "10.27.0.10"
    # Keep one, add one: the kept one stays. Where it is listed is not compared: netbay keeps
    # the order asked for, Neutron sorts by the address as a string (10.27.0.104 before
    # 10.27.0.11), and its IPAM picks the new one at random (docs/api.md).
    grown = member.network.update_port(port, fixed_ips=[{"subnet_id": subnet.id, "ip_address": "10.27.0.11"},
                                                        {"subnet_id": subnet.id}])
    addresses = [a["ip_address"] for a in grown.fixed_ips]
    assert "10.27.0.11" in addresses and len(set(addresses)) == 2, addresses
    # A failed change (one address taken) leaves the port as it was.
    r = member_http.put(f"/ports/{port.id}", json={"port": {"fixed_ips": [{"ip_address": "10.27.0.50"},
                                                                          {"ip_address": "10.27.0.10"}]}})
    _error(r, 409, "IpAddressAlreadyAllocated")
    assert member.network.get_port(port.id).fixed_ips == grown.fixed_ips
    assert [p.id for p in member.network.ports(fixed_ips=["ip_address=10.27.0.50"])] == []
    cleared = member.network.update_port(port, fixed_ips=[])
    assert cleared.fixed_ips == []
    reused = member.network.create_port(network_id=network.id, fixed_ips=[{"ip_address": "10.27.0.11"}])
    assert reused.fixed_ips[0]["ip_address"] == "10.27.0.11"


def test_update_security_groups_and_port_security(member, member_http, net):
    network, _ = net
    port = member.network.create_port(network_id=network.id)
    default = port.security_group_ids
    web = member.network.create_security_group(name=unique("web"))
    changed = member.network.update_port(port, security_group_ids=[web.id])
    assert changed.security_group_ids == [web.id]
    both = member.network.update_port(port, security_group_ids=[web.id] + default)
    assert sorted(both.security_group_ids) == sorted([web.id] + default)
    r = member_http.put(f"/ports/{port.id}", json={"port": {"port_security_enabled": False}})
    msg = _error(r, 409, "PortSecurityPortHasSecurityGroup")
    assert msg.startswith("Port has security group associated")
    off = member.network.update_port(port, is_port_security_enabled=False, security_group_ids=[])
    assert off.is_port_security_enabled is False and off.security_group_ids == []
    r = member_http.put(f"/ports/{port.id}", json={"port": {"security_groups": [web.id]}})
    _error(r, 400, "PortSecurityAndIPRequiredForSecurityGroups")
    r = member_http.put(f"/ports/{port.id}", json={"port": {"allowed_address_pairs": [{"ip_address": "1.2.3.4"}]}})
    _error(r, 409, "AddressPairAndPortSecurityRequired")
    on = member.network.update_port(port, is_port_security_enabled=True,
                                    allowed_address_pairs=[{"ip_address": "1.2.3.4"}])
    assert on.allowed_address_pairs == [{"ip_address": "1.2.3.4", "mac_address": port.mac_address}]
    r = member_http.put(f"/ports/{port.id}", json={"port": {"port_security_enabled": False}})
    _error(r, 409, "AddressPairAndPortSecurityRequired")
    r = member_http.put(f"/ports/{port.id}", json={"port": {"security_groups": ["00000000-0000-4000-8000-00000000000f"]}})
    _error(r, 404, "SecurityGroupNotFound")


@pytest.mark.parametrize("body", [{"status": "ACTIVE"}, {"network_id": "x"}, {"id": "x"}, {"name": None},
                                  {"tenant_id": "x"}, {"fixed_ips": [{"ip_address": "nope"}]}])
def test_update_refuses(member_http, member, net, body):
    network, _ = net
    port = member.network.create_port(network_id=network.id)
    r = member_http.put(f"/ports/{port.id}", json={"port": body})
    _error(r, 400, "HTTPBadRequest")


# --- list, filters, tags ------------------------------------------------------------------


def test_filters(member):
    # its own subnet: Neutron allocates at random, so a port of another test on the module's
    # network may hold .150
    network, (subnet,) = _network(member, ["10.20.0.0/24"])
    web = member.network.create_security_group(name=unique("web"))
    tag = unique("dev")
    a = member.network.create_port(network_id=network.id, device_id=tag, name="fa",
                                   fixed_ips=[{"ip_address": "10.20.0.150"}])
    b = member.network.create_port(network_id=network.id, device_id=tag, name="fb", security_group_ids=[web.id],
                                   is_admin_state_up=False, fixed_ips=[{"ip_address": "10.20.0.151"}])

    def ids(**query):
        return sorted(p.id for p in member.network.ports(**query))

    assert ids(device_id=tag) == sorted([a.id, b.id])
    assert ids(device_id=tag, name="fb") == [b.id]
    # (another test's network may have 10.20.0.0/24 too, and Neutron allocates at random:
    # the address alone may match a port there)
    assert ids(network_id=network.id, fixed_ips=["ip_address=10.20.0.150"]) == [a.id]
    assert ids(fixed_ips=["ip_address=10.20.0.150", "subnet_id=" + subnet.id]) == [a.id]
    assert ids(device_id=tag, fixed_ips=["subnet_id=" + subnet.id]) == sorted([a.id, b.id])
    assert ids(device_id=tag, fixed_ips=["ip_address_substr=0.15"]) == sorted([a.id, b.id])
    assert ids(security_group_ids=[web.id]) == [b.id]
    assert ids(device_id=tag, is_admin_state_up=False) == [b.id]
    assert ids(mac_address=a.mac_address) == [a.id]
    assert a.id in ids(network_id=network.id)
    assert ids(device_id=tag, status="ACTIVE") == []


def test_filter_errors(member_http):
    for query, kind in (({"fixed_ips": "ip_address"}, "InvalidInput"), ({"admin_state_up": "maybe"}, "InvalidInput"),
                        ({"colour": "red"}, "HTTPBadRequest"), ({"sort_key": "fixed_ips"}, "HTTPBadRequest"),
                        ({"limit": "x"}, "BadRequest")):
        r = member_http.get("/ports", params=query)
        _error(r, 400, kind)


@pytest.mark.embedded_only("Neutron 29 ignores an unknown key in a fixed_ips filter (it lists every port)")
def test_fixed_ips_filter_of_an_unknown_key(member_http):
    assert "color=red" in _error(member_http.get("/ports", params={"fixed_ips": "color=red"}), 400, "InvalidInput")


def test_sort_and_pagination(member, member_http):
    network, _ = _network(member, ["10.28.0.0/24"])
    names = [f"page-{i:02d}" for i in range(7)]
    for name in reversed(names):
        member.network.create_port(network_id=network.id, name=name)
    listed = [p.name for p in member.network.ports(network_id=network.id, sort_key="name", sort_dir="asc",
                                                     limit=3, paginated=True)]
    assert listed == names
    desc = [p.name for p in member.network.ports(network_id=network.id, sort_key="name", sort_dir="desc", limit=2)]
    assert desc == names[::-1]
    page = member_http.get("/ports", params={"network_id": network.id, "sort_key": "name", "sort_dir": "asc",
                                             "limit": 3}).json()
    assert [p["name"] for p in page["ports"]] == names[:3]
    assert [link["rel"] for link in page["ports_links"]] == ["next", "previous"]
    for alone in ({"sort_key": "name"}, {"sort_dir": "asc"}):  # no default direction, as in Neutron
        assert _error(member_http.get("/ports", params=alone), 400, "HTTPBadRequest") == \
            "The number of sort_keys and sort_dirs must be same"


def test_tags(member, member_http, net):
    network, _ = net
    tag = unique("tag")
    r = member_http.post("/ports", json={"port": {"network_id": network.id, "tags": [tag, "blue"]}})
    assert r.status_code == 201, r.text
    port = r.json()["port"]
    assert sorted(port["tags"]) == sorted([tag, "blue"]) and port["revision_number"] == 2  # tagged in an update of its own
    assert [p.id for p in member.network.ports(tags=tag)] == [port["id"]]
    r = member_http.put(f"/ports/{port['id']}/tags", json={"tags": ["red"]})
    assert r.status_code == 200, r.text
    assert member_http.get(f"/ports/{port['id']}").json()["port"]["tags"] == ["red"]
    assert [p.id for p in member.network.ports(tags=tag)] == []


# --- visibility and delete -----------------------------------------------------------------


def test_other_projects_port_is_not_found(member, other, net):
    network, _ = net
    port = member.network.create_port(network_id=network.id)
    _, http, _ = other
    for r in (http.get(f"/ports/{port.id}"), http.put(f"/ports/{port.id}", json={"port": {"name": "x"}}),
              http.delete(f"/ports/{port.id}")):
        assert port.id in _error(r, 404, "PortNotFound")
    assert port.id not in [p["id"] for p in http.get("/ports").json()["ports"]]


def test_network_owner_sees_ports_on_its_network(admin, member, member_http, other, net):
    network, _ = net
    conn, http, project = other
    theirs = admin.network.create_port(network_id=network.id, project_id=project)
    assert theirs.project_id == project
    assert theirs.id in [p.id for p in member.network.ports(network_id=network.id)]
    assert theirs.id in [p["id"] for p in http.get("/ports").json()["ports"]]
    r = member_http.put(f"/ports/{theirs.id}", json={"port": {"name": "mine now"}})
    assert _error(r, 403, "PolicyNotAuthorized") == "rule:update_port is disallowed by policy"
    member.network.delete_port(theirs)  # the network owner may remove it
    assert http.get(f"/ports/{theirs.id}").status_code == 404


def test_shared_and_external_networks(admin, member, member_http, other):
    shared = admin.network.create_network(name=unique("shared"), shared=True)
    admin.network.create_subnet(network_id=shared.id, ip_version=4, cidr="10.29.0.0/24")
    port = member.network.create_port(network_id=shared.id)
    assert port.project_id == member.current_project_id and port.fixed_ips
    r = member_http.post("/ports", json={"port": {"network_id": shared.id,
                                                  "fixed_ips": [{"ip_address": "10.29.0.77"}]}})
    assert _error(r, 403, "PolicyNotAuthorized") == ("(rule:create_port and (rule:create_port:fixed_ips and "
                                                     "(rule:create_port:fixed_ips:ip_address))) is disallowed by policy")
    external = admin.network.create_network(name=unique("ext"), is_router_external=True)
    admin.network.create_subnet(network_id=external.id, ip_version=4, cidr="10.31.0.0/24")
    r = member_http.post("/ports", json={"port": {"network_id": external.id}})
    assert _error(r, 403, "PolicyNotAuthorized") == "rule:create_port is disallowed by policy"
    assert admin.network.create_port(network_id=external.id).fixed_ips
    r = member_http.post("/ports", json={"port": {"network_id": shared.id, "project_id": other[2]}})
    _error(r, 400, "HTTPBadRequest")  # neutron-lib's _validate_privileges


def test_delete_port_and_network_in_use(member, member_http):
    network, _ = _network(member, ["10.32.0.0/24"])
    port = member.network.create_port(network_id=network.id)
    r = member_http.delete(f"/networks/{network.id}")
    _error(r, 409, "NetworkInUse")
    assert member_http.delete(f"/ports/{port.id}").status_code == 204
    _error(member_http.delete(f"/ports/{port.id}"), 404, "PortNotFound")
    with pytest.raises(os_exc.ResourceNotFound):
        member.network.get_port(port.id)
    assert member_http.delete(f"/networks/{network.id}").status_code == 204


def test_router_interface_port_cannot_be_deleted_directly(member, member_http):
    network, (subnet,) = _network(member, ["10.33.0.0/24"])
    router = member.network.create_router(name=unique("r"))
    member.network.add_interface_to_router(router, subnet_id=subnet.id)
    (port,) = member.network.ports(device_id=router.id, network_id=network.id)
    assert port.device_owner == "network:router_interface"
    r = member_http.delete(f"/ports/{port.id}")
    msg = _error(r, 409, "ServicePortInUse")
    assert msg == (f"Port {port.id} cannot be deleted directly via the port API: "
                   "has device owner network:router_interface.")
    member.network.remove_interface_from_router(router, subnet_id=subnet.id)
