"""One statistics round over the load balancers realized here: each listener's
counters (``netbay.dataplane.lbstats``), read from its namespace's table."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from netbay.dataplane import lbstats
from netbay.dataplane.lb.spec import LoadBalancerSpec
from netbay.dataplane.lb.table import TABLE, table_family
from netbay.dataplane.nft import Nft

log = logging.getLogger("netbay.dataplane.loadbalancer")   # its messages are the realizer's

#: lb id -> (counters, open connections by mark) as the last round saw them
Seen = dict[str, tuple[dict, dict]]


def collect(work: Iterable[tuple[LoadBalancerSpec, Nft | None, int | None]], seen: Seen) -> dict[str, dict[str, Any]]:
    """Listener id -> its counters, for every (spec, its nft context, its namespace's
    inode) of ``work``; ``seen`` is updated with what this round read."""
    out: dict[str, dict[str, Any]] = {}
    for spec, nft, inode in work:
        if nft is None or inode is None:
            continue
        try:
            counters = lbstats.read_counters(nft, table_family(spec), TABLE)
            last = seen.get(spec.id)
            if last is not None and last[0] == counters:
                opened = last[1]   # no packet since: no connection opened or closed
            else:
                # A conntrack dump walks the kernel's whole (shared) hash table, ~100 ms
                # here: only when packets flowed. Counters again after it, so that a
                # connection seen open is always in the total too.
                opened = lbstats.open_connections(spec.ns)
                counters = lbstats.read_counters(nft, table_family(spec), TABLE)
            seen[spec.id] = (counters, opened)
        except (OSError, RuntimeError) as exc:   # the namespace went meanwhile
            log.debug("load balancer %s: no statistics this round: %s", spec.id, exc)
            continue
        try:
            lbstats.drop_stale(nft, table_family(spec), TABLE, counters, [li.id for li in spec.listeners])
        except (OSError, RuntimeError) as exc:   # a refill under way still names them: next round
            log.debug("load balancer %s: stale counters kept this round: %s", spec.id, exc)
        epoch = f"{lbstats.PROCESS}:{inode}"
        for listener in spec.listeners:
            out[listener.id] = lbstats.listener_stats(counters, opened, listener.id, epoch)
    return out


__all__ = ["Seen", "collect"]
