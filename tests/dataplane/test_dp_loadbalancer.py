"""Load balancers in the kernel: a real server and agent, members serving real traffic.

One server and agent for the module (this run's prefix, tag ``lb``). Members are
sandboxes running a tiny TCP/HTTP (and UDP) server on a thread whose sockets were
opened inside their namespace; the client is another sandbox. Health monitors use
``delay`` 1 s, so every wait here is a few seconds at most, and bounded.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest

from netbay.dataplane import netns
from netbay.dataplane.loadbalancer import TABLE
from netbay.dataplane.nft import Nft

from .agent_fixtures import wait_for
from .sctp_fixtures import sctp_answers
from .lb_fixtures import (  # noqa: F401 - env: the module fixture
    HTTP_PORT, LB, SCTP_PORT, UDP_PORT, Env, ask_udp, env, fetch, get, make_lb, post, put, spread,
    try_fetch, wait_lb, wait_op)

CLOUD_TAG = "lb"   # the shared `cloud` fixture (conftest.py): its namespace prefix


# --- tests ------------------------------------------------------------------------------------------


def test_round_robin_spreads_over_the_members(env: Env) -> None:
    cloud = env.cloud
    made = make_lb(env, "rr")
    lb = made["lb"]
    assert lb["provisioning_status"] == "ACTIVE" and lb["operating_status"] == "ONLINE"
    ns = cloud.names.loadbalancer(lb["id"])
    assert netns.exists(ns)
    with Nft(ns) as nft:
        assert ("ip", TABLE) in nft.tables()
    # The whole tree settled: ACTIVE, members without a monitor NO_MONITOR.
    tree = cloud.ok(cloud.http.get(f"{LB}/loadbalancers/{lb['id']}/status"))["statuses"]["loadbalancer"]
    assert tree["provisioning_status"] == "ACTIVE"
    listener = tree["listeners"][0]
    assert (listener["provisioning_status"], listener["operating_status"]) == ("ACTIVE", "ONLINE")
    pool = listener["pools"][0]
    assert (pool["provisioning_status"], pool["operating_status"]) == ("ACTIVE", "ONLINE")
    assert {(m["provisioning_status"], m["operating_status"]) for m in pool["members"]} == {("ACTIVE", "NO_MONITOR")}

    counts = spread(env.clients[0], lb["vip_address"], 80, 30)
    assert set(counts) == {"m1", "m2", "m3"}, counts
    assert max(counts.values()) - min(counts.values()) <= 1, counts

    # Admin-down and weight-0 members take no traffic; weights are respected.
    m1, m2 = made["members"]["m1"], made["members"]["m2"]
    put(cloud, f"pools/{made['pool']['id']}/members/{m1['id']}", "member", {"admin_state_up": False}, lb["id"])
    wait_op(cloud, f"pools/{made['pool']['id']}/members/{m1['id']}", "OFFLINE")
    put(cloud, f"pools/{made['pool']['id']}/members/{m2['id']}", "member", {"weight": 2}, lb["id"])
    counts = spread(env.clients[0], lb["vip_address"], 80, 30)
    assert set(counts) == {"m2", "m3"} and counts["m2"] == 2 * counts["m3"], counts
    put(cloud, f"pools/{made['pool']['id']}/members/{m2['id']}", "member", {"weight": 0}, lb["id"])
    assert set(spread(env.clients[0], lb["vip_address"], 80, 6)) == {"m3"}
    cloud.ok(cloud.http.delete(f"{LB}/loadbalancers/{lb['id']}", params={"cascade": "true"}), 204)


def test_fully_populated_create_answers_through_the_vip(env: Env) -> None:
    """One POST with listener, pool, members and a health monitor: the tree is realized
    at once and the VIP spreads connections over the members."""
    cloud = env.cloud
    lb = cloud.ok(cloud.http.post(f"{LB}/loadbalancers", json={"loadbalancer": {
        "name": "full", "vip_subnet_id": env.subnet["id"], "listeners": [{
            "protocol": "TCP", "protocol_port": 81, "default_pool": {
                "protocol": "TCP", "lb_algorithm": "ROUND_ROBIN",
                "healthmonitor": {"type": "TCP", "delay": 1, "timeout": 1, "max_retries": 1},
                "members": [{"address": env.member(m)[1], "protocol_port": HTTP_PORT} for m in ("m1", "m2")],
            }}]}}), 201)["loadbalancer"]
    try:
        wait_lb(cloud, lb["id"])
        # ACTIVE means realized: the first connection already reaches a member.
        assert fetch(env.clients[0], lb["vip_address"], 81) in {"m1", "m2"}
        seen = wait_for(lambda: set(spread(env.clients[0], lb["vip_address"], 81, 8)) >= {"m1", "m2"} or None,
                        10, 0.05, "both members to answer through the VIP")
        assert seen
        assert set(spread(env.clients[0], lb["vip_address"], 81, 8)) == {"m1", "m2"}
    finally:
        cloud.ok(cloud.http.delete(f"{LB}/loadbalancers/{lb['id']}", params={"cascade": "true"}), 204)


def test_source_ip_sticks_to_one_member(env: Env) -> None:
    cloud = env.cloud
    made = make_lb(env, "sticky", algorithm="SOURCE_IP", port=81)
    vip = made["lb"]["vip_address"]
    seen = []
    for client in env.clients:
        counts = spread(client, vip, 81, 12)
        assert len(counts) == 1, f"{client} was spread: {counts}"
        seen.append(next(iter(counts)))
    # The same pool in round robin spreads the same client again.
    put(cloud, f"pools/{made['pool']['id']}", "pool", {"lb_algorithm": "ROUND_ROBIN"}, made["lb"]["id"])
    assert len(spread(env.clients[0], vip, 81, 9)) == 3
    cloud.ok(cloud.http.delete(f"{LB}/loadbalancers/{made['lb']['id']}", params={"cascade": "true"}), 204)


def test_udp_listener(env: Env) -> None:
    cloud = env.cloud
    made = make_lb(env, "udp", protocol="UDP", port=53, member_port=UDP_PORT)
    vip = made["lb"]["vip_address"]
    answers = Counter(ask_udp(env.clients[0], vip, 53) for _ in range(9))  # a new socket: a new flow
    assert set(answers) == {"m1", "m2", "m3"}, answers
    cloud.ok(cloud.http.delete(f"{LB}/loadbalancers/{made['lb']['id']}", params={"cascade": "true"}), 204)


@pytest.mark.parametrize("provider", [None, "amphora"])
def test_sctp_listener_spreads_associations_and_its_monitor_takes_a_dead_member_out(env: Env,
                                                                                   provider: str | None) -> None:
    """SCTP as the amphora's LVS forwards it (under either provider: nftables, beside
    haproxy for the amphora): each INIT (a new association) goes to the next member and
    its INIT ACK comes back from the VIP; an SCTP health monitor (an INIT per probe)
    finds the member that stopped answering and takes it out."""
    cloud = env.cloud
    made = make_lb(env, "sctp", provider=provider, protocol="SCTP", port=SCTP_PORT, member_port=SCTP_PORT)
    lb_id, pool_id, vip = made["lb"]["id"], made["pool"]["id"], made["lb"]["vip_address"]
    backends = {name: b for name, _, b in env.members}
    before = {name: b.sctp_inits for name, b in backends.items()}
    assert all(sctp_answers(env.clients[0], vip, SCTP_PORT) for _ in range(9))
    spread_over = {name: b.sctp_inits - before[name] for name, b in backends.items()}
    assert spread_over == {"m1": 3, "m2": 3, "m3": 3}, spread_over
    assert not sctp_answers(env.clients[0], vip, SCTP_PORT + 1, 0.3), "a port no listener has"

    post(cloud, "healthmonitors", "healthmonitor", {"pool_id": pool_id, "type": "SCTP", "delay": 1,
                                                    "timeout": 1, "max_retries": 1, "max_retries_down": 1}, lb_id)
    member = {name: f"pools/{pool_id}/members/{m['id']}" for name, m in made["members"].items()}
    for path in member.values():
        wait_op(cloud, path, "ONLINE")
    backends["m2"].stop()
    try:
        wait_op(cloud, member["m2"], "ERROR", timeout=8)
        wait_op(cloud, f"pools/{pool_id}", "DEGRADED")
        before = {name: b.sctp_inits for name, b in backends.items()}
        assert all(sctp_answers(env.clients[0], vip, SCTP_PORT) for _ in range(6))
        took = {name: b.sctp_inits - before[name] for name, b in backends.items()}
        assert took["m1"] >= 3 and took["m3"] >= 3 and took["m2"] == 0, took   # (+ the monitor's INITs)
    finally:
        backends["m2"].start()
    wait_op(cloud, member["m2"], "ONLINE", timeout=8)
    cloud.ok(cloud.http.delete(f"{LB}/loadbalancers/{lb_id}", params={"cascade": "true"}), 204)


def test_tcp_monitor_takes_a_dead_member_out_and_back(env: Env) -> None:
    cloud = env.cloud
    made = make_lb(env, "hm")
    lb_id, pool_id, vip = made["lb"]["id"], made["pool"]["id"], made["lb"]["vip_address"]
    hm = post(cloud, "healthmonitors", "healthmonitor", {
        "pool_id": pool_id, "type": "TCP", "delay": 1, "timeout": 1, "max_retries": 1,
        "max_retries_down": 1}, lb_id)
    member = {name: f"pools/{pool_id}/members/{m['id']}" for name, m in made["members"].items()}
    for path in member.values():
        wait_op(cloud, path, "ONLINE")
    assert get(cloud, f"healthmonitors/{hm['id']}")["operating_status"] == "ONLINE"
    wait_lb(cloud, lb_id, operating="ONLINE")

    _, _, backend = env.member("m2")
    backend.stop()
    try:
        wait_op(cloud, member["m2"], "ERROR", timeout=6)
        wait_op(cloud, f"pools/{pool_id}", "DEGRADED")
        wait_lb(cloud, lb_id, operating="DEGRADED")
        counts = spread(env.clients[0], vip, 80, 12)   # every connection answered, none by m2
        assert set(counts) == {"m1", "m3"}, counts
    finally:
        backend.start()
    wait_op(cloud, member["m2"], "ONLINE", timeout=6)
    wait_lb(cloud, lb_id, operating="ONLINE")
    assert set(spread(env.clients[0], vip, 80, 9)) == {"m1", "m2", "m3"}

    # Deleting the monitor: members back to NO_MONITOR.
    cloud.ok(cloud.http.delete(f"{LB}/healthmonitors/{hm['id']}"), 204)
    wait_lb(cloud, lb_id)
    for path in member.values():
        wait_op(cloud, path, "NO_MONITOR")
    cloud.ok(cloud.http.delete(f"{LB}/loadbalancers/{lb_id}", params={"cascade": "true"}), 204)


def test_http_and_ping_monitors(env: Env) -> None:
    cloud = env.cloud
    made = make_lb(env, "http", protocol="HTTP", port=8000, members=("m1", "m3"))
    lb_id, pool_id, vip = made["lb"]["id"], made["pool"]["id"], made["lb"]["vip_address"]
    hm = post(cloud, "healthmonitors", "healthmonitor", {
        "pool_id": pool_id, "type": "HTTP", "delay": 1, "timeout": 1, "max_retries": 1,
        "max_retries_down": 1, "url_path": "/healthz", "expected_codes": "200-204"}, lb_id)
    paths = [f"pools/{pool_id}/members/{m['id']}" for m in made["members"].values()]
    for path in paths:
        wait_op(cloud, path, "ONLINE")
    # The members answer 200: not an expected code any more -> all down, pool ERROR.
    put(cloud, f"healthmonitors/{hm['id']}", "healthmonitor", {"expected_codes": "404"}, lb_id)
    for path in paths:
        wait_op(cloud, path, "ERROR", timeout=6)
    wait_op(cloud, f"pools/{pool_id}", "ERROR")
    wait_lb(cloud, lb_id, operating="ERROR")   # Octavia: a pool with no working member
    assert try_fetch(env.clients[0], vip, 8000) is None   # no member: refused
    put(cloud, f"healthmonitors/{hm['id']}", "healthmonitor", {"expected_codes": "200"}, lb_id)
    for path in paths:
        wait_op(cloud, path, "ONLINE", timeout=6)
    assert set(spread(env.clients[0], vip, 8000, 4)) == {"m1", "m3"}
    cloud.ok(cloud.http.delete(f"{LB}/healthmonitors/{hm['id']}"), 204)
    wait_lb(cloud, lb_id)
    post(cloud, "healthmonitors", "healthmonitor", {
        "pool_id": pool_id, "type": "PING", "delay": 1, "timeout": 1, "max_retries": 1,
        "max_retries_down": 1}, lb_id)
    for path in paths:
        wait_op(cloud, path, "ONLINE")
    cloud.ok(cloud.http.delete(f"{LB}/loadbalancers/{lb_id}", params={"cascade": "true"}), 204)


def test_floating_ip_on_the_vip(env: Env) -> None:
    cloud = env.cloud
    made = make_lb(env, "fip")
    lb = made["lb"]
    cloud.wait_status(f"/network/v2.0/routers/{env.router['id']}", "ACTIVE")
    fip = cloud.ok(cloud.http.post("/network/v2.0/floatingips", json={"floatingip": {
        "floating_network_id": env.public["id"], "port_id": lb["vip_port_id"]}}), 201)["floatingip"]
    cloud.wait_status(f"/network/v2.0/floatingips/{fip['id']}", "ACTIVE")
    outside = cloud.names.external(env.public["id"])
    address = fip["floating_ip_address"]
    first = wait_for(lambda: try_fetch(outside, address, 80, 0.5), 10, 0.05,
                     what="the load balancer answering on its floating IP")
    counts = Counter([first, *(fetch(outside, address, 80) for _ in range(8))])
    assert set(counts) == {"m1", "m2", "m3"}, counts
    cloud.ok(cloud.http.delete(f"/network/v2.0/floatingips/{fip['id']}"), 204)
    cloud.ok(cloud.http.delete(f"{LB}/loadbalancers/{lb['id']}", params={"cascade": "true"}), 204)


def test_deleting_a_load_balancer_removes_its_namespace(env: Env) -> None:
    cloud = env.cloud
    made = make_lb(env, "gone", members=("m1",))
    lb_id = made["lb"]["id"]
    post(cloud, "healthmonitors", "healthmonitor", {
        "pool_id": made["pool"]["id"], "type": "TCP", "delay": 1, "timeout": 1, "max_retries": 1}, lb_id)
    ns = cloud.names.loadbalancer(lb_id)
    assert netns.exists(ns)
    assert fetch(env.clients[0], made["lb"]["vip_address"], 80) == "m1"
    t0 = time.monotonic()
    cloud.ok(cloud.http.delete(f"{LB}/loadbalancers/{lb_id}", params={"cascade": "true"}), 204)
    wait_for(lambda: not netns.exists(ns), 10, what="the load balancer's namespace deleted")
    assert time.monotonic() - t0 < 10
    agent = cloud.agent.agent
    realizer = next(r for r in agent.realizers if r.name == "loadbalancers")
    wait_for(lambda: not any(m.lb_id == lb_id for m in realizer.monitors.values()), 5,
             what="its monitor stopped")
    # No namespace outlives its load balancer (another test's failure may leave its own).
    alive = {cloud.names.loadbalancer(x["id"]) for x in cloud.ok(cloud.http.get(f"{LB}/loadbalancers"))["loadbalancers"]}
    assert not [n for n in cloud.namespaces() if n.startswith(cloud.names.loadbalancer("")) and n not in alive]


def test_agent_restart_adopts_load_balancers_and_sweeps_strays(env: Env) -> None:
    """Stopped, the agent leaves no health-check thread behind; restarted, it keeps a
    wanted load balancer serving (table rebuilt in place, monitor running again) and
    deletes a load balancer namespace nothing wants."""
    cloud = env.cloud
    made = make_lb(env, "adopt", members=("m1", "m3"))
    lb_id, pool_id, vip = made["lb"]["id"], made["pool"]["id"], made["lb"]["vip_address"]
    post(cloud, "healthmonitors", "healthmonitor", {
        "pool_id": pool_id, "type": "TCP", "delay": 1, "timeout": 1, "max_retries": 1,
        "max_retries_down": 1}, lb_id)
    for m in made["members"].values():
        wait_op(cloud, f"pools/{pool_id}/members/{m['id']}", "ONLINE")
    cloud.agent.stop()
    assert not [t for t in threading.enumerate() if t.name.startswith("netbay-lb-health")]
    stray = cloud.names.loadbalancer("00000000-0000-4000-8000-00000000dead")
    netns.create(stray)
    try:
        assert set(spread(env.clients[0], vip, 80, 4)) == {"m1", "m3"}   # the kernel kept serving
        cloud.agent.start()
        wait_for(lambda: not netns.exists(stray), 10, what="the stray load balancer namespace swept")
        assert set(spread(env.clients[0], vip, 80, 4)) == {"m1", "m3"}
        with Nft(cloud.names.loadbalancer(lb_id)) as nft:
            assert [t for t in nft.tables() if t[1] == TABLE] == [("ip", TABLE)]
        _, _, backend = env.member("m3")
        backend.stop()
        try:
            m3 = made["members"]["m3"]["id"]
            wait_op(cloud, f"pools/{pool_id}/members/{m3}", "ERROR", timeout=6)   # monitoring again
            assert set(spread(env.clients[0], vip, 80, 4)) == {"m1"}
        finally:
            backend.start()
    finally:
        netns.delete(stray)
    cloud.ok(cloud.http.delete(f"{LB}/loadbalancers/{lb_id}", params={"cascade": "true"}), 204)


# --- pure logic (no kernel) -----------------------------------------------------------------------


def test_slots_follow_weights_interleaved() -> None:
    from netbay.dataplane.lb.table import MemberSpec, slots

    a, b, c = (MemberSpec(n, f"10.0.0.{i}", 80, weight=w) for i, (n, w) in enumerate((("a", 4), ("b", 2), ("c", 0))))
    assert [m.id for m in slots([a, b, c])] == ["a", "b", "a"]   # 4:2 -> 2:1, weight 0 out
    assert slots([c]) == []


def test_health_rise_and_fall() -> None:
    from netbay.dataplane.lb.health import Health, expected

    h = Health()
    assert h.record(True, rise=2, fall=3) and h.up is True        # starts up at once
    assert not h.record(False, 2, 3) and not h.record(False, 2, 3) and h.up
    assert h.record(False, 2, 3) and h.up is False                 # third failure: down
    assert not h.record(True, 2, 3) and h.up is False              # one success is not enough
    assert h.record(True, 2, 3) and h.up is True
    assert expected("200-204", 204) and not expected("200-204", 301)
    assert expected("200, 202", 202) and not expected("200,202", 201)
