"""What the agent keeps in step with the state, part by part: the ``Realizer``
protocol, and the realizers of routers and security groups (load balancers, tap
flows and cluster networks have theirs in their own modules).

They live in the dataplane, beside the kernel work they drive; the agent
(:mod:`netbay.agent`) only composes them.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from netbay.dataplane import netns
from netbay.dataplane.fabric import Fabric, PortSpec
from netbay.dataplane.names import Names
from netbay.dataplane.sg.addressgroups import groups_naming, with_address_groups
from netbay.dataplane.state import State

log = logging.getLogger(__name__)

# collection -> ids to reconcile
Work = dict[str, set[str]]
# collection -> id -> realized?
Outcome = dict[str, dict[str, bool]]


class Realizer(Protocol):
    """A part of the dataplane the agent keeps in step with the state.

    ``resync`` makes everything the realizer owns match ``state`` (adopt, build,
    remove the rest); ``apply`` does the same for the ids of ``work`` only. ``specs``
    are the wanted port wirings (all of them for ``resync``, those of ``work`` for
    ``apply``). A realizer with ``before_fabric`` runs before the ports are wired
    (security groups: a port is filtered before its first packet), the others after
    (routers need their legs). Both return what they realized or failed to, by
    collection and id, which becomes status (a router ``ACTIVE`` or ``ERROR``).
    """

    name: str
    before_fabric: bool

    def resync(self, state: State, fabric: Fabric, specs: Mapping[str, PortSpec]) -> Outcome: ...

    def apply(self, state: State, fabric: Fabric, work: Work, specs: Mapping[str, PortSpec]) -> Outcome: ...

    # Optional (looked up with getattr): ``attach(report)`` hands a realizer with work
    # of its own (health checks) the agent's status reporter; ``stop()`` ends that work
    # when the agent stops; ``release()`` stops the processes it runs (haproxy,
    # resolvers) when the agent is told to stop (a killed one leaves them to be adopted);
    # ``before_snapshot()`` looks at the host just before a resync's snapshot is asked
    # for; ``statuses(state, work, everything, outcomes, failed)`` returns the
    # realizer's own status report (load balancer trees).


class RouterRealizer:
    """Routers through :mod:`netbay.dataplane.router` (namespace, forwarding, NAT)."""

    name = "routers"
    before_fabric = False

    def __init__(self, names: Names) -> None:
        from netbay.dataplane import router

        self.router = router
        self.names = names
        self.metering: Any = None   # a MeteringReporter once attached

    def attach_metering(self, send: Callable[[Mapping[str, Any]], Any]) -> None:
        """Where the metering counts go (the agent's ``PUT /netbay/v1/metering``)."""
        from netbay.dataplane.l3.meterreport import MeteringReporter

        self.metering = MeteringReporter(send)
        self.metering.start()

    def stop(self) -> None:
        if self.metering is not None:
            self.metering.stop()

    def _ensure(self, state: State, rid: str) -> bool:
        r = self.router
        try:
            spec = r.from_api(state.routers[rid], list(state.ports_of(rid)), state.subnets,
                              state.floatingips.values(), self.names, state.table("subnetpools"),
                              (state.table("metering_labels"), state.table("metering_label_rules")),
                              state.table("policies"))
            if self.metering is not None:
                if spec.metering:
                    self.metering.metered[rid] = spec.ns
                else:
                    self.metering.metered.pop(rid, None)
            r.ensure(spec)
        except Exception as exc:  # noqa: BLE001 - reported as the router's status
            log.warning("netbay agent: router %s: %s", rid, exc)
            return False
        return True

    def resync(self, state: State, fabric: Fabric, specs: Mapping[str, PortSpec]) -> Outcome:
        for rid in self.router.observed_routers(self.names) - set(state.routers):
            self.router.remove_router(self.names.router(rid))
        return {"routers": {rid: self._ensure(state, rid) for rid in state.routers}}

    def apply(self, state: State, fabric: Fabric, work: Work, specs: Mapping[str, PortSpec]) -> Outcome:
        done: dict[str, bool] = {}
        for rid in work.get("routers", ()):
            if rid in state.routers:
                done[rid] = self._ensure(state, rid)
            else:
                self.router.remove_router(self.names.router(rid))
                if self.metering is not None:
                    self.metering.metered.pop(rid, None)
        return {"routers": done}


class SecurityGroupRealizer:
    """Security groups through :mod:`netbay.dataplane.secgroups`, in the fabric.

    Runs before the fabric wires a port, so the port is filtered from its first
    packet. The agent chooses each port's mark (unique, 1..65535, reassigned at a
    resync) and each network's conntrack zone (its segmentation id).
    """

    name = "security_groups"
    before_fabric = True

    def __init__(self, names: Names) -> None:
        from netbay.dataplane import secgroups

        self.module = secgroups
        self.names = names
        self.sg: Any = None
        self.marks: dict[str, int] = {}
        self._next = 1

    def _groups(self) -> Any:
        if self.sg is None:
            self.sg = self.module.SecurityGroups(self.names.fabric)
        return self.sg

    def _mark(self, port_id: str) -> int:
        mark = self.marks.get(port_id)
        if mark is None:
            used = set(self.marks.values())
            for _ in range(self.module.MAX_MARK):
                if self._next > self.module.MAX_MARK:
                    self._next = 1
                if self._next not in used:
                    break
                self._next += 1
            else:
                raise RuntimeError("no free port mark: more than 65535 ports in one fabric")
            mark = self.marks[port_id] = self._next
            self._next += 1
        return mark

    @staticmethod
    def _zone(state: State, network_id: str) -> int:
        seg = (state.networks.get(network_id) or {}).get("provider:segmentation_id")
        if isinstance(seg, int) and 0 < seg <= 0xFFFF:
            return seg
        return (zlib.crc32(network_id.encode()) % 0xFFFF) + 1

    def expand(self, state: State, t: Any, w: Work) -> None:
        """An address group's change concerns the groups whose rules name it."""
        if t.collection == "address_groups":
            w.setdefault("security_groups", set()).update(
                groups_naming(state.table("security_groups"), t.id))

    @staticmethod
    def _group(state: State, group: Mapping[str, Any]) -> Mapping[str, Any]:
        return with_address_groups(group, state.table("address_groups"))

    def _entry(self, state: State, spec: PortSpec) -> tuple[Mapping[str, Any], int, int]:
        return state.ports[spec.port_id], self._mark(spec.port_id), self._zone(state, spec.network_id)

    def _reset(self) -> None:
        if self.sg is not None:
            self.sg.close()
        self.sg, self.marks, self._next = None, {}, 1

    def resync(self, state: State, fabric: Fabric, specs: Mapping[str, PortSpec]) -> Outcome:
        self._reset()
        if not netns.exists(self.names.fabric):
            return {}
        ports = [self._entry(state, specs[p]) for p in sorted(specs)]
        self._groups().sync(ports, [self._group(state, g) for g in state.table("security_groups").values()])
        return {}

    def apply(self, state: State, fabric: Fabric, work: Work, specs: Mapping[str, PortSpec]) -> Outcome:
        if not netns.exists(self.names.fabric):
            self._reset()
            return {}
        sg = self._groups()
        groups = state.table("security_groups")
        failed: dict[str, bool] = {}
        with sg.batch():  # the whole pass in one nft transaction
            for gid in sorted(work.get("security_groups", ())):
                if gid in groups:
                    sg.ensure_group(self._group(state, groups[gid]))
                else:
                    sg.remove_group(gid)
            for pid in sorted(work.get("ports", ())):
                try:
                    if pid in specs:
                        sg.ensure_port(*self._entry(state, specs[pid]))
                    elif pid in self.marks:
                        sg.remove_port(pid)
                        del self.marks[pid]
                except (ValueError, OSError, RuntimeError) as exc:
                    log.warning("netbay agent: security groups of port %s: %s", pid, exc)
                    failed[pid] = False
        return {"ports": failed} if failed else {}

