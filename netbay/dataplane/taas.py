"""The agent's realizer of Tap-as-a-Service: tap flows become tc mirrors in the fabric.

A flow is realized on its *source* port's tap (:mod:`netbay.dataplane.mirror`), so
the unit of work is a source port: whenever a flow, its tap service, the source
port or the tap service's port changes (a port rewired gets a new veth, and a
mirror names its target by ifindex), every mirror of that source is restated at
once. Any port on the fabric can be a source or a target — a sandbox's, a
container's, a cluster node's (which carries its pods' traffic off the node), a
router leg. A flow is ``ACTIVE`` when its copy runs, ``DOWN`` while either port is
not wired here, ``ERROR`` when the kernel refused; a tap service is ``ACTIVE``
while its port is wired.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from pyroute2.netlink.exceptions import NetlinkError

from netbay.dataplane import links, mirror, netns
from netbay.dataplane.names import Names

log = logging.getLogger(__name__)

SOURCES = "taas_sources"   # work key: source port ids whose mirrors to restate
Work = dict[str, set[str]]
Outcome = dict[str, dict[str, bool]]


class TaasRealizer:
    name = "taas"
    before_fabric = False

    def __init__(self, names: Names) -> None:
        self.names = names
        self.realized: dict[str, bool | None] = {}   # flow id -> running / refused / not wired (None)

    # -- what depends on what ----------------------------------------------------------------

    def expand(self, state: Any, t: Any, w: Work) -> None:
        """A flow's change concerns its source port (old and new); a port's change the
        sources mirroring from it or into it."""
        if t.collection == "tap_flows":
            w.setdefault(SOURCES, set()).update(t.values("source_port"))
        elif t.collection == "ports":
            w.setdefault(SOURCES, set()).update(_sources_touching(state, {t.id}))

    # -- realizing ----------------------------------------------------------------------------

    def resync(self, state: Any, fabric: Any, specs: Mapping[str, Any]) -> Outcome:
        self.realized.clear()
        ns = self.names.fabric
        if not netns.exists(ns):
            return {}
        sources = {f.get("source_port") for f in state.table("tap_flows").values()}
        stale = _mirrored_taps(ns) - {Names.tap(p) for p in sources if p}
        for tap in stale:   # mirrors nothing wants any more (a flow deleted while we were down)
            mirror.set_mirrors(ns, tap, [])
        return self._restate(state, {p for p in sources if p})

    def apply(self, state: Any, fabric: Any, work: Work, specs: Mapping[str, Any]) -> Outcome:
        if not netns.exists(self.names.fabric):
            self.realized.clear()
            return {}
        flows = state.table("tap_flows")
        sources = set(work.get(SOURCES, ()))
        sources |= {flows[f]["source_port"] for f in work.get("tap_flows", ()) if f in flows}
        sources |= _sources_touching(state, set(work.get("ports", ())))
        for fid in list(self.realized):
            if fid not in flows:
                del self.realized[fid]
        return self._restate(state, sources)

    def _restate(self, state: Any, sources: set[str]) -> Outcome:
        ns = self.names.fabric
        services = state.table("tap_services")
        by_source: dict[str, list[dict[str, Any]]] = {p: [] for p in sources}
        for flow in state.table("tap_flows").values():
            if flow.get("source_port") in by_source:
                by_source[flow["source_port"]].append(flow)
        done: dict[str, bool] = {}
        for source, flows in sorted(by_source.items()):
            wanted, placed = [], []
            for flow in sorted(flows, key=lambda f: f["id"]):
                service = services.get(flow.get("tap_service_id"))
                target = Names.tap(service["port_id"]) if service else None
                if target is None or links.get_link(ns, target) is None:
                    self.realized[flow["id"]] = None
                    continue
                wanted.append(mirror.Mirror(flow["direction"], target))
                placed.append(flow["id"])
            try:
                present = mirror.set_mirrors(ns, Names.tap(source), wanted)
            except (OSError, NetlinkError, ValueError) as exc:
                log.warning("netbay agent: mirrors of port %s: %s", source, exc)
                for fid in placed:
                    self.realized[fid] = done[fid] = False
                continue
            for fid in placed:
                self.realized[fid] = present or None
                done[fid] = True
        return {"tap_flows": done} if done else {}

    # -- status --------------------------------------------------------------------------------

    def statuses(self, state: Any, work: Work, everything: bool, outcomes: Any,
                 failed: Any) -> dict[str, dict[str, str]]:
        out: dict[str, dict[str, str]] = {}
        flows, services = state.table("tap_flows"), state.table("tap_services")
        for fid, flow in flows.items():
            if fid not in self.realized:
                continue
            ok = self.realized[fid]
            want = "ACTIVE" if ok else ("ERROR" if ok is False else "DOWN")
            if flow.get("status") != want:
                out.setdefault("tap_flows", {})[fid] = want
        ns = self.names.fabric
        ports = set(work.get("ports", ()))
        for sid, service in services.items():
            if not everything and sid not in work.get("tap_services", ()) and service["port_id"] not in ports:
                continue
            wired = netns.exists(ns) and links.get_link(ns, Names.tap(service["port_id"])) is not None
            want = "ACTIVE" if wired else "DOWN"
            if service.get("status") != want:
                out.setdefault("tap_services", {})[sid] = want
        return out


def _sources_touching(state: Any, port_ids: set[str]) -> set[str]:
    """Source ports whose mirrors involve any of ``port_ids`` (as source or as target)."""
    if not port_ids:
        return set()
    services = state.table("tap_services")
    into = {sid for sid, s in services.items() if s.get("port_id") in port_ids}
    return {f["source_port"] for f in state.table("tap_flows").values()
            if f.get("source_port") in port_ids or f.get("tap_service_id") in into}


def _mirrored_taps(ns: str) -> set[str]:
    """Taps of the fabric that hold a clsact qdisc (netbay puts one only for mirrors)."""
    ipr = links.ipr(ns)
    indexes = {q["index"] for q in ipr.get_qdiscs() if q.get_attr("TCA_KIND") == "clsact"}
    if not indexes:
        return set()
    return {link.ifname for link in links.links(ns) if link.index in indexes and link.ifname.startswith("tap")}


__all__ = ["SOURCES", "TaasRealizer"]
