"""Neutron's ``address-group`` through openstacksdk, the ``openstack`` CLI and raw HTTP
(issue 29): CRUD, add/remove_addresses with Neutron's refusals, security group rules
naming a group. Packets: tests/dataplane/test_dp_address_groups.py."""

from __future__ import annotations

import pytest

from conftest import neutron_error, unique
from oschelp import osc_json

pytestmark = pytest.mark.shared_server   # its tests make their own objects (tests/conftest.py)

BAD_ID = "0b5e7f6e-7a5c-4d8e-9d4f-3c2b1a000000"


def test_lifecycle_and_addresses(member, member_http):
    assert "address-group" in {e["alias"] for e in member_http.get("/extensions").json()["extensions"]}
    group = member.network.create_address_group(name=unique("ag"), description="d",
                                                addresses=["10.0.0.5/24", "192.0.2.1/32"])
    assert sorted(group.addresses) == ["10.0.0.0/24", "192.0.2.1/32"]
    body = member_http.get(f"/address-groups/{group.id}").json()["address_group"]
    assert set(body) >= {"id", "name", "description", "project_id", "addresses"}
    group = member.network.add_addresses_to_address_group(group, ["2001:db8::/64"])
    assert "2001:db8::/64" in group.addresses
    url = f"/address-groups/{group.id}"
    neutron_error(member_http.put(f"{url}/add_addresses", json={"addresses": ["10.0.0.0/24"]}), 400,
                  "AddressesAlreadyExist")
    neutron_error(member_http.put(f"{url}/remove_addresses", json={"addresses": ["10.9.0.0/24"]}), 404,
                  "AddressesNotFound")
    r = member_http.put(f"{url}/add_addresses", json={"addresses": ["10.1.1.1"]})
    assert r.status_code == 400 and "10.1.1.1/32' is recommended" in r.text
    group = member.network.remove_addresses_from_address_group(group, ["192.0.2.1/32"])
    assert sorted(group.addresses) == ["10.0.0.0/24", "2001:db8::/64"]
    assert member.network.update_address_group(group, name="renamed").name == "renamed"
    assert [g.id for g in member.network.address_groups(name="renamed")] == [group.id]

    sg = member.network.create_security_group(name=unique("agsg"))
    rule = member.network.create_security_group_rule(security_group_id=sg.id, direction="ingress",
                                                     protocol="tcp", remote_address_group_id=group.id)
    assert rule.remote_address_group_id == group.id and rule.remote_ip_prefix is None
    listed = member_http.get("/security-group-rules", params={"remote_address_group_id": group.id}).json()
    assert [r["id"] for r in listed["security_group_rules"]] == [rule.id]
    neutron_error(member_http.delete(url), 409, "AddressGroupInUse",
                  f"Address group {group.id} is in use on one or more security group rules.")
    rules = "/security-group-rules"
    both = {"security_group_id": sg.id, "direction": "ingress", "remote_address_group_id": group.id,
            "remote_ip_prefix": "10.0.0.0/8"}
    neutron_error(member_http.post(rules, json={"security_group_rule": both}), 400,
                  "SecurityGroupMultipleRemoteEntites")
    missing = {"security_group_id": sg.id, "direction": "egress", "remote_address_group_id": BAD_ID}
    neutron_error(member_http.post(rules, json={"security_group_rule": missing}), 404, "AddressGroupNotFound")
    member.network.delete_security_group_rule(rule)
    member.network.delete_address_group(group)
    neutron_error(member_http.get(url), 404, "AddressGroupNotFound")


def test_openstack_cli(server):
    name = unique("agcli")
    group = osc_json(server, "address", "group", "create", "--address", "10.5.0.0/16", name)
    assert group["addresses"] == ["10.5.0.0/16"]
    osc_json(server, "address", "group", "show", name)
    listed = osc_json(server, "address", "group", "list")
    assert group["id"] in [g["ID"] for g in listed]
