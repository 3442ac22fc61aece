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


def standins(coe: str | None, apiserver_port: int | None = None) -> dict[int, str]:
    """Port -> the service a stand-in on the cluster's masters answers for: the COE's own
    health-checked ports and the template's ``apiserver_port`` (the API load balancer's
    port when set), so every monitor and listener Magnum's templates point there finds one."""
    spec = COES.get(coe or "kubernetes") or COES["kubernetes"]
    out = dict(spec.standins)
    if apiserver_port:
        out.setdefault(int(apiserver_port), spec.standins[0][1])
    return out
