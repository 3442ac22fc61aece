"""Making the network service hold the translation's groups, by diff.

The engine remembers what it made (group ids by key, rule ids by rule, each port's
groups), so a change costs only the API calls that differ: a pod label change is one
port update, a new policy one group, one bulk rule create and an update per port it
selects. Groups carry a tag and are named after their key's hash, so :meth:`adopt`
finds them again after a restart, and what nothing wants any more is deleted.

A new Neutron group comes with two allow-all egress rules that must go before any
port joins it (three calls), so a few empty groups are kept ready (``SPARE``,
refilled after each change, kuryr's port-pool idea applied to groups): taking one
costs a rename.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from netbay.coe.executor import Api, ApiError
from netbay.k8s.policy.translate import Desired, Rule

log = logging.getLogger(__name__)

NET = "/network/v2.0"
SPARE = "k8s-np-spare"


def group_name(key: str) -> str:
    return "k8s-np-" + hashlib.sha1(key.encode()).hexdigest()[:20]


class Groups:
    """The security groups and port memberships of one cluster's policies."""

    def __init__(self, api: Api, tag: str, spares: int = 4) -> None:
        self.api = api
        self.tag = tag
        self.want_spares = spares
        self.spares: list[str] = []
        self._spare_lock = threading.Lock()  # refill() runs beside the engine's changes
        self._stale: list[dict[str, Any]] = []  # tagged groups adopt() found nobody wants
        self._members: dict[str, tuple[str, frozenset[str]]] = {}  # pod -> (port, group keys) applied
        self.ids: dict[str, str] = {}                 # key -> group id
        self.rules: dict[str, dict[Rule, str]] = {}   # key -> rule -> rule id
        self.ports: dict[str, tuple[str, tuple[str, ...]]] = {}  # pod key -> (port id, group ids)

    # -- restart ---------------------------------------------------------------------
    def adopt(self, keys: Iterable[str]) -> None:
        """Take over the tagged groups a previous engine made (by name); the rest of
        the tagged groups are left for :meth:`apply` to delete."""
        by_name = {group_name(k): k for k in keys}
        self.ids.clear()
        self.rules.clear()
        self.ports.clear()
        self._members.clear()
        found = self.api.call("GET", f"{NET}/security-groups", tags=self.tag)["security_groups"]
        stale = []
        self.spares = [g["id"] for g in found if g["name"] == SPARE and not g.get("security_group_rules")]
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
        trusting memory; ``partial``: ``port_ids`` are only the pods that changed."""
        calls = 0
        for key in sorted(desired.groups):
            if key not in self.ids:
                calls += self._new_group(key)
        # rules: add what is missing (one bulk call), later remove what is extra
        adds, add_keys = [], []
        for key, wanted in desired.groups.items():
            have = self.rules.setdefault(key, {})
            for rule in sorted(wanted - have.keys(), key=repr):
                adds.append(self._body(key, rule))
                add_keys.append((key, rule))
        if adds:
            made = self.api.call("POST", f"{NET}/security-group-rules", {"security_group_rules": adds})
            for (key, rule), r in zip(add_keys, made["security_group_rules"]):
                self.rules[key][rule] = r["id"]
            calls += 1
        # extra rules (a new group's default egress ones too) before any port joins
        for key, have in self.rules.items():
            wanted = desired.groups.get(key)
            if wanted is None:
                continue
            for rule in [r for r in have if r not in wanted]:
                self.api.gone_ok("DELETE", f"{NET}/security-group-rules/{have.pop(rule)}")
                calls += 1
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
                have = (port_id, tuple(sorted(current[port_id])))
            else:
                have = self.ports.get(pod, ("", ()))
            if have != (port_id, want):
                self.api.call("PUT", f"{NET}/ports/{port_id}", {"port": {"security_groups": list(want)}})
                calls += 1
            self.ports[pod] = (port_id, want)
            self._members[pod] = (port_id, members)
        for pod in [] if partial else list(self.ports):
            if pod not in port_ids:
                del self.ports[pod]
                self._members.pop(pod, None)
        # groups nothing wants any more
        for key in [k for k in self.ids if k not in desired.groups]:
            self._delete_group(self.ids.pop(key))
            self.rules.pop(key, None)
            calls += 1
        for g in self._stale:
            self._delete_group(g["id"])
            calls += 1
        self._stale = []
        return calls

    def _new_group(self, key: str) -> int:
        body = {"name": group_name(key), "description": f"k8s policy {key}"[:255]}
        with self._spare_lock:
            gid = self.spares.pop() if self.spares else None
        if gid is not None:
            try:
                self.api.call("PUT", f"{NET}/security-groups/{gid}", {"security_group": body})
                self.ids[key], self.rules[key] = gid, {}
                return 1
            except ApiError as exc:
                if exc.status != 404:
                    raise
        g = self.api.call("POST", f"{NET}/security-groups", {"security_group": {**body, "tags": [self.tag]}})
        g = g["security_group"]
        self.ids[key] = g["id"]
        self.rules[key] = {self._rule(r): r["id"] for r in g.get("security_group_rules") or []}
        return 1

    def refill(self) -> int:
        """Make spare groups (empty: the default egress rules removed) up to the wanted
        number; off the path of the change that used them."""
        calls = 0
        with self._spare_lock:
            missing = max(0, self.want_spares - len(self.spares))
        for _ in range(missing):
            try:
                g = self.api.call("POST", f"{NET}/security-groups", {"security_group": {
                    "name": SPARE, "tags": [self.tag]}})["security_group"]
            except ApiError as exc:  # best effort: a full quota only means no spares
                log.warning("k8s policy: no spare security group: %s", exc.message)
                return calls
            for r in g.get("security_group_rules") or []:
                self.api.gone_ok("DELETE", f"{NET}/security-group-rules/{r['id']}")
            with self._spare_lock:
                self.spares.append(g["id"])
            calls += 1 + len(g.get("security_group_rules") or [])
        return calls

    def _delete_group(self, gid: str) -> None:
        try:
            self.api.gone_ok("DELETE", f"{NET}/security-groups/{gid}")
        except ApiError as exc:
            if exc.status != 409:
                raise
            # still on a port that left the cluster's view: take it off, then retry once
            for p in self.api.call("GET", f"{NET}/ports", security_groups=gid)["ports"]:
                left = [g for g in p["security_groups"] if g != gid]
                self.api.call("PUT", f"{NET}/ports/{p['id']}", {"port": {"security_groups": left}})
            self.api.gone_ok("DELETE", f"{NET}/security-groups/{gid}")

    def _current_ports(self, port_ids: Mapping[str, str]) -> dict[str, list[str]]:
        out = {}
        for port_id in port_ids.values():
            try:
                out[port_id] = self.api.call("GET", f"{NET}/ports/{port_id}")["port"]["security_groups"]
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
        for pod, (port_id, _groups) in list(self.ports.items()):
            try:
                self.api.call("PUT", f"{NET}/ports/{port_id}", {"port": {"security_groups": []}})
            except ApiError as exc:
                if exc.status != 404:
                    raise
        self.ports.clear()
        self._members.clear()
        for gid in [*self.ids.values(), *self.spares]:
            self._delete_group(gid)
        self.ids.clear()
        self.spares.clear()
        self.rules.clear()


__all__ = ["Groups", "group_name"]
