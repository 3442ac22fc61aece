"""Neutron's ``dns-integration`` through openstacksdk and raw HTTP (issue 29):
``dns_name`` on ports and floating IPs, ``dns_domain`` on networks and floating IPs,
stored and shown, a port's ``dns_assignment``; names refused as Neutron refuses them."""

from __future__ import annotations

import pytest

from conftest import neutron_error, unique

pytestmark = pytest.mark.shared_server   # its tests make their own objects (tests/conftest.py)


def test_ports_networks_and_floating_ips(admin, member, member_http):
    assert "dns-integration" in {e["alias"] for e in member_http.get("/extensions").json()["extensions"]}
    net = member.network.create_network(name=unique("dns"), dns_domain="example.org.")
    assert net.dns_domain == "example.org."
    member.network.create_subnet(network_id=net.id, cidr="10.232.0.0/24", ip_version=4)
    port = member.network.create_port(network_id=net.id, dns_name="web1")
    ip = port.fixed_ips[0]["ip_address"]
    assert port.dns_name == "web1"
    assert port.dns_assignment == [{"hostname": "web1", "ip_address": ip, "fqdn": "web1.openstacklocal."}]
    plain = member_http.post("/ports", json={"port": {"network_id": net.id}}).json()["port"]
    dashed = plain["fixed_ips"][0]["ip_address"].replace(".", "-")
    assert plain["dns_name"] == "" and plain["dns_assignment"][0]["hostname"] == f"host-{dashed}"
    port = member.network.update_port(port, dns_name="web2")
    assert port.dns_assignment[0]["hostname"] == "web2"
    r = member_http.put(f"/ports/{port.id}", json={"port": {"dns_name": "-bad-"}})
    assert r.status_code == 400 and "not a valid PQDN or FQDN" in r.text
    r = member_http.put(f"/networks/{net.id}", json={"network": {"dns_domain": "corp.example."}})
    assert r.status_code == 200 and r.json()["network"]["dns_domain"] == "corp.example."

    public = admin.network.find_network("public")
    fip = member_http.post("/floatingips", json={"floatingip": {
        "floating_network_id": public.id, "dns_name": "www", "dns_domain": "example.org."}}).json()["floatingip"]
    assert (fip["dns_name"], fip["dns_domain"]) == ("www", "example.org.")
    r = member_http.put(f"/floatingips/{fip['id']}", json={"floatingip": {"dns_name": "other"}})
    neutron_error(r, 400, "HTTPBadRequest", "Cannot update read-only attribute dns_name")
    member_http.delete(f"/floatingips/{fip['id']}")
