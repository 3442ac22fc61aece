"""The agent's in-memory copy of desired state, fed by ``/state`` and ``/changes``.

Resources are kept exactly as the API renders them (Neutron JSON), by collection
and id, with the two indexes reconcilers need on every change (ports by network
and by device). Applying a change returns what it touched, with the previous
rendering, so the agent can find everything that depended on the old version
(a port that moved from one sandbox to another concerns both).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

Resource = dict[str, Any]

# change "resource" (the API's member name) -> collection
_COLLECTIONS = {
    "network": "networks", "subnet": "subnets", "subnetpool": "subnetpools", "port": "ports",
    "security_group": "security_groups", "security_group_rule": "security_group_rules",
    "router": "routers", "floatingip": "floatingips", "sandbox": "sandboxes",
    "loadbalancer": "loadbalancers", "listener": "listeners", "pool": "pools",
    "member": "members", "healthmonitor": "healthmonitors",
}


def collection_of(member: str) -> str:
    return _COLLECTIONS.get(member) or (member[:-1] + "ies" if member.endswith("y") else member + "s")


@dataclass(frozen=True)
class Touched:
    """One applied change: ``old``/``new`` renderings (None when absent) and the
    change's action (``create``, ``update``, ``delete``, or a verb like ``failover``)."""
    collection: str
    id: str
    old: Resource | None
    new: Resource | None
    action: str = ""

    def values(self, key: str) -> set[Any]:
        """``key`` in the old and the new rendering (what a change moved from and to)."""
        return {r.get(key) for r in (self.old, self.new) if r is not None and r.get(key)}


@dataclass
class State:
    revision: int = 0
    tables: dict[str, dict[str, Resource]] = field(default_factory=dict)
    # Collections the server told us about in its snapshot: only those may be swept.
    known: set[str] = field(default_factory=set)
    _by_network: dict[str, set[str]] = field(default_factory=dict)
    _by_device: dict[str, set[str]] = field(default_factory=dict)

    @classmethod
    def from_snapshot(cls, body: Mapping[str, Any]) -> State:
        state = cls(revision=int(body.get("revision") or 0))
        for key, items in body.items():
            if not isinstance(items, list):
                continue
            coll = key.replace("-", "_")
            state.known.add(coll)
            table = state.tables.setdefault(coll, {})
            for item in items:
                if isinstance(item, dict) and item.get("id"):
                    table[item["id"]] = item
        for port in state.table("ports").values():
            state._index(port)
        return state

    # -- tables -----------------------------------------------------------------------

    def table(self, collection: str) -> dict[str, Resource]:
        return self.tables.setdefault(collection, {})

    @property
    def networks(self) -> dict[str, Resource]:
        return self.table("networks")

    @property
    def subnets(self) -> dict[str, Resource]:
        return self.table("subnets")

    @property
    def ports(self) -> dict[str, Resource]:
        return self.table("ports")

    @property
    def routers(self) -> dict[str, Resource]:
        return self.table("routers")

    @property
    def floatingips(self) -> dict[str, Resource]:
        return self.table("floatingips")

    @property
    def sandboxes(self) -> dict[str, Resource]:
        return self.table("sandboxes")

    @property
    def loadbalancers(self) -> dict[str, Resource]:
        return self.table("loadbalancers")

    # -- indexes ------------------------------------------------------------------------

    def ports_on(self, network_id: str) -> Iterator[Resource]:
        for pid in list(self._by_network.get(network_id, ())):
            port = self.ports.get(pid)
            if port is not None:
                yield port

    def ports_of(self, device_id: str) -> Iterator[Resource]:
        for pid in list(self._by_device.get(device_id, ())):
            port = self.ports.get(pid)
            if port is not None:
                yield port

    def _index(self, port: Resource) -> None:
        self._by_network.setdefault(port.get("network_id") or "", set()).add(port["id"])
        self._by_device.setdefault(port.get("device_id") or "", set()).add(port["id"])

    def _unindex(self, port: Resource) -> None:
        for index, key in ((self._by_network, "network_id"), (self._by_device, "device_id")):
            ids = index.get(port.get(key) or "")
            if ids is not None:
                ids.discard(port["id"])
                if not ids:
                    index.pop(port.get(key) or "", None)

    # -- changes ------------------------------------------------------------------------

    def apply(self, change: Mapping[str, Any]) -> Touched:
        """Apply one change of the stream (``resource``, ``id``, ``action``, ``data``)."""
        coll = collection_of(str(change.get("resource") or ""))
        obj_id = str(change.get("id") or "")
        data = change.get("data")
        table = self.table(coll)
        old = table.get(obj_id)
        if change.get("action") == "delete" or not isinstance(data, dict):
            table.pop(obj_id, None)
            new = None
        else:
            new = table[obj_id] = data
        if coll == "ports":
            if old is not None:
                self._unindex(old)
            if new is not None:
                self._index(new)
        rev = change.get("revision")
        if isinstance(rev, int) and rev > self.revision:
            self.revision = rev
        return Touched(coll, obj_id, old, new, str(change.get("action") or ""))

    def apply_all(self, changes: Iterable[Mapping[str, Any]]) -> list[Touched]:
        return [self.apply(c) for c in changes]


__all__ = ["Resource", "State", "Touched", "collection_of"]
