"""Kubernetes: the guide's kube master and minion security groups and node names."""

from __future__ import annotations

from netbay.coe.fragments.servers import masters_and_minions
from netbay.coe.fragments.types import CoeSpec, rule

SPEC = CoeSpec(
    name="kubernetes",
    master_prefix="kube_master",
    minion_prefix="kube_minion",
    master_sg="secgroup_kube_master",
    minion_sg="secgroup_kube_minion",
    # secgroup_kube_master, exactly as the networking guide lists it.
    master_rules=(rule("tcp", 7080), rule("tcp", 8080), rule("tcp", 2379), rule("tcp", 2380),
                  rule("tcp", 6443), rule("tcp", 30000, 32767)),
    # secgroup_kube_minion: all ICMP, TCP and UDP.
    minion_rules=(rule("icmp"), rule("tcp"), rule("udp")),
    api_port=6443,
    api_scheme="https",
    etcd_lb=True,
    nodes=masters_and_minions,
    standins=((6443, "kube-apiserver"), (2379, "etcd")),
)
