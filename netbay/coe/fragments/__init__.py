"""Cluster fragments: the base cluster, one per COE, one per network driver.

``COES`` maps a COE to its spec (which carries its node fragment);
``NETWORK_DRIVERS`` maps a network driver to its fragment.
"""

from __future__ import annotations

from netbay.coe.fragments import calico, docker, flannel, kubernetes, kuryr, mesos, swarm
from netbay.coe.fragments.types import CoeSpec, FragmentFn

COES: dict[str, CoeSpec] = {
    "kubernetes": kubernetes.SPEC,
    "swarm": swarm.SPEC,
    "swarm-mode": swarm.SPEC,
    "mesos": mesos.SPEC,
}
NETWORK_DRIVERS: dict[str, FragmentFn] = {
    "flannel": flannel.fragment,
    "calico": calico.fragment,
    "docker": docker.fragment,
    "kuryr": kuryr.fragment,
}
