"""LEAST_CONNECTIONS on the listeners the kernel forwards (TCP under the nftables provider,
UDP, SCTP), with the real agent and real packets (issue 29): a new flow goes to the member
with the fewest live flows (conntrack's; a TCP connection while established), ties to the
first member; flows already tracked keep their member; a restarted agent counts the flows
made before it. Reuses the load balancer tests' cloud: members m1-m3 (UDP 5353, SCTP INITs
answered, TCP held open on HOLD_PORT for these tests), two clients (tag ``lb``).

The tests wait for the listener's map element to name the member they expect before
opening the next flow (the watcher counts a flow from its conntrack event, a moment
after its first packet): the element is the synchronization point, the answers are
what is asserted.
"""

from __future__ import annotations

import socket
import struct
import threading

from collections.abc import Iterator

import pytest

from netbay.dataplane import lbstats, links, netns
from netbay.dataplane.ctkill import IPCTNL_MSG_CT_DELETE, IPCTNL_MSG_CT_GET, CtNetlink
from netbay.dataplane.lb import ctevents
from netbay.dataplane.lb.leastconn import TCP_ESTABLISHED

from .agent_fixtures import wait_for
from .sctp_fixtures import sctp_answers
from .lb_fixtures import (  # noqa: F401 (fixtures)
    HOLD_PORT, LB, SCTP_PORT, UDP_PORT, Env, Holder, env, hold, make_lb, post, put, wait_held, wait_op)

CLOUD_TAG = "lb"   # the shared `cloud` fixture (conftest.py), on test_dp_loadbalancer's prefix


class UdpFlow:
    """One UDP flow from a client: a connected socket (its source port names the flow)."""

    def __init__(self, ns: str, vip: str, port: int) -> None:
        with netns.entered(ns):
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.settimeout(2.0)
        self.sock.connect((vip, port))
        self.sport = self.sock.getsockname()[1]

    def ask(self) -> str:
        self.sock.send(b"who")
        return self.sock.recv(2048).decode()

    def close(self) -> None:
        self.sock.close()


def end_flows(ns: str, sports: set[int]) -> int:
    """Delete the conntrack entries of the flows from these source ports (as their
    expiry would end them); returns how many."""
    done = 0
    with CtNetlink(ns) as ct:
        for chunk in ct.request(socket.AF_UNSPEC, IPCTNL_MSG_CT_GET, dump=True):
            flow = ctevents.parse(chunk)
            if flow is None:
                continue
            span = lbstats.nested(flow.key, (0, len(flow.key)), ctevents.CTA_TUPLE_PROTO, ctevents.CTA_PROTO_SRC_PORT)
            if span is None or struct.unpack_from("!H", flow.key, span[0])[0] not in sports:
                continue
            attr = struct.pack("=HH", 4 + len(flow.key), lbstats.CTA_TUPLE_ORIG | 0x8000) + flow.key  # NLA_F_NESTED
            ct.request(chunk[16], IPCTNL_MSG_CT_DELETE, attrs=attr)
            done += 1
    return done


def set_enabled(env: Env, made: dict, name: str, up: bool) -> None:
    path = f"pools/{made['pool']['id']}/members/{made['members'][name]['id']}"
    put(env.cloud, path, "member", {"admin_state_up": up}, made["lb"]["id"])
    wait_op(env.cloud, path, "NO_MONITOR" if up else "OFFLINE")


def in_pool_order(made: dict) -> list[str]:
    """The members' names in the pool's order (the realizer's: created, then id), which breaks ties."""
    return sorted(made["members"], key=lambda n: (made["members"][n]["created_at"], made["members"][n]["id"]))


def drop(env: Env, made: dict) -> None:
    env.cloud.ok(env.cloud.http.delete(f"{LB}/loadbalancers/{made['lb']['id']}", params={"cascade": "true"}), 204)


@pytest.fixture(scope="module")
def holders(env: Env) -> Iterator[dict[str, Holder]]:
    """Hold-open TCP servers on m1 and m2 (HOLD_PORT, let in by the members' group)."""
    cloud = env.cloud
    web = cloud.ok(cloud.http.get("/network/v2.0/security-groups", params={"name": "web"}))["security_groups"][0]
    cloud.ok(cloud.http.post("/network/v2.0/security-group-rules", json={"security_group_rule": {
        "security_group_id": web["id"], "direction": "ingress", "ethertype": "IPv4", "protocol": "tcp",
        "port_range_min": HOLD_PORT, "port_range_max": HOLD_PORT}}), 201)
    servers = {name: Holder(env.member(name)[2].ns, name) for name in ("m1", "m2")}
    yield servers
    for s in servers.values():
        s.stop()


def tcp_lb(env: Env, name: str, port: int) -> tuple[dict, str, str, dict[str, str]]:
    """A nftables load balancer with a LEAST_CONNECTIONS TCP pool of m1 and m2 (Holders):
    (what make_lb made, its namespace, the listener's id, member name -> address)."""
    made = make_lb(env, name, protocol="TCP", port=port, algorithm="LEAST_CONNECTIONS", members=("m1", "m2"),
                   member_port=HOLD_PORT)
    assert made["pool"]["lb_algorithm"] == "LEAST_CONNECTIONS"   # 201: no longer refused on TCP
    return (made, env.cloud.names.loadbalancer(made["lb"]["id"]), made["listener"]["id"],
            {n: env.member(n)[1] for n in ("m1", "m2")})


def test_tcp_least_connections_counts_established_connections(env: Env, holders: dict[str, Holder]) -> None:
    """LEAST_CONNECTIONS on a TCP pool of the nftables provider, as LVS's ``lc``: held-open
    connections spread by count (a, b, a, b: each counted once established). When b's
    two close, the next two go to b (round robin would give a one) although their
    conntrack entries linger (closing, then TIME_WAIT): a closed connection is not active."""
    made, ns, listener, address = tcp_lb(env, "lctcp", 85)
    vip, client = made["lb"]["vip_address"], env.clients[0]
    a, b = in_pool_order(made)
    conns = []

    def open_conn(expected: str) -> socket.socket:
        s, name = hold(client, vip, 85)
        conns.append(s)
        assert name == expected
        return s

    try:
        open_conn(a)
        wait_held(ns, listener, address[b])                # 1 : 0
        second = [open_conn(b)]
        wait_held(ns, listener, address[a])                # 1 : 1, a tie: the first member
        open_conn(a)
        wait_held(ns, listener, address[b])                # 2 : 1
        second.append(open_conn(b))
        wait_held(ns, listener, address[a])                # 2 : 2
        for s in second:
            s.close()
        wait_held(ns, listener, address[b])                # 2 : 0 active
        mark = lbstats.mark(listener)
        gone = [f for f in ctevents.dump(ns) if f.mark == mark and f.member is not None
                and str(f.member[0]) == address[b]]
        assert len(gone) == 2 and all(f.tcp_state != TCP_ESTABLISHED for f in gone), gone   # tracked, not active
        open_conn(b)
        open_conn(b)                                       # 2 : 1 -> b again
        wait_held(ns, listener, address[a])                # 2 : 2 (and b's two closed break the tie)
        open_conn(a)
    finally:
        for s in conns:
            s.close()
    drop(env, made)


def test_least_connections_counts_survive_an_agent_restart(env: Env, holders: dict[str, Holder]) -> None:
    """A restarted agent counts the connections made before it (its watcher's first
    conntrack dump; it saw none of their events): with 2 : 1 held open across the
    restart, the listener points at b again and the next connections keep the split."""
    cloud = env.cloud
    made, ns, listener, address = tcp_lb(env, "lcrestart", 86)
    lb_id, vip, client = made["lb"]["id"], made["lb"]["vip_address"], env.clients[0]
    a, b = in_pool_order(made)
    conns = []

    def open_conn(expected: str) -> None:
        s, name = hold(client, vip, 86)
        conns.append(s)
        assert name == expected

    try:
        open_conn(a)
        wait_held(ns, listener, address[b])
        open_conn(b)
        wait_held(ns, listener, address[a])
        open_conn(a)
        wait_held(ns, listener, address[b])                # 2 : 1
        cloud.agent.stop()
        cloud.agent.start()                                # its first resync refilled the table (maps emptied)
        realizer = next(r for r in cloud.agent.agent.realizers if r.name == "loadbalancers")
        assert realizer.realizations[lb_id] >= 1
        wait_held(ns, listener, address[b])                # from the dump: 2 : 1 (a tie would be a)
        open_conn(b)
        wait_held(ns, listener, address[a])                # 2 : 2: b's first connection was counted too
        open_conn(a)
    finally:
        for s in conns:
            s.close()
    drop(env, made)


def test_udp_least_connections_follows_live_flows(env: Env) -> None:
    """Amphora's LEAST_CONNECTIONS on a UDP pool (201, as Octavia's amphora), members a
    and b in the pool's order: two flows while b is disabled go to a; with b back, the
    next two go to b (2/2 — round robin would have given a a third), a tie then goes to
    a. When b's two flows end (their conntrack entries deleted), new flows go to b
    until it catches up, and the flows already tracked keep their member."""
    cloud = env.cloud
    made = make_lb(env, "lcudp", provider="amphora", protocol="UDP", port=54, algorithm="LEAST_CONNECTIONS",
                   members=("m1", "m2"), member_port=UDP_PORT)
    assert made["pool"]["lb_algorithm"] == "LEAST_CONNECTIONS"
    vip, listener = made["lb"]["vip_address"], made["listener"]["id"]
    ns = cloud.names.loadbalancer(made["lb"]["id"])
    links.sysctl(ns, "net.netfilter.nf_conntrack_udp_timeout", "300")   # no flow ends by itself here
    address = {name: env.member(name)[1] for name in ("m1", "m2")}
    a, b = in_pool_order(made)
    client = env.clients[0]
    flows: list[UdpFlow] = []

    def open_flow(expected: str) -> UdpFlow:
        flow = UdpFlow(client, vip, 54)
        flows.append(flow)
        assert flow.ask() == expected
        return flow

    try:
        set_enabled(env, made, b, False)
        first = [open_flow(a), open_flow(a)]
        set_enabled(env, made, b, True)
        wait_held(ns, listener, address[b])                # a has two live flows, b none
        second = [open_flow(b)]
        second.append(open_flow(b))                        # 2 : 1 -> still b
        wait_held(ns, listener, address[a])                # 2 : 2, a tie: the first member
        for f in second:
            f.close()
        assert end_flows(ns, {f.sport for f in second}) == 2
        wait_held(ns, listener, address[b])                # 2 : 0
        open_flow(b)
        open_flow(b)                                       # 2 : 1 -> b again
        wait_held(ns, listener, address[a])
        open_flow(a)                                       # the tie went to a: 3 : 2
        assert [f.ask() for f in first] == [a, a]          # tracked flows keep their member
    finally:
        for f in flows:
            f.close()
    drop(env, made)
    watcher = f"netbay-lb-leastconn-{made['lb']['id'][:8]}"
    wait_for(lambda: not any(t.name == watcher for t in threading.enumerate()), 5, 0.05, "the watcher ended")


def test_udp_least_connections_skips_a_member_its_monitor_found_down(env: Env) -> None:
    """A member a UDP-CONNECT monitor found down takes no new flow, however few it has;
    back up, it takes the next ones until it catches up."""
    cloud = env.cloud
    made = make_lb(env, "lcmon", protocol="UDP", port=55, algorithm="LEAST_CONNECTIONS", members=("m1", "m2"),
                   member_port=UDP_PORT)
    lb_id, vip, listener = made["lb"]["id"], made["lb"]["vip_address"], made["listener"]["id"]
    ns = cloud.names.loadbalancer(lb_id)
    links.sysctl(ns, "net.netfilter.nf_conntrack_udp_timeout", "300")
    address = {name: env.member(name)[1] for name in ("m1", "m2")}
    a, b = in_pool_order(made)
    post(cloud, "healthmonitors", "healthmonitor", {"pool_id": made["pool"]["id"], "type": "UDP-CONNECT",
                                                    "delay": 3, "timeout": 1, "max_retries": 1,
                                                    "max_retries_down": 1}, lb_id)
    path = {name: f"pools/{made['pool']['id']}/members/{made['members'][name]['id']}" for name in (a, b)}
    for name in (a, b):
        wait_op(cloud, path[name], "ONLINE", timeout=12)
    flows: list[UdpFlow] = []

    def open_flow(expected: str) -> None:
        flows.append(UdpFlow(env.clients[0], vip, 55))
        assert flows[-1].ask() == expected

    backend = env.member(a)[2]
    try:
        open_flow(a)
        wait_held(ns, listener, address[b])
        open_flow(b)                                       # 1 : 1
        backend.stop()                                     # a's port closes: port unreachable
        try:
            wait_op(cloud, path[a], "ERROR", timeout=12)
            wait_held(ns, listener, address[b])
            open_flow(b)
            open_flow(b)                                   # 1 : 3, a down
        finally:
            backend.start()
        wait_op(cloud, path[a], "ONLINE", timeout=12)
        wait_held(ns, listener, address[a])
        open_flow(a)
    finally:
        for f in flows:
            f.close()
    drop(env, made)


def test_sctp_least_connections_follows_live_associations(env: Env) -> None:
    """The nftables provider's LEAST_CONNECTIONS on an SCTP pool: associations opened
    while b is disabled go to a; with b back, the next two go to b, then a tie goes to a
    (each INIT is counted by the member that answered it)."""
    cloud = env.cloud
    made = make_lb(env, "lcsctp", protocol="SCTP", port=SCTP_PORT, algorithm="LEAST_CONNECTIONS",
                   members=("m1", "m2"), member_port=SCTP_PORT)
    vip, listener = made["lb"]["vip_address"], made["listener"]["id"]
    ns = cloud.names.loadbalancer(made["lb"]["id"])
    # An aborted association's entry stays (CLOSED) for this long: live for the count.
    links.sysctl(ns, "net.netfilter.nf_conntrack_sctp_timeout_closed", "300")
    address = {name: env.member(name)[1] for name in ("m1", "m2")}
    backends = {name: env.member(name)[2] for name in ("m1", "m2")}
    a, b = in_pool_order(made)

    def associate() -> str:
        before = {name: b.sctp_inits for name, b in backends.items()}
        assert sctp_answers(env.clients[0], vip, SCTP_PORT)
        took = [name for name, b in backends.items() if b.sctp_inits > before[name]]
        assert len(took) == 1, took
        return took[0]

    set_enabled(env, made, b, False)
    assert [associate(), associate()] == [a, a]
    set_enabled(env, made, b, True)
    wait_held(ns, listener, address[b])
    assert associate() == b
    assert associate() == b                                # 2 : 1 -> b
    wait_held(ns, listener, address[a])                    # 2 : 2, the first member
    assert associate() == a
    drop(env, made)


# --- pure logic (no kernel) -----------------------------------------------------------------------


def test_least_loaded_member_ties_to_the_first_and_skips_members_without_traffic() -> None:
    from collections import Counter

    from netbay.dataplane.lb.leastconn import least_loaded, member_key, served
    from netbay.dataplane.lb.spec import ListenerSpec, LoadBalancerSpec, MemberSpec, PoolSpec

    a, b = MemberSpec("a", "10.0.0.1", 53, weight=3), MemberSpec("b", "10.0.0.2", 53)
    off, spare = MemberSpec("c", "10.0.0.3", 53, weight=0), MemberSpec("d", "10.0.0.4", 53, backup=True)
    pool = PoolSpec("p", algorithm="LEAST_CONNECTIONS", members=(a, off, b, spare), protocol="UDP")
    spec = LoadBalancerSpec("lb", "ns", "10.0.0.9", listeners=(ListenerSpec("l", "udp", 53, pool_id="p"),),
                            pools=(pool,))
    [(listener, members)] = served(spec, lambda p, m: m.weight > 0)
    assert listener.id == "l" and [m.id for m in members] == ["a", "b"]   # once each, weight 0 and backup out
    assert least_loaded(members, Counter()).id == "a"                     # a tie: the first
    assert least_loaded(members, Counter({member_key(a): 1})).id == "b"
    assert least_loaded(members, Counter({member_key(a): 2, member_key(b): 2})).id == "a"
    assert [m.id for m in served(spec, lambda p, m: m.backup)[0][1]] == ["d"]   # no primary left: the backup


def test_a_tcp_connection_weighs_as_lvs_counts_it() -> None:
    """LVS's lc: 256 per established connection, 1 per connection opening or closing;
    a message without the state (an update of something else) keeps the weight."""
    from netbay.dataplane.lb.ctevents import Flow
    from netbay.dataplane.lb.leastconn import ACTIVE, INACTIVE, weight

    tcp = {state: Flow(b"k", 1, None, 6, state) for state in (1, 3, 4, 7, None)}
    assert weight(tcp[3]) == ACTIVE == 256
    assert weight(tcp[1]) == weight(tcp[4]) == weight(tcp[7]) == INACTIVE == 1   # SYN_SENT, FIN_WAIT, TIME_WAIT
    assert weight(tcp[None]) == INACTIVE and weight(tcp[None], ACTIVE) == ACTIVE
    assert weight(Flow(b"k", 1, None, 17)) == ACTIVE                           # UDP: while tracked
