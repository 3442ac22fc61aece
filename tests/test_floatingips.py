"""Floating IPs: allocation on the external network, association rules, errors.

Against netbay's API and a real Neutron alike (``neutron_api``, tests/backendfix.py)."""

from __future__ import annotations

import ipaddress
import itertools
import uuid
from types import SimpleNamespace

import pytest
import httpx
from conftest import neutron_error, unique

pytestmark = pytest.mark.every_db   # the store's semantics: on SQLite and PostgreSQL (tests/conftest.py)

_octets = itertools.count(1)
DATAPLANE = ("a floating IP goes ACTIVE on netbay's dataplane agent's report (PUT /netbay/v1/status, netbay's own); "
             "the peer Neutron has no L3 agent to make one ACTIVE")


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
def public_net(admin, public):
    """The external subnet's CIDR."""
    return ipaddress.ip_network(admin.network.get_subnet(public.subnet_ids[0]).cidr)


def make_topology(conn, public):
    """A network and subnet joined to ``public`` by a router, with one port on it."""
    net = conn.network.create_network(name=unique("fnet"))
    subnet = conn.network.create_subnet(network_id=net.id, cidr=f"10.{next(_octets)}.0.0/24", ip_version=4)
    router = conn.network.create_router(name=unique("frtr"), external_gateway_info={"network_id": public.id})
    conn.network.add_interface_to_router(router, subnet=subnet.id)
    port = conn.network.create_port(network_id=net.id, name=unique("vm"))
    return SimpleNamespace(net=net, subnet=subnet, router=router, port=port,
                           ip=port.fixed_ips[0]["ip_address"])


@pytest.fixture(scope="module")
def topo(member, public):
    return make_topology(member, public)


def dataplane_reports(server, fip_id: str, status: str) -> None:
    """Play the dataplane agent's part (these servers run without it)."""
    r = httpx.put(f"{server.url}/netbay/v1/status", json={"floatingips": {fip_id: status}},
                  headers={"X-Auth-Token": server.token()}, timeout=30)
    assert r.status_code == 200, r.text


def fip_port(admin, fip_id: str):
    ports = list(admin.network.ports(device_id=fip_id, device_owner="network:floatingip"))
    return ports[0] if ports else None


def test_unassociated_floating_ip(admin, member, member_http, public, public_net):
    r = member_http.post("/floatingips", json={"floatingip": {"floating_network_id": public.id,
                                                              "description": "spare"}})
    assert r.status_code == 201, r.text
    fip = r.json()["floatingip"]
    assert ipaddress.ip_address(fip["floating_ip_address"]) in public_net
    assert fip["floating_ip_address"] != str(public_net[1])  # the subnet's gateway
    assert fip["status"] == "DOWN" and fip["router_id"] is None and fip["port_id"] is None
    assert fip["fixed_ip_address"] is None and fip["port_details"] is None
    assert fip["floating_network_id"] == public.id and fip["description"] == "spare"
    assert fip["project_id"] == fip["tenant_id"] == member.current_project_id
    assert fip["tags"] == [] and fip["revision_number"] == 0 and "name" not in fip
    port = fip_port(admin, fip["id"])
    assert port is not None and port.network_id == public.id and port.project_id == ""
    assert [ip["ip_address"] for ip in port.fixed_ips] == [fip["floating_ip_address"]]
    member.network.delete_ip(fip["id"])
    assert member.network.find_ip(fip["id"]) is None
    assert fip_port(admin, fip["id"]) is None


@pytest.mark.embedded_only("the peer Neutron has no dns-integration or qos extension: a floating IP has no "
                            "dns_domain, dns_name or qos_policy_id; netbay's has them")
def test_dns_and_qos_attributes(member, public):
    fip = member.network.create_ip(floating_network_id=public.id).to_dict()
    assert fip["dns_domain"] == "" and fip["dns_name"] == "" and fip["qos_policy_id"] is None
    member.network.delete_ip(fip["id"])


@pytest.mark.embedded_only(DATAPLANE)
def test_create_associated(server, member, topo, public):
    fip = member.network.create_ip(floating_network_id=public.id, port_id=topo.port.id)
    assert fip.port_id == topo.port.id and fip.fixed_ip_address == topo.ip
    # DOWN until the dataplane has the NAT in place (it reports ACTIVE).
    assert fip.router_id == topo.router.id and fip.status == "DOWN"
    dataplane_reports(server, fip.id, "ACTIVE")
    assert member.network.get_ip(fip).status == "ACTIVE"
    details = member.network.get_ip(fip).port_details
    assert details == {"name": topo.port.name, "network_id": topo.net.id,
                       "mac_address": topo.port.mac_address, "admin_state_up": True,
                       "status": topo.port.status, "device_id": topo.port.device_id,
                       "device_owner": topo.port.device_owner}
    member.network.delete_ip(fip)


def test_floating_network_must_be_external(member, member_http):
    net = member.network.create_network(name=unique("notext"))
    neutron_error(member_http.post("/floatingips", json={"floatingip": {"floating_network_id": net.id}}),
                  400, "BadRequest", f"Bad floatingip request: Network {net.id} is not a valid external network.")
    neutron_error(member_http.post("/floatingips", json={"floatingip": {}}), 400, "HTTPBadRequest",
                  "Failed to parse request. Required attribute 'floating_network_id' not specified")
    neutron_error(member_http.post("/floatingips", json={"floatingip": {"floating_network_id": "x"}}),
                  400, "HTTPBadRequest")
    assert list(member.network.ips(floating_network_id=net.id)) == []


@pytest.mark.embedded_only("Neutron refuses a floating IP on a network that does not exist as 404 NetworkNotFound; "
                            "netbay as 400 BadRequest")
def test_floating_network_must_exist(member_http):
    missing = str(uuid.uuid4())
    neutron_error(member_http.post("/floatingips", json={"floatingip": {"floating_network_id": missing}}),
                  400, "BadRequest")


@pytest.mark.embedded_only("Neutron does not refuse router_id in a floating IP POST as an attribute: it answers "
                            "on the network (BadRequest: not a valid external network); netbay refuses router_id first")
def test_router_id_is_not_allowed_in_post(member, member_http):
    net = member.network.create_network(name=unique("notext"))
    r = member_http.post("/floatingips", json={"floatingip": {"floating_network_id": net.id,
                                                              "router_id": str(uuid.uuid4())}})
    neutron_error(r, 400, "HTTPBadRequest", "Attribute 'router_id' not allowed in POST")
    member.network.delete_network(net)


def test_member_may_not_ask_for_an_address(member_http, public, public_net):
    body = {"floatingip": {"floating_network_id": public.id, "floating_ip_address": str(public_net[223])}}
    neutron_error(member_http.post("/floatingips", json=body), 403, "PolicyNotAuthorized",
                  "(rule:create_floatingip and rule:create_floatingip:floating_ip_address) is disallowed by policy")


def test_requested_address(admin, admin_http, public, public_net):
    a = str(public_net[222])
    fip = admin.network.create_ip(floating_network_id=public.id, floating_ip_address=a)
    assert fip.floating_ip_address == a
    body = {"floatingip": {"floating_network_id": public.id, "floating_ip_address": a}}
    neutron_error(admin_http.post("/floatingips", json=body), 409, "IpAddressAlreadyAllocated")
    body["floatingip"]["floating_ip_address"] = "10.0.0.5"
    neutron_error(admin_http.post("/floatingips", json=body), 400, "InvalidIpForNetwork")
    admin.network.delete_ip(fip)
    # Freed: the address can be had again.
    again = admin.network.create_ip(floating_network_id=public.id, floating_ip_address=a)
    admin.network.delete_ip(again)


def test_subnet_id_picks_the_subnet(admin, public):
    subnet_id = public.subnet_ids[0]
    fip = admin.network.create_ip(floating_network_id=public.id, subnet_id=subnet_id)
    port = fip_port(admin, fip.id)
    assert port.fixed_ips[0]["subnet_id"] == subnet_id
    admin.network.delete_ip(fip)


def test_association_rules(server, member, member_http, topo, public):
    url = "/floatingips"
    base = {"floating_network_id": public.id}
    missing = str(uuid.uuid4())
    neutron_error(member_http.post(url, json={"floatingip": {**base, "port_id": missing}}), 404, "PortNotFound")
    neutron_error(member_http.post(url, json={"floatingip": {**base, "port_id": topo.port.id,
                                                             "fixed_ip_address": "10.250.0.9"}}),
                  400, "BadRequest", f"Bad floatingip request: Port {topo.port.id} does not have fixed ip 10.250.0.9.")
    neutron_error(member_http.post(url, json={"floatingip": {**base, "fixed_ip_address": topo.ip}}), 400,
                  "BadRequest", "Bad floatingip request: fixed_ip_address cannot be specified without a port_id.")

    # A port with two IPv4 addresses needs fixed_ip_address.
    two = member.network.create_port(network_id=topo.net.id, fixed_ips=[{"subnet_id": topo.subnet.id}] * 2)
    neutron_error(member_http.post(url, json={"floatingip": {**base, "port_id": two.id}}), 400, "BadRequest",
                  f"Bad floatingip request: Port {two.id} has multiple fixed IPv4 addresses.  Must provide a "
                  "specific IPv4 address when assigning a floating IP.")
    second_ip = two.fixed_ips[1]["ip_address"]
    fip = member.network.create_ip(floating_network_id=public.id, port_id=two.id, fixed_ip_address=second_ip)
    assert fip.fixed_ip_address == second_ip and fip.router_id == topo.router.id

    # The same fixed IP cannot have two floating IPs on one external network.
    r = member_http.post(url, json={"floatingip": {**base, "port_id": two.id, "fixed_ip_address": second_ip}})
    neutron_error(r, 409, "FloatingIPPortAlreadyAssociated")
    # ... but the port's other address can.
    other = member.network.create_ip(floating_network_id=public.id, port_id=two.id,
                                     fixed_ip_address=two.fixed_ips[0]["ip_address"])
    member.network.delete_ip(other)
    member.network.delete_ip(fip)
    member.network.delete_port(two)
    assert [f for f in member.network.ips(port_id=two.id)] == []


def test_ipv6_addresses_get_no_floating_ip(member, member_http, public):
    """No NAT66 (IPv6 is routed): a port with only IPv6 addresses, or a dual-stack port's
    IPv6 address named, is refused as Neutron refuses it; the dual-stack port's IPv4
    address takes the floating IP."""
    topo = make_topology(member, public)
    v6 = member.network.create_subnet(network_id=topo.net.id, ip_version=6, cidr=f"fd30:{next(_octets)}::/64")
    url, base = "/floatingips", {"floating_network_id": public.id}
    only6 = member.network.create_port(network_id=topo.net.id, fixed_ips=[{"subnet_id": v6.id}])
    neutron_error(member_http.post(url, json={"floatingip": {**base, "port_id": only6.id}}), 400, "BadRequest",
                  f"Bad floatingip request: Cannot add floating IP to port {only6.id} that has no fixed IPv4 "
                  "addresses.")
    dual = member.network.create_port(network_id=topo.net.id, fixed_ips=[{"subnet_id": topo.subnet.id},
                                                                          {"subnet_id": v6.id}])
    addr6 = next(f["ip_address"] for f in dual.fixed_ips if ":" in f["ip_address"])
    neutron_error(member_http.post(url, json={"floatingip": {**base, "port_id": dual.id, "fixed_ip_address": addr6}}),
                  400, "BadRequest", f"Bad floatingip request: Cannot process floating IP association with {addr6}, "
                  "since that is not an IPv4 address.")
    fip = member.network.create_ip(floating_network_id=public.id, port_id=dual.id)
    assert fip.fixed_ip_address == next(f["ip_address"] for f in dual.fixed_ips if ":" not in f["ip_address"])
    member.network.delete_ip(fip)
    for port in (only6, dual):
        member.network.delete_port(port)


def test_no_router_means_not_reachable(member, member_http, public):
    net = member.network.create_network(name=unique("island"))
    subnet = member.network.create_subnet(network_id=net.id, cidr="10.222.0.0/24", ip_version=4)
    port = member.network.create_port(network_id=net.id)
    body = {"floatingip": {"floating_network_id": public.id, "port_id": port.id}}
    message = (f"External network {public.id} is not reachable from subnet {subnet.id}.  "
               f"Therefore, cannot associate Port {port.id} with a Floating IP.")
    neutron_error(member_http.post("/floatingips", json=body), 404, "ExternalGatewayForFloatingIPNotFound", message)
    # A router with an interface but no gateway does not help either.
    router = member.network.create_router(name=unique("nogw"))
    member.network.add_interface_to_router(router, subnet=subnet.id)
    neutron_error(member_http.post("/floatingips", json=body), 404, "ExternalGatewayForFloatingIPNotFound", message)
    # Nothing is left over from the refusals.
    assert [f for f in member.network.ips(port_id=port.id)] == []
    member.network.remove_interface_from_router(router, subnet=subnet.id)
    member.network.delete_router(router)


@pytest.mark.embedded_only(DATAPLANE)
def test_update_associate_and_disassociate(server, member, member_http, topo, public):
    fip = member.network.create_ip(floating_network_id=public.id)
    fip = member.network.update_ip(fip, port_id=topo.port.id)
    assert fip.port_id == topo.port.id and fip.status == "DOWN" and fip.router_id == topo.router.id
    dataplane_reports(server, fip.id, "ACTIVE")
    # A description change keeps the association.
    fip = member.network.update_ip(fip, description="web")
    assert fip.port_id == topo.port.id and fip.description == "web" and fip.fixed_ip_address == topo.ip
    assert fip.status == "ACTIVE"  # the same association: the NAT in place stays
    r = member_http.put(f"/floatingips/{fip.id}", json={"floatingip": {"fixed_ip_address": topo.ip}})
    neutron_error(r, 400, "BadRequest")
    r = member_http.put(f"/floatingips/{fip.id}", json={"floatingip": {"floating_network_id": public.id}})
    neutron_error(r, 400, "HTTPBadRequest", "Cannot update read-only attribute floating_network_id")
    r = member_http.put(f"/floatingips/{fip.id}", json={"floatingip": {"port_id": None}})
    assert r.status_code == 200, r.text
    body = r.json()["floatingip"]
    assert body["port_id"] is None and body["fixed_ip_address"] is None
    assert body["router_id"] is None and body["status"] == "DOWN" and body["port_details"] is None
    assert body["revision_number"] > fip.revision_number
    member.network.delete_ip(fip)


def test_router_refuses_changes_a_floating_ip_needs(member, member_http, public):
    t = make_topology(member, public)
    fip = member.network.create_ip(floating_network_id=public.id, port_id=t.port.id)
    r = member_http.put(f"/routers/{t.router.id}/remove_router_interface", json={"subnet_id": t.subnet.id})
    neutron_error(r, 409, "RouterInterfaceInUseByFloatingIP",
                  f"Router interface for subnet {t.subnet.id} on router {t.router.id} cannot be deleted, "
                  "as it is required by one or more floating IPs.")
    r = member_http.put(f"/routers/{t.router.id}", json={"router": {"external_gateway_info": {}}})
    neutron_error(r, 409, "RouterExternalGatewayInUseByFloatingIp",
                  f"Gateway cannot be updated for router {t.router.id}, since a gateway to external network "
                  f"{public.id} is required by one or more floating IPs.")
    neutron_error(member_http.delete(f"/routers/{t.router.id}"), 409, "RouterInUse")
    assert member.network.get_router(t.router).external_gateway_info is not None

    member.network.update_ip(fip, port_id=None)
    member.network.update_router(t.router, external_gateway_info={})
    member.network.remove_interface_from_router(t.router, subnet=t.subnet.id)
    member.network.delete_router(t.router)
    member.network.delete_ip(fip)


@pytest.mark.embedded_only(DATAPLANE)
def test_deleting_the_fixed_port_disassociates(server, member, topo, public):
    port = member.network.create_port(network_id=topo.net.id)
    fip = member.network.create_ip(floating_network_id=public.id, port_id=port.id)
    dataplane_reports(server, fip.id, "ACTIVE")
    fip = member.network.get_ip(fip.id)
    assert fip.status == "ACTIVE"
    revision = fip.revision_number
    member.network.delete_port(port)
    after = member.network.get_ip(fip.id)
    assert after.port_id is None and after.fixed_ip_address is None and after.router_id is None
    assert after.status == "DOWN" and after.revision_number > revision
    member.network.delete_ip(fip)


@pytest.mark.embedded_only(DATAPLANE)
def test_filters(server, member, topo, public):
    a = member.network.create_ip(floating_network_id=public.id, port_id=topo.port.id, description="fa")
    b = member.network.create_ip(floating_network_id=public.id, description="fb")
    dataplane_reports(server, a.id, "ACTIVE")

    def ids(**query):
        return {f.id for f in member.network.ips(**query)}

    assert ids(floating_ip_address=a.floating_ip_address) == {a.id}
    assert ids(port_id=topo.port.id) == {a.id}
    assert ids(router_id=topo.router.id) == {a.id}
    assert ids(fixed_ip_address=topo.ip) == {a.id}
    assert ids(description="fb") == {b.id}
    assert {a.id, b.id} <= ids(floating_network_id=public.id)
    assert a.id in ids(status="ACTIVE") and b.id not in ids(status="ACTIVE")
    assert b.id in ids(status="DOWN")
    assert {a.id, b.id} <= ids(project_id=member.current_project_id)
    assert {a.id, b.id} <= ids(tenant_id=member.current_project_id)
    member.network.delete_ip(a)
    member.network.delete_ip(b)


def test_other_projects_get_404(server, admin, member, public):
    fip = member.network.create_ip(floating_network_id=public.id)
    user, password, project = server.make_user()
    other = server.connect(user, password, project)
    other_http = server.http(other.auth_token)
    for r in (other_http.get(f"/floatingips/{fip.id}"),
              other_http.put(f"/floatingips/{fip.id}", json={"floatingip": {"description": "x"}}),
              other_http.delete(f"/floatingips/{fip.id}")):
        neutron_error(r, 404, "FloatingIPNotFound", f"Floating IP {fip.id} could not be found")
    assert fip.id not in {f.id for f in other.network.ips()}
    # Another project's port cannot be associated with one's own floating IP.
    t = make_topology(member, public)
    mine = other.network.create_ip(floating_network_id=public.id)
    r = other_http.put(f"/floatingips/{mine.id}", json={"floatingip": {"port_id": t.port.id}})
    neutron_error(r, 404, "PortNotFound")
    assert fip.id in {f.id for f in admin.network.ips(project_id=member.current_project_id)}
    other.network.delete_ip(mine)
    member.network.delete_ip(fip)
