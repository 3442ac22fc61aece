"""Neutron's bodies held against the real Neutron (``neutron_api``: netbay's API and
Neutron 29 from PyPI, tests/peers/openstack_cloud.py): the router interface answers,
QoS rules by id alone (``qos-rules-alias``), ``vlan_transparent`` and ``qinq``, a port's
``resource_request``, and the key set of every object's show body and of ``/extensions``.

Each key set is Neutron 29's as the peer shows it; netbay's extras (attributes of
extensions it has and the peer does not load: ``dns-integration``'s, the segment's)
are named in ``NETBAY_EXTRA`` and asserted on netbay's side only.
"""

from __future__ import annotations

import uuid

import httpx
import pytest
from conftest import neutron_error, unique

pytestmark = pytest.mark.shared_server   # its tests make their own objects (tests/conftest.py)

MISSING = "00000000-0000-4000-8000-000000000000"
INTERFACE_KEYS = {"id", "project_id", "port_id", "network_id", "subnet_id", "subnet_ids"}
STANDARD = {"id", "project_id", "tenant_id", "created_at", "updated_at", "revision_number", "tags", "description"}
# Neutron 29's show bodies, as the peer's ML2 (no mechanism driver; qos, port_forwarding,
# metering, network_ip_availability service plugins) gives them to an admin.
SHOW_KEYS = {
    "network": STANDARD | {
        "name", "admin_state_up", "status", "shared", "router:external", "mtu", "subnets",
        "provider:network_type", "provider:physical_network", "provider:segmentation_id", "port_security_enabled",
        "qos_policy_id", "availability_zone_hints", "availability_zones", "ipv4_address_scope", "ipv6_address_scope",
        "vlan_transparent", "qinq"},
    "subnet": STANDARD | {
        "name", "network_id", "ip_version", "cidr", "gateway_ip", "allocation_pools", "dns_nameservers", "host_routes",
        "enable_dhcp", "ipv6_address_mode", "ipv6_ra_mode", "subnetpool_id", "service_types", "router:external"},
    "port": STANDARD | {
        "name", "network_id", "admin_state_up", "mac_address", "fixed_ips", "device_id", "device_owner", "status",
        "allowed_address_pairs", "extra_dhcp_opts", "security_groups", "port_security_enabled", "binding:host_id",
        "binding:profile", "binding:vif_details", "binding:vif_type", "binding:vnic_type", "qos_policy_id",
        "qos_network_policy_id", "resource_request"},
    "router": STANDARD | {
        "name", "admin_state_up", "status", "external_gateway_info", "routes", "distributed", "ha", "flavor_id",
        "availability_zone_hints", "availability_zones"},
    "floatingip": STANDARD | {
        "floating_ip_address", "floating_network_id", "fixed_ip_address", "port_id", "router_id", "status",
        "port_details", "port_forwardings", "qos_policy_id"},
    "security_group": STANDARD | {"name", "security_group_rules", "shared", "stateful"},
    "security_group_rule": STANDARD - {"tags"} | {
        "security_group_id", "direction", "ethertype", "protocol", "port_range_min", "port_range_max",
        "remote_ip_prefix", "remote_group_id", "remote_address_group_id", "normalized_cidr", "belongs_to_default_sg"},
    "subnetpool": STANDARD | {
        "name", "prefixes", "default_prefixlen", "min_prefixlen", "max_prefixlen", "default_quota", "ip_version",
        "shared", "is_default", "address_scope_id"},
    "address_scope": {"id", "name", "project_id", "tenant_id", "shared", "ip_version"},
    "policy": STANDARD | {"name", "shared", "is_default", "rules"},
}
# What netbay shows beside: dns-integration's names and domains, the subnet's segment
# (one per network) and the network's L2 adjacency, a floating IP's network policy.
NETBAY_EXTRA = {
    "network": {"dns_domain", "l2_adjacency"},
    "subnet": {"segment_id"},
    "port": {"dns_name", "dns_assignment"},
    "floatingip": {"dns_name", "dns_domain", "qos_network_policy_id"},
}
# netbay's aliases that the peer does not list, and the peer's that netbay does not:
# agents, schedulers, availability zones, flavors, DVR/HA, placement-facing port
# attributes, per-extension variants netbay has not taken up.
NETBAY_ONLY_ALIASES = {"dns-integration", "fields", "netbay-batch", "taas", "trunk"}
PEER_ONLY_ALIASES = {
    "aap-reject-multicast", "agent", "agent-resources-synced", "agent_sort_key", "auto-allocated-topology",
    "availability_zone", "availability_zone_filter", "binding-extended", "dhcp_agent_scheduler", "dvr", "flavors",
    "floating-ip-router-writable", "floatingip-pools", "l3-flavors", "l3-ha", "l3-port-ip-change-not-allowed",
    "l3_agent_scheduler", "multi-provider", "network_availability_zone", "network_ha", "port-device-profile",
    "port-mac-address-regenerate", "port-mac-override", "port-numa-affinity-policy",
    "port-numa-affinity-policy-socket", "qos-gateway-ip", "qos-pps", "qos-pps-minimum",
    "qos-pps-minimum-rule-alias", "rbac-address-group",
    "rbac-address-scope", "router-admin-state-down-before-update", "router_availability_zone",
    "security-groups-default-statefulness", "security-groups-normalized-cidr", "service-type", "subnet_onboard"}


@pytest.fixture(scope="module")
def server(neutron_api):
    return neutron_api


def ok(r: httpx.Response, status: int = 200) -> dict:
    assert r.status_code == status, r.text
    return r.json() if r.content else {}


def embedded(server) -> bool:
    return server.kind == "embedded"


class Made:
    """Objects made through the API, deleted in reverse."""

    def __init__(self, http: httpx.Client) -> None:
        self.http, self.paths = http, []

    def post(self, collection: str, member: str, **body) -> dict:
        obj = ok(self.http.post(f"/{collection}", json={member: body}), 201)[member]
        self.paths.append(f"/{collection}/{obj['id']}")
        return obj

    def cleanup(self) -> None:
        for path in reversed(self.paths):
            self.http.delete(path)


@pytest.fixture
def made(admin_http):
    objects = Made(admin_http)
    yield objects
    objects.cleanup()


# --- show bodies and extensions ------------------------------------------------------------


def test_every_objects_show_body_has_neutrons_keys(server, admin_http, made):
    """One of each object, shown to an admin: Neutron 29's keys, and netbay's named extras."""
    public = ok(admin_http.get("/networks", params={"name": "public"}))["networks"][0]["id"]
    scope = made.post("address-scopes", "address_scope", name=unique("as"), ip_version=4)
    made.post("subnetpools", "subnetpool", name=unique("sp"), prefixes=["10.187.0.0/16"],
              address_scope_id=scope["id"])
    made.post("qos/policies", "policy", name=unique("q"))
    net = made.post("networks", "network", name=unique("n"))
    subnet = made.post("subnets", "subnet", network_id=net["id"], cidr="10.186.0.0/24", ip_version=4)
    made.post("ports", "port", network_id=net["id"])
    group = made.post("security-groups", "security_group", name=unique("sg"))
    made.post("security-group-rules", "security_group_rule", security_group_id=group["id"], direction="ingress",
              protocol="tcp", port_range_min=22, port_range_max=22, ethertype="IPv4")
    router = made.post("routers", "router", name=unique("r"), external_gateway_info={"network_id": public})
    fip = made.post("floatingips", "floatingip", floating_network_id=public)
    try:
        ok(admin_http.put(f"/routers/{router['id']}/add_router_interface", json={"subnet_id": subnet["id"]}))
        shown = {path.split("/")[-2]: ok(admin_http.get(path)) for path in made.paths}
        for body in shown.values():
            (member, value), = body.items()
            extra = NETBAY_EXTRA.get(member, set()) if embedded(server) else set()
            assert set(value) == SHOW_KEYS[member] | extra, member
        external = ok(admin_http.get(f"/networks/{public}"))["network"]
        assert external["is_default"] is False   # an external network's alone
        assert (fip["status"], fip["port_details"], fip["port_forwardings"]) == ("DOWN", None, [])
    finally:
        admin_http.put(f"/routers/{router['id']}/remove_router_interface", json={"subnet_id": subnet["id"]})


def test_extension_aliases_against_neutrons(server, admin_http):
    """netbay's ``/extensions`` beside the peer's: what each has that the other has not is
    the two named sets (on the peer side, the set it lists is checked whole)."""
    aliases = {e["alias"] for e in ok(admin_http.get("/extensions"))["extensions"]}
    assert {"qos-rules-alias", "vlan-transparent", "qinq", "port-resource-request",
            "port-resource-request-groups"} <= aliases
    if embedded(server):
        assert not aliases & PEER_ONLY_ALIASES and aliases >= NETBAY_ONLY_ALIASES
    else:
        assert aliases >= PEER_ONLY_ALIASES and not aliases & NETBAY_ONLY_ALIASES
    shown = ok(admin_http.get("/extensions/qos-rules-alias"))["extension"]
    assert shown["name"] == "Quality of Service rules alias API"


# --- router interfaces -------------------------------------------------------------------------


def test_router_interface_answers_as_neutron_29(admin_http, member, member_http):
    """``add_router_interface`` / ``remove_router_interface`` answer Neutron 29's six keys
    (no ``tenant_id``, no ``tags``), by subnet and by port."""
    net = ok(member_http.post("/networks", json={"network": {"name": unique("if")}}), 201)["network"]
    router = ok(member_http.post("/routers", json={"router": {"name": unique("if")}}), 201)["router"]
    url = f"/routers/{router['id']}"
    try:
        v4 = ok(member_http.post("/subnets", json={"subnet": {"network_id": net["id"], "cidr": "10.185.0.0/24",
                                                              "ip_version": 4}}), 201)["subnet"]
        added = ok(member_http.put(f"{url}/add_router_interface", json={"subnet_id": v4["id"]}))
        assert set(added) == INTERFACE_KEYS
        assert (added["id"], added["network_id"], added["subnet_id"], added["subnet_ids"], added["project_id"]) == (
            router["id"], net["id"], v4["id"], [v4["id"]], member.current_project_id)
        removed = ok(member_http.put(f"{url}/remove_router_interface", json={"subnet_id": v4["id"]}))
        assert removed == added
        v6 = ok(member_http.post("/subnets", json={"subnet": {"network_id": net["id"], "cidr": "fd00:185::/64",
                                                              "ip_version": 6}}), 201)["subnet"]
        port = ok(member_http.post("/ports", json={"port": {"network_id": net["id"], "fixed_ips": [
            {"subnet_id": v4["id"]}, {"subnet_id": v6["id"]}]}}), 201)["port"]
        added = ok(member_http.put(f"{url}/add_router_interface", json={"port_id": port["id"]}))
        assert set(added) == INTERFACE_KEYS and added["port_id"] == port["id"]
        assert sorted(added["subnet_ids"]) == sorted([v4["id"], v6["id"]]) and added["subnet_id"] in added["subnet_ids"]
        removed = ok(member_http.put(f"{url}/remove_router_interface", json={"port_id": port["id"]}))
        assert set(removed) == INTERFACE_KEYS and sorted(removed["subnet_ids"]) == sorted(added["subnet_ids"])
    finally:
        member_http.delete(url)
        for p in ok(admin_http.get("/ports", params={"network_id": net["id"]}))["ports"]:
            admin_http.delete(f"/ports/{p['id']}")
        member_http.delete(f"/networks/{net['id']}")


# --- qos-rules-alias ---------------------------------------------------------------------------


def test_qos_rules_by_their_id_alone(admin_http, member_http):
    policy = ok(admin_http.post("/qos/policies", json={"policy": {"name": unique("al")}}), 201)["policy"]
    url = f"/qos/policies/{policy['id']}"
    try:
        bw = ok(admin_http.post(f"{url}/bandwidth_limit_rules", json={"bandwidth_limit_rule": {
            "max_kbps": 1000}}), 201)["bandwidth_limit_rule"]
        dscp = ok(admin_http.post(f"{url}/dscp_marking_rules", json={"dscp_marking_rule": {"dscp_mark": 26}}),
                  201)["dscp_marking_rule"]
        minimum = ok(admin_http.post(f"{url}/minimum_bandwidth_rules", json={"minimum_bandwidth_rule": {
            "min_kbps": 10}}), 201)["minimum_bandwidth_rule"]
        for collection, rule in (("bandwidth_limit_rules", bw), ("dscp_marking_rules", dscp),
                                 ("minimum_bandwidth_rules", minimum)):
            alias = "alias_" + collection[:-1]
            assert ok(admin_http.get(f"/qos/alias_{collection}/{rule['id']}")) == {alias: rule}
        assert ok(admin_http.get(f"/qos/alias_bandwidth_limit_rules/{bw['id']}", params={"fields": "max_kbps"})) == {
            "alias_bandwidth_limit_rule": {"max_kbps": 1000}}
        for rule_id in (dscp["id"], MISSING, "not-a-uuid"):   # another type's rule is not found either
            neutron_error(admin_http.get(f"/qos/alias_bandwidth_limit_rules/{rule_id}"), 404, "QosRuleNotFound",
                          f"QoS rule {rule_id} for policy  could not be found.")
        alias_bw = f"/qos/alias_bandwidth_limit_rules/{bw['id']}"
        changed = ok(admin_http.put(alias_bw, json={"alias_bandwidth_limit_rule": {"max_kbps": 2000}}))
        assert changed == {"alias_bandwidth_limit_rule": {**bw, "max_kbps": 2000}}
        assert ok(admin_http.get(f"{url}/bandwidth_limit_rules/{bw['id']}"))["bandwidth_limit_rule"]["max_kbps"] == 2000
        neutron_error(admin_http.put(alias_bw, json={"bandwidth_limit_rule": {"max_kbps": 1}}), 400, "HTTPBadRequest",
                      "Unable to find 'alias_bandwidth_limit_rule' in request body")
        neutron_error(admin_http.put(alias_bw, json={"alias_bandwidth_limit_rule": {"max_kbps": -1}}), 400,
                      "HTTPBadRequest", "Invalid input for max_kbps. Reason: '-1' is too small - must be at least '0'.")
        neutron_error(admin_http.put(alias_bw, json={"alias_bandwidth_limit_rule": {"foo": 1}}), 400,
                      "HTTPBadRequest", "Unrecognized attribute(s) 'foo'")
        neutron_error(admin_http.put(f"/qos/alias_minimum_bandwidth_rules/{minimum['id']}", json={
            "alias_minimum_bandwidth_rule": {"min_kbps": 5000}}), 409, "QoSRuleParameterConflict",
            f"Unable to add the rule with value 5000 to the policy {policy['id']} as the existing rule of type "
            "bandwidth_limit has value 2000.")
        neutron_error(admin_http.put(f"/qos/alias_bandwidth_limit_rules/{MISSING}", json={
            "alias_bandwidth_limit_rule": {"max_kbps": 1}}), 404, "QosRuleNotFound")
        # A member does not see another project's policy that is not shared: its policy is not found.
        neutron_error(member_http.get(alias_bw), 404, "QosPolicyNotFound",
                      f"QoS policy {policy['id']} could not be found.")
        neutron_error(member_http.delete(alias_bw), 404, "QosPolicyNotFound")
        ok(admin_http.delete(f"/qos/alias_dscp_marking_rules/{dscp['id']}"), 204)
        neutron_error(admin_http.delete(f"/qos/alias_dscp_marking_rules/{dscp['id']}"), 404, "QosRuleNotFound")
        assert sorted(r["type"] for r in ok(admin_http.get(url))["policy"]["rules"]) == ["bandwidth_limit",
                                                                                       "minimum_bandwidth"]
    finally:
        ok(admin_http.delete(url), 204)


@pytest.mark.embedded_only("Neutron 29 answers a member's alias request on a shared policy 500 (PolicyCheckError: "
                           "no ext_parent); netbay shows the rule and refuses the change")
def test_qos_alias_rule_of_a_shared_policy_to_a_member(admin_http, member_http):
    policy = ok(admin_http.post("/qos/policies", json={"policy": {"name": unique("al"), "shared": True}}),
                201)["policy"]
    url = f"/qos/policies/{policy['id']}"
    try:
        bw = ok(admin_http.post(f"{url}/bandwidth_limit_rules", json={"bandwidth_limit_rule": {"max_kbps": 1}}),
                201)["bandwidth_limit_rule"]
        alias_bw = f"/qos/alias_bandwidth_limit_rules/{bw['id']}"
        assert ok(member_http.get(alias_bw)) == {"alias_bandwidth_limit_rule": bw}
        neutron_error(member_http.put(alias_bw, json={"alias_bandwidth_limit_rule": {"max_kbps": 5}}), 404,
                      "HTTPNotFound")
        neutron_error(member_http.delete(alias_bw), 404, "HTTPNotFound")
    finally:
        ok(admin_http.delete(url), 204)


# --- vlan-transparent and qinq ----------------------------------------------------------------


def test_vlan_transparent_and_qinq_as_neutron_takes_them(admin_http):
    net = ok(admin_http.post("/networks", json={"network": {"name": unique("vt")}}), 201)["network"]
    try:
        assert (net["vlan_transparent"], net["qinq"]) == (False, False)
        for attr in ("vlan_transparent", "qinq"):
            neutron_error(admin_http.put(f"/networks/{net['id']}", json={"network": {attr: False}}), 400,
                          "HTTPBadRequest", f"Cannot update read-only attribute {attr}")
        listed = ok(admin_http.get("/networks", params={"vlan_transparent": "false", "qinq": "false"}))["networks"]
        assert net["id"] in {n["id"] for n in listed}
        neutron_error(admin_http.post("/networks", json={"network": {"vlan_transparent": True, "qinq": True}}), 400,
                      "BadRequest", "Bad network request: Attributes 'vlan_transparent' and 'qinq' can not be set to "
                      "True for the same network..")
        neutron_error(admin_http.post("/networks", json={"network": {"vlan_transparent": "x"}}), 400, "InvalidInput",
                      "Invalid input for operation: 'x' cannot be converted to boolean.")
        neutron_error(admin_http.post("/networks", json={"network": {"qinq": None}}), 400, "InvalidInput",
                      "Invalid input for operation: 'None' cannot be converted to boolean.")
        explicit = ok(admin_http.post("/networks", json={"network": {"name": unique("vt"), "vlan_transparent": False,
                                                                     "qinq": False}}), 201)["network"]
        admin_http.delete(f"/networks/{explicit['id']}")
    finally:
        admin_http.delete(f"/networks/{net['id']}")


@pytest.mark.embedded_only("the peer's ML2 has no mechanism driver, so nothing vetoes either (and it stores True); "
                           "netbay refuses as ML2 does when its drivers cannot carry them")
def test_vlan_transparency_and_qinq_refused_as_by_a_driver_without_them(admin_http):
    neutron_error(admin_http.post("/networks", json={"network": {"vlan_transparent": True}}), 400,
                  "VlanTransparencyDriverError", "Backend does not support VLAN Transparency.")
    neutron_error(admin_http.post("/networks", json={"network": {"qinq": True}}), 400,
                  "VlanQinqDriverError", "Backend does not support VLAN QinQ.")
    assert ok(admin_http.get("/networks", params={"vlan_transparent": "true"}))["networks"] == []


# --- resource_request ---------------------------------------------------------------------------


def test_resource_request_is_an_admins_and_null_without_a_guarantee(admin_http, member_http):
    net = ok(member_http.post("/networks", json={"network": {"name": unique("rr")}}), 201)["network"]
    try:
        port = ok(member_http.post("/ports", json={"port": {"network_id": net["id"]}}), 201)["port"]
        assert "resource_request" not in port
        assert ok(admin_http.get(f"/ports/{port['id']}"))["port"]["resource_request"] is None
        neutron_error(admin_http.post("/ports", json={"port": {"network_id": net["id"], "resource_request": {}}}),
                      400, "HTTPBadRequest", "Attribute 'resource_request' not allowed in POST")
        neutron_error(admin_http.put(f"/ports/{port['id']}", json={"port": {"resource_request": None}}), 400,
                      "HTTPBadRequest", "Cannot update read-only attribute resource_request")
        admin_http.delete(f"/ports/{port['id']}")
    finally:
        member_http.delete(f"/networks/{net['id']}")


@pytest.mark.embedded_only("the peer's ML2 has no mechanism driver, so a port refuses any QoS rule "
                           "(409 QosRuleNotSupported); the shape is Neutron's QoS plugin's, for a tunnelled network")
def test_resource_request_from_minimum_bandwidth_rules(admin_http):
    policy = ok(admin_http.post("/qos/policies", json={"policy": {"name": unique("rr")}}), 201)["policy"]
    limit_only = ok(admin_http.post("/qos/policies", json={"policy": {"name": unique("rr")}}), 201)["policy"]
    url = f"/qos/policies/{policy['id']}"
    net = ok(admin_http.post("/networks", json={"network": {"name": unique("rr"), "qos_policy_id": policy["id"]}}),
             201)["network"]
    try:
        ok(admin_http.post(f"/qos/policies/{limit_only['id']}/bandwidth_limit_rules", json={
            "bandwidth_limit_rule": {"max_kbps": 5000}}), 201)
        rules = [ok(admin_http.post(f"{url}/minimum_bandwidth_rules", json={"minimum_bandwidth_rule": {
            "min_kbps": kbps, "direction": direction}}), 201)["minimum_bandwidth_rule"]
            for kbps, direction in ((1000, "egress"), (2000, "ingress"))]
        own = ok(admin_http.post("/ports", json={"port": {"network_id": net["id"]}}), 201)["port"]
        group = str(uuid.uuid5(uuid.UUID(own["id"]), ":".join(sorted(r["id"] for r in rules))))
        assert own["resource_request"] == {
            "request_groups": [{"id": group, "required": ["CUSTOM_NETWORK_TUNNEL_PROVIDER", "CUSTOM_VNIC_TYPE_NORMAL"],
                                "resources": {"NET_BW_EGR_KILOBIT_PER_SEC": 1000,
                                              "NET_BW_IGR_KILOBIT_PER_SEC": 2000}}],
            "same_subtree": [group]}
        listed = ok(admin_http.get("/ports", params={"id": own["id"], "fields": "resource_request"}))["ports"]
        assert listed == [{"resource_request": own["resource_request"]}]
        # The port's own policy, without a guarantee, wins over the network's.
        changed = ok(admin_http.put(f"/ports/{own['id']}", json={"port": {"qos_policy_id": limit_only["id"]}}))
        assert changed["port"]["resource_request"] is None
        admin_http.delete(f"/ports/{own['id']}")
    finally:
        admin_http.delete(f"/networks/{net['id']}")
        for p in (policy, limit_only):
            admin_http.delete(f"/qos/policies/{p['id']}")


# --- the extensions netbay had and now lists ----------------------------------------------------


def test_tag_creation_adds_several_tags(admin_http):
    net = ok(admin_http.post("/networks", json={"network": {"name": unique("tg")}}), 201)["network"]
    url = f"/networks/{net['id']}/tags"
    try:
        ok(admin_http.put(url, json={"tags": ["a", "b"]}))
        assert ok(admin_http.post(url, json={"tags": ["c", "a"]})) == {"tags": ["c", "a"]}
        assert sorted(ok(admin_http.get(url))["tags"]) == ["a", "b", "c"]
        neutron_error(admin_http.post(url, json={}), 400, "InvalidInput",
                      "Invalid input for operation: Invalid tags body.")
    finally:
        admin_http.delete(f"/networks/{net['id']}")


def test_filters_the_listed_extensions_promise(admin_http):
    """``security-groups-shared-filtering``, ``port-security-groups-filtering``,
    ``security-groups-rules-belongs-to-default-sg`` and ``empty-string-filtering``."""
    group = ok(admin_http.post("/security-groups", json={"security_group": {"name": unique("f")}}),
               201)["security_group"]
    net = ok(admin_http.post("/networks", json={"network": {"name": unique("f"), "description": "d"}}),
             201)["network"]
    try:
        port = ok(admin_http.post("/ports", json={"port": {"network_id": net["id"],
                                                           "security_groups": [group["id"]]}}), 201)["port"]
        listed = ok(admin_http.get("/security-groups", params={"shared": "false"}))["security_groups"]
        assert group["id"] in {g["id"] for g in listed}
        assert ok(admin_http.get("/security-groups", params={"shared": "true"}))["security_groups"] == []
        assert [p["id"] for p in ok(admin_http.get("/ports", params={"security_groups": group["id"]}))["ports"]] == [
            port["id"]]
        rules = ok(admin_http.get("/security-group-rules", params={"security_group_id": group["id"],
                                                                    "belongs_to_default_sg": "false"}))
        assert {r["id"] for r in rules["security_group_rules"]} == {r["id"] for r in group["security_group_rules"]}
        assert net["id"] not in {n["id"] for n in ok(admin_http.get("/networks", params={"description": ""}))[
            "networks"]}
        assert net["id"] in {n["id"] for n in ok(admin_http.get("/networks", params={"description": "d"}))[
            "networks"]}
        admin_http.delete(f"/ports/{port['id']}")
    finally:
        admin_http.delete(f"/networks/{net['id']}")
        admin_http.delete(f"/security-groups/{group['id']}")


def test_qos_rule_types_filtered(server, admin_http):
    """``qos-rule-type-filter``: ``all_rules`` lists every type Neutron knows (given at all:
    ``false`` too, as Neutron 29 answers); ``all_supported`` and no filter what the drivers
    support (none on the peer, whose ML2 has no mechanism driver; netbay's three)."""
    every = ["bandwidth_limit", "dscp_marking", "minimum_bandwidth", "minimum_packet_rate", "packet_rate_limit"]
    supported = ["bandwidth_limit", "dscp_marking", "minimum_bandwidth"] if embedded(server) else []

    def types(**params: str) -> list[str]:   # in no set order on the peer
        return sorted(t["type"] for t in ok(admin_http.get("/qos/rule-types", params=params))["rule_types"])

    for params in ({"all_rules": "true"}, {"all_rules": "false"}, {"all_rules": "true", "all_supported": "true"}):
        assert types(**params) == every
    for params in ({}, {"all_supported": "true"}):
        assert types(**params) == supported
    neutron_error(admin_http.get("/qos/rule-types", params={"all_rules": "x"}), 400, "InvalidInput",
                  "Invalid input for operation: 'x' cannot be converted to boolean.")
    neutron_error(admin_http.get("/qos/rule-types", params={"foo": "bar"}), 400, "HTTPBadRequest",
                  "['foo'] is invalid attribute for filtering")


def test_quota_check_limit(admin_http):
    """``quota-check-limit``: ``check_limit`` taken, and a limit below usage refused with or
    without it (Neutron 29 checks by default), unless ``force``."""
    net = ok(admin_http.post("/networks", json={"network": {"name": unique("q")}}), 201)["network"]
    url = f"/quotas/{net['project_id']}"
    try:
        for check in (True, False):
            message = neutron_error(admin_http.put(url, json={"quota": {"network": 0, "check_limit": check}}), 400,
                                    "HTTPBadRequest")
            assert message.startswith("Quota limit 0 for network must be greater than or equal to already used ")
        assert ok(admin_http.put(url, json={"quota": {"network": 0, "force": True}}))["quota"]["network"] == 0
    finally:
        ok(admin_http.delete(url), 204)   # back to the defaults
        admin_http.delete(f"/networks/{net['id']}")
