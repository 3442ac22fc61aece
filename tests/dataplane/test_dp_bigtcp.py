"""BIG TCP per path: the probe's outcome decides the GSO limit the product's links get.

The links are made by the product (fabric ports, ``pods.attach`` bridged and routed,
a VXLAN-backed pod) and read back with pyroute2. Where a test forces the probe's
outcome it replaces only the measurement (``gsoprobe.measure``) with fixed figures;
the decision rule, the cache and the wiring are the product's. One test runs the
real probe on a path.
"""

from __future__ import annotations

import json
import os
import sys

import pytest

from netbay.dataplane import bigtcp, gsoprobe, links, netns
from netbay.dataplane.fabric import Consumer, Fabric, PortSpec
from netbay.dataplane.names import Names
from netbay.drivers import node as nodelib, pods
from netbay.drivers.node import Node

from .cluster_net import tcp_exchange
from .dp_helpers import PREFIX
from tests import zygote

BIG, DEFAULT = bigtcp.GSO_MAX_SIZE, 65536


@pytest.fixture
def fresh_decision(tmp_path, monkeypatch):
    """No decision in this process, an empty cache of our own, no setting."""
    monkeypatch.setenv(bigtcp.CACHE_ENV, str(tmp_path / "bigtcp.json"))
    monkeypatch.delenv(bigtcp.ENV, raising=False)
    bigtcp.force(None)
    yield tmp_path / "bigtcp.json"
    bigtcp.force(None)


def gso(ns: str, ifname: str) -> tuple[int, int]:
    """(IFLA_GSO_MAX_SIZE, IFLA_GSO_IPV4_MAX_SIZE) of a link, read with pyroute2."""
    (msg,) = links.ipr(ns).get_links(ifname=ifname)
    return msg.get_attr("IFLA_GSO_MAX_SIZE"), msg.get_attr("IFLA_GSO_IPV4_MAX_SIZE") or msg.get_attr(
        "IFLA_GSO_MAX_SIZE")


def wire_all(make_ns, tag: str) -> dict[str, list[tuple[str, str]]]:
    """A fabric port and a bridged, a routed and a VXLAN-backed pod, made by the product:
    path -> the links whose limit follows that path's decision."""
    names = Names(PREFIX + tag)
    fab = Fabric(names)
    sandbox = make_ns(f"{tag}s")
    port = PortSpec("b1970000-0000-4000-8000-00000000000" + tag[-1], "net" + tag,
                    Consumer("sandbox", "s1", sandbox, "eth0"), "fa:16:3e:00:00:01", ("10.61.0.5/24",), 1500, True)
    try:
        fab.ensure_port(port)
    finally:
        made_fabric.append(fab)
    n = make_ns(f"{tag}n")
    node = Node(n, "10.9.0.10/24", "10.100.1.0/24")
    links.bridge(n, "eth0x", 1500)   # the node's only IPv4 address (routed pods ARP from it)
    links.add_address(n, "eth0x", "10.9.0.10/24")
    nodelib.enable_forwarding(n)
    nodelib.ensure_cni_bridge(node, 1450)
    bp, rp, vp = make_ns(f"{tag}b"), make_ns(f"{tag}r"), make_ns(f"{tag}v")
    lb = pods.attach(n, bp, address="10.100.1.2/24", gateway="10.100.1.1", mtu=1450)
    lr = pods.attach(n, rp, address="10.100.2.5/32", gateway=pods.ROUTED_GATEWAY, mtu=1450, bridge=None)
    lv = pods.attach(n, vp, address="10.100.1.3/24", gateway="10.100.1.1", mtu=1450, big_packets=False)
    assert tcp_exchange(vp, bp, "10.100.1.2")[0] == "10.100.1.3"   # packets flow either way
    return {"fabric": [(sandbox, "eth0"), (names.fabric, Names.tap(port.port_id))],
            "pod-bridged": [(bp, "eth0"), (n, lb.host_ifname), (n, "cni0")],
            "pod-routed": [(rp, "eth0"), (n, lr.host_ifname)],
            "pod-vxlan": [(vp, "eth0"), (n, lv.host_ifname)]}


made_fabric: list[Fabric] = []


@pytest.fixture(autouse=True)
def _remove_fabrics():
    yield
    while made_fabric:
        made_fabric.pop().remove()


F = gsoprobe.Figures
WHOLE, CUT = (60_000, 150_000), (60_000, 1_448)   # mean packet sizes at the receiver, 64 KiB / 192 KiB
OUTCOMES = {
    # path -> what the probe would report; the last figure in each row is the expected decision
    "big-wins": {"fabric": (F(12.0, 24.0, *WHOLE), True), "pod-bridged": (F(11.0, 13.5, *WHOLE), True),
                 "pod-routed": (F(11.0, 9.0, *WHOLE), True)},      # busy machine: slower, still >= 75%
    "big-loses": {"fabric": (F(12.0, 8.0, *WHOLE), False),          # whole but clearly slower
                  "pod-bridged": (F(11.3, 4.5, *CUT), False), "pod-routed": (F(11.0, 12.0, *CUT), False)},
    "this-machine": {"fabric": (F(12.4, 24.9, *WHOLE), True), "pod-bridged": (F(11.3, 4.5, *CUT), False),
                     "pod-routed": (F(11.0, 3.0, *CUT), False)},
}


def figures_of(outcome: str) -> dict[str, gsoprobe.Figures]:
    return {p: f for p, (f, _) in OUTCOMES[outcome].items()}


@pytest.mark.parametrize("outcome", sorted(OUTCOMES))
def test_probe_outcome_decides_the_links_gso(make_ns, fresh_decision, monkeypatch, outcome):
    figures = figures_of(outcome)
    monkeypatch.setattr(gsoprobe, "measure", lambda paths, big, **kw: {p: figures[p] for p in paths})
    decision = bigtcp.decide()
    want = {p: big for p, (_, big) in OUTCOMES[outcome].items()} | {"pod-vxlan": False}
    assert {p: d.big for p, d in decision.paths.items()} == want
    assert decision.paths["pod-bridged"].default_gbps == figures["pod-bridged"].default_gbps
    assert decision.paths["pod-bridged"].big_packet == figures["pod-bridged"].big_packet
    made = wire_all(make_ns, outcome[:3] + "1")
    for path, devs in made.items():
        for ns, ifname in devs:
            assert gso(ns, ifname) == ((BIG, BIG) if want[path] else (DEFAULT, DEFAULT)), (path, ifname)


def test_cache_spares_the_next_start_the_probe(fresh_decision, monkeypatch):
    figures = figures_of("this-machine")
    monkeypatch.setattr(gsoprobe, "measure", lambda paths, big, **kw: {p: figures[p] for p in paths})
    first = bigtcp.decide()
    assert first.probe_ms is not None
    saved = json.loads(fresh_decision.read_text())
    assert saved["host"] == bigtcp.host_key() and saved["paths"]["fabric"]["big"] is True

    def no_probe(paths, big, **kw):
        raise AssertionError(f"probed again: {paths}")

    monkeypatch.setattr(gsoprobe, "measure", no_probe)
    bigtcp.force(None)                        # a new agent start on the same boot
    again = bigtcp.decide()
    assert {p: d.big for p, d in again.paths.items()} == {p: d.big for p, d in first.paths.items()}
    assert {d.source for p, d in again.paths.items() if p != "pod-vxlan"} == {"cache"}
    # another boot (or kernel): the cache does not apply
    saved["host"] = "other/boot"
    fresh_decision.write_text(json.dumps(saved))
    bigtcp.force(None)
    failed = bigtcp.decide()   # it probes (here: fails, and falls back to the kernel's default)
    assert {(d.big, d.source) for p, d in failed.paths.items() if p != "pod-vxlan"} == {(False, "error")}
    assert "probed again" in failed.paths["fabric"].note
    assert json.loads(fresh_decision.read_text())["host"] == "other/boot"   # a failure is not remembered


def test_setting_overrides_the_probe(make_ns, fresh_decision, monkeypatch):
    monkeypatch.setattr(gsoprobe, "measure", lambda paths, big, **kw: {p: figures_of("big-wins")[p] for p in paths})
    monkeypatch.setenv(bigtcp.ENV, "pod-bridged=off,fabric=on")
    d = bigtcp.decide()
    assert (d.paths["pod-bridged"].big, d.paths["pod-bridged"].source) == (False, "setting")
    assert (d.paths["pod-routed"].big, d.paths["pod-routed"].source) == (True, "probe")
    assert bigtcp.gso_max_size("pod-bridged") is None and bigtcp.gso_max_size("fabric") == BIG
    made = wire_all(make_ns, "set1")
    assert all(gso(ns, i) == (DEFAULT, DEFAULT) for ns, i in made["pod-bridged"])
    assert all(gso(ns, i) == (BIG, BIG) for ns, i in made["pod-routed"])
    bigtcp.force(None)
    monkeypatch.setenv(bigtcp.ENV, "off")
    assert not any(p.big for p in bigtcp.decide().paths.values())
    bigtcp.force(None)
    monkeypatch.setenv(bigtcp.ENV, "pod-bridged=maybe")
    with pytest.raises(ValueError, match="pod-bridged=maybe"):
        bigtcp.decide()


def test_real_probe_tells_whole_from_cut_up_packets():
    """The decisive figure: through the fabric BIG TCP's packets arrive whole; a pod's
    through a node eth0 at 192 KiB too; through an eth0 at 64 KiB they arrive either
    whole or cut into MTU-sized segments (this project's 6.18 build: cut), nothing between."""
    fabric = gsoprobe.measure(["fabric"], BIG, seconds=0.05, rounds=1)["fabric"]
    if fabric.big_packet <= 65536:
        pytest.skip(f"this kernel builds no IPv4 packets above 64 KiB: {fabric}")
    cut = gsoprobe.measure(["pod-bridged"], BIG, seconds=0.05, rounds=1)["pod-bridged"]
    whole = gsoprobe.measure(["pod-bridged"], BIG, seconds=0.05, rounds=1, underlay_gso=BIG)["pod-bridged"]
    assert fabric.whole, fabric
    assert whole.whole and whole.big_packet > 65536, whole
    assert (not cut.whole and cut.big_packet < 3000) or cut.big_packet > 65536, cut


@pytest.mark.parametrize("path", ["fabric", "pod-routed"])
def test_real_probe_measures_both_limits_and_cleans_up(path):
    before = set(netns.list("nb-gso"))
    figures = gsoprobe.measure([path], BIG, seconds=0.05, rounds=1)
    f = figures[path]
    assert f.default_gbps > 0.1 and f.big_gbps > 0.1, figures   # TCP really flowed through both copies
    assert 1000 < f.default_packet <= 65536 + 100 and 1000 < f.big_packet <= BIG + 100, figures
    assert set(netns.list("nb-gso")) == before
    assert not any(n.startswith(f"nb-gso{os.getpid() % 100000}") for n in netns.list("nb-gso"))


def test_pod_paths_are_probed_over_the_fabric_s_eth0_limit(fresh_decision, monkeypatch):
    """A node's eth0 is a fabric port: the pod paths are measured over an eth0 with the
    fabric's decision, and their cached figures count only for that limit."""
    asked = []

    def measure(paths, big, underlay_gso=None):
        asked.append((tuple(paths), underlay_gso))
        return {p: figures_of("this-machine")[p] for p in paths}

    monkeypatch.setattr(gsoprobe, "measure", measure)
    bigtcp.decide()
    assert asked == [(("fabric",), None), (("pod-bridged", "pod-routed"), BIG)]
    bigtcp.force(None)
    monkeypatch.setenv(bigtcp.ENV, "fabric=off")   # now node eth0s stay at 64 KiB: measure again
    d = bigtcp.decide()
    assert asked[-1] == (("pod-bridged", "pod-routed"), None)
    assert d.paths["pod-bridged"].underlay_gso is None and d.paths["fabric"].source == "setting"


def test_a_pod_never_gets_more_than_its_node_s_eth0(make_ns, fresh_decision):
    bigtcp.force({"pod-bridged": True, "pod-routed": True})
    n = make_ns("capn")
    node = Node(n, "10.9.0.10/24", "10.100.1.0/24")
    links.bridge(n, "eth0", 1500)    # the node's way out, at the kernel's 64 KiB
    nodelib.enable_forwarding(n)
    nodelib.ensure_cni_bridge(node, 1450)
    capped, free = make_ns("capa"), make_ns("capb")
    lc = pods.attach(n, capped, address="10.100.1.2/24", gateway="10.100.1.1", mtu=1450, underlay="eth0")
    assert gso(capped, "eth0") == gso(n, lc.host_ifname) == (DEFAULT, DEFAULT)
    assert gso(n, "cni0") == (DEFAULT, DEFAULT)
    lf = pods.attach(n, free, address="10.100.2.5/32", gateway=pods.ROUTED_GATEWAY, mtu=1450, bridge=None)
    assert gso(free, "eth0") == gso(n, lf.host_ifname) == (BIG, BIG)   # no underlay named: the decision


def test_doctor_reports_the_decision_and_its_figures(fresh_decision, monkeypatch):
    figures = figures_of("this-machine")
    monkeypatch.setattr(gsoprobe, "measure", lambda paths, big, **kw: {p: figures[p] for p in paths})
    bigtcp.decide()   # what an agent start leaves in the per-host cache
    env = {**os.environ, bigtcp.CACHE_ENV: str(fresh_decision), bigtcp.ENV: "pod-routed=on"}
    r = zygote.run([sys.executable, "-m", "netbay.cli.main", "doctor", "--json"], env=env,
                   capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    got = json.loads(r.stdout)["big_tcp"]
    assert got["cache"] == str(fresh_decision)
    paths = got["paths"]
    assert (paths["fabric"]["big"], paths["fabric"]["source"], paths["fabric"]["big_gbps"]) == (True, "cache", 24.9)
    assert (paths["pod-bridged"]["big"], paths["pod-bridged"]["big_packet"]) == (False, CUT[1])
    assert (paths["pod-routed"]["big"], paths["pod-routed"]["source"]) == (True, "setting")
    assert (paths["pod-vxlan"]["big"], paths["pod-vxlan"]["source"]) == (False, "fixed")
    r = zygote.run([sys.executable, "-m", "netbay.cli.main", "doctor"], env={**env, bigtcp.ENV: "sometimes"},
                   capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "NETBAY_BIG_TCP='sometimes'" in r.stdout
