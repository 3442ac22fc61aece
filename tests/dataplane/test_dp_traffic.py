"""Real packets: sandboxes wired to bridges in a fabric namespace, filtered by nftables.

Topology (all in namespaces this test makes)::

    sandbox a 10.0.0.1 ─┐
                        ├─ bridge br1 ─┐
    sandbox b 10.0.0.2 ─┘              ├─ fabric namespace
    sandbox c 10.0.0.3 ─── bridge br2 ─┘

a and b share a network; c has an address in the same range on another network and
must stay unreachable.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

import pytest

from netbay.dataplane import links, netns
from netbay.dataplane.nft import Nft
from .dp_helpers import RUN_ID, ifname, ping

TABLE = f"nbt{RUN_ID}"


@dataclass
class Topo:
    fabric: str
    a: str
    b: str
    c: str


@pytest.fixture
def topo(make_ns) -> Topo:
    fab = make_ns("tfab")
    t = Topo(fab, make_ns("ta"), make_ns("tb"), make_ns("tc"))
    links.bridge(fab, "br1", 1450)
    links.bridge(fab, "br2", 1450)
    for n, (sb, br, tag) in enumerate(((t.a, "br1", "a"), (t.b, "br1", "b"),
                                       (t.c, "br2", "c")), start=1):
        links.wire_port(fab, br, sb, host_ifname=ifname(tag), mac=f"fa:16:3e:00:00:0{n}",
                        cidrs=[f"10.0.0.{n}/24"], gateway="10.0.0.254", mtu=1450)
    return t


def test_same_bridge_reaches_other_bridge_does_not(topo):
    assert ping(topo.a, "10.0.0.2", count=3)
    assert ping(topo.b, "10.0.0.1", count=3)
    assert not ping(topo.a, "10.0.0.3", timeout=0.5, count=2)
    assert not ping(topo.c, "10.0.0.1", timeout=0.5, count=2)


def test_tcp_between_sandboxes_in_process(topo):
    """Sockets opened inside each sandbox talk over the bridge (no fork, no exec)."""
    with netns.entered(topo.b):
        srv = socket.socket()
    with netns.entered(topo.a):
        cli = socket.socket()
    try:
        srv.bind(("10.0.0.2", 0))
        srv.listen(1)
        srv.settimeout(5)
        cli.settimeout(5)
        cli.connect(("10.0.0.2", srv.getsockname()[1]))
        conn, peer = srv.accept()
        with conn:
            assert peer[0] == "10.0.0.1"
            cli.sendall(b"hello netbay")
            assert conn.recv(64) == b"hello netbay"
    finally:
        cli.close()
        srv.close()


def _install_filter(fabric: str) -> Nft:
    nft = Nft(fabric)
    nft.run({"nftables": [
        {"add": {"table": {"family": "inet", "name": TABLE}}},
        {"add": {"set": {"family": "inet", "table": TABLE, "name": "blocked",
                         "type": "ipv4_addr"}}},
        {"add": {"chain": {"family": "inet", "table": TABLE, "name": "c_forward",
                           "type": "filter", "hook": "forward", "prio": 0,
                           "policy": "accept"}}},
        {"add": {"rule": {"family": "inet", "table": TABLE, "chain": "c_forward", "expr": [
            {"match": {"op": "==", "left": {"meta": {"key": "l4proto"}}, "right": "icmp"}},
            {"match": {"op": "==", "left": {"payload": {"protocol": "ip", "field": "saddr"}},
                       "right": "@blocked"}},
            {"counter": None},
            {"drop": None},
        ]}}},
    ]})
    return nft


def _drop_count(nft: Nft) -> int:
    for o in nft.list_ruleset():
        if "rule" in o:
            for e in o["rule"]["expr"]:
                if "counter" in e:
                    return e["counter"]["packets"]
    raise AssertionError("no counter in the ruleset")


def test_nft_set_element_drops_bridged_icmp(topo):
    links.sysctl(topo.fabric, "net.bridge.bridge-nf-call-iptables", 1)
    nft = _install_filter(topo.fabric)
    assert ping(topo.a, "10.0.0.2", count=3)

    nft.add_elements("inet", TABLE, "blocked", ["10.0.0.1"])
    assert not ping(topo.a, "10.0.0.2", timeout=0.5, count=2)
    dropped = _drop_count(nft)
    assert dropped >= 2
    assert ping(topo.b, "10.0.0.1", timeout=0.5, count=2) is False  # replies from a dropped
    assert ping(topo.a, "10.0.0.2", timeout=0.3) is False

    nft.delete_elements("inet", TABLE, "blocked", ["10.0.0.1"])
    assert ping(topo.a, "10.0.0.2", count=3)
    assert ping(topo.b, "10.0.0.1", count=3)


def test_without_bridge_nf_call_the_inet_hook_does_not_see_bridged_traffic(topo):
    """Why the fabric sets net.bridge.bridge-nf-call-iptables=1 (per namespace)."""
    links.sysctl(topo.fabric, "net.bridge.bridge-nf-call-iptables", 0)
    nft = _install_filter(topo.fabric)
    nft.add_elements("inet", TABLE, "blocked", ["10.0.0.1"])
    assert ping(topo.a, "10.0.0.2", count=3)
    assert _drop_count(nft) == 0
    links.sysctl(topo.fabric, "net.bridge.bridge-nf-call-iptables", 1)
    assert not ping(topo.a, "10.0.0.2", timeout=0.5, count=2)
