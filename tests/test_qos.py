"""Neutron's ``qos`` through openstacksdk, the ``openstack`` CLI and raw HTTP (issue 29):
policies with their rules, the three rule types' bodies and Neutron's refusals,
``qos_policy_id`` on ports and networks. Packets: tests/dataplane/test_dp_qos.py."""

from __future__ import annotations

import uuid

import pytest

from conftest import neutron_error, unique
from oschelp import osc_as, osc_json

pytestmark = pytest.mark.shared_server   # its tests make their own objects (tests/conftest.py)

BAD_ID = "0b5e7f6e-7a5c-4d8e-9d4f-3c2b1a000000"


def test_extensions_and_rule_types(member_http):
    aliases = {e["alias"] for e in member_http.get("/extensions").json()["extensions"]}
    assert {"qos", "qos-bw-limit-direction", "qos-default", "qos-rule-type-details",
            "qos-port-network-policy"} <= aliases
    types = {t["type"] for t in member_http.get("/qos/rule-types").json()["rule_types"]}
    assert types == {"bandwidth_limit", "dscp_marking", "minimum_bandwidth"}


def test_policy_and_rules_through_the_sdk(admin, admin_http):
    """As an admin: Neutron's defaults keep policies and rules to admins (and project
    managers), tests/test_neutron_ext_peer.py has a member's refusals."""
    policy = admin.network.create_qos_policy(name=unique("qos"), description="gold")
    assert policy.rules == [] and policy.is_shared is False and policy.is_default is False
    bw = admin.network.create_qos_bandwidth_limit_rule(policy, max_kbps=8000, max_burst_kbps=800)
    assert (bw.max_kbps, bw.max_burst_kbps, bw.direction) == (8000, 800, "egress")
    bw_in = admin.network.create_qos_bandwidth_limit_rule(policy, max_kbps=4000, direction="ingress")
    assert bw_in.max_burst_kbps == 0
    dscp = admin.network.create_qos_dscp_marking_rule(policy, dscp_mark=26)
    minimum = admin.network.create_qos_minimum_bandwidth_rule(policy, min_kbps=1000)
    body = admin_http.get(f"/qos/policies/{policy.id}").json()["policy"]
    assert {(r["type"], r["id"]) for r in body["rules"]} == {
        ("bandwidth_limit", bw.id), ("bandwidth_limit", bw_in.id), ("dscp_marking", dscp.id),
        ("minimum_bandwidth", minimum.id)}
    assert all(r["qos_policy_id"] == policy.id for r in body["rules"])
    assert body["revision_number"] > policy.revision_number       # each rule bumps the policy
    got = admin_http.get(f"/qos/policies/{policy.id}/dscp_marking_rules/{dscp.id}").json()
    assert got == {"dscp_marking_rule": {"id": dscp.id, "dscp_mark": 26}}
    assert [r.id for r in admin.network.qos_bandwidth_limit_rules(policy)] in ([bw.id, bw_in.id], [bw_in.id, bw.id])
    bw = admin.network.update_qos_bandwidth_limit_rule(bw, policy, max_kbps=9000)
    assert bw.max_kbps == 9000

    url = f"/qos/policies/{policy.id}"
    r = admin_http.post(f"{url}/bandwidth_limit_rules", json={"bandwidth_limit_rule": {"max_kbps": 1}})
    neutron_error(r, 409, "QoSRuleParameterConflict")   # a limit below the egress guarantee
    r = admin_http.post(f"{url}/bandwidth_limit_rules", json={"bandwidth_limit_rule": {"max_kbps": 5000}})
    neutron_error(r, 409, "QoSRulesConflict")
    r = admin_http.post(f"{url}/dscp_marking_rules", json={"dscp_marking_rule": {"dscp_mark": 27}})
    assert r.status_code == 400 and "is not in" in r.json()["NeutronError"]["message"]
    r = admin_http.post(f"{url}/minimum_bandwidth_rules", json={"minimum_bandwidth_rule": {}})
    neutron_error(r, 400, "HTTPBadRequest", "Failed to parse request. Required attribute 'min_kbps' not specified")
    r = admin_http.post(f"{url}/bandwidth_limit_rules",
                         json={"bandwidth_limit_rule": {"max_kbps": 5, "direction": "sideways"}})
    assert r.status_code == 400
    neutron_error(admin_http.get(f"{url}/dscp_marking_rules/{BAD_ID}"), 404, "QosRuleNotFound")
    neutron_error(admin_http.get(f"/qos/policies/{BAD_ID}"), 404, "QosPolicyNotFound")

    admin.network.delete_qos_dscp_marking_rule(dscp, policy)
    assert [r["type"] for r in admin_http.get(url).json()["policy"]["rules"]].count("dscp_marking") == 0
    admin.network.delete_qos_policy(policy)
    neutron_error(admin_http.get(url), 404, "QosPolicyNotFound")


def test_ports_and_networks_carry_a_policy(admin, member, member_http, admin_http):
    """A member's port and network carry a policy an admin made for the member's project."""
    policy = admin.network.create_qos_policy(name=unique("qos"), project_id=member.current_project_id)
    net = member.network.create_network(name=unique("qnet"), qos_policy_id=policy.id)
    assert net.qos_policy_id == policy.id
    member.network.create_subnet(network_id=net.id, cidr="10.231.0.0/24", ip_version=4)
    port = member.network.create_port(network_id=net.id, qos_policy_id=policy.id)
    assert port.qos_policy_id == policy.id
    neutron_error(admin_http.delete(f"/qos/policies/{policy.id}"), 409, "QosPolicyInUse",
                  f"QoS Policy {policy.id} is used by port {port.id}.")
    r = member_http.put(f"/ports/{port.id}", json={"port": {"qos_policy_id": None}})
    assert r.status_code == 200 and r.json()["port"]["qos_policy_id"] is None
    r = member_http.put(f"/ports/{port.id}", json={"port": {"qos_policy_id": BAD_ID}})
    neutron_error(r, 404, "QosPolicyNotFound")
    neutron_error(member_http.post("/networks", json={"network": {"qos_policy_id": BAD_ID}}), 404,
                  "QosPolicyNotFound")
    neutron_error(admin_http.delete(f"/qos/policies/{policy.id}"), 409, "QosPolicyInUse")
    member.network.update_network(net, qos_policy_id=None)
    member.network.delete_port(port)
    member.network.delete_network(net)
    admin.network.delete_qos_policy(policy)


def test_ports_show_their_networks_policy(admin, member, member_http):
    """``qos-port-network-policy``: ``qos_network_policy_id`` is the network's policy,
    shown on create (read with the create's one query), show and list, read-only (Neutron's
    400 for a read-only attribute)."""
    policy = admin.network.create_qos_policy(name=unique("qos"), project_id=member.current_project_id)
    net = member.network.create_network(name=unique("qnet"), qos_policy_id=policy.id)
    member.network.create_subnet(network_id=net.id, cidr="10.232.0.0/24", ip_version=4)
    port = member.network.create_port(network_id=net.id)
    assert (port.qos_policy_id, port.qos_network_policy_id) == (None, policy.id)
    shown = member_http.get(f"/ports/{port.id}").json()["port"]
    assert (shown["qos_policy_id"], shown["qos_network_policy_id"]) == (None, policy.id)
    listed = member_http.get("/ports", params={"network_id": net.id}).json()["ports"]
    assert [p["qos_network_policy_id"] for p in listed] == [policy.id]
    assert member.network.get_port(port.id).qos_network_policy_id == policy.id
    r = member_http.put(f"/ports/{port.id}", json={"port": {"qos_network_policy_id": None}})
    neutron_error(r, 400, "HTTPBadRequest", "Cannot update read-only attribute qos_network_policy_id")
    r = member_http.post("/ports", json={"port": {"network_id": net.id, "qos_network_policy_id": policy.id}})
    neutron_error(r, 400, "HTTPBadRequest", "Attribute 'qos_network_policy_id' not allowed in POST")
    member.network.update_network(net, qos_policy_id=None)
    assert member_http.get(f"/ports/{port.id}").json()["port"]["qos_network_policy_id"] is None
    member.network.delete_port(port)
    member.network.delete_network(net)
    admin.network.delete_qos_policy(policy)


def test_openstack_cli(server, admin_http):
    name = unique("qcli")
    policy = osc_json(server, "network", "qos", "policy", "create", name)
    rule = osc_json(server, "network", "qos", "rule", "create", "--type", "bandwidth-limit", "--max-kbps", "2000",
                    "--egress", name)
    assert rule["max_kbps"] == 2000
    shown = osc_json(server, "network", "qos", "policy", "show", name)
    assert shown["id"] == policy["id"] and len(shown["rules"]) == 1
    listed = osc_json(server, "network", "qos", "rule", "list", name)
    assert [r["ID"] for r in listed] == [rule["id"]]
    # ``qos-fip``: a floating IP made with the policy, without it, and given it again (the
    # CLI's three ways); a policy in use by one is not deleted (Neutron's ``fip`` binding).
    fip = osc_json(server, "floating", "ip", "create", "--qos-policy", name, "public")
    assert fip["qos_policy_id"] == policy["id"]
    url = f"/floatingips/{fip['id']}"
    assert osc_as(server, "floating", "ip", "unset", "--qos-policy", fip["id"]).returncode == 0
    assert admin_http.get(url).json()["floatingip"]["qos_policy_id"] is None
    assert osc_as(server, "floating", "ip", "set", "--qos-policy", name, fip["id"]).returncode == 0
    assert admin_http.get(url).json()["floatingip"]["qos_policy_id"] == policy["id"]
    neutron_error(admin_http.delete(f"/qos/policies/{policy['id']}"), 409, "QosPolicyInUse",
                  f"QoS Policy {policy['id']} is used by fip {fip['id']}.")
    assert admin_http.delete(url).status_code == 204
    assert admin_http.delete(f"/qos/policies/{policy['id']}").status_code == 204


def _port_list_statements(ports: int) -> tuple[int, list[dict]]:
    """Statements a list of ``ports`` ports costs (each with a guaranteed-bandwidth
    policy, half their own and half their network's), and what it renders."""
    from sqlalchemy import create_engine, event
    from sqlalchemy.orm import Session

    from netbay.context import Context
    from netbay.network.ports import PORTS
    from netbay.network.resource import ListQuery
    from netbay.store.models import Base, Network, Port, QosPolicy, QosRule

    engine = create_engine("sqlite://")
    Base.metadata.create_all(engine)
    with Session(engine) as session:
        for name in ("net-policy", "own-policy"):
            session.add(QosPolicy(id=name, project_id="p", name=name))
            session.add(QosRule(policy_id=name, type="minimum_bandwidth", direction="egress", min_kbps=1000))
        session.add(Network(id="n", project_id="p", name="n", segmentation_id=1, qos_policy_id="net-policy"))
        session.add_all([Port(id=str(uuid.UUID(int=i)), project_id="p", network_id="n", mac_address=f"fa:16:3e:00:00:{i:02x}",
                              qos_policy_id="own-policy" if i % 2 else None) for i in range(ports)])
        session.flush()
        statements = [0]
        event.listen(engine, "before_cursor_execute", lambda *_: statements.__setitem__(0, statements[0] + 1))
        page = PORTS.list(session, Context.admin(), ListQuery({}, [], [], None, None))
    return statements[0], page.items


def test_port_list_reads_resource_requests_in_one_query():
    """A listed port's ``resource_request`` (its policy's minimum-bandwidth rules) costs no
    query of its own: a list of 8 ports costs the statements of a list of 2 (it was one
    more statement per port with a policy)."""
    two, _ = _port_list_statements(2)
    eight, items = _port_list_statements(8)
    assert eight == two
    assert all(p["resource_request"]["request_groups"][0]["resources"] == {"NET_BW_EGR_KILOBIT_PER_SEC": 1000}
               for p in items)
