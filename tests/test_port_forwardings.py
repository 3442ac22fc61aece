"""Floating IP port forwardings (``floating-ip-port-forwarding``, issue 29) through
openstacksdk, the ``openstack`` CLI and raw HTTP: Neutron's bodies, the floating IP's
``port_forwardings`` and router, and Neutron's refusals (collisions 400, a floating IP
both forwarding and associated 409). Packets: tests/dataplane/test_dp_router.py."""

from __future__ import annotations

import pytest
from conftest import neutron_error, unique
from oschelp import osc_json

pytestmark = pytest.mark.shared_server   # its tests make their own objects (tests/conftest.py)

BAD_ID = "0b5e7f6e-7a5c-4d8e-9d4f-3c2b1a000000"


@pytest.fixture(scope="module")
def site(admin, member):
    """A member's network behind a router with a gateway on ``public``, two ports on it."""
    public = admin.network.find_network("public")
    net = member.network.create_network(name=unique("pfnet"))
    subnet = member.network.create_subnet(network_id=net.id, cidr="10.230.0.0/24", ip_version=4)
    router = member.network.create_router(name=unique("pfr"), external_gateway_info={"network_id": public.id})
    member.network.add_interface_to_router(router, subnet_id=subnet.id)
    ports = [member.network.create_port(network_id=net.id, name=unique("pfp")) for _ in range(2)]
    return public, router, ports


def _fip(member, public):
    return member.network.create_ip(floating_network_id=public.id)


def test_extension_listed(member_http):
    aliases = {e["alias"] for e in member_http.get("/extensions").json()["extensions"]}
    assert {"floating-ip-port-forwarding", "expose-port-forwarding-in-fip",
            "floating-ip-port-forwarding-port-ranges"} <= aliases


def test_lifecycle_through_the_sdk(member, member_http, site):
    public, router, (port, other) = site
    fip = _fip(member, public)
    assert fip.router_id is None
    ip = port.fixed_ips[0]["ip_address"]
    pf = member.network.create_floating_ip_port_forwarding(
        fip, internal_port_id=port.id, internal_ip_address=ip, internal_port=22, external_port=2222,
        protocol="tcp", description="ssh")
    assert (pf.internal_port, pf.external_port, pf.protocol, pf.internal_ip_address) == (22, 2222, "tcp", ip)
    body = member_http.get(f"/floatingips/{fip.id}/port_forwardings/{pf.id}").json()["port_forwarding"]
    assert set(body) == {"id", "external_port", "internal_port", "internal_ip_address", "protocol",
                         "internal_port_id", "description", "external_port_range", "internal_port_range"}
    assert (body["external_port_range"], body["internal_port_range"]) == ("2222:2222", "22:22")
    shown = member_http.get(f"/floatingips/{fip.id}").json()["floatingip"]
    assert shown["router_id"] == router.id and shown["port_id"] is None
    assert shown["port_forwardings"] == [{"id": pf.id, "internal_ip_address": ip, "protocol": "tcp",
                                          "internal_port": 22, "external_port": 2222,
                                          "internal_port_id": port.id}]
    assert [p.id for p in member.network.floating_ip_port_forwardings(fip)] == [pf.id]
    assert [p.id for p in member.network.floating_ip_port_forwardings(fip, external_port=2222)] == [pf.id]
    assert list(member.network.floating_ip_port_forwardings(fip, external_port=2223)) == []
    pf = member.network.update_floating_ip_port_forwarding(fip, pf, external_port=2200)
    assert pf.external_port == 2200
    member.network.delete_floating_ip_port_forwarding(fip, pf)
    neutron_error(member_http.get(f"/floatingips/{fip.id}/port_forwardings/{pf.id}"), 404,
                  "PortForwardingNotFound", f"Port Forwarding {pf.id} could not be found.")
    assert member.network.get_ip(fip).router_id is None     # the last one lets the router go
    member.network.delete_ip(fip)


def test_conflicts_refused_as_neutron_does(member, member_http, site):
    public, _router, (port, other) = site
    fip = _fip(member, public)
    ip = port.fixed_ips[0]["ip_address"]
    url = f"/floatingips/{fip.id}/port_forwardings"
    body = {"internal_port_id": port.id, "internal_ip_address": ip, "internal_port": 80,
            "external_port": 8080, "protocol": "tcp"}
    assert member_http.post(url, json={"port_forwarding": body}).status_code == 201
    same_outside = {**body, "internal_port": 81}
    msg = neutron_error(member_http.post(url, json={"port_forwarding": same_outside}), 400, "BadRequest")
    assert "port collision with the external_port_range" in msg
    same_inside = {**body, "external_port": 8081}
    msg = neutron_error(member_http.post(url, json={"port_forwarding": same_inside}), 400, "BadRequest")
    assert "port collision with the internal_port_range" in msg
    assert member_http.post(url, json={"port_forwarding": {**same_outside, "protocol": "udp"}}).status_code == 201
    wrong_ip = {**body, "internal_ip_address": "10.230.0.250", "external_port": 9000}
    msg = neutron_error(member_http.post(url, json={"port_forwarding": wrong_ip}), 400, "BadRequest")
    assert "is not suitable for internal neutron port" in msg
    neutron_error(member_http.post(url, json={"port_forwarding": {**body, "external_port": 70000}}), 400,
                  "HTTPBadRequest")
    neutron_error(member_http.post(url, json={"port_forwarding": {**body, "protocol": "icmpx"}}), 400,
                  "InvalidInput")   # neutron-lib's convert_to_protocol refuses a name it does not know
    missing = {k: v for k, v in body.items() if k != "internal_port"}
    neutron_error(member_http.post(url, json={"port_forwarding": missing}), 400, "HTTPBadRequest",
                  "Failed to parse request. Required attribute 'internal_port' not specified")
    neutron_error(member_http.get(f"/floatingips/{BAD_ID}/port_forwardings"), 404, "FloatingIPNotFound")
    # A floating IP forwarding ports is neither associated nor deleted.
    neutron_error(member_http.put(f"/floatingips/{fip.id}", json={"floatingip": {"port_id": other.id}}), 409,
                  "FipInUseByPortForwarding", f"Floating IP {fip.id} in use by Port Forwarding resources.")
    neutron_error(member_http.delete(f"/floatingips/{fip.id}"), 409, "FipInUseByPortForwarding")
    # An associated floating IP forwards nothing; a port with a floating IP is not forwarded to.
    bound = member.network.create_ip(floating_network_id=public.id, port_id=other.id)
    bound_url = f"/floatingips/{bound.id}/port_forwardings"
    other_body = {**body, "internal_port_id": other.id, "internal_ip_address": other.fixed_ips[0]["ip_address"]}
    neutron_error(member_http.post(bound_url, json={"port_forwarding": {**body, "external_port": 9002, "internal_port": 90}}),
                  409,
                  "FloatingIPPortAlreadyAssociated")
    neutron_error(member_http.post(url, json={"port_forwarding": {**other_body, "external_port": 9001}}), 409,
                  "PortHasBindingFloatingIP")
    member.network.delete_ip(bound)
    # The internal port going takes its forwardings along.
    member.network.delete_port(port)
    assert member_http.get(url).json() == {"port_forwardings": []}
    member.network.delete_ip(fip)


def test_port_ranges_as_neutron_has_them(server, member, member_http, site):
    """``floating-ip-port-forwarding-port-ranges``: N external ports to N internal ones or
    to one; a range shows no single port on its side; overlaps collide; bad ranges get
    neutron-lib's wording. Packets: tests/dataplane/test_dp_router_ext.py."""
    public, _router, (_port, other) = site
    fip = _fip(member, public)
    ip = other.fixed_ips[0]["ip_address"]
    url = f"/floatingips/{fip.id}/port_forwardings"
    base = {"internal_port_id": other.id, "internal_ip_address": ip, "protocol": "tcp"}
    r = member_http.post(url, json={"port_forwarding": {**base, "internal_port_range": "2000:2010",
                                                        "external_port_range": "3000:3010"}})
    assert r.status_code == 201, r.text
    n_n = r.json()["port_forwarding"]
    assert (n_n["internal_port"], n_n["external_port"]) == (None, None)
    assert (n_n["internal_port_range"], n_n["external_port_range"]) == ("2000:2010", "3000:3010")
    one_n = member.network.create_floating_ip_port_forwarding(
        fip, internal_port_id=other.id, internal_ip_address=ip, protocol="tcp", internal_port_range="22",
        external_port_range="4000:4005")
    assert (one_n.internal_port, one_n.external_port, one_n.external_port_range) == (22, None, "4000:4005")
    shown = member_http.get(f"/floatingips/{fip.id}").json()["floatingip"]["port_forwardings"]
    by_id = {pf["id"]: pf for pf in shown}
    assert by_id[one_n.id]["internal_port"] == 22 and "external_port" not in by_id[one_n.id]
    listed = member_http.get(url, params={"external_port_range": "3000:3010"}).json()["port_forwardings"]
    assert [pf["id"] for pf in listed] == [n_n["id"]]

    def refused(body: dict, message: str) -> None:
        neutron_error(member_http.post(url, json={"port_forwarding": {**base, **body}}), 400, "BadRequest",
                      f"Bad port_forwarding request: {message}.")

    refused({"internal_port_range": "5000:5002", "external_port_range": "6000:6005"},
            "Invalid ranges of internal and/or external ports. The relation between internal and external "
            "ports must be N-N or 1-N")
    refused({"internal_port": 80, "external_port_range": "3005:3020"},
            "There is a port collision with the external_port_range. The following ranges collide: "
            "3000:3010 and 3005:3020")
    refused({"internal_port_range": "2010:2011", "external_port_range": "7000:7001"},
            "There is a port collision with the internal_port_range. The following ranges collide: "
            "2000:2010 and 2010:2011")
    for bad, reason in (("10:5", "First port in a port range must be lower than the second port"),
                        ("1:2:3", "Port range must be two integers separated by a colon"),
                        ("0:10", "Invalid port: 0, the port must be in the range [1, 65535]")):
        r = member_http.post(url, json={"port_forwarding": {**base, "internal_port": 9,
                                                            "external_port_range": bad}})
        neutron_error(r, 400, "HTTPBadRequest", f"Invalid input for external_port_range. Reason: {reason}.")
    updated = member_http.put(f"{url}/{n_n['id']}", json={"port_forwarding": {
        "internal_port_range": "2100:2110", "external_port_range": "3100:3110"}})
    assert updated.json()["port_forwarding"]["external_port_range"] == "3100:3110", updated.text
    # python-openstackclient sends a range given as first:last
    cli = osc_json(server, "floating", "ip", "port", "forwarding", "create", "--internal-ip-address", ip,
                   "--port", other.id, "--internal-protocol-port", "8000:8002",
                   "--external-protocol-port", "9000:9002", "--protocol", "udp", fip.id)
    assert (cli["internal_port_range"], cli["external_port_range"]) == ("8000:8002", "9000:9002")
    for pf in member_http.get(url).json()["port_forwardings"]:
        assert member_http.delete(f"{url}/{pf['id']}").status_code == 204
    member.network.delete_ip(fip)


def test_openstack_cli(server, admin, site):
    public, _router, (_port, other) = site
    fip = admin.network.create_ip(floating_network_id=public.id)
    ip = other.fixed_ips[0]["ip_address"]
    pf = osc_json(server, "floating", "ip", "port", "forwarding", "create", "--internal-ip-address", ip,
                  "--port", other.id, "--internal-protocol-port", "53", "--external-protocol-port", "5353",
                  "--protocol", "udp", fip.id)
    assert pf["internal_port"] == 53 and pf["external_port"] == 5353 and pf["protocol"] == "udp"
    listed = osc_json(server, "floating", "ip", "port", "forwarding", "list", fip.id)
    assert [row["ID"] for row in listed] == [pf["id"]]
    admin.network.delete_floating_ip_port_forwarding(fip, pf["id"])
    admin.network.delete_ip(fip)
