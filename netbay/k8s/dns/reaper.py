"""The agent's part of the cluster resolvers: none outlives its port or its agent.

A controller (``netbay k8s apply``, ``netbay k8s watch``) starts a cluster's resolver
detached (:mod:`.process`) and may be long gone when the cluster goes — the server
deletes the resolver's port with the cluster. The dataplane agent of the same prefix
follows the ports anyway, so it is the one that reaps: a resolver whose port (a node
cluster's: whose pod, :mod:`.nodes`) was deleted (a change), or is absent from a snapshot although the resolver was already
on this host when the snapshot was asked for (a restart after the agent was
killed) — never one made after it, whose port the snapshot may not hold yet. When
the agent stops, every resolver of its prefix stops with it (:meth:`release`); the
next pass of a controller starts it again.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from netbay.dataplane import netns
from netbay.dataplane.names import Names
from netbay.k8s.dns.process import POD_PREFIX, Process, namespace, port_ids, state_root, stop_all

log = logging.getLogger(__name__)


def _live(state: Any) -> set[str]:
    """What a resolver on this host may belong to: a port (kuryr's), or a pod (a node cluster's)."""
    return set(state.ports) | {POD_PREFIX + p for p in state.table("pods")}


class ResolverReaper:
    """A realizer (:class:`netbay.dataplane.realizers.Realizer`) that only removes."""

    name = "resolvers"
    before_fabric = False

    def __init__(self, names: Names) -> None:
        self.prefix = names.prefix
        self._before: set[str] = set()   # resolvers on this host before the last snapshot was asked for

    def before_snapshot(self) -> None:
        self._before = port_ids(self.prefix)

    def resync(self, state: Any, fabric: Any, specs: Mapping[str, Any]) -> dict:
        for port_id in sorted(self._before - _live(state)):
            self.reap(port_id)
        self._before = set()
        return {}

    def apply(self, state: Any, fabric: Any, work: Mapping[str, set[str]], specs: Mapping[str, Any]) -> dict:
        pods = state.table("pods")
        deleted = {p for p in work.get("ports") or () if p not in state.ports} | \
            {POD_PREFIX + p for p in work.get("pods") or () if p not in pods}
        if deleted:
            for port_id in sorted(deleted & port_ids(self.prefix)):
                self.reap(port_id)
        return {}

    def reap(self, port_id: str) -> None:
        """Its process, files and namespace (the namespace's veth goes with it)."""
        ns = namespace(self.prefix, port_id)
        log.info("netbay agent: removing the cluster resolver of deleted port %s", port_id)
        Process(state_root(self.prefix), port_id, ns).remove()
        netns.delete(ns)

    def release(self) -> None:
        """The agent stops: so do the resolvers of its prefix (their files go too)."""
        for port_id in stop_all(self.prefix):
            log.info("netbay agent: stopped the cluster resolver of port %s", port_id)


__all__ = ["ResolverReaper"]
