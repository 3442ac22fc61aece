"""Which ids a batch of changes concerns: a change to one object touches what
depends on it (a subnet's ports and routers, the routers of a subnet pool's subnets
(its address scope), a sandbox's ports, the routers a floating IP moved between,
the load balancer a member belongs to…), and each realizer may add what its own
kinds depend on (``expand(state, touched, work)``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from netbay.dataplane.realizers import Work
from netbay.dataplane.state import State, Touched

LB_CHILDREN = ("listeners", "pools", "members", "healthmonitors")


def _lb_of(state: State, t: Touched) -> set[str]:
    """The load balancers a change of a listener, pool, member or monitor concerns
    (through its old and new rendering: a child never moves, but be safe)."""
    out: set[str] = set()
    pools = state.table("pools")
    for r in (t.old, t.new):
        if r is None:
            continue
        refs = r.get("loadbalancers")
        pool_ids = [r.get("pool_id")] if t.collection == "members" else \
            [p.get("id") for p in r.get("pools") or () if isinstance(p, dict)]
        if t.collection in ("listeners", "pools"):
            out.update(x["id"] for x in refs or () if isinstance(x, dict) and x.get("id"))
        for pid in pool_ids:
            pool = pools.get(pid or "")
            if pool is not None:
                out.update(x["id"] for x in pool.get("loadbalancers") or ()
                           if isinstance(x, dict) and x.get("id"))
    return out


def expand(state: State, touched: Iterable[Touched], realizers: Sequence[Any] = ()) -> Work:
    """The ids ``touched`` concerns, following dependencies."""
    w: Work = defaultdict(set)
    for t in touched:
        w[t.collection].add(t.id)
        if t.collection == "networks":
            w["ports"].update(p["id"] for p in state.ports_on(t.id))
        elif t.collection == "subnetpools":   # its address scope: the routers of its subnets
            nets = {str(s["network_id"]) for s in state.subnets.values()
                    if s.get("subnetpool_id") == t.id and s.get("network_id")}
            for net in nets:
                w["routers"].update(p["device_id"] for p in state.ports_on(net)
                                    if str(p.get("device_owner", "")).startswith("network:router"))
        elif t.collection in ("metering_labels", "metering_label_rules"):   # every router it may meter
            w["routers"].update(state.routers)
        elif t.collection == "subnets":
            for net in t.values("network_id"):
                for p in state.ports_on(net):
                    w["ports"].add(p["id"])
                    if str(p.get("device_owner", "")).startswith("network:router"):
                        w["routers"].add(p["device_id"])
                    elif str(p.get("device_id", "")).startswith("lb-"):
                        w["loadbalancers"].add(p["device_id"][3:])  # VIP routes
        elif t.collection == "ports":
            for dev in t.values("device_id"):
                if dev in state.sandboxes or any(
                        r is not None and r.get("device_owner") == "netbay:sandbox" for r in (t.old, t.new)):
                    w["sandboxes"].add(dev)
                    w["ports"].update(p["id"] for p in state.ports_of(dev))  # default route choice
                if dev in state.routers:
                    w["routers"].add(dev)
            w["floatingips"].update(f["id"] for f in state.floatingips.values() if f.get("port_id") == t.id)
            w["loadbalancers"].update(d[3:] for d in t.values("device_id") if str(d).startswith("lb-"))
        elif t.collection == "sandboxes":
            w["ports"].update(p["id"] for p in state.ports_of(t.id))
            for r in (t.old, t.new):
                if r is not None:
                    w["ports"].update(p.get("port_id") for p in r.get("ports") or () if p.get("port_id"))
        elif t.collection == "routers":
            w["ports"].update(p["id"] for p in state.ports_of(t.id))
            w["floatingips"].update(f["id"] for f in state.floatingips.values() if f.get("router_id") == t.id)
        elif t.collection == "floatingips":
            w["routers"].update(t.values("router_id"))
        elif t.collection == "security_group_rules":
            w["security_groups"].update(t.values("security_group_id"))
        elif t.collection == "loadbalancers":
            w["ports"].update(p["id"] for p in state.ports_of(f"lb-{t.id}"))
        elif t.collection in LB_CHILDREN:
            w["loadbalancers"].update(_lb_of(state, t))
        for r in realizers:   # what a realizer's own kinds depend on (cluster nodes)
            more = getattr(r, "expand", None)
            if more is not None:
                more(state, t, w)
    return w
