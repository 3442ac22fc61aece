"""Neutron's ``security-groups-default-rules`` through raw HTTP and openstacksdk (issue
29): the four templates Neutron starts with, a template added by an admin shaping the
groups made after it, members refused, Neutron's errors."""

from __future__ import annotations

from conftest import neutron_error, unique

BAD_ID = "0b5e7f6e-7a5c-4d8e-9d4f-3c2b1a000000"
URL = "/default-security-group-rules"


def _shape(rule: dict) -> tuple:
    return (rule["direction"], rule["ethertype"], rule["protocol"], rule["port_range_min"], rule["remote_ip_prefix"])


def test_templates_shape_new_groups(admin_http, member, member_http):
    assert "security-groups-default-rules" in {e["alias"] for e in member_http.get("/extensions").json()["extensions"]}
    templates = member_http.get(URL).json()["default_security_group_rules"]
    assert sorted((t["direction"], t["ethertype"], t["remote_group_id"], t["used_in_default_sg"],
                   t["used_in_non_default_sg"]) for t in templates) == [
        ("egress", "IPv4", None, True, True), ("egress", "IPv6", None, True, True),
        ("ingress", "IPv4", "PARENT", True, False), ("ingress", "IPv6", "PARENT", True, False)]
    ssh = {"direction": "ingress", "ethertype": "IPv4", "protocol": "tcp", "port_range_min": 22,
           "port_range_max": 22, "remote_ip_prefix": "10.0.0.0/8", "used_in_default_sg": False,
           "used_in_non_default_sg": True, "description": "ssh"}
    neutron_error(member_http.post(URL, json={"default_security_group_rule": ssh}), 403, "PolicyNotAuthorized")
    r = admin_http.post(URL, json={"default_security_group_rule": ssh})
    assert r.status_code == 201, r.text
    template = r.json()["default_security_group_rule"]
    assert template["used_in_non_default_sg"] is True and template["used_in_default_sg"] is False
    neutron_error(admin_http.post(URL, json={"default_security_group_rule": ssh}), 409,
                  "DefaultSecurityGroupRuleExists")
    assert member_http.get(f"{URL}/{template['id']}").json()["default_security_group_rule"] == template
    group = member.network.create_security_group(name=unique("tmpl"))
    shapes = {_shape(r) for r in group.security_group_rules}
    assert ("ingress", "IPv4", "tcp", 22, "10.0.0.0/8") in shapes
    assert {s[0] for s in shapes} == {"egress", "ingress"} and len(shapes) == 3
    neutron_error(member_http.delete(f"{URL}/{template['id']}"), 403, "PolicyNotAuthorized")
    assert admin_http.delete(f"{URL}/{template['id']}").status_code == 204
    neutron_error(admin_http.get(f"{URL}/{BAD_ID}"), 404, "DefaultSecurityGroupRuleNotFound")
    later = member.network.create_security_group(name=unique("tmpl"))
    assert {r["direction"] for r in later.security_group_rules} == {"egress"}
    assert len(member_http.get(URL, params={"direction": "egress"}).json()["default_security_group_rules"]) == 2
