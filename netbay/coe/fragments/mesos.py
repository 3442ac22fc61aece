"""Mesos: Magnum's mesos templates' groups and node names (masters and slaves).

Masters open Mesos (5050) and Marathon (8080); there is no etcd, so no etcd
load balancer.
"""

from __future__ import annotations

from netbay.coe.fragments.servers import masters_and_minions
from netbay.coe.fragments.types import CoeSpec, rule

SPEC = CoeSpec(
    name="mesos",
    master_prefix="mesos_master",
    minion_prefix="mesos_slave",
    master_sg="secgroup_mesos_master",
    minion_sg="secgroup_mesos_slave",
    master_rules=(rule("tcp", 5050), rule("tcp", 8080)),
    minion_rules=(rule("icmp"), rule("tcp"), rule("udp")),
    api_port=8080,
    api_scheme="http",
    etcd_lb=False,
    nodes=masters_and_minions,
    standins=((8080, "Marathon"), (5050, "mesos-master")),
)
