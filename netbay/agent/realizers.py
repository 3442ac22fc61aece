"""The realizers the agent composes by default: the dataplane's and the container
network drivers', each module imported only when its realizer is made (so each is
optional, and the agent's import pulls in none of them)."""

from __future__ import annotations

import logging

from netbay.dataplane.names import Names
from netbay.dataplane.realizers import Realizer, RouterRealizer, SecurityGroupRealizer

log = logging.getLogger("netbay.agent.agent")   # the agent's own log lines


def default_realizers(names: Names) -> list[Realizer]:
    """The realizers whose modules are present (each is optional)."""
    out: list[Realizer] = []
    for make in (SecurityGroupRealizer, RouterRealizer, _load_balancers, _cluster_networks, _taps, _qos,
                 _resolvers):
        try:
            out.append(make(names))
        except ImportError as exc:  # pragma: no cover - module absent
            log.info("netbay agent: no %s realizer (%s)", getattr(make, "name", make.__name__), exc)
    return out


def _load_balancers(names: Names) -> Realizer:
    """Load balancers through :mod:`netbay.dataplane.loadbalancer` (the VIP port is
    wired into ``<prefix>lb-<id>`` as ``vip`` by the fabric; the realizer does the rest)."""
    from netbay.dataplane.loadbalancer import LoadBalancerRealizer

    return LoadBalancerRealizer(names)


def _cluster_networks(names: Names) -> Realizer:
    """Cluster networks and pods through the container network drivers (:mod:`netbay.drivers.realizer`)."""
    from netbay.drivers.realizer import ClusterNetRealizer

    return ClusterNetRealizer(names)


def _resolvers(names: Names) -> Realizer:
    """Kuryr clusters' resolvers a controller left on this host, reaped with their port
    (:mod:`netbay.k8s.dns.reaper`)."""
    from netbay.k8s.dns.reaper import ResolverReaper

    return ResolverReaper(names)


def _qos(names: Names) -> Realizer:
    """QoS policies on ports' host ends through :mod:`netbay.dataplane.qos`."""
    from netbay.dataplane.qosrealizer import QosRealizer

    return QosRealizer(names)


def _taps(names: Names) -> Realizer:
    """Tap flows as tc mirrors through :mod:`netbay.dataplane.taas` (port mirroring)."""
    from netbay.dataplane.taas import TaasRealizer

    return TaasRealizer(names)
