"""``POST /network/v2.0/batch`` (netbay extension): several network-API writes in one
transaction — all applied together, or none (issue 12: a NetworkPolicy change is one
commit and one wake-up of the agent)."""

from __future__ import annotations

import httpx
from conftest import neutron_error, unique


def _group(http: httpx.Client) -> dict:
    r = http.post("/security-groups", json={"security_group": {"name": unique("batch")}})
    assert r.status_code == 201, r.text
    return r.json()["security_group"]


def _port(http: httpx.Client) -> dict:
    net = http.post("/networks", json={"network": {"name": unique("batch")}}).json()["network"]
    assert http.post("/subnets", json={"subnet": {"network_id": net["id"], "cidr": "10.77.0.0/24",
                                                  "ip_version": 4}}).status_code == 201
    r = http.post("/ports", json={"port": {"network_id": net["id"]}})
    assert r.status_code == 201, r.text
    return r.json()["port"]


def test_batch_applies_every_operation_and_answers_each(admin_http: httpx.Client) -> None:
    assert admin_http.get("/extensions/netbay-batch").status_code == 200
    group, port = _group(admin_http), _port(admin_http)
    v4, v6 = (x["id"] for x in group["security_group_rules"])  # Neutron's default egress pair
    rules = [{"security_group_id": group["id"], "direction": "ingress", "protocol": "tcp",
              "port_range_min": p, "port_range_max": p} for p in (80, 81)]
    r = admin_http.post("/batch", json={"batch": [
        {"method": "PUT", "path": f"security-groups/{group['id']}", "body": {"security_group": {"name": "renamed"}}},
        {"method": "POST", "path": "security-group-rules", "body": {"security_group_rules": rules}},
        {"method": "DELETE", "path": f"security-group-rules/{v4}"},
        {"method": "DELETE", "path": f"security-group-rules/{v6}"},
        {"method": "DELETE", "path": "security-group-rules/00000000-0000-0000-0000-000000000000", "missing_ok": True},
        {"method": "PUT", "path": f"ports/{port['id']}", "body": {"port": {"security_groups": [group["id"]]}}},
    ]})
    assert r.status_code == 200, r.text
    renamed, made, deleted4, deleted6, absent, moved = r.json()["batch"]
    assert renamed["security_group"]["name"] == "renamed"
    assert sorted(x["port_range_min"] for x in made["security_group_rules"]) == [80, 81]
    assert deleted4 is None and deleted6 is None and absent is None
    assert moved["port"]["security_groups"] == [group["id"]]
    # the service holds what the answers say
    shown = admin_http.get(f"/security-groups/{group['id']}").json()["security_group"]
    assert shown["name"] == "renamed"
    assert {x["id"] for x in shown["security_group_rules"]} == {x["id"] for x in made["security_group_rules"]}
    assert admin_http.get(f"/ports/{port['id']}").json()["port"]["security_groups"] == [group["id"]]


def test_a_refused_operation_rolls_back_the_batch(admin_http: httpx.Client) -> None:
    group, port = _group(admin_http), _port(admin_http)
    before = admin_http.get(f"/security-groups/{group['id']}").json()["security_group"]
    r = admin_http.post("/batch", json={"batch": [
        {"method": "PUT", "path": f"security-groups/{group['id']}", "body": {"security_group": {"name": "nope"}}},
        {"method": "PUT", "path": f"ports/{port['id']}", "body": {"port": {"security_groups": [group["id"]]}}},
        {"method": "DELETE", "path": "security-group-rules/00000000-0000-0000-0000-000000000000"},
    ]})
    neutron_error(r, 404, "SecurityGroupRuleNotFound")
    after = admin_http.get(f"/security-groups/{group['id']}").json()["security_group"]
    assert after["name"] == before["name"] and after["revision_number"] == before["revision_number"]
    assert admin_http.get(f"/ports/{port['id']}").json()["port"]["security_groups"] == port["security_groups"]


def test_bad_batches_are_refused_before_any_write(admin_http: httpx.Client) -> None:
    group = _group(admin_http)
    rename = {"method": "PUT", "path": f"security-groups/{group['id']}", "body": {"security_group": {"name": "x"}}}
    cases = [
        ({}, "Unable to find 'batch'"),
        ({"batch": []}, "Unable to find 'batch'"),
        ({"batch": [rename, {"method": "GET", "path": "ports"}]}, "GET ports is not an operation"),
        ({"batch": [rename, {"method": "POST", "path": "widgets", "body": {}}]}, "unknown collection"),
        ({"batch": [rename, {"method": "POST", "path": "security-group-rules",
                             "body": {"security_group_rule": {"direction": "sideways",
                                                              "security_group_id": group["id"]}}}]}, "sideways"),
        ({"batch": [rename] * 1001}, "limited to 1000"),
    ]
    for body, words in cases:
        message = neutron_error(admin_http.post("/batch", json=body), 400, "HTTPBadRequest")
        assert words in message, (body if len(str(body)) < 300 else "...", message)
    assert admin_http.get(f"/security-groups/{group['id']}").json()["security_group"]["name"] == group["name"]


def test_a_member_batches_only_what_it_may_change(admin_http: httpx.Client, member_http: httpx.Client) -> None:
    theirs = _group(admin_http)
    mine = _group(member_http)
    r = member_http.post("/batch", json={"batch": [
        {"method": "PUT", "path": f"security-groups/{mine['id']}", "body": {"security_group": {"name": "m"}}},
        {"method": "PUT", "path": f"security-groups/{theirs['id']}", "body": {"security_group": {"name": "m"}}},
    ]})
    neutron_error(r, 404, "SecurityGroupNotFound")  # another project's group is invisible, as alone
    assert member_http.get(f"/security-groups/{mine['id']}").json()["security_group"]["name"] == mine["name"]
