"""The API shapes of the extensions whose service plugins run without agents — QoS,
address scopes, metering, network IP availability, floating IP port forwarding — held
against a real Neutron (``neutron_api``: netbay's API and Neutron 29 with
``service_plugins = router,qos,port_forwarding,metering,network_ip_availability``,
tests/peers/openstack_cloud.py): status codes, bodies' keys and errors, alike on both.

Where the two differ by design, the test says so and asserts netbay's side only.
"""

from __future__ import annotations

import ipaddress

import httpx
import pytest
from conftest import neutron_error, unique

pytestmark = pytest.mark.shared_server   # its tests make their own objects (tests/conftest.py)

MISSING = "00000000-0000-4000-8000-000000000000"
POLICY_KEYS = {"id", "name", "description", "project_id", "tenant_id", "shared", "rules", "is_default",
               "revision_number", "created_at", "updated_at", "tags"}
SCOPE_KEYS = {"id", "name", "project_id", "tenant_id", "shared", "ip_version"}
LABEL_KEYS = {"id", "name", "description", "project_id", "tenant_id", "shared"}
LABEL_RULE_KEYS = {"id", "metering_label_id", "direction", "excluded", "remote_ip_prefix", "source_ip_prefix",
                   "destination_ip_prefix"}
PF_KEYS = {"id", "protocol", "internal_ip_address", "internal_port", "internal_port_id", "external_port",
           "internal_port_range", "external_port_range", "description"}


@pytest.fixture(scope="module")
def server(neutron_api):
    return neutron_api


def ok(r: httpx.Response, status: int = 200) -> dict:
    assert r.status_code == status, r.text
    return r.json() if r.content else {}


# --- QoS ----------------------------------------------------------------------------------


def test_qos_policies_and_rules_are_an_admins(admin_http, member_http):
    """Neutron's defaults: an admin (or a project manager) makes and changes QoS policies and
    their rules; a member sees shared ones and may not change them — 403, or 404 where
    Neutron's controller checks its show rule on the policy fields alone."""
    neutron_error(member_http.post("/qos/policies", json={"policy": {"name": unique("q")}}), 403,
                  "PolicyNotAuthorized", "rule:create_policy is disallowed by policy")
    policy = ok(admin_http.post("/qos/policies", json={"policy": {"name": unique("q"), "shared": True}}), 201)["policy"]
    try:
        assert set(policy) == POLICY_KEYS and policy["rules"] == [] and policy["revision_number"] == 0
        url = f"/qos/policies/{policy['id']}"
        assert ok(member_http.get(url))["policy"]["id"] == policy["id"]
        neutron_error(member_http.put(url, json={"policy": {"name": "x"}}), 404, "HTTPNotFound",
                      "The resource could not be found.")
        neutron_error(member_http.delete(url), 403, "PolicyNotAuthorized", "rule:delete_policy is disallowed by policy")
        neutron_error(member_http.post(f"{url}/bandwidth_limit_rules", json={"bandwidth_limit_rule": {"max_kbps": 1}}),
                      403, "PolicyNotAuthorized", "rule:create_policy_bandwidth_limit_rule is disallowed by policy")
        rule = ok(admin_http.post(f"{url}/dscp_marking_rules", json={"dscp_marking_rule": {"dscp_mark": 26}}),
                  201)["dscp_marking_rule"]
        assert set(rule) == {"id", "dscp_mark"}
        neutron_error(member_http.delete(f"{url}/dscp_marking_rules/{rule['id']}"), 404, "HTTPNotFound",
                      "The resource could not be found.")
        assert [r["type"] for r in ok(member_http.get(url))["policy"]["rules"]] == ["dscp_marking"]
    finally:
        ok(admin_http.delete(f"/qos/policies/{policy['id']}"), 204)


def test_qos_rule_bodies_and_neutron_lib_wording(admin_http):
    policy = ok(admin_http.post("/qos/policies", json={"policy": {"name": unique("q")}}), 201)["policy"]
    url = f"/qos/policies/{policy['id']}"
    try:
        bw = ok(admin_http.post(f"{url}/bandwidth_limit_rules", json={"bandwidth_limit_rule": {
            "max_kbps": 1000, "max_burst_kbps": 100}}), 201)["bandwidth_limit_rule"]
        assert set(bw) == {"id", "max_kbps", "max_burst_kbps", "direction"} and bw["direction"] == "egress"
        minimum = ok(admin_http.post(f"{url}/minimum_bandwidth_rules", json={"minimum_bandwidth_rule": {
            "min_kbps": 100}}), 201)["minimum_bandwidth_rule"]
        assert set(minimum) == {"id", "min_kbps", "direction"}
        neutron_error(admin_http.post(f"{url}/bandwidth_limit_rules", json={"bandwidth_limit_rule": {
            "max_kbps": 1, "direction": "up"}}), 400, "HTTPBadRequest",
            "Invalid input for direction. Reason: up is not in valid_values.")
        neutron_error(admin_http.post(f"{url}/bandwidth_limit_rules", json={"bandwidth_limit_rule": {
            "max_kbps": -1}}), 400, "HTTPBadRequest",
            "Invalid input for max_kbps. Reason: '-1' is too small - must be at least '0'.")
        neutron_error(admin_http.post(f"{url}/dscp_marking_rules", json={"dscp_marking_rule": {"dscp_mark": 7}}),
                      400, "HTTPBadRequest", "Invalid input for dscp_mark. Reason: 7 is not in valid_values.")
        neutron_error(admin_http.post(f"{url}/bandwidth_limit_rules", json={"bandwidth_limit_rule": {
            "max_kbps": 5}}), 409, "QoSRuleParameterConflict",
            f"Unable to add the rule with value 5 to the policy {policy['id']} as the existing rule of type "
            "minimum_bandwidth has value 100.")
        message = neutron_error(admin_http.post(f"{url}/bandwidth_limit_rules", json={"bandwidth_limit_rule": {
            "max_kbps": 500}}), 409, "QoSRulesConflict")
        assert message == f"Rule bandwidth_limit conflicts with rule {bw['id']} which already exists in QoS Policy " \
                          f"{policy['id']}."
        ok(admin_http.put(f"{url}/bandwidth_limit_rules/{bw['id']}", json={"bandwidth_limit_rule": {"max_kbps": 3000}}))
        neutron_error(admin_http.get(f"{url}/bandwidth_limit_rules/{MISSING}"), 404, "QosRuleNotFound",
                      f"QoS rule {MISSING} for policy {policy['id']} could not be found.")
        shown = ok(admin_http.get(url))["policy"]
        assert sorted((r["type"], r.get("max_kbps")) for r in shown["rules"]) == [("bandwidth_limit", 3000),
                                                                                ("minimum_bandwidth", None)]
        assert all(r["qos_policy_id"] == policy["id"] for r in shown["rules"])
    finally:
        ok(admin_http.delete(url), 204)
    neutron_error(admin_http.get(url), 404, "QosPolicyNotFound", f"QoS policy {policy['id']} could not be found.")


def test_qos_policy_in_use_by_a_network(admin_http):
    policy = ok(admin_http.post("/qos/policies", json={"policy": {"name": unique("q")}}), 201)["policy"]
    net = ok(admin_http.post("/networks", json={"network": {"name": unique("qn"),
                                                            "qos_policy_id": policy["id"]}}), 201)["network"]
    try:
        assert net["qos_policy_id"] == policy["id"]
        neutron_error(admin_http.delete(f"/qos/policies/{policy['id']}"), 409, "QosPolicyInUse",
                      f"QoS Policy {policy['id']} is used by network {net['id']}.")
        assert ok(admin_http.put(f"/networks/{net['id']}", json={"network": {"qos_policy_id": None}})
                  )["network"]["qos_policy_id"] is None
    finally:
        admin_http.delete(f"/networks/{net['id']}")
        ok(admin_http.delete(f"/qos/policies/{policy['id']}"), 204)


def test_qos_policy_of_a_floating_ip(admin_http):
    """``qos-fip``: a floating IP takes a policy on create and update (null takes it away),
    a policy in use by one is not deleted, and an unknown policy is refused."""
    public = ok(admin_http.get("/networks", params={"name": "public"}))["networks"][0]["id"]
    policy = ok(admin_http.post("/qos/policies", json={"policy": {"name": unique("q")}}), 201)["policy"]
    fip = ok(admin_http.post("/floatingips", json={"floatingip": {"floating_network_id": public,
                                                                  "qos_policy_id": policy["id"]}}), 201)["floatingip"]
    url = f"/floatingips/{fip['id']}"
    try:
        assert fip["qos_policy_id"] == policy["id"]
        neutron_error(admin_http.delete(f"/qos/policies/{policy['id']}"), 409, "QosPolicyInUse",
                      f"QoS Policy {policy['id']} is used by fip {fip['id']}.")
        assert ok(admin_http.put(url, json={"floatingip": {"qos_policy_id": None}}))["floatingip"]["qos_policy_id"] \
            is None
        changed = ok(admin_http.put(url, json={"floatingip": {"qos_policy_id": policy["id"]}}))["floatingip"]
        assert changed["qos_policy_id"] == policy["id"] and changed["port_id"] is None
        assert ok(admin_http.get(url))["floatingip"]["qos_policy_id"] == policy["id"]
        r = admin_http.put(url, json={"floatingip": {"qos_policy_id": MISSING}})
        assert r.status_code in (400, 404, 409), r.text   # refused (the kind is not the same on both)
        assert ok(admin_http.put(url, json={"floatingip": {"qos_policy_id": None}}))["floatingip"]["qos_policy_id"] \
            is None
    finally:
        admin_http.delete(url)
        ok(admin_http.delete(f"/qos/policies/{policy['id']}"), 204)


# --- address scopes -------------------------------------------------------------------------


def test_address_scopes_and_their_pools(admin_http, member_http):
    scope = ok(admin_http.post("/address-scopes", json={"address_scope": {"name": unique("as"), "ip_version": 4}}),
               201)["address_scope"]
    scope6 = ok(admin_http.post("/address-scopes", json={"address_scope": {"name": unique("as"), "ip_version": 6}}),
                201)["address_scope"]
    made: list[tuple[str, str]] = [("address-scopes", scope["id"]), ("address-scopes", scope6["id"])]
    try:
        assert set(scope) == SCOPE_KEYS and scope["shared"] is False
        neutron_error(admin_http.post("/address-scopes", json={"address_scope": {"name": "x", "ip_version": 5}}), 400,
                      "HTTPBadRequest", "Invalid input for ip_version. Reason: 5 is not in valid_values.")
        neutron_error(member_http.get(f"/address-scopes/{scope['id']}"), 404, "AddressScopeNotFound",
                      f"Address scope {scope['id']} could not be found.")
        neutron_error(admin_http.put(f"/address-scopes/{scope['id']}", json={"address_scope": {"ip_version": 6}}),
                      400, "HTTPBadRequest", "Cannot update read-only attribute ip_version")
        pool = ok(admin_http.post("/subnetpools", json={"subnetpool": {
            "name": unique("sp"), "prefixes": ["10.180.0.0/16"], "address_scope_id": scope["id"]}}), 201)["subnetpool"]
        made.insert(0, ("subnetpools", pool["id"]))
        pool6 = ok(admin_http.post("/subnetpools", json={"subnetpool": {
            "name": unique("sp"), "prefixes": ["fd00:98::/48"], "address_scope_id": scope6["id"]}}), 201)["subnetpool"]
        made.insert(0, ("subnetpools", pool6["id"]))
        neutron_error(admin_http.post("/subnetpools", json={"subnetpool": {
            "name": "x", "prefixes": ["10.180.1.0/24"], "address_scope_id": scope["id"]}}), 409,
            "AddressScopePrefixConflict", "Failed to associate address scope: subnetpools within an address scope "
            "must have unique prefixes.")
        neutron_error(admin_http.delete(f"/address-scopes/{scope['id']}"), 409, "AddressScopeInUse")
        net = ok(admin_http.post("/networks", json={"network": {"name": unique("n")}}), 201)["network"]
        made.insert(0, ("networks", net["id"]))
        for version, pid, plen in ((4, pool["id"], 24), (6, pool6["id"], 64)):
            ok(admin_http.post("/subnets", json={"subnet": {"network_id": net["id"], "ip_version": version,
                                                            "subnetpool_id": pid, "prefixlen": plen}}), 201)
        shown = ok(admin_http.get(f"/networks/{net['id']}",
                                  params={"fields": ["ipv4_address_scope", "ipv6_address_scope"]}))["network"]
        assert shown == {"ipv4_address_scope": scope["id"], "ipv6_address_scope": scope6["id"]}
    finally:
        for collection, obj_id in made:
            admin_http.delete(f"/{collection}/{obj_id}")


# --- network IP availability -------------------------------------------------------------------


def test_ip_availability_counts_ipv6_and_is_an_admins(admin_http, member_http):
    """An IPv6 /64's count is beyond 64 bits (JSON has no such limit); to others than
    admins the list is empty and a network not found."""
    net = ok(admin_http.post("/networks", json={"network": {"name": unique("ipa")}}), 201)["network"]
    try:
        made = ok(admin_http.post("/subnets", json={"subnet": {"network_id": net["id"], "ip_version": 6,
                                                               "cidr": "fd00:97::/64"}}), 201)["subnet"]
        in_pools = sum(int(ipaddress.ip_address(p["end"])) - int(ipaddress.ip_address(p["start"])) + 1
                       for p in made["allocation_pools"])
        got = ok(admin_http.get(f"/network-ip-availabilities/{net['id']}"))["network_ip_availability"]
        assert set(got) == {"network_id", "network_name", "tenant_id", "project_id", "subnet_ip_availability",
                            "used_ips", "total_ips", "ip_availability_details"}
        assert got["total_ips"] == in_pools > 2**63 and got["used_ips"] == 0
        assert got["ip_availability_details"] == {"total_ips_in_subnet": 2**64, "total_ips_in_allocation_pool": in_pools,
                                                  "used_ips_in_subnet": 0, "used_ips_in_allocation_pool": 0}
        (subnet,) = got["subnet_ip_availability"]
        assert subnet["ip_availability_details"] == got["ip_availability_details"]
        assert ok(member_http.get("/network-ip-availabilities")) == {"network_ip_availabilities": []}
        neutron_error(member_http.get(f"/network-ip-availabilities/{net['id']}"), 404, "HTTPNotFound",
                      "The resource could not be found.")
    finally:
        admin_http.delete(f"/networks/{net['id']}")


# --- metering -----------------------------------------------------------------------------------


def test_metering_labels_and_rules(admin_http, member_http):
    label = ok(admin_http.post("/metering/metering-labels", json={"metering_label": {
        "name": unique("ml"), "description": "d"}}), 201)["metering_label"]
    url = f"/metering/metering-labels/{label['id']}"
    try:
        assert set(label) == LABEL_KEYS
        neutron_error(member_http.post("/metering/metering-labels", json={"metering_label": {"name": "x"}}), 403,
                      "PolicyNotAuthorized", "rule:create_metering_label is disallowed by policy")
        neutron_error(member_http.get(url), 404, "MeteringLabelNotFound")
        neutron_error(admin_http.put(url, json={"metering_label": {"name": "z"}}), 400, "HTTPBadRequest",
                      "Cannot update read-only attribute name")
        r = admin_http.put(url, json={"metering_label": {}})
        assert r.status_code == 501 and r.json() == {"NotImplementedError": {
            "type": "NotImplementedError", "message": "", "detail": ""}}
        # The label is read first (for the policy), so an unknown one is a 404, not the 501.
        neutron_error(admin_http.put("/metering/metering-labels/" + "0" * 32, json={"metering_label": {}}), 404,
                      "MeteringLabelNotFound")

        def rule(**body) -> httpx.Response:
            return admin_http.post("/metering/metering-label-rules", json={"metering_label_rule": {
                "metering_label_id": label["id"], **body}})

        neutron_error(rule(remote_ip_prefix="10.1.0.0/24"), 400, "HTTPBadRequest",
                      "Failed to parse request. Required attribute 'direction' not specified")
        v4 = ok(rule(direction="ingress", remote_ip_prefix="10.0.0.0/24"), 201)["metering_label_rule"]
        assert set(v4) == LABEL_RULE_KEYS and v4["excluded"] is False
        v6 = ok(rule(direction="egress", source_ip_prefix="fd00:a::/64"), 201)["metering_label_rule"]
        assert (v6["source_ip_prefix"], v6["remote_ip_prefix"]) == ("fd00:a::/64", None)
        neutron_error(rule(direction="ingress", remote_ip_prefix="10.0.0.0/25"), 409, "MeteringLabelRuleOverlaps")
        neutron_error(admin_http.put(f"/metering/metering-label-rules/{v4['id']}", json={
            "metering_label_rule": {"excluded": True}}), 400, "HTTPBadRequest",
            "Cannot update read-only attribute excluded")
        listed = ok(admin_http.get("/metering/metering-label-rules", params={"metering_label_id": label["id"]}))
        assert {r["id"] for r in listed["metering_label_rules"]} == {v4["id"], v6["id"]}
        ok(admin_http.delete(f"/metering/metering-label-rules/{v4['id']}"), 204)
        neutron_error(admin_http.delete(f"/metering/metering-label-rules/{v4['id']}"), 404,
                      "MeteringLabelRuleNotFound")
    finally:
        ok(admin_http.delete(url), 204)
    neutron_error(admin_http.delete(url), 404, "MeteringLabelNotFound")


# --- port forwarding ----------------------------------------------------------------------------


def test_port_forwardings_as_neutron_takes_them(admin_http):
    """Neutron's protocols (ICMP's too, which netbay's dataplane does not forward: no port),
    neutron-lib's range wording, the forwarding's body."""
    public = ok(admin_http.get("/networks", params={"name": "public"}))["networks"][0]["id"]
    net = ok(admin_http.post("/networks", json={"network": {"name": unique("pf")}}), 201)["network"]
    subnet = ok(admin_http.post("/subnets", json={"subnet": {"network_id": net["id"], "ip_version": 4,
                                                             "cidr": "10.181.0.0/24"}}), 201)["subnet"]
    router = ok(admin_http.post("/routers", json={"router": {"name": unique("pf"), "external_gateway_info": {
        "network_id": public}}}), 201)["router"]
    fip = None
    try:
        ok(admin_http.put(f"/routers/{router['id']}/add_router_interface", json={"subnet_id": subnet["id"]}))
        port = ok(admin_http.post("/ports", json={"port": {"network_id": net["id"]}}), 201)["port"]
        ip = port["fixed_ips"][0]["ip_address"]
        fip = ok(admin_http.post("/floatingips", json={"floatingip": {"floating_network_id": public}}),
                 201)["floatingip"]
        url = f"/floatingips/{fip['id']}/port_forwardings"

        def forward(**body) -> httpx.Response:
            return admin_http.post(url, json={"port_forwarding": {
                "internal_port_id": port["id"], "internal_ip_address": ip, **body}})

        tcp = ok(forward(protocol="tcp", internal_port=22, external_port=2222, description="ssh"),
                 201)["port_forwarding"]
        assert set(tcp) == PF_KEYS and (tcp["external_port_range"], tcp["internal_port_range"]) == ("2222:2222",
                                                                                                    "22:22")
        icmp = ok(forward(protocol="icmp", internal_port=24, external_port=2224), 201)["port_forwarding"]
        assert icmp["protocol"] == "icmp"
        neutron_error(forward(protocol=47, internal_port=25, external_port=2225), 400, "InvalidInput",
                      "Invalid input for operation: Input value 47 must be string type.")
        neutron_error(forward(protocol="47", internal_port=25, external_port=2225), 400, "HTTPBadRequest",
                      "Invalid input for protocol. Reason: 47 is not in valid_values.")
        # A known name in capitals passes convert_to_protocol unchanged, and fails type:values
        # over the lower-case names, on a create and an update alike.
        neutron_error(forward(protocol="TCP", internal_port=25, external_port=2225), 400, "HTTPBadRequest",
                      "Invalid input for protocol. Reason: TCP is not in valid_values.")
        neutron_error(admin_http.put(f"{url}/{tcp['id']}", json={"port_forwarding": {"protocol": "UDP"}}), 400,
                      "HTTPBadRequest", "Invalid input for protocol. Reason: UDP is not in valid_values.")
        neutron_error(forward(protocol="gre", internal_port=25, external_port=2225), 400, "InvalidInput",
                      "Invalid input for operation: IP protocol 'gre' is not supported. Only protocol names and "
                      "their integer representation (0 to 255) are supported.")
        neutron_error(forward(protocol="tcp", internal_port=0, external_port=2226), 400, "HTTPBadRequest",
                      "Invalid input for internal_port. Reason: '0' is too small - must be at least '1'.")
        neutron_error(forward(protocol="tcp", internal_port=23, external_port=70000), 400, "HTTPBadRequest",
                      "Invalid input for external_port. Reason: '70000' is too large - must be no larger than "
                      "'65535'.")
        neutron_error(admin_http.get(f"{url}/{MISSING}"), 404, "PortForwardingNotFound")
        changed = ok(admin_http.put(f"{url}/{tcp['id']}", json={"port_forwarding": {"external_port": 2223}}))
        assert changed["port_forwarding"]["external_port"] == 2223
        listed = ok(admin_http.get(url, params={"protocol": "tcp"}))["port_forwardings"]
        assert [p["id"] for p in listed] == [tcp["id"]]
        for pf in (tcp, icmp):
            ok(admin_http.delete(f"{url}/{pf['id']}"), 204)
    finally:
        if fip is not None:
            admin_http.delete(f"/floatingips/{fip['id']}")
        admin_http.put(f"/routers/{router['id']}/remove_router_interface", json={"subnet_id": subnet["id"]})
        admin_http.delete(f"/routers/{router['id']}")
        for p in ok(admin_http.get("/ports", params={"network_id": net["id"]}))["ports"]:
            admin_http.delete(f"/ports/{p['id']}")
        admin_http.delete(f"/networks/{net['id']}")
