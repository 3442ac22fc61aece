"""Packets through a real OVN: two containers on one logical switch, on two chassis,
talk over Geneve in OVS's userspace datapath; an OVN ACL drops, then lets through;
the lab leaves nothing behind."""

from __future__ import annotations

import pytest

from netbay.dataplane import netns
from tests.dataplane.dp_helpers import ping, root_snapshot

from .daemons import processes_under
from .guards import check_root_unchanged, stop_lab
from .lab import OvnLab, Pair, plug_pair
from .probes import reaches, tcp_arrives

pytestmark = pytest.mark.ovn


def test_ports_bound_to_their_chassis(ovn_lab: OvnLab, ovn_pair: Pair) -> None:
    assert ovn_lab.bound_chassis(ovn_pair.a.port) == ovn_lab.hvs[0].chassis
    assert ovn_lab.bound_chassis(ovn_pair.b.port) == ovn_lab.hvs[1].chassis
    # the two chassis have Geneve tunnels to each other on br-int
    for hv, other in ((ovn_lab.hvs[0], ovn_lab.hvs[1]), (ovn_lab.hvs[1], ovn_lab.hvs[0])):
        tunnels = hv.vsctl("--bare", "--columns=options", "find", "Interface", "type=geneve")
        assert f"remote_ip={other.encap_ip}" in tunnels.replace('"', "")


def test_ping_across_chassis(ovn_lab: OvnLab, ovn_pair: Pair) -> None:
    assert reaches(ovn_pair.a, ovn_pair.b)
    assert reaches(ovn_pair.b, ovn_pair.a)
    # it really crossed the underlay: each echo left a's chassis on br-phy's uplink
    before = ovn_lab.hvs[0].uplink_tx_packets()
    assert sum(ping(ovn_pair.a.ns, ovn_pair.b.ip, timeout=1.0) for _ in range(5)) == 5
    assert ovn_lab.hvs[0].uplink_tx_packets() - before >= 5


def test_tcp_across_chassis(ovn_lab: OvnLab, ovn_pair: Pair) -> None:
    """1 MiB over TCP arrives intact (checksums right after the userspace tunnel: see
    netbay.runtime.vif.checksum_in_software)."""
    a, b = ovn_pair.a, ovn_pair.b
    assert reaches(a, b)
    assert tcp_arrives(a.ns, b.ns, b.ip)


def test_acl_drops_then_allows(ovn_lab: OvnLab, ovn_pair: Pair) -> None:
    a, b = ovn_pair.a, ovn_pair.b
    assert reaches(a, b)
    ovn_lab.nbctl("acl-add", ovn_pair.switch, "to-lport", "1001",
                  f'outport == "{b.port}" && ip4 && icmp4', "drop")
    ovn_lab.sync()
    try:
        assert not any(ping(a.ns, b.ip, timeout=0.5) for _ in range(4)), "ACL drop let ICMP through"
    finally:
        ovn_lab.nbctl("acl-del", ovn_pair.switch)
        ovn_lab.sync()
    assert reaches(a, b, tries=5)


def test_teardown_leaves_nothing() -> None:
    """A lab of its own, used then stopped: no daemon of it, no namespace of it, the
    root namespace as before (and never an ovs-system or br-int there)."""
    before = root_snapshot()
    lab = OvnLab(hypervisors=2)
    try:
        lab.start()
        pair = plug_pair(lab, "ls-td")
        assert reaches(pair.a, pair.b)
        during = root_snapshot()["ip -o link"]
        assert not [ln for ln in during if "ovs-system" in ln or "br-int" in ln or "br-phy" in ln]
        pids = [d.pid for d in lab.daemons()]
        names = list(lab.namespaces)
    finally:
        stop_lab(lab)
    assert not processes_under(lab.dir)
    for pid in pids:
        assert not _running(pid), f"daemon pid {pid} still running"
    assert not [n for n in names if netns.exists(n)]
    check_root_unchanged(before)


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except (FileNotFoundError, IndexError):
        return False
