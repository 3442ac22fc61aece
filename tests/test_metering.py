"""Neutron's ``metering`` through openstacksdk and raw HTTP (issue 29): labels and rules
with Neutron's bodies, admin-only policy, validation and overlap refusal. API only:
netbay counts no metered traffic."""

from __future__ import annotations

import pytest

from conftest import neutron_error, unique

pytestmark = pytest.mark.shared_server   # its tests make their own objects (tests/conftest.py)


def test_labels_and_rules(admin, admin_http, member_http):
    assert "metering" in {e["alias"] for e in admin_http.get("/extensions").json()["extensions"]}
    label = admin.network.create_metering_label(name=unique("m"), description="d")
    assert label.is_shared is False
    body = admin_http.get(f"/metering/metering-labels/{label.id}").json()["metering_label"]
    assert set(body) == {"id", "name", "description", "project_id", "tenant_id", "shared"}
    rule = admin.network.create_metering_label_rule(metering_label_id=label.id, direction="egress",
                                                    remote_ip_prefix="10.0.0.0/24")
    assert (rule.direction, rule.is_excluded, rule.remote_ip_prefix) == ("egress", False, "10.0.0.0/24")
    rules = "/metering/metering-label-rules"
    r = admin_http.post(rules, json={"metering_label_rule": {"metering_label_id": label.id, "direction": "egress",
                                                             "remote_ip_prefix": "10.0.0.128/25"}})
    neutron_error(r, 409, "MeteringLabelRuleOverlaps")
    r = admin_http.post(rules, json={"metering_label_rule": {"metering_label_id": label.id, "direction": "egress"}})
    neutron_error(r, 400, "Invalid")
    r = admin_http.post(rules, json={"metering_label_rule": {
        "metering_label_id": label.id, "direction": "egress", "remote_ip_prefix": "10.1.0.0/16",
        "source_ip_prefix": "10.2.0.0/16"}})
    neutron_error(r, 400, "Invalid")
    r = admin_http.post(rules, json={"metering_label_rule": {"metering_label_id": label.id,
                                                             "source_ip_prefix": "10.3.0.0/16"}})
    neutron_error(r, 400, "HTTPBadRequest", "Failed to parse request. Required attribute 'direction' not specified")
    src = admin.network.create_metering_label_rule(metering_label_id=label.id, source_ip_prefix="10.3.0.0/16",
                                                   destination_ip_prefix="192.0.2.0/24", direction="ingress")
    assert src.direction == "ingress" and src.source_ip_prefix == "10.3.0.0/16"
    assert {r.id for r in admin.network.metering_label_rules(metering_label_id=label.id)} == {rule.id, src.id}
    neutron_error(member_http.post("/metering/metering-labels", json={"metering_label": {"name": "x"}}), 403,
                  "PolicyNotAuthorized")
    assert member_http.get("/metering/metering-labels").json() == {"metering_labels": []}
    admin.network.delete_metering_label(label)
    neutron_error(admin_http.get(f"{rules}/{rule.id}"), 404, "MeteringLabelRuleNotFound")
