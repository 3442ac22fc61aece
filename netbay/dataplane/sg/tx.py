"""One nft transaction, netted per element; a group's derived state; a port's elements."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from netbay.dataplane.ctkill import Kill as _Kill
from netbay.dataplane.sg.nftjson import TABLE, ZONE_TABLE, nft_concat, nft_obj
from netbay.dataplane.sg.parse import ParsedPort, ParsedRule, link_local
from netbay.dataplane.sg.ruleset import src_set


Elem = tuple[str, str, str, Any, Any]   # (family, table, set or map, key, value or None)


class Tx:
    """One nft transaction: objects first, then rules, then element changes. Element
    changes are netted per element (the first operation tells whether it existed) and
    sent as one command per set."""

    def __init__(self) -> None:
        self.create: list[dict] = []
        self.rules: list[dict] = []
        self.ops: dict[tuple, list[tuple[bool, Any]]] = {}
        self.comments: dict[tuple, str] = {}
        self.kills: set[_Kill] = set()

    def elem(self, add: bool, e: Elem, comment: str | None = None) -> None:
        fam, table, name, key, value = e
        self.ops.setdefault((fam, table, name, key), []).append((add, value))
        if comment is not None:
            self.comments[(fam, table, name, key)] = comment

    def commands(self) -> list[dict]:
        dels: dict[tuple, list] = {}
        adds: dict[tuple, list] = {}
        for (fam, table, name, key), ops in self.ops.items():
            existed, (last_add, value) = not ops[0][0], ops[-1]
            k = nft_concat(key) if isinstance(key, tuple) else key
            if existed and (not last_add or ops[0][1] != value):
                dels.setdefault((fam, table, name), []).append(k)
            elif existed:
                continue  # deleted and re-added as it was
            if last_add:
                c = self.comments.get((fam, table, name, key))
                v: Any = {"elem": {"val": k, "comment": c}} if c else k
                if value is not None:
                    v = [v, value]
                adds.setdefault((fam, table, name), []).append(v)
        out = self.create + self.rules
        for verb, groups in (("delete", dels), ("add", adds)):
            for (fam, table, name), elems in groups.items():
                out.append({verb: nft_obj("element", fam, table, name=name, elem=elems)})
        return out


@dataclass
class Group:
    id: str
    tag: int
    known: bool = False                                  # ensured (vs only referenced)
    stateful: bool = True                                # ``stateful: false``: no conntrack
    rules: dict[str, ParsedRule] = field(default_factory=dict)
    ports: set[str] = field(default_factory=set)         # filtered ports with it in a slot
    member_ports: set[str] = field(default_factory=set)
    members: Counter = field(default_factory=Counter)    # (fam, addr, plen) -> ports
    remote_rules: set[str] = field(default_factory=set)  # rules (anywhere) naming it as remote


def port_elems(p: ParsedPort, tag: Any, stateless: bool = False) -> frozenset[Elem]:
    """Every element a port puts in the kernel (``tag(gid)`` gives a group's tag;
    ``stateless``: every group of the port is ``stateful: false``)."""
    out: set[Elem] = {("bridge", TABLE, "port_mark", p.tap, p.mark)}
    if p.zone:
        out.add(("inet", ZONE_TABLE, "zone", p.mark, p.zone))
    if not p.secured:
        return frozenset(out)
    out |= {("bridge", TABLE, "filtered", p.tap, None), ("inet", TABLE, "filtered", p.mark, None)}
    macs = {p.mac} | {m for m, _ in p.pairs}
    out |= {("bridge", TABLE, "macs", (p.tap, m), None) for m in macs}
    srcs = [(p.mac, n) for n in p.fixed] + list(p.pairs) + [(m, link_local(m)) for m in macs]
    for mac, net in srcs:
        out.add(("bridge", TABLE, src_set(net.version, net.prefixlen),
                 (p.tap, mac, str(net.network_address)), None))
    for i, gid in enumerate(p.groups):
        out.add(("inet", TABLE, f"slot{i}", p.mark, (tag(gid) << 16) | p.mark))
    if stateless and p.groups:
        out.add(("inet", TABLE, "stateless", p.mark, None))
    return frozenset(out)
