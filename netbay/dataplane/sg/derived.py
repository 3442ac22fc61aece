"""The security groups' derived state in the kernel and the steps that change it.

What :class:`netbay.dataplane.secgroups.SecurityGroups` was told becomes refcounted
state (groups and their tags, rule elements, shapes, ports' elements, spoofing sets,
bridge zones); each step here adds its part of one nft transaction (:class:`Tx`) and
the conntrack entries that lost their permission. The realizer holds the state
(its ``__init__`` makes it) and serializes the calls; this class is its half that
turns a wanted change into set elements.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import replace

from netbay.dataplane.ctkill import ConntrackWorker
from netbay.dataplane.ctkill import Kill as _Kill
from netbay.dataplane.sg.nftjson import MAX_TAG, TABLE, ZONE_TABLE, addr_type, nft_obj, nft_rule
from netbay.dataplane.sg.parse import ParsedPort, ParsedRule
from netbay.dataplane.sg.ruleset import spoof_rules, src_set
from netbay.dataplane.sg.shapes import Atom, Shape, atoms
from netbay.dataplane.sg.tx import Elem, Group, Tx, port_elems

log = logging.getLogger("netbay.dataplane.secgroups")   # the realizer's log lines


class Derived:
    """The derived state's steps, mixed into the realizer (which owns the attributes)."""

    _want_groups: dict[str, dict[str, ParsedRule | None]]
    _want_stateless: set[str]
    _ports: dict[str, ParsedPort]
    _port_elems: dict[str, frozenset[Elem]]
    _groups: dict[str, Group]
    _rule_group: dict[str, str]
    _elems: Counter
    _shapes: set[Shape]
    _spoof_lens: set[tuple[int, int]]
    _bridge_zones: Counter
    _tags: dict[int, str]
    _next_tag: int
    _ct: ConntrackWorker

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
