"""The agent's QoS part: each wired port's policy (its own, else its network's) on its
host end in the fabric, through :mod:`netbay.dataplane.qos`.

A policy's change (its rules come with it) concerns the ports that use it directly or
through their network, and the routers of the floating IPs that use it (their limits
live in the router namespace: :mod:`netbay.dataplane.l3.fipqos`); a port's, network's
or floating IP's change is already the port's or router's work.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from netbay.dataplane import links, netns
from netbay.dataplane.names import Names
from netbay.dataplane.qos import FabricQos, PortQos, port_qos
from netbay.dataplane.realizers import Outcome, Work

log = logging.getLogger(__name__)


class QosRealizer:
    name = "qos"
    before_fabric = False   # the host end must exist

    def __init__(self, names: Names) -> None:
        self.names = names
        self.fq = FabricQos(names.fabric)
        self.applied: dict[str, PortQos] = {}   # port id -> what its host end holds

    def expand(self, state: Any, t: Any, w: Work) -> None:
        if t.collection != "policies":
            return
        nets = {n["id"] for n in state.networks.values() if n.get("qos_policy_id") == t.id}
        w.setdefault("ports", set()).update(
            p["id"] for p in state.ports.values()
            if p.get("qos_policy_id") == t.id or (not p.get("qos_policy_id") and p.get("network_id") in nets))
        w.setdefault("routers", set()).update(
            f["router_id"] for f in state.floatingips.values() if f.get("qos_policy_id") == t.id and f.get("router_id"))

    def resync(self, state: Any, fabric: Any, specs: Mapping[str, Any]) -> Outcome:
        self.applied.clear()
        self.fq = FabricQos(self.names.fabric)
        if not netns.exists(self.names.fabric):
            return {}
        wanted = {Names.tap(p) for p in specs}
        for ifname in (set(self.fq.marks()) | self.fq.policed()) - wanted:   # ports gone while we were down
            self.fq.forget_port(ifname)
        return self._apply(state, set(specs), specs)

    def apply(self, state: Any, fabric: Any, work: Work, specs: Mapping[str, Any]) -> Outcome:
        if not netns.exists(self.names.fabric):
            self.applied.clear()
            self.fq = FabricQos(self.names.fabric)
            return {}
        return self._apply(state, set(work.get("ports", ())), specs)

    def _apply(self, state: Any, port_ids: set[str], specs: Mapping[str, Any]) -> Outcome:
        policies = state.table("policies")
        failed: dict[str, bool] = {}
        for pid in sorted(port_ids):
            tap = Names.tap(pid)
            try:
                if pid not in specs or pid not in state.ports:
                    if self.applied.pop(pid, None) is not None:
                        self.fq.forget_port(tap)
                    continue
                want = port_qos(state.ports[pid], state.networks, policies)
                if self.applied.get(pid, PortQos()) == want and (pid in self.applied or want.empty):
                    continue
                self.fq.set_port(tap, want)
                self.applied[pid] = want
            except (OSError, ValueError, links.LinkError) as exc:
                log.warning("netbay agent: QoS of port %s: %s", pid, exc)
                failed[pid] = False
        return {"ports": failed} if failed else {}
