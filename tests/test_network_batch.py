"""``POST /network/v2.0/batch`` (netbay extension): several network-API writes in one
transaction — all applied together, or none (issue 12: a NetworkPolicy change is one
commit and one wake-up of the agent)."""

from __future__ import annotations

import httpx
import pytest
from conftest import neutron_error, unique

pytestmark = pytest.mark.every_db   # the store's semantics: on SQLite and PostgreSQL (tests/conftest.py)


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


def _changes_after(server, revision: int) -> list[dict]:
    r = httpx.get(f"{server.url}/netbay/v1/changes", params={"since": revision},
                  headers={"X-Auth-Token": server.token()}, timeout=10)
    assert r.status_code == 200, r.text
    return r.json()["changes"]


def _head(server) -> int:
    revision = 0
    for _ in range(1000):
        r = httpx.get(f"{server.url}/netbay/v1/changes", params={"since": revision},
                      headers={"X-Auth-Token": server.token()}, timeout=10).json()
        if not r["changes"]:
            return revision
        revision = r["revision"]
    raise AssertionError("change stream did not end")


def test_a_groups_only_port_update_mixes_with_full_ones(admin_http: httpx.Client) -> None:
    """``{"port": {"security_groups": [...]}}`` alone is written as rows (portgroups.py); in
    one batch with ORM updates of the same port, each sees the other's writes."""
    a, b = _group(admin_http), _group(admin_http)
    port = _port(admin_http)
    put = lambda body: {"method": "PUT", "path": f"ports/{port['id']}", "body": {"port": body}}  # noqa: E731
    r = admin_http.post("/batch", json={"batch": [
        put({"name": "first"}),                               # the ORM path loads the port
        put({"security_groups": [a["id"], b["id"]]}),           # as rows
        put({"description": "third"}),                        # the ORM path again: sees both groups
        put({"security_groups": [b["id"]]}),
    ]})
    assert r.status_code == 200, r.text
    answers = [x["port"] for x in r.json()["batch"]]
    assert [x["revision_number"] for x in answers] == [port["revision_number"] + i for i in (1, 2, 3, 4)]
    assert answers[1]["security_groups"] == [a["id"], b["id"]] and answers[1]["name"] == "first"
    assert sorted(answers[2]["security_groups"]) == sorted([a["id"], b["id"]]) and answers[2]["description"] == "third"
    shown = admin_http.get(f"/ports/{port['id']}").json()["port"]
    assert shown == answers[3]
    assert shown["security_groups"] == [b["id"]] and shown["fixed_ips"] == port["fixed_ips"]
    assert shown["name"] == "first" and shown["description"] == "third"
    # the same refusals as the ORM path, nothing written
    missing = "00000000-0000-0000-0000-000000000000"
    neutron_error(admin_http.put(f"/ports/{port['id']}", json={"port": {"security_groups": [missing]}}),
                  404, "SecurityGroupNotFound")
    neutron_error(admin_http.put(f"/ports/{missing}", json={"port": {"security_groups": []}}), 404, "PortNotFound")
    assert admin_http.get(f"/ports/{port['id']}").json()["port"] == shown


def test_a_members_groups_only_update_is_checked(admin_http: httpx.Client, member_http: httpx.Client) -> None:
    mine, theirs = _group(member_http), _group(admin_http)
    net = member_http.post("/networks", json={"network": {"name": unique("batch")}}).json()["network"]
    assert member_http.post("/subnets", json={"subnet": {"network_id": net["id"], "cidr": "10.78.0.0/24",
                                                         "ip_version": 4}}).status_code == 201
    port = member_http.post("/ports", json={"port": {"network_id": net["id"]}}).json()["port"]
    r = member_http.put(f"/ports/{port['id']}", json={"port": {"security_groups": [theirs["id"]]}})
    neutron_error(r, 404, "SecurityGroupNotFound")  # another project's group, as the ORM path says
    r = member_http.put(f"/ports/{port['id']}", json={"port": {"security_groups": [mine["id"]]}})
    assert r.status_code == 200, r.text
    assert r.json()["port"]["security_groups"] == [mine["id"]]
    # an admin's port on another network stays out of reach
    other = _port(admin_http)
    r = member_http.put(f"/ports/{other['id']}", json={"port": {"security_groups": [mine["id"]]}})
    neutron_error(r, 404, "PortNotFound")


def test_a_groups_rules_changed_in_one_batch_make_one_group_record(server, admin_http: httpx.Client) -> None:
    """The group's change record (the group with ALL its rules: what the agent realizes)
    is written once per transaction, at its end, with every rule it then has."""
    group = _group(admin_http)
    v4, v6 = (x["id"] for x in group["security_group_rules"])
    head = _head(server)
    rules = [{"security_group_id": group["id"], "direction": "ingress", "protocol": "tcp",
              "port_range_min": p, "port_range_max": p} for p in (80, 81, 82)]
    r = admin_http.post("/batch", json={"batch": [
        {"method": "POST", "path": "security-group-rules", "body": {"security_group_rules": rules}},
        {"method": "DELETE", "path": f"security-group-rules/{v4}"},
    ]})
    assert r.status_code == 200, r.text
    made = {x["id"] for x in r.json()["batch"][0]["security_group_rules"]}
    changes = _changes_after(server, head)
    records = [c for c in changes if c["resource"] == "security_group" and c["id"] == group["id"]]
    assert len(records) == 1 and records[0]["action"] == "update"
    assert {x["id"] for x in records[0]["data"]["security_group_rules"]} == made | {v6}
    assert records[0]["revision"] == max(c["revision"] for c in changes)  # written last
    shown = admin_http.get(f"/security-groups/{group['id']}").json()["security_group"]
    assert records[0]["data"] == shown
    assert shown["revision_number"] == group["revision_number"] + 4  # one per rule change, as alone
    rule_records = [c for c in changes if c["resource"] == "security_group_rule"]
    assert {(c["id"], c["action"]) for c in rule_records} == {(i, "create") for i in made} | {(v4, "delete")}


def test_a_group_deleted_after_its_rules_changed_has_no_late_update(server, admin_http: httpx.Client) -> None:
    group = _group(admin_http)
    head = _head(server)
    r = admin_http.post("/batch", json={"batch": [
        {"method": "POST", "path": "security-group-rules", "body": {"security_group_rule": {
            "security_group_id": group["id"], "direction": "ingress", "protocol": "udp"}}},
        {"method": "DELETE", "path": f"security-groups/{group['id']}"},
    ]})
    assert r.status_code == 200, r.text
    records = [c for c in _changes_after(server, head) if c["resource"] == "security_group"]
    assert [(c["id"], c["action"]) for c in records] == [(group["id"], "delete")]
    neutron_error(admin_http.get(f"/security-groups/{group['id']}"), 404, "SecurityGroupNotFound")


def test_rows_and_orm_writes_to_one_group_in_one_batch_agree(server, admin_http: httpx.Client) -> None:
    """Rule creates and deletes are written as rows (netbay/network/sgrows.py), a group's
    rename through the ORM: mixed in one batch on one group, each sees the others' writes —
    a rule deleted and made again is no duplicate, the group's one record carries the
    final rules and name, and its revision counts every change, as alone."""
    group = _group(admin_http)
    head = _head(server)
    rule = {"security_group_id": group["id"], "direction": "ingress", "protocol": "tcp",
            "port_range_min": 80, "port_range_max": 80}
    first = admin_http.post("/batch", json={"batch": [
        {"method": "POST", "path": "security-group-rules", "body": {"security_group_rule": rule}}]})
    assert first.status_code == 200, first.text
    made = first.json()["batch"][0]["security_group_rule"]["id"]
    r = admin_http.post("/batch", json={"batch": [
        {"method": "PUT", "path": f"security-groups/{group['id']}", "body": {"security_group": {"name": "mixed"}}},
        {"method": "DELETE", "path": f"security-group-rules/{made}"},
        {"method": "POST", "path": "security-group-rules", "body": {"security_group_rule": rule}},
        {"method": "POST", "path": "security-group-rules", "body": {"security_group_rule": {**rule, "protocol": "udp"}}},
    ]})
    assert r.status_code == 200, r.text
    again, udp = (x["security_group_rule"]["id"] for x in r.json()["batch"][2:])
    dup = admin_http.post("/batch", json={"batch": [
        {"method": "POST", "path": "security-group-rules", "body": {"security_group_rule": rule}}]})
    neutron_error(dup, 409, "SecurityGroupRuleExists")
    shown = admin_http.get(f"/security-groups/{group['id']}").json()["security_group"]
    defaults = {x["id"] for x in group["security_group_rules"]}
    assert {x["id"] for x in shown["security_group_rules"]} == defaults | {again, udp}
    assert shown["name"] == "mixed" and shown["revision_number"] == group["revision_number"] + 5
    records = [c for c in _changes_after(server, head) if c["resource"] == "security_group"]
    assert records[-1]["data"] == shown


def test_an_admins_remote_groups_are_checked_in_the_batch(server, admin_http: httpx.Client,
                                                          member_http: httpx.Client) -> None:
    """An admin's rule may name any project's group as its remote group, but not one that
    is gone — also when an earlier operation of the batch read it (its rows are kept for
    the transaction: netbay/network/sgrows.py) or deleted it."""
    project = server.connect(*server.make_user()).current_project_id  # the admin's own groups are many here
    group, peers = (admin_http.post("/security-groups", json={"security_group": {
        "name": unique("remote"), "project_id": project}}).json()["security_group"] for _ in range(2))
    theirs = _group(member_http)

    def rule(remote: str, port: int) -> dict:
        return {"method": "POST", "path": "security-group-rules", "body": {"security_group_rule": {
            "security_group_id": group["id"], "direction": "ingress", "protocol": "tcp",
            "port_range_min": port, "port_range_max": port, "remote_group_id": remote}}}

    peers_rule = {"method": "POST", "path": "security-group-rules", "body": {"security_group_rule": {
        "security_group_id": peers["id"], "direction": "ingress", "protocol": "udp"}}}
    r = admin_http.post("/batch", json={"batch": [peers_rule, rule(peers["id"], 80), rule(theirs["id"], 81),
                                                  rule(group["id"], 82)]})
    assert r.status_code == 200, r.text
    assert [x["security_group_rule"]["remote_group_id"] for x in r.json()["batch"][1:]] == \
        [peers["id"], theirs["id"], group["id"]]
    before = admin_http.get(f"/security-groups/{group['id']}").json()["security_group"]
    for ops in ([peers_rule | {"body": {"security_group_rule": {**peers_rule["body"]["security_group_rule"],
                                                                "protocol": "tcp"}}},
                 {"method": "DELETE", "path": f"security-groups/{peers['id']}"}, rule(peers["id"], 83)],
                [rule(unique("gone"), 84)]):
        neutron_error(admin_http.post("/batch", json={"batch": ops}), 404, "SecurityGroupNotFound")
    assert admin_http.get(f"/security-groups/{group['id']}").json()["security_group"] == before  # rolled back
    assert admin_http.delete(f"/security-groups/{theirs['id']}").status_code == 204


def test_a_rules_quota_is_counted_with_its_group_and_refused_first(server, admin_http: httpx.Client) -> None:
    """A single rule create counts the rule quota in the statement reading its group
    (netbay/network/quotas.py ``DEFERRED``): still refused (409 OverQuota) before any other
    refusal, as every create is, also when the group was read earlier in the batch, and a
    bulk is still counted whole."""
    user, password, project_name = server.make_user()
    http = server.http(server.connect(user, password, project_name).auth_token)
    group = _group(http)
    project = group["project_id"]
    held = len(http.get("/security-group-rules", params={"project_id": project}).json()["security_group_rules"])
    assert admin_http.put(f"/quotas/{project}", json={"quota": {"security_group_rule": held + 2}}).status_code == 200
    over = "Quota exceeded for resources: ['security_group_rule']."

    def rule(port: int, **extra) -> dict:
        return {"security_group_id": group["id"], "direction": "ingress", "protocol": "tcp",
                "port_range_min": port, "port_range_max": port, **extra}

    def single(body: dict) -> dict:
        return {"method": "POST", "path": "security-group-rules", "body": {"security_group_rule": body}}

    # three singles in one batch: the third (its group read already) is one too many; none is made
    neutron_error(http.post("/batch", json={"batch": [single(rule(p)) for p in (80, 81, 82)]}), 409, "OverQuota", over)
    neutron_error(http.post("/security-group-rules", json={"security_group_rules": [rule(p) for p in (80, 81, 82)]}),
                  409, "OverQuota", over)
    assert len(http.get("/security-group-rules", params={"project_id": project}).json()["security_group_rules"]) == held
    r = http.post("/batch", json={"batch": [single(rule(p)) for p in (80, 81)]})
    assert r.status_code == 200, r.text
    for body in (rule(83), rule(80),  # over quota before it is found a duplicate
                 {**rule(83), "security_group_id": unique("gone")}, {**rule(83), "direction": None},
                 {k: v for k, v in rule(83).items() if k != "security_group_id"}, rule(83, protocol="nope")):
        neutron_error(http.post("/security-group-rules", json={"security_group_rule": body}), 409, "OverQuota", over)
    assert admin_http.delete(f"/quotas/{project}").status_code == 204
    neutron_error(http.post("/security-group-rules", json={"security_group_rule": rule(80)}), 409,
                  "SecurityGroupRuleExists")
