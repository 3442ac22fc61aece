"""Port mirroring in the fabric: tc ``mirred`` from a port's tap to a tap service's tap.

A port's fabric end ``tap<port>`` sees the port's traffic from the other side: what
the workload sends arrives on the tap's *ingress*, what it receives leaves through
the tap's *egress*. So Tap-as-a-Service's directions map onto the two hooks of a
``clsact`` qdisc — ``OUT`` (from the port) on ingress, ``IN`` (to the port) on
egress, ``BOTH`` on both — each a ``u32`` filter matching every frame (``0/0``; the
kernel here has no ``matchall``: CONFIG_NET_CLS_MATCHALL is unset) whose ``mirred egress
mirror`` action puts a copy on the tap service port's tap, which hands it straight
to the capturing workload (never onto the bridge, so nothing else sees copies).

Every call states the whole wanted set for one source tap and replaces what is
there (the filters of a clsact hook are netbay's alone), so it is idempotent and
adopts whatever a crash left. Netlink through pyroute2, in-process: no ``tc`` fork.
"""

from __future__ import annotations

import errno
from collections.abc import Iterable
from dataclasses import dataclass

from pyroute2 import protocols
from pyroute2.netlink.exceptions import NetlinkError

from netbay.dataplane import links

IN, OUT, BOTH = "IN", "OUT", "BOTH"
DIRECTIONS = (IN, OUT, BOTH)
# clsact's two hooks (TC_H_MIN_INGRESS / TC_H_MIN_EGRESS under TC_H_CLSACT)
INGRESS_HOOK, EGRESS_HOOK = 0xFFFFFFF2, 0xFFFFFFF3
FIRST_PRIO = 1


@dataclass(frozen=True)
class Mirror:
    """One copy to make: packets of ``direction`` (as TaaS names it) to ``target`` (a tap)."""
    direction: str
    target: str


def hooks_of(direction: str) -> tuple[int, ...]:
    """The clsact hooks of a source tap that carry ``direction``'s packets."""
    if direction not in DIRECTIONS:
        raise ValueError(f"unknown mirror direction {direction!r}")
    return {OUT: (INGRESS_HOOK,), IN: (EGRESS_HOOK,), BOTH: (INGRESS_HOOK, EGRESS_HOOK)}[direction]


def set_mirrors(ns: str, source: str, mirrors: Iterable[Mirror]) -> bool:
    """Make ``source``'s mirrors exactly ``mirrors``; False when ``source`` is absent.

    A target missing from ``ns`` raises ``LinkError`` (the caller reports the flow).
    """
    wanted = list(dict.fromkeys(mirrors))
    ipr = links.ipr(ns)
    src = links.get_link(ns, source)
    if src is None:
        return False
    targets = {m.target: links.index(ns, m.target) for m in wanted}
    _clear(ipr, src.index)
    if not wanted:
        _drop_clsact(ipr, src.index)
        return True
    try:
        ipr.tc("add", "clsact", src.index)
    except NetlinkError as exc:
        if exc.code != errno.EEXIST:
            raise links.LinkError(exc.code, f"clsact on {source} in {ns}: {exc}") from None
    prio = {INGRESS_HOOK: FIRST_PRIO, EGRESS_HOOK: FIRST_PRIO}
    for m in wanted:
        for hook in hooks_of(m.direction):
            action = {"kind": "mirred", "direction": "egress", "action": "mirror", "ifindex": targets[m.target]}
            try:
                ipr.tc("add-filter", "u32", src.index, parent=hook, prio=prio[hook], protocol=protocols.ETH_P_ALL,
                       target=0, keys=["0x0/0x0+0"], action=action)
            except NetlinkError as exc:
                raise links.LinkError(exc.code, f"mirror {source} -> {m.target} in {ns}: {exc}") from None
            prio[hook] += 1
    return True


def mirrors_of(ns: str, source: str) -> list[int]:
    """The target ifindex of every mirror on ``source`` (one per hook a flow uses): what
    the kernel holds. u32 keeps one table list per qdisc, so a dump of either clsact
    hook shows the filters of both; actions are told apart by their index."""
    src = links.get_link(ns, source)
    if src is None:
        return []
    found: dict[int, int] = {}
    for hook in (INGRESS_HOOK, EGRESS_HOOK):
        try:
            filters = links.ipr(ns).get_filters(index=src.index, parent=hook)
        except NetlinkError:
            continue
        for f in filters:
            for act in _actions(f):
                options = act.get_attr("TCA_ACT_OPTIONS")
                parms = options.get_attr("TCA_MIRRED_PARMS") if options is not None else None
                if parms is not None:
                    found[parms["index"]] = parms["ifindex"]
    return sorted(found.values())


def _actions(msg) -> list:  # noqa: ANN001
    """The actions of a u32 filter message (pyroute2 nla objects)."""
    options = msg.get_attr("TCA_OPTIONS")
    acts = options.get_attr("TCA_U32_ACT") if options is not None else None
    return [value for _, value in acts["attrs"]] if acts is not None else []


def _clear(ipr, index: int) -> None:  # noqa: ANN001
    for hook in (INGRESS_HOOK, EGRESS_HOOK):
        try:
            ipr.tc("del-filter", index=index, parent=hook)
        except NetlinkError as exc:
            if exc.code not in (errno.ENOENT, errno.EINVAL, errno.ENODEV):
                raise links.LinkError(exc.code, f"clearing mirrors of link {index}: {exc}") from None


def _drop_clsact(ipr, index: int) -> None:  # noqa: ANN001
    try:
        ipr.tc("del", "clsact", index)
    except NetlinkError as exc:
        if exc.code not in (errno.ENOENT, errno.EINVAL, errno.ENODEV):
            raise links.LinkError(exc.code, f"dropping clsact of link {index}: {exc}") from None


__all__ = ["BOTH", "DIRECTIONS", "IN", "Mirror", "OUT", "hooks_of", "mirrors_of", "set_mirrors"]
