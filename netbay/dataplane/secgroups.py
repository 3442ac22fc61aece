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
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from netbay.dataplane import links
from netbay.dataplane.ctkill import ConntrackWorker
from netbay.dataplane.ctkill import Kill as _Kill
from netbay.dataplane.nft import Nft, NftError
from netbay.dataplane.sg.nftjson import (
    MAX_GROUPS, MAX_MARK, MAX_TAG, MAX_ZONE, TABLE, ZONE_TABLE, addr_type, nft_obj, nft_rule,
)
from netbay.dataplane.sg.parse import ParsedPort, ParsedRule, check_id, parse_port, parse_rule
from netbay.dataplane.sg.ruleset import ZONE_TEXT, base_ruleset, spoof_rules, src_set
from netbay.dataplane.sg.shapes import Atom, Shape, atoms
from netbay.dataplane.sg.tx import Elem, Group, Tx, port_elems

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


class SecurityGroups:
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

    # -- groups and rules ---------------------------------------------------------------

    def _group(self, gid: str) -> Group:
        g = self._groups.get(gid)
        if g is None:
            if len(self._tags) >= MAX_TAG:
                raise ValueError(f"more than {MAX_TAG} security groups")
            while self._next_tag in self._tags or not 1 <= self._next_tag <= MAX_TAG:
                self._next_tag = self._next_tag % MAX_TAG + 1
            g = self._groups[gid] = Group(gid, self._next_tag, stateful=gid not in self._want_stateless)
            self._tags[g.tag] = gid
        return g

    def _gc_group(self, gid: str) -> None:
        """Forget a group (and free its tag) once nothing refers to it; none of its
        elements are left by then."""
        g = self._groups.get(gid)
        if g is None or g.known or g.rules or g.ports or g.member_ports or g.remote_rules:
            return
        del self._groups[gid]
        self._tags.pop(g.tag, None)

    def _group_tx(self, tx: Tx, gid: str, rules: Mapping[str, ParsedRule | None] | None) -> None:
        g = self._group(gid)
        g.known = rules is not None
        stateful = gid not in self._want_stateless
        if g.stateful != stateful:  # its ports gain or lose their ``stateless`` element
            g.stateful = stateful
            for pid in sorted(g.ports):
                self._port_tx(tx, pid, self._ports[pid])
        want = {rid: r for rid, r in (rules or {}).items() if r is not None}
        for rid in [r for r in g.rules if want.get(r) != g.rules[r]]:
            self._rule_tx(tx, gid, rid, None)
        for rid, r in want.items():
            if rid not in g.rules:
                self._rule_tx(tx, gid, rid, r)
        self._gc_group(gid)

    def _rule_tx(self, tx: Tx, gid: str, rid: str, rule: ParsedRule | None) -> None:
        """Add (``rule``) or remove (None) one rule of group ``gid``."""
        g = self._group(gid)
        old = g.rules.pop(rid, None)
        if old is not None:
            self._rule_group.pop(rid, None)
            for atom in self._rule_atoms(old, g):
                self._dec(tx, atom)
            self._kill_rule(tx, g, old)
            if old.remote_group:
                r = self._groups.get(old.remote_group)
                if r is not None:
                    r.remote_rules.discard(rid)
                    self._gc_group(r.id)
        if rule is not None:
            g.known = g.known or gid in self._want_groups
            g.rules[rid] = rule
            self._rule_group[rid] = gid
            if rule.remote_group:
                self._group(rule.remote_group).remote_rules.add(rid)
            for atom in self._rule_atoms(rule, g):
                self._inc(tx, atom)
        self._gc_group(gid)

    def _rule_atoms(self, rule: ParsedRule, g: Group) -> list[Atom]:
        if rule.remote_group is None:
            if rule.prefix is None:
                return atoms(rule, g.tag, None, None)
            return atoms(rule, g.tag, rule.prefix.prefixlen, str(rule.prefix.network_address))
        r = self._groups.get(rule.remote_group)
        if r is None:
            return []
        return [a for (fam, addr, plen) in r.members if fam == rule.family
                for a in atoms(rule, g.tag, plen, addr)]

    def _inc(self, tx: Tx, atom: Atom) -> None:
        shape, key = atom
        if shape not in self._shapes:  # first use: the shape's set and rule
            exprs, types = shape.expr()
            tx.create.append({"add": nft_obj("set", "inet", name=shape.set_name,
                                          type=types[0] if len(types) == 1 else types)})
            tx.rules.append(nft_rule("inet", f"{shape.direction}shapes", exprs))
            self._shapes.add(shape)
        self._elems[atom] += 1
        if self._elems[atom] == 1:
            tx.elem(True, ("inet", TABLE, shape.set_name, key, None))

    def _dec(self, tx: Tx, atom: Atom) -> None:
        self._elems[atom] -= 1
        if self._elems[atom] <= 0:
            del self._elems[atom]
            tx.elem(False, ("inet", TABLE, atom[0].set_name, atom[1], None))

    def _member(self, tx: Tx, gid: str, member: tuple[int, str, int], delta: int) -> None:
        """A member address of ``gid`` appears (+1) or goes (-1): the rules naming
        ``gid`` as their remote group gain or lose its elements."""
        r = self._group(gid)
        before = r.members[member]
        r.members[member] += delta
        if r.members[member] <= 0:
            del r.members[member]
        if (before == 0) == (delta < 0):
            return  # the address was already there (another port, another network)
        fam, addr, plen = member
        for rid in r.remote_rules:
            u = self._groups[self._rule_group[rid]]
            rule = u.rules[rid]
            if rule.family == fam:
                for atom in atoms(rule, u.tag, plen, addr):
                    (self._inc if delta > 0 else self._dec)(tx, atom)

    # -- ports ------------------------------------------------------------------------

    def _port_tx(self, tx: Tx, pid: str, p: ParsedPort | None) -> None:
        """Move port ``pid`` from what the kernel has to ``p`` (None: remove it)."""
        old = self._ports.get(pid)
        for gid in p.groups if p else ():
            self._group(gid)
        o_el = self._port_elems.get(pid, frozenset())
        n_el = port_elems(p, lambda gid: self._groups[gid].tag,
                           all(not self._groups[gid].stateful for gid in p.groups)) if p else frozenset()
        for e in o_el - n_el:
            tx.elem(False, e)
        for e in n_el - o_el:
            fam, table, name, _, _ = e
            if name.startswith("src") and "_" in name:  # a CIDR pair: its length's set
                self._spoof_len(tx, int(name[3]), int(name.split("_")[1]))
            tx.elem(True, e, comment=pid if name == "port_mark" else None)
        o_mem = {(g, m) for g in old.groups for m in old.members()} if old else set()
        n_mem = {(g, m) for g in p.groups for m in p.members()} if p else set()
        for gid, m in o_mem - n_mem:
            self._member(tx, gid, m, -1)
        for gid, m in n_mem - o_mem:
            self._member(tx, gid, m, +1)
        o_bz = (old.bridge, old.zone) if old and old.bridge and old.zone else None
        n_bz = (p.bridge, p.zone) if p and p.bridge and p.zone else None
        if o_bz != n_bz:
            self._bridge_zone(tx, o_bz, -1)
            self._bridge_zone(tx, n_bz, +1)
        self._kill_port(tx, old, p)
        o_slots = set(old.groups) if old and old.secured else set()
        n_slots = set(p.groups) if p and p.secured else set()
        for gid in n_slots:
            self._groups[gid].ports.add(pid)
        for gid in set(p.groups if p else ()):
            self._groups[gid].member_ports.add(pid)
        if p is None:
            self._ports.pop(pid, None)
            self._port_elems.pop(pid, None)
        else:
            self._ports[pid], self._port_elems[pid] = p, n_el
        left = set(old.groups if old else ()) - set(p.groups if p else ())
        for gid in (o_slots - n_slots) | left:
            g = self._groups.get(gid)
            if g is not None:
                if gid not in n_slots:
                    g.ports.discard(pid)
                if p is None or gid not in p.groups:
                    g.member_ports.discard(pid)
                self._gc_group(gid)

    def _spoof_len(self, tx: Tx, fam: int, plen: int) -> None:
        """First CIDR address pair of a length: its set and anti-spoofing rules."""
        if (fam, plen) in self._spoof_lens:
            return
        self._spoof_lens.add((fam, plen))
        tx.create.append({"add": nft_obj("set", "bridge", name=src_set(fam, plen),
                                      type=["ifname", "ether_addr", addr_type(fam)])})
        tx.rules += [nft_rule("bridge", "spoof_allow", r) for r in spoof_rules(fam, plen)]

    def _bridge_zone(self, tx: Tx, bz: tuple[str, int] | None, delta: int) -> None:
        """Zone of packets entering a bridge from a non-port device (e.g. VXLAN)."""
        if bz is None:
            return
        before = self._bridge_zones[bz]
        self._bridge_zones[bz] += delta
        if self._bridge_zones[bz] <= 0:
            del self._bridge_zones[bz]
        now = self._bridge_zones.get(bz, 0)
        if (before == 0) != (now == 0):
            if now and any(b == bz[0] and z != bz[1] for b, z in self._bridge_zones):
                log.warning("bridge %s has ports in two zones; keeping the first", bz[0])
                return
            tx.elem(bool(now), ("inet", ZONE_TABLE, "bridge_zone", bz[0], bz[1]))

    # -- conntrack ----------------------------------------------------------------------

    def _kill_rule(self, tx: Tx, g: Group, rule: ParsedRule) -> None:
        """A removed rule: the filtered ports of its group re-check their flows in its
        direction (from or to its prefix, when it has one)."""
        peer = frozenset([rule.prefix]) if rule.prefix is not None else None
        for pid in g.ports:
            p = self._ports.get(pid)
            mine = frozenset(n for n in p.nets() if n.version == rule.family) if p else None
            if p is None or not p.zone or not mine:
                continue
            tx.kills.add(_Kill(p.zone, peer, mine) if rule.direction == "i"
                         else _Kill(p.zone, mine, peer))

    def _kill_port(self, tx: Tx, old: ParsedPort | None, new: ParsedPort | None) -> None:
        """Permissions of, or towards, a port that shrank: delete the affected flows."""
        if old is None:
            return
        if new is not None and new.zone and new.secured and (
                not old.secured or set(old.groups) - set(new.groups)):
            mine = frozenset(new.nets())
            if mine:
                tx.kills |= {_Kill(new.zone, mine, None), _Kill(new.zone, None, mine)}
        # As a remote-group member: flows between its lost addresses and the filtered
        # ports of the groups whose rules name a group it was in.
        kept = set(new.nets()) if new else set()
        for remote in old.groups:
            stays = new is not None and remote in new.groups
            lost = frozenset(set(old.nets()) - kept if stays else old.nets())
            r = self._groups.get(remote)
            if not lost or r is None:
                continue
            for rid in r.remote_rules:
                u = self._groups[self._rule_group[rid]]
                rule = u.rules[rid]
                for pid in u.ports:
                    q = self._ports.get(pid)
                    if q is None or not q.zone or pid == old.id:
                        continue
                    theirs = frozenset(q.nets())
                    tx.kills.add(_Kill(q.zone, lost, theirs) if rule.direction == "i"
                                 else _Kill(q.zone, theirs, lost))

    def _kill(self, kills: set[_Kill]) -> None:
        """After the commit: only flows admitted before it (``Kill.before``)."""
        if kills:
            committed = time.time_ns()
            self._ct.submit({replace(k, before=committed) for k in kills})
