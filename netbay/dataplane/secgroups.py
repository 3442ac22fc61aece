"""Security groups in the fabric namespace, with Neutron semantics, on nftables.

Enforced outside the workload, on the bridges of the fabric namespace. This kernel
has no bridge-family conntrack, so (DESIGN.md) ``br_netfilter`` hands bridged IPv4
and IPv6 to the ``inet`` hooks, where conntrack works; there ``iifname`` is the
bridge, so the bridge family marks packets with their port first. A packet's path::

  bridge prerouting (-300)   mark = ingress port's mark (@port_mark); its anti-spoofing
  inet prerouting (raw)      ct zone = its network's zone (table nb_sg_zone, @zone)
  inet prerouting (0)        conntrack done: EGRESS rules of the sending port
  bridge forward (-300)      mark = egress port's mark (``oifname``: seen here, not in inet)
  inet forward (0)           INGRESS rules of the receiving port

Dispatching ingress on the real output port (not on the destination address) also
covers broadcast, multicast and addresses routed behind a port.

Why a change stays O(1) at 10,000 rules or members: nothing per port or per group is
a chain or a rule — with libnftables 1.0.6, adding a rule or a verdict-map ``jump``
element costs ~10 µs per chain in the namespace (it fetches the chain cache), and
appending to a chain of N rules or deleting from a pipapo interval set costs O(N) in
the kernel. Everything that changes is an element of a hash set or map:

* a port's groups: slot maps ``slot<i>: mark -> tag<<16 | mark`` (one per group
  position, up to :data:`MAX_GROUPS`); the generic egress/ingress chain, for each slot
  that has the port, puts the group's tag in the mark's high half and jumps to the
  shape rules;
* a rule: elements of *shape* sets keyed ``tag . (peer address & mask) . protocol .
  (port & mask)`` — a shape is (direction, ethertype, prefix length, kind of
  protocol match, port block size); a port range splits into aligned power-of-two
  blocks. Shape rules are created on first use and kept (an empty set matches
  nothing), so later changes are element adds/deletes;
* a remote group: the rules naming it are expanded over its member addresses (a
  port joining a group adds one element per address and per rule naming the group;
  adding a rule that names a group of M members adds M elements) — a separate
  member set per group would need one rule per (group, remote group) pair;
* anti-spoofing: ``ifname . ether . address`` sets (one per prefix length for CIDR
  address pairs).

Neutron behaviour kept: stateful (established/related accepted, invalid dropped),
except for a port whose groups are all ``stateful: false`` (set ``stateless``): its
rules alone decide, so replies need rules of their own, as with Neutron's NOTRACK
(flows stay in conntrack, unconsulted, so a stateful peer still sees its replies as
established), default deny both ways for a port with port security, ARP/ND/DHCP-client allowed,
RA and DHCP-server replies from ports dropped, MAC/IP/ARP anti-spoofing
(allowed_address_pairs: IP or CIDR with optional MAC, plus the EUI-64 link-local of
each allowed MAC), ``port_security_enabled=false`` and ``network:*`` device owners
bypass everything. When permissions shrink (rule removed, a member leaves a remote
group, a port leaves a group) the conntrack entries of the affected flows are deleted
in their zone, so open connections are re-checked — by a worker thread right after
the commit, as Neutron does (``ctkill``: a ctnetlink dump walks the kernel's whole
conntrack table, 10-20 ms here). A rule naming an address group arrives expanded over the
group's CIDRs (:mod:`netbay.dataplane.sg.addressgroups`): an address added or removed is
elements added or removed. Not supported: more than :data:`MAX_GROUPS` groups on one
filtered port (refused).

Use: :meth:`SecurityGroups.sync` after a start (it rebuilds atomically); then the
incremental verbs, one nft transaction each — or, inside :meth:`SecurityGroups.batch`,
one for all of them (the agent's pass). If one is refused, the realizer rebuilds from
what it was told.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from netbay.dataplane import links
from netbay.dataplane.ctkill import ConntrackWorker
from netbay.dataplane.nft import Nft, NftError
from netbay.dataplane.sg.nftjson import MAX_GROUPS, MAX_MARK, MAX_ZONE, TABLE, ZONE_TABLE, nft_obj
from netbay.dataplane.sg.parse import ParsedPort, ParsedRule, check_id, parse_port, parse_rule
from netbay.dataplane.sg.derived import Derived
from netbay.dataplane.sg.ruleset import ZONE_TEXT, base_ruleset
from netbay.dataplane.sg.shapes import Shape
from netbay.dataplane.sg.tx import Elem, Group, Tx

__all__ = ["SecurityGroups", "TABLE", "ZONE_TABLE", "MAX_MARK", "MAX_ZONE", "MAX_GROUPS"]

log = logging.getLogger(__name__)


# --- the realizer ------------------------------------------------------------------------

def _locked(fn: Any) -> Any:
    """Serialize the public verbs (the derived state is shared)."""
    def wrapper(self: SecurityGroups, *args: Any, **kw: Any) -> Any:
        with self._lock:
            return fn(self, *args, **kw)
    wrapper.__name__, wrapper.__doc__ = fn.__name__, fn.__doc__
    return wrapper


class SecurityGroups(Derived):
    """Neutron security groups of the ports of one fabric namespace.

    Inputs are plain Neutron JSON (dicts). Ports carry the ``mark`` (1..65535, unique
    per port in the fabric, chosen by the agent) and ``zone`` (the conntrack zone of
    the port's network, 1..65535; 0: none).
    """

    def __init__(self, fabric_ns: str) -> None:
        self.ns = fabric_ns
        self._nft: Nft | None = None
        # What we were told (the base of a rebuild): ports, and each group's rules.
        self._want_ports: dict[str, ParsedPort] = {}
        self._want_groups: dict[str, dict[str, ParsedRule | None]] = {}
        self._want_stateless: set[str] = set()      # groups with ``stateful: false``
        self._want_marks: dict[int, str] = {}
        # What the kernel holds (derived, refcounted).
        self._ports: dict[str, ParsedPort] = {}
        self._port_elems: dict[str, frozenset[Elem]] = {}
        self._groups: dict[str, Group] = {}
        self._rule_group: dict[str, str] = {}
        self._elems: Counter = Counter()            # (shape, key) -> uses
        self._shapes: set[Shape] = set()
        self._spoof_lens: set[tuple[int, int]] = set()
        self._bridge_zones: Counter = Counter()     # (bridge, zone) -> ports
        self._tags: dict[int, str] = {}
        self._next_tag = 1
        self._built = False
        self._brnf = False
        self._ct = ConntrackWorker(fabric_ns)
        self._lock = threading.RLock()
        self._pending: list[Any] | None = None  # builds deferred by :meth:`batch`

    # -- public verbs -----------------------------------------------------------------

    @contextmanager
    def batch(self) -> Iterator[None]:
        """The verbs called inside reach the kernel as ONE nft transaction, at the end
        (an agent pass: a change's groups and ports together): one commit, and one
        fill of libnftables' cache, which costs more the larger the ruleset."""
        with self._lock:
            outer = self._pending is None
            if outer:
                self._pending = []
            try:
                yield
            finally:
                if outer:
                    builds, self._pending = self._pending, None
                    if builds:
                        self._apply(lambda tx: [build(tx) for build in builds])

    @_locked
    def sync(self, ports: Iterable[tuple[Mapping[str, Any], int, int]],
             groups: Iterable[Mapping[str, Any]]) -> None:
        """Make the kernel hold exactly ``ports`` (``(port, mark, zone)``) and ``groups``,
        rebuilt in one nft transaction: traffic sees the old or the new ruleset."""
        parsed = {p.id: p for p in (parse_port(p, m, z) for p, m, z in ports)}
        marks = Counter(p.mark for p in parsed.values())
        if marks and marks.most_common(1)[0][1] > 1:
            raise ValueError(f"mark {marks.most_common(1)[0][0]} given to two ports")
        gs = {}
        for g in groups:  # everything is validated before anything is touched
            gs[check_id("security group", g.get("id"))] = self._parse_rules(g)
        self._want_ports, self._want_groups = parsed, gs
        self._want_stateless = {g["id"] for g in groups if g.get("stateful") is False}
        self._want_marks = {p.mark: p.id for p in parsed.values()}
        self._rebuild()

    @_locked
    def ensure_port(self, port: Mapping[str, Any], mark: int, zone: int) -> None:
        p = parse_port(port, mark, zone)
        if self._want_ports.get(p.id) == p and self._built:
            return
        other = self._want_marks.get(mark)
        if other is not None and other != p.id:
            raise ValueError(f"mark {mark} is port {other}'s")
        old = self._want_ports.get(p.id)
        if old is not None and old.mark != mark:
            self._want_marks.pop(old.mark, None)
        self._want_ports[p.id] = p
        self._want_marks[mark] = p.id
        self._apply(lambda tx: self._port_tx(tx, p.id, p))

    @_locked
    def remove_port(self, port_id: str) -> None:
        old = self._want_ports.pop(port_id, None)
        if old is not None:
            self._want_marks.pop(old.mark, None)
        elif port_id not in self._ports:
            return
        self._apply(lambda tx: self._port_tx(tx, port_id, None))

    @_locked
    def ensure_group(self, group: Mapping[str, Any]) -> None:
        """Ensure a group and exactly its ``security_group_rules`` (rules are immutable in
        Neutron: compared by id and content)."""
        gid = check_id("security group", group.get("id"))
        rules = self._parse_rules(group)
        self._want_groups[gid] = dict(rules)
        if group.get("stateful") is False:
            self._want_stateless.add(gid)
        else:
            self._want_stateless.discard(gid)
        self._apply(lambda tx: self._group_tx(tx, gid, rules))

    @_locked
    def remove_group(self, group_id: str) -> None:
        self._want_stateless.discard(group_id)
        if self._want_groups.pop(group_id, None) is None and group_id not in self._groups:
            return
        self._apply(lambda tx: self._group_tx(tx, group_id, None))

    @_locked
    def ensure_rule(self, rule: Mapping[str, Any]) -> None:
        """Add one rule (its ``security_group_id`` names the group): element adds only."""
        r = parse_rule(rule)
        rid = check_id("security group rule", rule.get("id"))
        gid = check_id("security group", rule.get("security_group_id"))
        old = self._rule_group.get(rid)
        if old is not None and old != gid:
            raise ValueError(f"rule {rid} belongs to group {old}, not {gid}")
        self._want_groups.setdefault(gid, {})[rid] = r
        self._apply(lambda tx: self._rule_tx(tx, gid, rid, r))

    @_locked
    def remove_rule(self, rule_id: str) -> None:
        """Remove one rule: element deletes, then its flows' conntrack entries."""
        gid = self._rule_group.get(rule_id)
        if gid is None:
            return
        self._want_groups.get(gid, {}).pop(rule_id, None)
        self._apply(lambda tx: self._rule_tx(tx, gid, rule_id, None))

    @_locked
    def observed(self) -> set[str]:
        """Ids of the ports in the kernel (comments of the ``port_mark`` elements)."""
        try:
            res = self._ctx().run([{"list": nft_obj("map", "bridge", name="port_mark")}])
        except NftError:
            return set()
        out = set()
        for o in Nft._objects(res):
            for e in (o.get("map") or {}).get("elem", []):
                key = e[0] if isinstance(e, list) else e
                if isinstance(key, dict) and key.get("elem", {}).get("comment"):
                    out.add(key["elem"]["comment"])
        return out

    def wait_conntrack(self, timeout: float = 5.0) -> bool:
        """Wait until the conntrack entries of flows that lost their permission are
        deleted (done off the request path, as Neutron does); False on timeout."""
        return self._ct.wait(timeout)

    def close(self) -> None:
        self._ct.stop()
        if self._nft is not None:
            self._nft.close()
            self._nft = None

    # -- plumbing ---------------------------------------------------------------------

    def _ctx(self) -> Nft:
        if self._nft is None:
            self._nft = Nft(self.ns)
        return self._nft

    def _bridge_netfilter(self) -> None:
        """Bridged traffic must traverse the inet hooks (per namespace; the keys exist once
        br_netfilter is loaded and the namespace has a bridge)."""
        if self._brnf:
            return
        try:
            for fam in ("iptables", "ip6tables"):
                key = f"net.bridge.bridge-nf-call-{fam}"
                links.sysctl(self.ns, key, 1)
            self._brnf = True
        except OSError as exc:
            log.info("bridge netfilter sysctls not set yet in %s: %s", self.ns, exc)
            return
        try:  # start times on conntrack entries: flows admitted after a commit keep theirs
            links.sysctl(self.ns, "net.netfilter.nf_conntrack_timestamp", 1)
        except OSError as exc:
            log.info("no conntrack timestamps in %s (a change also resets flows it admits): %s",
                     self.ns, exc)

    def _parse_rules(self, group: Mapping[str, Any]) -> dict[str, ParsedRule | None]:
        gid = check_id("security group", group.get("id"))
        out: dict[str, ParsedRule | None] = {}
        for r in group.get("security_group_rules") or ():
            out[check_id("security group rule", r.get("id"))] = parse_rule(r, gid)
        return out

    def _apply(self, build: Any) -> None:
        """Run one incremental change (the wanted state is already updated); if it
        cannot be built or is refused, rebuild everything from the wanted state."""
        if self._pending is not None:  # inside batch(): one transaction at its end
            self._pending.append(build)
            return
        self._bridge_netfilter()
        if not self._built:  # first use without sync(): start from clean tables
            self._rebuild()
            return
        tx = Tx()
        try:
            build(tx)
            cmds = tx.commands()
            if cmds:
                self._ctx().run(cmds)
        except Exception as exc:  # refused, or a bug: the rebuild repairs
            log.error("security groups: incremental update failed, rebuilding: %s", exc,
                      exc_info=not isinstance(exc, NftError))
            self._rebuild()
            return
        self._kill(tx.kills)

    def _rebuild(self) -> None:
        """Everything from the wanted state: the zone table in one transaction (kept, its
        chain re-made), then both filter tables deleted and re-created in another."""
        self._bridge_netfilter()
        self._ports, self._port_elems, self._groups, self._rule_group = {}, {}, {}, {}
        self._elems, self._shapes, self._spoof_lens = Counter(), set(), set()
        self._bridge_zones, self._tags, self._next_tag = Counter(), {}, 1
        self._built = False
        tx = Tx()
        for gid, rules in self._want_groups.items():
            self._group_tx(tx, gid, rules)
        for p in self._want_ports.values():
            self._port_tx(tx, p.id, p)
        nft = self._ctx()
        nft.run(ZONE_TEXT)
        flush = [{"flush": nft_obj("map", "inet", ZONE_TABLE, name=m)}
                 for m in ("zone", "bridge_zone")]
        nft.run(base_ruleset() + flush + tx.commands())
        self._built = True
