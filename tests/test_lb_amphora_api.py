"""Octavia's amphora provider as its clients see it (issue 29): the amphora admin API
over the haproxy namespaces, every field of the announced API versions (HSTS at
2.27, ``vip_sg_ids``/``vip_vnic_type``) with ``fields=`` on every list, member
``backup``, the HTTPS/TLS-HELLO/UDP-CONNECT monitors and SOURCE_IP_PORT on ``ovn``,
through openstacksdk, python-octaviaclient and raw HTTP.

Nothing realizes load balancers here: statuses are settled as the realizer would
(``PUT /netbay/v1/status``). Traffic is in ``tests/dataplane/test_dp_lb_amphora.py``.
"""

from __future__ import annotations

import httpx
import openstack.exceptions as osexc
import pytest
from conftest import unique
from lbhelp import UNSUPPORTED, make_net, octavia_error, osc

pytestmark = pytest.mark.shared_server   # its tests make their own objects (tests/conftest.py)

DENIED = "Policy does not allow this request to be performed."


@pytest.fixture(scope="module")
def net(admin):
    return make_net(admin, "amp")


@pytest.fixture(scope="module")
def admin_lb(server):
    client = httpx.Client(base_url=f"{server.url}/load-balancer/v2", headers={"X-Auth-Token": server.token()},
                          timeout=30)
    server._clients.append(client)
    return client


def _client_as(server, role: str) -> httpx.Client:
    user, password, project = server.make_user(role=role)
    client = httpx.Client(base_url=f"{server.url}/load-balancer/v2",
                          headers={"X-Auth-Token": server.token(user, password, project)}, timeout=30)
    server._clients.append(client)
    return client


@pytest.fixture(scope="module")
def amp_tree(admin, net, settle):
    """An amphora load balancer with a TCP listener, and an ovn one beside it."""
    lbs = admin.load_balancer
    lb = lbs.create_load_balancer(vip_subnet_id=net.subnet.id, name=unique("amp"), provider="amphora")
    ovn = lbs.create_load_balancer(vip_subnet_id=net.subnet.id, name=unique("ovn"), provider="ovn")
    settle(lb.id)
    settle(ovn.id)
    listener = lbs.create_listener(loadbalancer_id=lb.id, protocol="TCP", protocol_port=80)
    settle(lb.id)
    return {"lb": lbs.get_load_balancer(lb.id), "ovn": ovn, "listener": listener}


# --- the amphora admin API ----------------------------------------------------------------------------


def test_amphorae_are_the_haproxy_namespaces(server, admin, admin_lb, amp_tree):
    lb = amp_tree["lb"]
    [amp] = list(admin.load_balancer.amphorae(loadbalancer_id=lb.id))
    assert (amp.loadbalancer_id, amp.role, amp.status) == (lb.id, "STANDALONE", "ALLOCATED")
    assert amp.ha_ip == amp.vrrp_ip == lb.vip_address and amp.ha_port_id == lb.vip_port_id
    assert amp.compute_id and amp.created_at and amp.updated_at
    # The nftables (ovn) load balancer has none, as OVN's have none.
    assert list(admin.load_balancer.amphorae(loadbalancer_id=amp_tree["ovn"].id)) == []
    assert amp.id in {a.id for a in admin.load_balancer.amphorae()}
    shown = admin.load_balancer.get_amphora(amp.id)
    assert shown.to_dict() == amp.to_dict()
    r = admin_lb.get("/octavia/amphorae", params={"loadbalancer_id": lb.id, "fields": "id,role"})
    assert r.json()["amphorae"] == [{"id": amp.id, "role": "STANDALONE"}]
    # python-octaviaclient
    [row] = osc(server, "loadbalancer", "amphora", "list", "--loadbalancer", lb.id)
    assert row["id"] == amp.id and row["role"] == "STANDALONE"
    stats = osc(server, "loadbalancer", "amphora", "stats", "show", amp.id)
    assert stats["bytes_in"] == 0 and stats["total_connections"] == 0
    r = admin_lb.get(f"/octavia/amphorae/{amp.id}/stats")
    assert r.json()["amphora_stats"] == [{
        "id": amp.id, "loadbalancer_id": lb.id, "listener_id": amp_tree["listener"].id, "active_connections": 0,
        "bytes_in": 0, "bytes_out": 0, "request_errors": 0, "total_connections": 0}]
    octavia_error(admin_lb.get("/octavia/amphorae/00000000-0000-0000-0000-000000000000"), 404,
                  "Amphora 00000000-0000-0000-0000-000000000000 not found.")
    assert admin_lb.put(f"/octavia/amphorae/{amp.id}/config").status_code == 202


def test_amphora_api_is_for_load_balancer_admins(server, admin, amp_tree):
    [amp] = list(admin.load_balancer.amphorae(loadbalancer_id=amp_tree["lb"].id))
    for role in ("member", "load-balancer_global_observer"):
        client = _client_as(server, role)
        octavia_error(client.get("/octavia/amphorae"), 403, DENIED)
        octavia_error(client.get(f"/octavia/amphorae/{amp.id}"), 403, DENIED)
        octavia_error(client.put(f"/octavia/amphorae/{amp.id}/failover"), 403, DENIED)
        octavia_error(client.delete(f"/octavia/amphorae/{amp.id}"), 403, DENIED)


def test_amphora_delete_as_octavia_2025_1(server, admin, admin_lb, net, settle):
    """API 2.20's delete: only an amphora in ERROR goes (Octavia 2025.1's rule); a working
    one is immutable (409), an unknown one 404; a failover brings a new one."""
    lbs = admin.load_balancer
    lb = lbs.create_load_balancer(vip_subnet_id=net.subnet.id, name=unique("ampdel"), provider="amphora")
    settle(lb.id)
    [amp] = list(lbs.amphorae(loadbalancer_id=lb.id))
    octavia_error(admin_lb.delete(f"/octavia/amphorae/{amp.id}"), 409,
                  f"amphora {amp.id} is immutable and cannot be updated.")
    octavia_error(admin_lb.delete("/octavia/amphorae/00000000-0000-0000-0000-000000000000"), 404,
                  "Amphora 00000000-0000-0000-0000-000000000000 not found.")
    settle(lb.id, "ERROR/ERROR")
    [broken] = list(lbs.amphorae(loadbalancer_id=lb.id))
    assert (broken.id, broken.status) == (amp.id, "ERROR")
    osc(server, "loadbalancer", "amphora", "delete", amp.id, output=False)   # python-octaviaclient: 204
    assert list(lbs.amphorae(loadbalancer_id=lb.id)) == []
    octavia_error(admin_lb.get(f"/octavia/amphorae/{amp.id}"), 404, f"Amphora {amp.id} not found.")
    lbs.failover_load_balancer(lb.id)
    settle(lb.id)
    [new] = list(lbs.amphorae(loadbalancer_id=lb.id))
    assert new.id != amp.id and new.status == "ALLOCATED"
    lbs.delete_load_balancer(lb.id, cascade=True)


def test_amphora_failover_builds_a_new_amphora(admin, admin_lb, net, settle):
    lbs = admin.load_balancer
    lb = lbs.create_load_balancer(vip_subnet_id=net.subnet.id, name=unique("ampfo"), provider="amphora")
    settle(lb.id)
    [before] = list(lbs.amphorae(loadbalancer_id=lb.id))
    lbs.failover_amphora(before.id)
    assert lbs.get_load_balancer(lb.id).provisioning_status == "PENDING_UPDATE"
    r = admin_lb.put(f"/octavia/amphorae/{before.id}/failover")
    octavia_error(r, 404, f"Amphora {before.id} not found.")   # replaced already
    settle(lb.id)
    [after] = list(lbs.amphorae(loadbalancer_id=lb.id))
    assert after.id != before.id and after.loadbalancer_id == lb.id
    # A load balancer failover replaces it too.
    lbs.failover_load_balancer(lb.id)
    settle(lb.id)
    [third] = list(lbs.amphorae(loadbalancer_id=lb.id))
    assert third.id not in {before.id, after.id}
    with pytest.raises(osexc.NotFoundException):
        lbs.get_amphora(after.id)
    lbs.delete_load_balancer(lb.id, cascade=True)


# --- fields of every object ------------------------------------------------------------------------------


def test_listener_hsts_fields_as_octavia_2_27(admin, admin_lb, amp_tree, settle):
    listener = amp_tree["listener"]
    shown = admin_lb.get(f"/lbaas/listeners/{listener.id}").json()["listener"]
    assert (shown["hsts_max_age"], shown["hsts_include_subdomains"], shown["hsts_preload"]) == (None, False, False)
    r = admin_lb.get("/lbaas/listeners", params={"fields": "hsts_preload", "id": listener.id})
    assert r.json()["listeners"] == [{"hsts_preload": False}]
    lb_id = amp_tree["lb"].id
    r = admin_lb.post("/lbaas/listeners", json={"listener": {
        "loadbalancer_id": lb_id, "protocol": "HTTP", "protocol_port": 8080, "hsts_max_age": 100}})
    octavia_error(r, 400, "Validation failure: The HSTS feature can only be used for listeners using the "
                          "TERMINATED_HTTPS protocol.")
    r = admin_lb.put(f"/lbaas/listeners/{listener.id}", json={"listener": {"hsts_preload": True}})
    octavia_error(r, 400, "Validation failure: HSTS configuration options hsts_include_subdomains and "
                          "hsts_preload only make sense if hsts_max_age is set as well.")
    r = admin_lb.put(f"/lbaas/listeners/{listener.id}", json={"listener": {"hsts_preload": False,
                                                                           "hsts_max_age": None}})
    assert r.status_code == 200 and r.json()["listener"]["hsts_preload"] is False
    settle(lb_id)


def test_fields_on_every_list_return_the_asked_keys(admin, admin_lb, amp_tree, settle):
    lbs = admin.load_balancer
    lb = amp_tree["lb"]
    pool = lbs.create_pool(loadbalancer_id=lb.id, protocol="HTTP", lb_algorithm="ROUND_ROBIN")
    settle(lb.id)
    lbs.create_member(pool.id, address="10.250.0.9", protocol_port=80)
    settle(lb.id)
    lbs.create_health_monitor(pool_id=pool.id, type="HTTP", delay=1, timeout=1, max_retries=1)
    settle(lb.id)
    shown = admin_lb.get(f"/lbaas/loadbalancers/{lb.id}").json()["loadbalancer"]
    assert shown["vip_sg_ids"] == [] and shown["vip_vnic_type"] == "normal"
    collections = {"loadbalancers": "/lbaas/loadbalancers", "listeners": "/lbaas/listeners",
                   "pools": "/lbaas/pools", "members": f"/lbaas/pools/{pool.id}/members",
                   "healthmonitors": "/lbaas/healthmonitors", "amphorae": "/octavia/amphorae"}
    for key, path in collections.items():
        [whole, *_] = admin_lb.get(path).json()[key]
        for field in whole:
            r = admin_lb.get(path, params={"fields": field})
            items = r.json()[key]
            assert items and all(set(i) == {field} for i in items), (key, field, items[:2])
        two = sorted(whole)[:2]
        assert set(admin_lb.get(path, params={"fields": ",".join(two)}).json()[key][0]) == set(two)
    lbs.delete_pool(pool.id)
    settle(lb.id)


# --- member backup, monitors, algorithms -----------------------------------------------------------------


def test_member_backup_is_offered(admin, amp_tree, settle):
    lbs = admin.load_balancer
    lb = amp_tree["lb"]
    pool = lbs.create_pool(listener_id=amp_tree["listener"].id, protocol="TCP", lb_algorithm="ROUND_ROBIN")
    settle(lb.id)
    spare = lbs.create_member(pool.id, address="10.250.0.20", protocol_port=80, backup=True)
    assert spare.backup is True
    settle(lb.id)
    assert [m.id for m in lbs.members(pool.id, backup=True)] == [spare.id]
    assert lbs.update_member(spare, pool.id, backup=False).backup is False
    settle(lb.id)
    lbs.delete_pool(pool.id)
    settle(lb.id)


def test_https_tls_hello_and_udp_connect_monitors(admin, admin_lb, amp_tree, settle):
    lbs = admin.load_balancer
    lb = amp_tree["lb"]

    def monitor(pool_id: str, **attrs):
        return admin_lb.post("/lbaas/healthmonitors", json={"healthmonitor": {
            "pool_id": pool_id, "timeout": 1, "max_retries": 2, **attrs}})

    pools = []
    for protocol in ("HTTPS", "TCP", "UDP"):
        pools.append(lbs.create_pool(loadbalancer_id=lb.id, protocol=protocol, lb_algorithm="ROUND_ROBIN"))
        settle(lb.id)
    https, tcp, udp = pools
    r = monitor(https.id, type="HTTPS", delay=1)
    assert r.status_code == 201, r.text
    made = r.json()["healthmonitor"]
    assert (made["type"], made["http_method"], made["url_path"], made["expected_codes"]) == \
        ("HTTPS", "GET", "/", "200")
    settle(lb.id)
    octavia_error(monitor(tcp.id, type="UDP-CONNECT", delay=3), 400,
                  "Validation failure: The UDP-CONNECT type is only supported for pools of type UDP/SCTP.")
    r = monitor(tcp.id, type="TLS-HELLO", delay=1, url_path="/x")
    assert "url_path can only be set on HTTP health monitors" in octavia_error(r, 400)
    hello = lbs.create_health_monitor(pool_id=tcp.id, type="TLS-HELLO", delay=1, timeout=1, max_retries=1)
    assert hello.type == "TLS-HELLO" and hello.url_path is None
    settle(lb.id)
    octavia_error(monitor(udp.id, type="UDP-CONNECT", delay=2), 400,
                  "Validation failure: The request delay value 2 should be larger than 3 for UDP-CONNECT "
                  "health monitor type.")
    udp_mon = lbs.create_health_monitor(pool_id=udp.id, type="UDP-CONNECT", delay=3, timeout=1, max_retries=1)
    settle(lb.id)
    r = admin_lb.put(f"/lbaas/healthmonitors/{udp_mon.id}", json={"healthmonitor": {"delay": 1}})
    octavia_error(r, 400)
    for pool in (https, tcp, udp):
        lbs.delete_pool(pool.id)
        settle(lb.id)


def test_source_ip_port_on_ovn_only(admin, admin_lb, amp_tree, settle):
    lbs = admin.load_balancer
    ovn, amp = amp_tree["ovn"], amp_tree["lb"]
    listener = lbs.create_listener(loadbalancer_id=ovn.id, protocol="TCP", protocol_port=80)
    settle(ovn.id)
    pool = lbs.create_pool(listener_id=listener.id, protocol="TCP", lb_algorithm="SOURCE_IP_PORT")
    assert pool.lb_algorithm == "SOURCE_IP_PORT"
    settle(ovn.id)
    for protocol in ("TCP", "UDP"):
        r = admin_lb.post("/lbaas/pools", json={"pool": {"loadbalancer_id": amp.id, "protocol": protocol,
                                                         "lb_algorithm": "SOURCE_IP_PORT"}})
        assert "SOURCE_IP_PORT is not offered by provider amphora" in octavia_error(r, UNSUPPORTED)


def test_prometheus_listeners_take_no_children(admin, admin_lb, amp_tree, settle):
    lbs = admin.load_balancer
    amp, ovn = amp_tree["lb"], amp_tree["ovn"]
    listener = lbs.create_listener(loadbalancer_id=amp.id, protocol="PROMETHEUS", protocol_port=9100)
    assert listener.protocol == "PROMETHEUS"
    settle(amp.id)
    no_children = "Protocol PROMETHEUS listeners cannot have child objects."
    r = admin_lb.post("/lbaas/pools", json={"pool": {"listener_id": listener.id, "protocol": "HTTP",
                                                     "lb_algorithm": "ROUND_ROBIN"}})
    octavia_error(r, 400, no_children)
    r = admin_lb.post("/lbaas/l7policies", json={"l7policy": {"listener_id": listener.id, "action": "REJECT"}})
    octavia_error(r, 400, no_children)
    r = admin_lb.post("/lbaas/listeners", json={"listener": {"loadbalancer_id": ovn.id, "protocol": "PROMETHEUS",
                                                             "protocol_port": 9100}})
    assert "protocol PROMETHEUS is not offered by provider ovn" in octavia_error(r, UNSUPPORTED)
    lbs.delete_listener(listener.id)
    settle(amp.id)
