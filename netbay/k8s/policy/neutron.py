"""Making the network service hold the translation's groups, by diff.

The engine remembers what it made (group ids by key, rule ids by rule, each port's
groups), so a change costs only the operations that differ: a pod label change is
one port update, a new policy a spare group taken, one bulk rule create and an update
per port it selects. Groups carry a tag and are named after their key's hash, so
:meth:`adopt` finds them again after a restart, and what nothing wants any more is
deleted.

A change goes to the network backend as ONE batch (:mod:`netbay.backends.batch`:
netbay's ``POST /v2.0/batch`` — one transaction, so one commit and one wake-up of the
dataplane agent, all or nothing — or, on a backend without one, the same calls in
order, undone on a refusal); a refused batch is retried one call at a time. A new Neutron group comes with
two allow-all egress rules that must go before any port joins it, so a few empty
groups are kept ready (``SPARE``, refilled after each change, kuryr's port-pool idea
applied to groups): taking one costs no call; it is named after its key by the
refill that follows the change (a restart before that finds it in use and replaces it).
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from netbay.backends import NetworkBackend
from netbay.backends import batch as batches
from netbay.client import gone_ok
from netbay.errors import NetbayError as ApiError
from netbay.k8s.policy.translate import Desired, Rule

log = logging.getLogger(__name__)

SPARE = "k8s-np-spare"


def group_name(key: str) -> str:
    return "k8s-np-" + hashlib.sha1(key.encode()).hexdigest()[:20]


def _naming(key: str) -> dict[str, str]:
    return {"name": group_name(key), "description": f"k8s policy {key}"[:255]}


@dataclass
class _Op:
    """One call of the network API: alone, or an operation of a batch. ``body`` is
    built when the call goes out (group ids may change until then); ``alone``
    replaces the plain call when it needs its own recovery."""
    method: str
    path: str  # under /network/v2.0/
    body: Callable[[], Any] | None = None
    done: Callable[[Any], None] = lambda _result: None
    missing_ok: bool = False
    alone: Callable[[], Any] | None = None

    def wire(self) -> dict[str, Any]:
        op: dict[str, Any] = {"method": self.method, "path": self.path}
        if self.body is not None:
            op["body"] = self.body()
        if self.missing_ok:
            op["missing_ok"] = True
        return op


class Groups:
    """The security groups and port memberships of one cluster's policies."""

    def __init__(self, net: NetworkBackend, tag: str, spares: int = 4) -> None:
        self.net = net
        self.tag = tag
        self.want_spares = spares
        self.spares: list[str] = []
        self._spare_lock = threading.Lock()  # refill() runs beside the engine's changes
        self._stale: list[dict[str, Any]] = []  # tagged groups adopt() found nobody wants
        self._members: dict[str, tuple[str, frozenset[str]]] = {}  # pod -> (port, group keys) applied
        self.ids: dict[str, str] = {}                 # key -> group id
        self.rules: dict[str, dict[Rule, str]] = {}   # key -> rule -> rule id
        self.ports: dict[str, tuple[str, tuple[str, ...]]] = {}  # pod key -> (port id, group ids)
        self._unnamed: dict[str, str] = {}  # spares taken, not named yet: group id -> key
        self._retired: dict[str, tuple[str, dict[Rule, str]]] = {}  # key -> (group id, rules): to delete

    # -- restart ---------------------------------------------------------------------
    def adopt(self, keys: Iterable[str]) -> None:
        """Take over the tagged groups a previous engine made (by name); the rest of
        the tagged groups are left for :meth:`apply` to delete."""
        by_name = {group_name(k): k for k in keys}
        self.ids.clear()
        self.rules.clear()
        self.ports.clear()
        self._members.clear()
        found = self.net.list("security_group", tags=self.tag)
        stale = []
        empty = [g["id"] for g in found if g["name"] == SPARE and not g.get("security_group_rules")]
        # a spare some port is in was taken by a change, and the engine stopped before naming it
        used = {gid for p in (self.net.list("port", security_groups=empty) if empty else ())
                for gid in p["security_groups"]}
        self.spares = [gid for gid in empty if gid not in used]
        self._unnamed.clear()
        self._retired.clear()  # still tagged: adopted below if wanted again, else stale
        for g in found:
            if g["id"] in self.spares:
                continue
            key = by_name.get(g["name"])
            if key is None or key in self.ids:
                stale.append(g)
                continue
            self.ids[key] = g["id"]
        for g in found:
            key = by_name.get(g["name"])
            if key is not None and self.ids.get(key) == g["id"]:
                self.rules[key] = {self._rule(r): r["id"] for r in g.get("security_group_rules") or []}
        self._stale = stale

    def _rule(self, r: Mapping[str, Any]) -> Rule:
        rev = {v: k for k, v in self.ids.items()}
        remote = r.get("remote_group_id")
        return Rule(r["direction"], r.get("ethertype") or "IPv4", r.get("protocol"), r.get("port_range_min"),
                    r.get("port_range_max"), r.get("remote_ip_prefix"),
                    rev.get(remote, f"?{remote}") if remote else None)

    # -- apply -----------------------------------------------------------------------
    def apply(self, desired: Desired, port_ids: Mapping[str, str], *, check_ports: bool = False,
              partial: bool = False) -> int:
        """Make the service match ``desired``; returns the number of API calls made.
        ``check_ports`` re-reads each port's groups (after a restart) instead of
        trusting memory; ``partial``: ``port_ids`` are only the pods that changed.

        Everything but the rare new group without a spare goes in ONE batch (one
        transaction, one wake-up of the agent): rules, memberships, deletions. What
        the engine remembers changes as the service answers, so a refused change is
        tried again by the next one."""
        calls = 0
        ops: list[_Op] = []
        for key in sorted(desired.groups):
            if key not in self.ids:
                calls += self._new_group(key, ops)
        # rules: add what is missing (one bulk create), remove what is extra (a new
        # group's default egress ones too) in the same transaction as the ports joining
        adds = [(key, rule) for key, wanted in desired.groups.items()
                for rule in sorted(wanted - self.rules.setdefault(key, {}).keys(), key=repr)]
        if adds:
            def added(result: Any, adds: list[tuple[str, Rule]] = adds) -> None:
                for (key, rule), r in zip(adds, result["security_group_rules"]):
                    self.rules[key][rule] = r["id"]
            ops.append(_Op("POST", "security-group-rules",
                           lambda: {"security_group_rules": [self._body(k, r) for k, r in adds]}, added))
        for key, have in self.rules.items():
            wanted = desired.groups.get(key)
            if wanted is None:
                continue
            for rule in [r for r in have if r not in wanted]:
                ops.append(_Op("DELETE", f"security-group-rules/{have[rule]}", missing_ok=True,
                               done=lambda _r, have=have, rule=rule: have.pop(rule, None)))
        # memberships
        current = self._current_ports(port_ids) if check_ports else {}
        for pod, port_id in sorted(port_ids.items()):
            members = desired.members.get(pod, frozenset())
            if not check_ports and self._members.get(pod) == (port_id, members):
                continue  # unchanged since the last apply: most pods, most of the time
            if check_ports and port_id not in current:
                log.warning("k8s policy: pod %s: port %s does not exist (yet)", pod, port_id)
                continue
            want = tuple(sorted(self.ids[k] for k in members))
            if check_ports:
                have_ports = (port_id, tuple(sorted(current[port_id])))
            else:
                have_ports = self.ports.get(pod, ("", ()))
            if have_ports == (port_id, want):
                self._joined(pod, port_id, members, want)
            else:
                ops.append(_Op("PUT", f"ports/{port_id}",
                               lambda members=members: {"port": {"security_groups": sorted(
                                   self.ids[k] for k in members)}},
                               lambda r, pod=pod, port_id=port_id, members=members: self._joined(
                                   pod, port_id, members, tuple(sorted(r["port"]["security_groups"])))))
        for pod in [] if partial else list(self.ports):
            if pod not in port_ids:
                del self.ports[pod]
                self._members.pop(pod, None)
        # groups nothing wants any more: no port is in them once this batch is done, so
        # they allow nothing; :meth:`refill` deletes them a moment later, off the path of
        # the change (a policy delete is then its port moves alone)
        for key in [k for k in self.ids if k not in desired.groups]:
            with self._spare_lock:
                self._retired[key] = (self.ids.pop(key), self.rules.pop(key, {}))
        for g in list(self._stale):
            ops.append(_Op("DELETE", f"security-groups/{g['id']}", missing_ok=True,
                           done=lambda _r, g=g: self._stale.remove(g),
                           alone=lambda gid=g["id"]: self._delete_group(gid)))
        return calls + self._run(ops)

    def _joined(self, pod: str, port_id: str, members: frozenset[str], ids: tuple[str, ...]) -> None:
        """What ``pod``'s port is in, once the service says so."""
        self.ports[pod] = (port_id, ids)
        self._members[pod] = (port_id, members)

    def _run(self, ops: list[_Op]) -> int:
        """``ops`` as one batch (one transaction), or one call each where the service has
        no batch or refused it (then each runs alone, with its own recovery: a spare
        gone, a group still on a port the engine does not know). Returns the calls."""
        if not ops:
            return 0
        if len(ops) > 1:
            try:
                done = batches.run(self.net, [op.wire() for op in ops])
            except ApiError as exc:
                log.info("k8s policy: batch of %d refused (%s); one call each", len(ops), exc.message)
            else:
                for op, result in zip(ops, done):
                    op.done(result)
                return 1 if batches.has_batch(self.net) else len(ops)
        for op in ops:
            op.done(op.alone() if op.alone is not None else self._alone(op))
        return len(ops) + (len(ops) > 1)

    def _alone(self, op: _Op) -> Any:
        wire = op.wire()
        if op.missing_ok:
            return gone_ok(lambda: batches.run_one(self.net, wire))
        return batches.run_one(self.net, wire)

    def _new_group(self, key: str, ops: list[_Op]) -> int:
        """A group for ``key``: a spare (no call: it is named after the change, by
        :meth:`refill`), else one made now (the rare case: its default rules go in the
        batch)."""
        with self._spare_lock:
            retired = self._retired.pop(key, None)  # wanted again before refill deleted it
            gid = self.spares.pop() if self.spares and retired is None else None
            if gid is not None:
                self._unnamed[gid] = key
        if retired is not None:
            self.ids[key], self.rules[key] = retired
            return 0
        if gid is not None:
            self.ids[key], self.rules[key] = gid, {}
            return 0
        self._create_group(key, _naming(key))
        return 1

    def _create_group(self, key: str, body: dict[str, Any]) -> None:
        """A new group for ``key``; its default egress rules are in ``self.rules``, so
        the next :meth:`apply` removes them before any port joins."""
        g = self._tagged(self.net.create("security_group", {**body, "tags": [self.tag]}))
        self.ids[key] = g["id"]
        self.rules[key] = {self._rule(r): r["id"] for r in g.get("security_group_rules") or []}

    @property
    def refill_due(self) -> bool:
        return bool(self._unnamed or self._retired) or len(self.spares) < self.want_spares

    def refill(self) -> int:
        """Name the spares the last changes took and delete the groups they retired (one
        batch), then make spare groups (empty: the default egress rules removed) up to
        the wanted number: after the change that needed them, off its path."""
        with self._spare_lock:
            unnamed, self._unnamed = self._unnamed, {}
            retired, self._retired = self._retired, {}
        ops = [_Op("PUT", f"security-groups/{gid}", lambda key=key: {"security_group": _naming(key)},
                   alone=lambda gid=gid, key=key: self._name(gid, key)) for gid, key in unnamed.items()]
        ops += [_Op("DELETE", f"security-groups/{gid}", missing_ok=True, alone=lambda gid=gid: self._delete_group(gid))
                for gid, _rules in retired.values()]
        try:
            calls = self._run(ops)
        except Exception:
            with self._spare_lock:  # for the next refill
                self._unnamed = {**unnamed, **self._unnamed}
                self._retired = {**retired, **self._retired}
            raise
        with self._spare_lock:
            missing = max(0, self.want_spares - len(self.spares))
        for _ in range(missing):
            try:
                g = self._tagged(self.net.create("security_group", {"name": SPARE, "tags": [self.tag]}))
            except ApiError as exc:  # best effort: a full quota only means no spares
                log.warning("k8s policy: no spare security group: %s", exc.message)
                return calls
            calls += 1 + self._run([_Op("DELETE", f"security-group-rules/{r['id']}", missing_ok=True)
                                    for r in g.get("security_group_rules") or []])
            with self._spare_lock:
                self.spares.append(g["id"])
        return calls

    def _name(self, gid: str, key: str) -> None:
        """A taken spare named after its key (gone already: its policy went meanwhile)."""
        try:
            self.net.update("security_group", gid, _naming(key))
        except ApiError as exc:
            if exc.status != 404:
                raise

    def _delete_group(self, gid: str) -> None:
        try:
            gone_ok(lambda: self.net.delete("security_group", gid))
        except ApiError as exc:
            if exc.status != 409:
                raise
            # still on a port that left the cluster's view: take it off, then retry once
            for p in self.net.list("port", security_groups=gid):
                left = [g for g in p["security_groups"] if g != gid]
                self.net.update("port", p["id"], {"security_groups": left})
            gone_ok(lambda: self.net.delete("security_group", gid))

    def _tagged(self, g: dict[str, Any]) -> dict[str, Any]:
        """A group whose backend dropped its tag on create (Neutron refuses ``tags`` on a
        group's POST) gets it at once: :meth:`adopt` finds groups by it."""
        if self.tag not in (g.get("tags") or []):
            g = {**g, "tags": self.net.set_tags("security_group", g["id"], [self.tag])}
        return g

    def _current_ports(self, port_ids: Mapping[str, str]) -> dict[str, list[str]]:
        out = {}
        for port_id in port_ids.values():
            try:
                out[port_id] = self.net.show("port", port_id)["security_groups"]
            except ApiError as exc:
                if exc.status != 404:
                    raise
        return out

    def _body(self, key: str, rule: Rule) -> dict[str, Any]:
        body: dict[str, Any] = {"security_group_id": self.ids[key], "direction": rule.direction,
                                "ethertype": rule.ethertype}
        for field, value in (("protocol", rule.protocol), ("port_range_min", rule.port_min),
                             ("port_range_max", rule.port_max), ("remote_ip_prefix", rule.remote_ip_prefix)):
            if value is not None:
                body[field] = value
        if rule.remote is not None:
            body["remote_group_id"] = self.ids[rule.remote]
        return body

    def delete_all(self) -> None:
        """Every group this engine made (ports first leave them)."""
        for _pod, (port_id, _groups) in list(self.ports.items()):
            try:
                self.net.update("port", port_id, {"security_groups": []})
            except ApiError as exc:
                if exc.status != 404:
                    raise
        self.ports.clear()
        self._members.clear()
        for gid in [*self.ids.values(), *self.spares, *(g for g, _rules in self._retired.values())]:
            self._delete_group(gid)
        self.ids.clear()
        self.spares.clear()
        self.rules.clear()
        self._retired.clear()


__all__ = ["Groups", "group_name"]
