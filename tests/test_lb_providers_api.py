"""Providers, L7 policies and rules, and the haproxy provider's options, through
openstacksdk, python-octaviaclient (``openstack loadbalancer …``) and raw HTTP.

Nothing realizes load balancers here: statuses are settled as the realizer
would (``PUT /netbay/v1/status``). Traffic is tested in
``tests/dataplane/test_dp_lb_haproxy.py``.
"""

from __future__ import annotations


import httpx
import pytest
from conftest import unique
from lbhelp import UNSUPPORTED, make_net, octavia_error, osc

pytestmark = pytest.mark.shared_server   # its tests make their own objects (tests/conftest.py)


@pytest.fixture(scope="module")
def lb_http(server, member):
    client = httpx.Client(base_url=f"{server.url}/load-balancer/v2",
                          headers={"X-Auth-Token": member.auth_token}, timeout=30)
    server._clients.append(client)
    return client


@pytest.fixture(scope="module")
def net(member):
    return make_net(member, "l7net")


# --- providers -------------------------------------------------------------------------------------


def test_providers_and_capabilities(member, lb_http):
    names = {p.name: p.description for p in member.load_balancer.providers()}
    assert {"nftables", "haproxy", "amphora", "ovn"} <= set(names)
    assert "haproxy" in names["amphora"] and "nftables" in names["ovn"]
    caps = list(member.load_balancer.provider_flavor_capabilities("haproxy"))
    assert [c.name for c in caps] == ["loadbalancer_topology"]
    r = lb_http.get("/lbaas/providers/nftables/availability_zone_capabilities")
    assert r.status_code == 200 and r.json()["availability_zone_capabilities"][0]["name"] == "host"
    octavia_error(lb_http.get("/lbaas/providers/f5/flavor_capabilities"), 404, "Provider 'f5' was not found.")


def test_provider_is_kept_and_options_refused_per_provider(member, net, settle, lb_http):
    lbs = member.load_balancer
    l4 = lbs.create_load_balancer(vip_subnet_id=net.subnet.id, name=unique("l4"))
    assert l4.provider == "nftables"
    l7 = lbs.create_load_balancer(vip_subnet_id=net.subnet.id, name=unique("l7"), provider="amphora")
    assert l7.provider == "amphora"   # kept as given (realized by haproxy)
    settle(l4.id)
    settle(l7.id)

    def post(kind: str, **attrs):
        return lb_http.post(f"/lbaas/{kind}s", json={kind: attrs})

    # nftables lacks L7: each option refused naming the provider; the same asks pass on amphora.
    r = post("listener", loadbalancer_id=l4.id, protocol="HTTPS", protocol_port=443)
    message = octavia_error(r, UNSUPPORTED)
    assert message.startswith("Provider 'nftables' does not support a requested option: protocol HTTPS")
    r = post("listener", loadbalancer_id=l4.id, protocol="HTTP", protocol_port=80,
             insert_headers={"X-Forwarded-For": "true"})
    assert "insert_headers is not offered by provider nftables" in octavia_error(r, UNSUPPORTED)
    http4 = lbs.create_listener(loadbalancer_id=l4.id, protocol="HTTP", protocol_port=80)
    settle(l4.id)
    r = post("pool", listener_id=http4.id, protocol="PROXY", lb_algorithm="ROUND_ROBIN")
    assert "protocol PROXY is not offered by provider nftables" in octavia_error(r, UNSUPPORTED)
    r = lb_http.post("/lbaas/l7policies", json={"l7policy": {"listener_id": http4.id, "action": "REJECT"}})
    assert "L7 policies are not offered by provider nftables" in octavia_error(r, UNSUPPORTED)

    # TERMINATED_HTTPS: refused by both, saying why.
    for lb in (l4, l7):
        r = post("listener", loadbalancer_id=lb.id, protocol="TERMINATED_HTTPS", protocol_port=443)
        assert "key manager" in octavia_error(r, UNSUPPORTED)

    https = lbs.create_listener(loadbalancer_id=l7.id, protocol="HTTPS", protocol_port=443)
    settle(l7.id)
    passthrough = lbs.create_pool(listener_id=https.id, protocol="HTTPS", lb_algorithm="LEAST_CONNECTIONS",
                                  session_persistence={"type": "SOURCE_IP"})
    assert passthrough.lb_algorithm == "LEAST_CONNECTIONS"
    assert passthrough.session_persistence["type"] == "SOURCE_IP"
    settle(l7.id)
    http = lbs.create_listener(loadbalancer_id=l7.id, protocol="HTTP", protocol_port=80,
                               insert_headers={"X-Forwarded-For": "true", "X-Forwarded-Port": "true"},
                               allowed_cidrs=["10.0.0.0/8", "192.168.1.7"], timeout_client_data=1000,
                               connection_limit=100)
    assert http.insert_headers == {"X-Forwarded-For": "true", "X-Forwarded-Port": "true"}
    assert http.allowed_cidrs == ["10.0.0.0/8", "192.168.1.7/32"]
    settle(l7.id)
    # Octavia's validations of the options.
    r = post("listener", loadbalancer_id=l7.id, protocol="TCP", protocol_port=81,
             insert_headers={"X-Forwarded-For": "true"})
    octavia_error(r, 400, "Validation failure: The following headers are not supported for TCP listeners: "
                          "X-Forwarded-For")
    r = post("listener", loadbalancer_id=l7.id, protocol="HTTP", protocol_port=82, allowed_cidrs=["fd00::/64"])
    assert "IP version incompatible" in octavia_error(r, 400)
    r = post("listener", loadbalancer_id=l7.id, protocol="HTTP", protocol_port=82, allowed_cidrs=["nope"])
    octavia_error(r, 400, "Invalid input for field/attribute allowed_cidrs. Value: '['nope']'. "
                          "Value should be a valid CIDR")
    r = post("pool", listener_id=http.id, protocol="HTTP", lb_algorithm="ROUND_ROBIN",
             session_persistence={"type": "APP_COOKIE"})
    octavia_error(r, 400, "Validation failure: Field `cookie_name` can not be empty for session persistence "
                          "type APP_COOKIE.")
    r = post("pool", listener_id=http.id, protocol="HTTP", lb_algorithm="ROUND_ROBIN",
             session_persistence={"type": "HTTP_COOKIE", "cookie_name": "x"})
    assert "`cookie_name` can only be specified" in octavia_error(r, 400)
    r = post("pool", loadbalancer_id=l7.id, protocol="TCP", lb_algorithm="ROUND_ROBIN",
             session_persistence={"type": "HTTP_COOKIE"})
    assert "not supported for TCP protocol pools" in octavia_error(r, 400)
    r = post("pool", listener_id=http.id, protocol="HTTP", lb_algorithm="SOURCE_IP_PORT")
    assert "SOURCE_IP_PORT is not offered by provider amphora" in octavia_error(r, UNSUPPORTED)
    # UDP stays in the kernel under haproxy too: L4 algorithms, no persistence, no CIDR filter.
    r = post("listener", loadbalancer_id=l7.id, protocol="UDP", protocol_port=53, allowed_cidrs=["10.0.0.0/8"])
    assert "allowed_cidrs is not offered for UDP listeners" in octavia_error(r, UNSUPPORTED)
    r = post("pool", loadbalancer_id=l7.id, protocol="UDP", lb_algorithm="SOURCE_IP_PORT")
    assert "ROUND_ROBIN or SOURCE_IP or LEAST_CONNECTIONS for UDP pools" in octavia_error(r, UNSUPPORTED)
    # LEAST_CONNECTIONS on UDP and SCTP pools under either provider (the amphora's LVS ``lc``),
    # and on every pool of the nftables provider (TCP and HTTP too: LVS's ``lc`` in the kernel).
    for lb, protocol in ((l7, "UDP"), (l7, "SCTP"), (l4, "UDP"), (l4, "SCTP"), (l4, "TCP"), (l4, "HTTP")):
        lc = lbs.create_pool(loadbalancer_id=lb.id, protocol=protocol, lb_algorithm="LEAST_CONNECTIONS")
        assert (lc.protocol, lc.lb_algorithm) == (protocol, "LEAST_CONNECTIONS")
        settle(lb.id)
    r = post("pool", loadbalancer_id=l7.id, protocol="UDP", lb_algorithm="ROUND_ROBIN",
             session_persistence={"type": "SOURCE_IP"})
    assert "session_persistence SOURCE_IP is not offered by provider amphora for UDP pools" in \
        octavia_error(r, UNSUPPORTED)
    pool = lbs.create_pool(listener_id=http.id, protocol="PROXYV2", lb_algorithm="ROUND_ROBIN",
                           session_persistence={"type": "APP_COOKIE", "cookie_name": "JSESSIONID"})
    assert pool.session_persistence["cookie_name"] == "JSESSIONID"
    settle(l7.id)
    # Persistence changed and removed by update.
    pool = lbs.update_pool(pool, session_persistence=None)
    assert pool.session_persistence is None
    settle(l7.id)
    for lb in (l4, l7):
        lbs.delete_load_balancer(lb.id, cascade=True)


# --- L7 policies and rules -----------------------------------------------------------------------------


def test_l7_policies_and_rules_crud(member, net, settle, lb_http, agent_http):
    lbs = member.load_balancer
    lb = lbs.create_load_balancer(vip_subnet_id=net.subnet.id, name=unique("l7"), provider="haproxy")
    settle(lb.id)
    listener = lbs.create_listener(loadbalancer_id=lb.id, protocol="HTTP", protocol_port=80)
    settle(lb.id)
    pool = lbs.create_pool(loadbalancer_id=lb.id, protocol="HTTP", lb_algorithm="ROUND_ROBIN")
    settle(lb.id)

    p1 = lbs.create_l7_policy(listener_id=listener.id, action="REDIRECT_TO_POOL", redirect_pool_id=pool.id,
                              name="api")
    assert (p1.position, p1.provisioning_status, p1.redirect_pool_id) == (1, "PENDING_CREATE", pool.id)
    assert lbs.get_listener(listener.id).provisioning_status == "PENDING_UPDATE"
    octavia_error(lb_http.post("/lbaas/l7policies", json={"l7policy": {
        "listener_id": listener.id, "action": "REJECT"}}), 409)   # the load balancer is PENDING_UPDATE
    settle(lb.id)
    assert lbs.get_l7_policy(p1.id).provisioning_status == "ACTIVE"   # settled with its load balancer
    p2 = lbs.create_l7_policy(listener_id=listener.id, action="REDIRECT_TO_URL",
                              redirect_url="https://example.com/moved")
    assert p2.position == 2
    assert lb_http.get(f"/lbaas/l7policies/{p2.id}").json()["l7policy"]["redirect_http_code"] == 302
    settle(lb.id)
    p0 = lbs.create_l7_policy(listener_id=listener.id, action="REJECT", position=1)
    settle(lb.id)
    order = [(p.id, p.position) for p in lbs.l7_policies(listener_id=listener.id)]
    assert sorted(order, key=lambda x: x[1]) == [(p0.id, 1), (p1.id, 2), (p2.id, 3)]
    assert [x["id"] for x in lbs.get_listener(listener.id).l7_policies] == [p0.id, p1.id, p2.id]

    rule = lbs.create_l7_rule(p1, type="PATH", compare_type="STARTS_WITH", rule_value="/api")
    assert (rule.type, rule.compare_type, rule.rule_value, rule.invert) == ("PATH", "STARTS_WITH", "/api", False)
    assert lbs.get_l7_policy(p1.id).provisioning_status == "PENDING_UPDATE"
    settle(lb.id)
    assert lbs.get_l7_rule(rule, p1).provisioning_status == "ACTIVE"
    assert [r["id"] for r in lbs.get_l7_policy(p1.id).rules] == [rule.id]
    rule = lbs.update_l7_rule(rule, p1, invert=True)
    assert rule.invert is True
    settle(lb.id)
    # Octavia's rule validations.
    rules = f"/lbaas/l7policies/{p1.id}/rules"
    r = lb_http.post(rules, json={"rule": {"type": "HEADER", "compare_type": "EQUAL_TO", "value": "x"}})
    octavia_error(r, 400, "Error parsing L7Rule: L7 rule type HEADER needs a key.")
    r = lb_http.post(rules, json={"rule": {"type": "FILE_TYPE", "compare_type": "STARTS_WITH", "value": "jpg"}})
    assert "FILE_TYPE only supports" in octavia_error(r, 400)
    r = lb_http.post(rules, json={"rule": {"type": "SSL_CONN_HAS_CERT", "compare_type": "EQUAL_TO",
                                           "value": "tRuE"}})
    assert "needs TERMINATED_HTTPS" in octavia_error(r, UNSUPPORTED)
    r = lb_http.post(rules, json={"rule": {"type": "PATH", "compare_type": "REGEX", "value": "(["}})
    assert "Invalid L7 rule regex" in octavia_error(r, 400)
    r = lb_http.post(rules, json={"l7rule": {}})
    octavia_error(r, 400, 'Missing argument: "rule"')
    r = lb_http.post("/lbaas/l7policies", json={"l7policy": {"listener_id": listener.id,
                                                             "action": "REDIRECT_TO_POOL"}})
    assert "requires redirect_pool_id" in octavia_error(r, 400)
    r = lb_http.post("/lbaas/l7policies", json={"l7policy": {"listener_id": listener.id,
                                                             "action": "REDIRECT_TO_URL",
                                                             "redirect_url": "not a url"}})
    assert "redirect_url" in octavia_error(r, 400)

    # Moving p2 first renumbers the others.
    lbs.update_l7_policy(p2, position=1)
    settle(lb.id)
    assert {p.id: p.position for p in lbs.l7_policies(listener_id=listener.id)} == {p2.id: 1, p0.id: 2, p1.id: 3}
    # The status tree shows policies and their rules.
    tree = lb_http.get(f"/lbaas/loadbalancers/{lb.id}/status").json()["statuses"]["loadbalancer"]
    shown = {p["id"]: p for p in tree["listeners"][0]["l7policies"]}
    assert shown[p1.id]["rules"][0]["id"] == rule.id
    # A pool an L7 policy redirects to cannot go (Octavia's PoolInUseByL7Policy); deleting
    # a policy closes the gap in positions; the rule goes with its policy.
    octavia_error(lb_http.delete(f"/lbaas/pools/{pool.id}"), 409, f"Pool {pool.id} is in use by L7 policy {p1.id}")
    lbs.delete_l7_policy(p0.id)
    settle(lb.id)
    assert {p.id: p.position for p in lbs.l7_policies(listener_id=listener.id)} == {p2.id: 1, p1.id: 2}
    lbs.delete_l7_policy(p1.id)
    settle(lb.id)
    assert lb_http.get(f"/lbaas/l7policies/{p1.id}/rules/{rule.id}").status_code == 404
    lbs.delete_pool(pool.id)   # free now
    settle(lb.id)
    lbs.delete_load_balancer(lb.id, cascade=True)
    assert lb_http.get(f"/lbaas/l7policies/{p2.id}").status_code == 404


@pytest.mark.slow
def test_octaviaclient_l7_commands(server, admin, net, agent_http):
    """``openstack loadbalancer …`` (python-octaviaclient) for providers, policies and rules."""
    providers = osc(server, "loadbalancer", "provider", "list")
    assert {"nftables", "haproxy"} <= {p["name"] for p in providers}
    caps = osc(server, "loadbalancer", "provider", "capability", "list", "haproxy")
    assert "loadbalancer_topology" in {c["name"] for c in caps}

    def settle(lb_id: str) -> None:
        assert agent_http.put("/status", json={"loadbalancers": {lb_id: "ACTIVE/ONLINE"}}).status_code == 200

    subnet = admin.network.create_subnet(network_id=admin.network.create_network(name=unique("osc")).id,
                                         cidr="10.77.0.0/24", ip_version=4)
    lb = osc(server, "loadbalancer", "create", "--vip-subnet-id", subnet.id, "--provider", "haproxy",
             "--name", unique("osc"))
    assert lb["provider"] == "haproxy"
    settle(lb["id"])
    listener = osc(server, "loadbalancer", "listener", "create", "--protocol", "HTTP", "--protocol-port", "80",
                   "--insert-headers", "X-Forwarded-For=true", "--allowed-cidr", "10.0.0.0/8", lb["id"])
    settle(lb["id"])
    pool = osc(server, "loadbalancer", "pool", "create", "--protocol", "HTTP", "--lb-algorithm",
               "LEAST_CONNECTIONS", "--session-persistence", "type=HTTP_COOKIE", "--loadbalancer", lb["id"])
    settle(lb["id"])
    policy = osc(server, "loadbalancer", "l7policy", "create", "--action", "REDIRECT_TO_POOL",
                 "--redirect-pool", pool["id"], listener["id"])
    settle(lb["id"])
    rule = osc(server, "loadbalancer", "l7rule", "create", "--type", "HOST_NAME", "--compare-type", "EQUAL_TO",
               "--value", "api.example.com", policy["id"])
    settle(lb["id"])
    shown = osc(server, "loadbalancer", "l7rule", "show", policy["id"], rule["id"])
    assert (shown["type"], shown["value"], shown["provisioning_status"]) == ("HOST_NAME", "api.example.com",
                                                                            "ACTIVE")
    listed = osc(server, "loadbalancer", "l7policy", "list")
    assert policy["id"] in {p["id"] for p in listed}
    assert [r["id"] for r in osc(server, "loadbalancer", "l7rule", "list", policy["id"])] == [rule["id"]]
    osc(server, "loadbalancer", "delete", "--cascade", lb["id"], output=False)
    assert lb["id"] not in {x["id"] for x in osc(server, "loadbalancer", "list")}
