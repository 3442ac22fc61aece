"""Octavia's stats, failover and member batch update with the real agent and real packets
(issue 17). Reuses the load balancer tests' cloud: members m1-m3 serving HTTP, two
clients, one server and agent for this module (this run's prefix, tag ``lb``).
Octavia's operating-status rules are checked as pure logic at the end.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from netbay.dataplane import netns
from netbay.dataplane.lbstats import read_counters
from netbay.dataplane.loadbalancer import TABLE
from netbay.dataplane.nft import Nft

from .agent_fixtures import wait_for
from .lb_fixtures import LB, Env, env, make_lb, try_fetch, wait_lb  # noqa: F401 (fixtures)

CLOUD_TAG = "lb"   # the shared `cloud` fixture (conftest.py), on test_dp_loadbalancer's prefix

PAYLOAD = 40_000   # what the member's server drains (16 reads of 4 KiB) with room to spare


@pytest.fixture(scope="module")
def sdk(env: Env) -> Iterator:
    """openstacksdk as the admin (the module's cloud)."""
    conn = env.cloud.server.connect()
    env.cloud.server._clients.append(conn)
    yield conn


def lb_realizer(env: Env):
    return next(r for r in env.cloud.agent.agent.realizers if r.name == "loadbalancers")


def send(ns: str, vip: str, port: int, payload: bytes, *, hold: threading.Event | None = None) -> bytes:
    """One connection from ``ns``: send ``payload``, read the answer; with ``hold``, keep
    the connection open until it is set."""
    with netns.entered(ns):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.settimeout(3)
        s.connect((vip, port))
        s.sendall(payload)
        if hold is not None:
            hold.wait(10)
        s.shutdown(socket.SHUT_WR)
        data = b""
        for _ in range(64):
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        return data
    finally:
        s.close()


def test_stats_grow_by_the_bytes_sent_through_a_listener(env: Env, sdk) -> None:
    cloud = env.cloud
    made = make_lb(env, "stats", members=("m1",))
    lb, listener = made["lb"], made["listener"]
    realizer = lb_realizer(env)
    assert realizer.stats is not None, "the agent started no statistics sender"

    def now() -> dict:
        realizer.stats.round()   # what the sender's thread does every few seconds, at once
        s = sdk.load_balancer.get_listener_statistics(listener["id"])
        return {k: getattr(s, k) for k in ("bytes_in", "bytes_out", "active_connections", "total_connections")}

    before = now()
    answer = send(env.clients[0], lb["vip_address"], 80, b"x" * PAYLOAD)
    assert answer.endswith(b"m1"), answer
    after = now()
    grew_in = after["bytes_in"] - before["bytes_in"]
    # The payload plus its packets' IP/TCP headers (at most ~100 packets here).
    assert PAYLOAD <= grew_in <= PAYLOAD + 100 * 80, (before, after)
    assert len(answer) <= after["bytes_out"] - before["bytes_out"] <= len(answer) + 50 * 80, (before, after)
    assert after["total_connections"] == before["total_connections"] + 1
    assert after["active_connections"] == 0
    # A connection held open is active; the load balancer's stats are its listeners'.
    hold = threading.Event()
    t = threading.Thread(target=send, args=(env.clients[1], lb["vip_address"], 80, b"y" * 100),
                         kwargs={"hold": hold}, daemon=True)
    t.start()
    try:
        held = wait_for(lambda: (s := now())["active_connections"] == 1 and s, 5, 0.05, "an active connection")
        assert held["total_connections"] == after["total_connections"] + 1
        lbs = sdk.load_balancer.get_load_balancer_statistics(lb["id"])
        assert (lbs.bytes_in, lbs.total_connections, lbs.active_connections) == (
            held["bytes_in"], held["total_connections"], 1)
    finally:
        hold.set()
        t.join(10)
    wait_for(lambda: now()["active_connections"] == 0, 5, 0.05, "the connection closed")
    # A deleted listener's counters leave the table with the next round.
    extra = cloud.ok(cloud.http.post(f"{LB}/listeners", json={"listener": {
        "loadbalancer_id": lb["id"], "protocol": "TCP", "protocol_port": 81}}), 201)["listener"]
    wait_lb(cloud, lb["id"])

    def counters() -> set[str]:
        with Nft(cloud.names.loadbalancer(lb["id"])) as nft:
            return set(read_counters(nft, "ip", TABLE))

    assert {f"in-{extra['id']}", f"conn-{extra['id']}"} <= counters()
    cloud.ok(cloud.http.delete(f"{LB}/listeners/{extra['id']}"), 204)
    wait_lb(cloud, lb["id"])
    realizer.stats.round()
    assert not {n for n in counters() if extra["id"] in n}
    assert f"in-{listener['id']}" in counters()
    cloud.ok(cloud.http.delete(f"{LB}/loadbalancers/{lb['id']}", params={"cascade": "true"}), 204)


def test_failover_rebuilds_the_namespace_and_keeps_the_vip(env: Env, sdk) -> None:
    """During a 200-request loop: at most the connection open at that moment is lost, and
    the VIP answers again within 1 s of the failover; id, VIP address and port unchanged."""
    cloud = env.cloud
    made = make_lb(env, "failover")
    lb = made["lb"]
    vip, ns = lb["vip_address"], cloud.names.loadbalancer(lb["id"])
    old_inode = netns.inode(ns)
    results: list[tuple[float, bool]] = []
    started = threading.Event()

    def loop() -> None:
        for i in range(200):
            if i == 40:
                started.set()
            ok = try_fetch(env.clients[0], vip, 80, timeout=3.0) in ("m1", "m2", "m3")
            results.append((time.monotonic(), ok))
            time.sleep(0.01)   # ~3 s in all: the failover happens well inside the loop
        started.set()

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    try:
        assert started.wait(30)
        t0 = time.monotonic()
        sdk.load_balancer.failover_load_balancer(lb["id"])
        wait_for(lambda: netns.inode(ns) != old_inode, 5, 0.001, "the namespace rebuilt")
        answered = wait_for(lambda: try_fetch(env.clients[1], vip, 80, timeout=0.05) and time.monotonic(),
                            5, 0.0, "the VIP to answer again")
        print(f"failover: VIP answered again {1000 * (answered - t0):.0f} ms after the request")
        assert answered - t0 < 1.0, f"VIP answered {answered - t0:.3f}s after the failover"
    finally:
        t.join(120)
    assert len(results) == 200 and results[-1][0] > answered   # the loop ran across the failover
    failed = [at for at, ok in results if not ok]
    slowest = max(b[0] - a[0] for a, b in zip(results, results[1:]))
    print(f"failover: {len(failed)} of 200 requests lost, longest gap between requests {1000 * slowest:.0f} ms")
    assert len(failed) <= 1, f"{len(failed)} requests lost: {failed}"
    after = wait_lb(cloud, lb["id"], "ACTIVE", "ONLINE")
    assert (after["id"], after["vip_address"], after["vip_port_id"]) == (lb["id"], vip, lb["vip_port_id"])
    assert netns.inode(ns) != old_inode
    cloud.ok(cloud.http.delete(f"{LB}/loadbalancers/{lb['id']}", params={"cascade": "true"}), 204)


def test_member_batch_update_is_realized_once(env: Env) -> None:
    """3 → 5 members, then → 2, each one PUT: one table transaction each."""
    cloud = env.cloud
    made = make_lb(env, "batch")
    lb_id, pool_id, vip = made["lb"]["id"], made["pool"]["id"], made["lb"]["vip_address"]
    realizer = lb_realizer(env)
    base = env.member("m1")[1].rsplit(".", 1)[0]
    addresses = [env.member(n)[1] for n in ("m1", "m2", "m3")] + [f"{base}.201", f"{base}.202"]

    def batch(addrs: list[str]) -> None:
        before = realizer.realizations[lb_id]
        r = cloud.http.put(f"{LB}/pools/{pool_id}/members", json={"members": [
            {"address": a, "protocol_port": 8080} for a in addrs]})
        assert r.status_code == 202, r.text
        wait_lb(cloud, lb_id)
        time.sleep(0.3)   # anything still to come from this batch would come now
        assert realizer.realizations[lb_id] == before + 1
        members = cloud.ok(cloud.http.get(f"{LB}/pools/{pool_id}/members"))["members"]
        assert sorted(m["address"] for m in members) == sorted(addrs)

    batch(addresses)
    batch(addresses[:2])
    counts = {try_fetch(env.clients[0], vip, 80) for _ in range(8)}
    assert counts == {"m1", "m2"}, counts
    cloud.ok(cloud.http.delete(f"{LB}/loadbalancers/{lb_id}", params={"cascade": "true"}), 204)


# --- Octavia's operating statuses (pure logic) ---------------------------------------------------------


def test_operating_statuses_follow_octavias_rules() -> None:
    from netbay.dataplane.loadbalancer import (
        Health, ListenerSpec, LoadBalancerSpec, MemberSpec, MonitorSpec, PoolSpec, operating_statuses)

    mon = MonitorSpec("hm", "TCP", 1, 1, 1, 1)
    members = (MemberSpec("a", "10.0.0.1", 80), MemberSpec("b", "10.0.0.2", 80),
               MemberSpec("c", "10.0.0.3", 80, enabled=False))
    served = PoolSpec("p1", members=members, monitor=mon)
    unmonitored = PoolSpec("p2", members=(MemberSpec("d", "10.0.0.4", 80),))
    lonely = PoolSpec("p3", members=(MemberSpec("e", "10.0.0.5", 80),))     # no listener
    empty = PoolSpec("p4")
    spec = LoadBalancerSpec("lb", "ns", "10.0.0.100", listeners=(
        ListenerSpec("l1", "tcp", 80, pool_id="p1"), ListenerSpec("l2", "tcp", 81, pool_id="p2"),
        ListenerSpec("l3", "tcp", 82, pool_id="p4"), ListenerSpec("l4", "tcp", 83, enabled=False)),
        pools=(served, unmonitored, lonely, empty))
    up, down = Health(up=True), Health(up=False)
    out = operating_statuses(spec, {"a": up, "b": up})
    assert out["members"] == {"a": "ONLINE", "b": "ONLINE", "c": "OFFLINE", "d": "NO_MONITOR", "e": "NO_MONITOR"}
    # A served pool is ONLINE with no members too (the amphora's backend with no servers is UP).
    assert out["pools"] == {"p1": "ONLINE", "p2": "ONLINE", "p3": "OFFLINE", "p4": "ONLINE"}
    assert out["listeners"] == {"l1": "ONLINE", "l2": "ONLINE", "l3": "ONLINE", "l4": "OFFLINE"}
    assert out["loadbalancers"] == {"lb": "ONLINE"} and out["healthmonitors"] == {"hm": "ONLINE"}
    out = operating_statuses(spec, {"a": up, "b": down})
    assert out["members"]["b"] == "ERROR" and out["pools"]["p1"] == "DEGRADED"
    assert out["loadbalancers"]["lb"] == "DEGRADED"
    out = operating_statuses(spec, {"a": down, "b": down})
    assert out["pools"]["p1"] == "ERROR" and out["loadbalancers"]["lb"] == "ERROR"
    assert operating_statuses(spec, {})["members"]["a"] is None   # not probed yet: nothing said
    all_down = PoolSpec("p1", members=(MemberSpec("a", "10.0.0.1", 80, enabled=False),))
    out = operating_statuses(LoadBalancerSpec("lb", "ns", "10.0.0.100", listeners=spec.listeners[:1],
                                              pools=(all_down,)), {})
    assert (out["members"]["a"], out["pools"]["p1"], out["loadbalancers"]["lb"]) == ("OFFLINE", "ERROR", "ERROR")
    unserved = LoadBalancerSpec("lb", "ns", "10.0.0.100", pools=(served,))   # its listener gone
    out = operating_statuses(unserved, {"a": up, "b": up})
    assert out["pools"]["p1"] == "OFFLINE" and out["members"] == {"a": "OFFLINE", "b": "OFFLINE", "c": "OFFLINE"}
    off = LoadBalancerSpec("lb", "ns", "10.0.0.100", enabled=False, listeners=spec.listeners, pools=spec.pools)
    out = operating_statuses(off, {"a": up})
    assert out["loadbalancers"]["lb"] == "OFFLINE" and set(out["pools"].values()) == {"OFFLINE"}
    assert set(out["members"].values()) == {"OFFLINE"} and set(out["listeners"].values()) == {"OFFLINE"}
