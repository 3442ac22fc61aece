"""Swarm (and swarm-mode): Magnum's swarm templates' groups and node names.

Masters open the Docker API (2375/2376) and etcd (2379/2380) as Magnum's
swarmcluster template does; nodes take all traffic like Kubernetes minions.
"""

from __future__ import annotations

from netbay.coe.fragments.servers import masters_and_minions
from netbay.coe.fragments.types import CoeSpec, rule

SPEC = CoeSpec(
    name="swarm",
    master_prefix="swarm_master",
    minion_prefix="swarm_node",
    master_sg="secgroup_swarm_manager",
    minion_sg="secgroup_swarm_node",
    master_rules=(rule("tcp", 2375), rule("tcp", 2376), rule("tcp", 2379), rule("tcp", 2380)),
    minion_rules=(rule("icmp"), rule("tcp"), rule("udp")),
    api_port=2376,
    api_scheme="tcp",
    etcd_lb=True,
    nodes=masters_and_minions,
    standins=((2376, "swarm manager Docker API"), (2379, "etcd")),
)
