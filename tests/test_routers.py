"""Routers: gateways, interfaces, extra routes, visibility, Neutron's errors.

Against netbay's API and a real Neutron alike (``neutron_api``, tests/backendfix.py)."""

from __future__ import annotations

import ipaddress
import itertools
import uuid

import httpx
import pytest
from conftest import neutron_error, unique

pytestmark = [pytest.mark.every_db,   # the store's semantics: on SQLite and PostgreSQL (tests/conftest.py)
              pytest.mark.shared_server]   # its tests make their own objects

_octets = itertools.count(1)


def make_subnet(conn, cidr: str | None = None, **kwargs):
    net = conn.network.create_network(name=unique("rnet"))
    cidr = cidr or f"10.{next(_octets)}.0.0/24"
    return net, conn.network.create_subnet(network_id=net.id, cidr=cidr, ip_version=4, **kwargs)


@pytest.fixture(scope="module")
def server(neutron_api):
    """netbay's network API or a real Neutron's."""
    return neutron_api


@pytest.fixture(scope="module")
def public(admin):
    net = admin.network.find_network("public")
    assert net is not None and net.is_router_external
    return net


@pytest.fixture(scope="module")
def public_subnet(admin, public):
    return admin.network.get_subnet(public.subnet_ids[0])


@pytest.fixture(scope="module")
def other(server):
    user, password, project = server.make_user()
    return server.connect(user, password, project), server.http(server.token(user, password, project))


def ports_of(admin, router_id: str, owner: str) -> list:
    return list(admin.network.ports(device_id=router_id, device_owner=owner))


# --- attributes and gateway -----------------------------------------------------------------


def test_router_attributes_without_gateway(member, member_http):
    r = member_http.post("/routers", json={"router": {"name": "plain", "description": "d"}})
    assert r.status_code == 201, r.text
    router = r.json()["router"]
    assert router["status"] == "ACTIVE" and router["admin_state_up"] is True
    assert router["external_gateway_info"] is None
    assert router["routes"] == []
    assert router["flavor_id"] is None and router["availability_zone_hints"] == []
    assert router["tags"] == [] and router["revision_number"] == 1
    assert router["project_id"] == router["tenant_id"] == member.current_project_id
    assert router["created_at"] and router["name"] == "plain"
    assert member.network.get_router(router["id"]).description == "d"
    member.network.delete_router(router["id"])
    assert member.network.find_router(router["id"]) is None


@pytest.mark.embedded_only("Neutron shows a router's distributed and ha to admins only (policy), netbay to its "
                            "owner; the peer Neutron (no L3 agents) has availability_zones [], netbay ['nova']")
def test_router_attributes_of_netbays_own(member_http):
    r = member_http.post("/routers", json={"router": {"name": "plain"}})
    router = r.json()["router"]
    assert router["distributed"] is False and router["ha"] is False
    assert router["availability_zones"] == ["nova"]
    assert member_http.delete(f"/routers/{router['id']}").status_code == 204


def test_routes_and_readonly_refused_on_post(member_http):
    r = member_http.post("/routers", json={"router": {"routes": []}})
    neutron_error(r, 400, "HTTPBadRequest", "Attribute 'routes' not allowed in POST")
    r = member_http.post("/routers", json={"router": {"status": "DOWN"}})
    neutron_error(r, 400, "HTTPBadRequest", "Attribute 'status' not allowed in POST")


def test_gateway_on_create_takes_an_external_address(admin, member, public, public_subnet):
    router = member.network.create_router(name=unique("gw"), external_gateway_info={"network_id": public.id})
    info = router.external_gateway_info
    assert info["network_id"] == public.id and info["enable_snat"] is True
    [fixed] = info["external_fixed_ips"]
    assert fixed["subnet_id"] == public_subnet.id
    assert ipaddress.ip_address(fixed["ip_address"]) in ipaddress.ip_network(public_subnet.cidr)
    assert fixed["ip_address"] != public_subnet.gateway_ip
    [port] = ports_of(admin, router.id, "network:router_gateway")
    assert port.network_id == public.id and port.project_id == ""
    assert [ip["ip_address"] for ip in port.fixed_ips] == [fixed["ip_address"]]
    # The member does not see the gateway port: it is not theirs.
    assert list(member.network.ports(device_id=router.id)) == []
    member.network.delete_router(router)
    assert ports_of(admin, router.id, "network:router_gateway") == []


def test_gateway_must_be_an_external_network(member, member_http):
    net = member.network.create_network(name=unique("int"))
    body = {"router": {"external_gateway_info": {"network_id": net.id}}}
    neutron_error(member_http.post("/routers", json=body), 400, "BadRequest",
                  f"Bad router request: Network {net.id} is not an external network.")
    missing = str(uuid.uuid4())
    body = {"router": {"external_gateway_info": {"network_id": missing}}}
    neutron_error(member_http.post("/routers", json=body), 404, "NetworkNotFound")
    body = {"router": {"external_gateway_info": {"network_id": "not-a-uuid"}}}
    neutron_error(member_http.post("/routers", json=body), 400, "HTTPBadRequest")
    body = {"router": {"external_gateway_info": {"enable_snat": False}}}
    neutron_error(member_http.post("/routers", json=body), 400, "HTTPBadRequest")
    # Nothing was left behind by the refused requests.
    assert [r for r in member.network.routers() if r.external_gateway_info] == []


def test_snat_and_fixed_ips_are_refused_to_members(member, member_http, public, public_subnet):
    for info in ({"network_id": public.id, "enable_snat": False},
                 {"network_id": public.id, "external_fixed_ips": [{"subnet_id": public_subnet.id}]}):
        asked = " and ".join(f"rule:create_router:external_gateway_info:{k}" for k in info)
        neutron_error(member_http.post("/routers", json={"router": {"external_gateway_info": info}}),
                      403, "PolicyNotAuthorized", "(rule:create_router and (rule:create_router:external_gateway_info "
                      f"and ({asked}))) is disallowed by policy")
    router = member.network.create_router(name=unique("snat"))
    r = member_http.put(f"/routers/{router.id}", json={"router": {"external_gateway_info": {
        "network_id": public.id, "enable_snat": False}}})
    neutron_error(r, 403, "PolicyNotAuthorized")
    assert member.network.get_router(router).external_gateway_info is None
    member.network.delete_router(router)


def test_snat_and_fixed_ips_are_for_admins(admin, member, admin_http, public, public_subnet):
    host = ipaddress.ip_network(public_subnet.cidr)
    router = member.network.create_router(name=unique("snat"))

    updated = admin.network.update_router(router, external_gateway_info={
        "network_id": public.id, "enable_snat": False,
        "external_fixed_ips": [{"subnet_id": public_subnet.id, "ip_address": str(host[200])}]})
    info = updated.external_gateway_info
    assert info["enable_snat"] is False
    assert info["external_fixed_ips"] == [{"subnet_id": public_subnet.id, "ip_address": str(host[200])}]
    [port] = ports_of(admin, router.id, "network:router_gateway")

    # A new address on the same network keeps the port; SNAT goes back to its default.
    updated = admin.network.update_router(router, external_gateway_info={
        "network_id": public.id, "external_fixed_ips": [{"ip_address": str(host[201])}]})
    assert updated.external_gateway_info["enable_snat"] is True
    assert updated.external_gateway_info["external_fixed_ips"][0]["ip_address"] == str(host[201])
    assert [p.id for p in ports_of(admin, router.id, "network:router_gateway")] == [port.id]

    # The external subnet's gateway address is refused.
    r = admin_http.put(f"/routers/{router.id}", json={"router": {"external_gateway_info": {
        "network_id": public.id, "external_fixed_ips": [{"ip_address": public_subnet.gateway_ip}]}}})
    neutron_error(r, 400, "BadRequest",
                  f"Bad router request: External IP {public_subnet.gateway_ip} is the same as the gateway IP.")
    twice = [{"ip_address": str(host[210])}] * 2
    r = admin_http.put(f"/routers/{router.id}", json={"router": {"external_gateway_info": {
        "network_id": public.id, "external_fixed_ips": twice}}})
    neutron_error(r, 400, "HTTPBadRequest")
    assert admin.network.get_router(router.id).external_gateway_info["external_fixed_ips"][0]["ip_address"] \
        == str(host[201])
    member.network.delete_router(router)


def test_clearing_the_gateway_removes_its_port(admin, member, member_http, public):
    router = member.network.create_router(name=unique("clr"), external_gateway_info={"network_id": public.id})
    rev = router.revision_number
    assert rev == 2  # created, then its gateway set: two writes in Neutron 29
    cleared = member.network.update_router(router, external_gateway_info={})
    assert cleared.external_gateway_info is None and cleared.revision_number > rev
    assert ports_of(admin, router.id, "network:router_gateway") == []
    member.network.update_router(router, external_gateway_info={"network_id": public.id})
    assert len(ports_of(admin, router.id, "network:router_gateway")) == 1
    r = member_http.put(f"/routers/{router.id}", json={"router": {"external_gateway_info": None}})
    assert r.status_code == 200 and r.json()["router"]["external_gateway_info"] is None
    assert ports_of(admin, router.id, "network:router_gateway") == []
    member.network.delete_router(router)


# --- interfaces ------------------------------------------------------------------------------


def test_add_interface_by_subnet(admin, member, server):
    net, subnet = make_subnet(member)
    router = member.network.create_router(name=unique("if"))
    revision = router.revision_number
    result = member.network.add_interface_to_router(router, subnet=subnet.id)
    assert set(result) >= {"id", "project_id", "port_id", "subnet_id", "subnet_ids", "network_id"}
    assert result["id"] == router.id and result["subnet_id"] == subnet.id
    assert result["subnet_ids"] == [subnet.id] and result["network_id"] == net.id
    assert result["project_id"] == member.current_project_id
    port = member.network.get_port(result["port_id"])
    assert port.device_owner == "network:router_interface" and port.device_id == router.id
    assert port.fixed_ips == [{"subnet_id": subnet.id, "ip_address": subnet.gateway_ip}]
    assert port.security_group_ids == []
    assert member.network.get_router(router.id).revision_number > revision

    removed = member.network.remove_interface_from_router(router, subnet=subnet.id)
    assert removed["port_id"] == port.id and removed["subnet_id"] == subnet.id
    assert member.network.find_port(port.id) is None
    member.network.delete_router(router)


def test_interface_body_rules(member, member_http):
    router = member.network.create_router(name=unique("body"))
    url = f"/routers/{router.id}/add_router_interface"
    neutron_error(member_http.put(url, json={}), 400, "BadRequest",
                  "Bad router request: Either subnet_id or port_id must be specified.")
    both = {"subnet_id": str(uuid.uuid4()), "port_id": str(uuid.uuid4())}
    neutron_error(member_http.put(url, json=both), 400, "BadRequest",
                  "Bad router request: Cannot specify both subnet-id and port-id.")
    neutron_error(member_http.put(url, json={"subnet_id": "nope"}), 400, "BadRequest",
                  "Bad router request: 'nope' is not a valid UUID.")
    missing = str(uuid.uuid4())
    neutron_error(member_http.put(url, json={"subnet_id": missing}), 404, "SubnetNotFound")
    neutron_error(member_http.put(url, json={"port_id": missing}), 404, "PortNotFound")
    neutron_error(member_http.put(f"/routers/{missing}/add_router_interface", json={"subnet_id": missing}),
                  404, "RouterNotFound")
    member.network.delete_router(router)


@pytest.mark.embedded_only("Neutron 29 answers a list body to add_router_interface 500 HTTPInternalServerError, "
                            "netbay 400 BadRequest; and a body that is not JSON MalformedRequestBody, netbay "
                            "HTTPBadRequest")
def test_interface_body_must_be_a_json_object(member, member_http):
    router = member.network.create_router(name=unique("body"))
    url = f"/routers/{router.id}/add_router_interface"
    neutron_error(member_http.put(url, json=[]), 400, "BadRequest")
    neutron_error(member_http.put(url, content=b"{not json"), 400, "HTTPBadRequest")
    member.network.delete_router(router)


def test_interface_subnet_rules(member, member_http):
    router = member.network.create_router(name=unique("dup"))
    url = f"/routers/{router.id}/add_router_interface"
    _, subnet = make_subnet(member, "10.200.0.0/24")
    member.network.add_interface_to_router(router, subnet=subnet.id)
    neutron_error(member_http.put(url, json={"subnet_id": subnet.id}), 400, "BadRequest",
                  f"Bad router request: Router already has a port on subnet {subnet.id}.")
    _, overlapping = make_subnet(member, "10.200.0.0/16")
    neutron_error(member_http.put(url, json={"subnet_id": overlapping.id}), 400, "BadRequest",
                  f"Bad router request: Cidr 10.200.0.0/16 of subnet {overlapping.id} overlaps with "
                  f"cidr 10.200.0.0/24 of subnet {subnet.id}.")
    _, no_gateway = make_subnet(member, gateway_ip=None)
    neutron_error(member_http.put(url, json={"subnet_id": no_gateway.id}), 400, "BadRequest",
                  "Bad router request: Subnet for router interface must have a gateway IP.")
    # Another router cannot take the same gateway address.
    second = member.network.create_router(name=unique("dup2"))
    r = member_http.put(f"/routers/{second.id}/add_router_interface", json={"subnet_id": subnet.id})
    neutron_error(r, 409, "IpAddressAlreadyAllocated")
    assert len(list(member.network.ports(device_id=router.id))) == 1
    assert list(member.network.ports(device_id=second.id)) == []

    neutron_error(member_http.delete(f"/routers/{router.id}"), 409, "RouterInUse")
    member.network.remove_interface_from_router(router, subnet=subnet.id)
    member.network.delete_router(router)
    member.network.delete_router(second)


@pytest.mark.embedded_only("Neutron words RouterInUse 'Router <id> has ports still attached: <port ids>'; "
                           "netbay 'Router <id> still has ports'")
def test_router_in_use_wording(member, member_http):
    router = member.network.create_router(name=unique("inuse"))
    _, subnet = make_subnet(member)
    member.network.add_interface_to_router(router, subnet=subnet.id)
    neutron_error(member_http.delete(f"/routers/{router.id}"), 409, "RouterInUse",
                  f"Router {router.id} still has ports")
    member.network.remove_interface_from_router(router, subnet=subnet.id)
    member.network.delete_router(router)


def test_add_and_remove_interface_by_port(member, member_http):
    net, subnet = make_subnet(member)
    router = member.network.create_router(name=unique("byport"))
    port = member.network.create_port(network_id=net.id, fixed_ips=[{"subnet_id": subnet.id}])
    result = member.network.add_interface_to_router(router, port=port.id)
    assert result["port_id"] == port.id and result["subnet_ids"] == [subnet.id]
    attached = member.network.get_port(port.id)
    assert attached.device_owner == "network:router_interface" and attached.device_id == router.id

    # Bound ports are refused.
    used = member.network.create_port(network_id=net.id, device_id="some-vm")
    r = member_http.put(f"/routers/{router.id}/add_router_interface", json={"port_id": used.id})
    neutron_error(r, 409, "PortInUse")

    other_net, other_subnet = make_subnet(member)
    url = f"/routers/{router.id}/remove_router_interface"
    neutron_error(member_http.put(url, json={"port_id": used.id}), 404, "RouterInterfaceNotFound",
                  f"Router {router.id} does not have an interface with id {used.id}")
    neutron_error(member_http.put(url, json={"subnet_id": other_subnet.id}), 404,
                  "RouterInterfaceNotFoundForSubnet",
                  f"Router {router.id} has no interface on subnet {other_subnet.id}")
    neutron_error(member_http.put(url, json={"port_id": port.id, "subnet_id": other_subnet.id}), 400,
                  "SubnetMismatchForPort")
    member.network.remove_interface_from_router(router, port=port.id)
    assert member.network.find_port(port.id) is None  # Neutron deletes the port too
    member.network.delete_router(router)


# --- extra routes ----------------------------------------------------------------------------


def test_routes_need_a_connected_nexthop(member, member_http):
    _, subnet = make_subnet(member, "10.210.0.0/24")
    router = member.network.create_router(name=unique("routes"))
    member.network.add_interface_to_router(router, subnet=subnet.id)
    routes = [{"destination": "192.168.50.0/24", "nexthop": "10.210.0.20"}]
    assert member.network.update_router(router, routes=routes).routes == routes

    url = f"/routers/{router.id}"
    bad = [{"destination": "192.168.51.0/24", "nexthop": "10.99.0.1"}]
    msg = neutron_error(member_http.put(url, json={"router": {"routes": bad}}), 400, "InvalidRoutes")
    assert msg.endswith("the nexthop is not connected with router")
    own = [{"destination": "192.168.51.0/24", "nexthop": subnet.gateway_ip}]
    msg = neutron_error(member_http.put(url, json={"router": {"routes": own}}), 400, "InvalidRoutes")
    assert msg.endswith("the nexthop is used by router")
    neutron_error(member_http.put(url, json={"router": {"routes": routes + routes}}), 400, "HTTPBadRequest")
    neutron_error(member_http.put(url, json={"router": {"routes": [{"destination": "x", "nexthop": "1.1.1.1"}]}}),
                  400, "HTTPBadRequest")
    assert member.network.get_router(router).routes == routes

    r = member_http.put(f"{url}/remove_router_interface", json={"subnet_id": subnet.id})
    neutron_error(r, 409, "RouterInterfaceInUseByRoute")
    r = member_http.put(url, json={"router": {"routes": None}})
    assert r.status_code == 200 and r.json()["router"]["routes"] == []
    member.network.remove_interface_from_router(router, subnet=subnet.id)
    member.network.delete_router(router)


def test_extraroutes_added_and_removed_atomically(member, member_http, admin_http):
    """``extraroute-atomic``: the SDK's add/remove_extra_routes; adding what is there and
    removing what is not change nothing; the result is validated as a PUT would be."""
    _, subnet = make_subnet(member, "10.211.0.0/24")
    router = member.network.create_router(name=unique("atomic"))
    member.network.add_interface_to_router(router, subnet=subnet.id)
    one = {"destination": "192.168.60.0/24", "nexthop": "10.211.0.20"}
    two = {"destination": "192.168.61.0/24", "nexthop": "10.211.0.21"}
    got = member.network.add_extra_routes_to_router(router, {"router": {"routes": [one, two, one]}})
    assert sorted(got.routes, key=str) == [one, two]
    got = member.network.add_extra_routes_to_router(router, {"router": {"routes": [one]}})
    assert sorted(got.routes, key=str) == [one, two]
    got = member.network.remove_extra_routes_from_router(
        router, {"router": {"routes": [two, {"destination": "10.9.9.0/24", "nexthop": "10.211.0.9"}]}})
    assert got.routes == [one]

    url = f"/routers/{router.id}/add_extraroutes"
    r = member_http.put(url, json={"router": {"routes": [{"destination": "192.168.62.0/24",
                                                          "nexthop": "10.99.0.1"}]}})
    assert neutron_error(r, 400, "InvalidRoutes").endswith("the nexthop is not connected with router")
    r = member_http.put(url, json={"router": {"routes": [{"destination": "x", "nexthop": "10.211.0.20"}]}})
    assert r.status_code == 400
    body = member_http.put(f"/routers/{router.id}/remove_extraroutes", json={"router": {"routes": [one]}}).json()
    assert body["router"]["id"] == router.id and body["router"]["routes"] == []
    assert member.network.get_router(router).routes == []
    # Several nexthops for one destination (an ECMP route in the router's namespace):
    # added and removed one nexthop at a time, as Neutron's extraroute-atomic does.
    via_a = {"destination": "192.168.63.0/24", "nexthop": "10.211.0.20"}
    via_b = {"destination": "192.168.63.0/24", "nexthop": "10.211.0.21"}
    got = member.network.add_extra_routes_to_router(router, {"router": {"routes": [via_a, via_b]}})
    assert sorted(got.routes, key=str) == [via_a, via_b]
    got = member.network.remove_extra_routes_from_router(router, {"router": {"routes": [via_a]}})
    assert got.routes == [via_b]
    r = member_http.put(f"/routers/{router.id}", json={"router": {"routes": [via_b, via_b]}})
    neutron_error(r, 400, "HTTPBadRequest")   # the same route twice
    # extraroute's quota: a router's routes against its project's ``router_route`` (a
    # limit per router: counted as used 0), checked on every change of them.
    project = member.current_project_id
    assert admin_http.get(f"/quotas/{project}/details").json()["quota"]["router_route"] == \
        {"limit": 30, "used": 0, "reserved": 0}
    assert admin_http.put(f"/quotas/{project}", json={"quota": {"router_route": 1}}).status_code == 200
    try:
        assert neutron_error(member_http.put(url, json={"router": {"routes": [via_a]}}), 409, "OverQuota") == \
            "Quota exceeded for resources: ['router_route']."
        assert member.network.get_router(router).routes == [via_b]
    finally:
        admin_http.delete(f"/quotas/{project}")
    member.network.update_router(router, routes=[])
    member.network.remove_interface_from_router(router, subnet=subnet.id)
    member.network.delete_router(router)


# --- visibility and change log -----------------------------------------------------------------


def test_other_projects_get_404(admin, member, other, public):
    other_conn, other_http = other
    router = member.network.create_router(name=unique("mine"))
    _, subnet = make_subnet(member)
    for r in (other_http.get(f"/routers/{router.id}"),
              other_http.put(f"/routers/{router.id}", json={"router": {"name": "x"}}),
              other_http.delete(f"/routers/{router.id}"),
              other_http.put(f"/routers/{router.id}/add_router_interface", json={"subnet_id": subnet.id})):
        neutron_error(r, 404, "RouterNotFound", f"Router {router.id} could not be found")
    assert router.id not in {r.id for r in other_conn.network.routers()}
    # A subnet of another project is not attachable to one's own router either.
    mine = other_conn.network.create_router(name=unique("theirs"))
    r = other_http.put(f"/routers/{mine.id}/add_router_interface", json={"subnet_id": subnet.id})
    neutron_error(r, 404, "SubnetNotFound")
    assert router.id in {r.id for r in admin.network.routers(project_id=member.current_project_id)}
    other_conn.network.delete_router(mine)
    member.network.delete_router(router)


def test_filters(member):
    name = unique("flt")
    router = member.network.create_router(name=name, description="filter-me")
    assert [r.id for r in member.network.routers(name=name)] == [router.id]
    assert [r.id for r in member.network.routers(description="filter-me")] == [router.id]
    assert router.id not in {r.id for r in member.network.routers(is_admin_state_up=False)}
    member.network.update_router(router, is_admin_state_up=False)
    assert router.id in {r.id for r in member.network.routers(is_admin_state_up=False)}
    member.network.delete_router(router)


@pytest.mark.embedded_only("/netbay/v1/changes is netbay's own change log; Neutron has none")
def test_interface_changes_are_logged(server, member):
    token = server.token()
    head = 0
    for _ in range(1000):
        page = httpx.get(f"{server.url}/netbay/v1/changes", params={"since": head},
                         headers={"X-Auth-Token": token}, timeout=10).json()
        if not page["changes"]:
            break
        head = page["revision"]
    _, subnet = make_subnet(member)
    router = member.network.create_router(name=unique("log"))
    result = member.network.add_interface_to_router(router, subnet=subnet.id)
    member.network.remove_interface_from_router(router, subnet=subnet.id)
    changes = httpx.get(f"{server.url}/netbay/v1/changes", params={"since": head},
                        headers={"X-Auth-Token": token}, timeout=10).json()["changes"]
    seen = [(c["resource"], c["action"]) for c in changes if c["id"] in {router.id, result["port_id"]}]
    assert seen == [("router", "create"), ("port", "create"), ("router", "update"),
                    ("port", "delete"), ("router", "update")]
    revisions = [c["data"]["revision_number"] for c in changes
                 if c["id"] == router.id and c["action"] == "update"]
    assert revisions == [2, 3]
    member.network.delete_router(router)


def test_subnets_overlapping_the_gateway_are_refused_both_ways(admin, admin_http):
    """Neutron's dup check covers the gateway port: an interface on a subnet overlapping the
    external network's, or a gateway onto an external network overlapping an interface."""
    public = admin.network.find_network("public")
    ext_cidr = admin.network.get_subnet(public.subnet_ids[0]).cidr
    net = admin.network.create_network(name=unique("ov"))
    sub = admin.network.create_subnet(network_id=net.id, cidr=ext_cidr, ip_version=4)
    router = admin.network.create_router(name=unique("r"), external_gateway_info={"network_id": public.id})
    r = admin_http.put(f"/routers/{router.id}/add_router_interface", json={"subnet_id": sub.id})
    assert r.status_code == 400 and "overlaps" in r.json()["NeutronError"]["message"], r.text
    plain = admin.network.create_router(name=unique("r"))
    admin.network.add_interface_to_router(plain, subnet_id=sub.id)
    r = admin_http.put(f"/routers/{plain.id}", json={"router": {"external_gateway_info": {"network_id": public.id}}})
    assert r.status_code == 400 and "overlaps" in r.json()["NeutronError"]["message"], r.text
    assert admin.network.get_router(plain.id).external_gateway_info is None
    admin.network.remove_interface_from_router(plain, subnet_id=sub.id)
    for rid in (router.id, plain.id):
        admin.network.delete_router(rid)
    admin.network.delete_network(net.id)
