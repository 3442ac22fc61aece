"""What the agent reports after a reconcile: each port's, sandbox's, router's and
floating IP's status as this host realized it (and what the realizers report of
their own kinds), only where it differs from what the network service holds."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

from netbay.dataplane import netns
from netbay.dataplane.fabric import Fabric, consumer, on_host
from netbay.dataplane.names import Names
from netbay.dataplane.realizers import Realizer, Work
from netbay.dataplane.state import State


def statuses(state: State, fabric: Fabric, names: Names, host: str, realizers: Sequence[Realizer],
             outcomes: Mapping[str, Mapping[str, bool]], failed: Mapping[str, set[str]], unwired: set[str],
             work: Work, everything: bool = False) -> dict[str, dict[str, str]]:
    """What to report for the objects of ``work``: only what differs from the state."""
    out: dict[str, dict[str, str]] = defaultdict(dict)
    port_ids = set(state.ports) if everything else set(work.get("ports", ()))
    sandbox_ids = set(state.sandboxes) if everything else set(work.get("sandboxes", ()))
    router_ids = set(state.routers) if everything else set(work.get("routers", ()))
    fip_ids = set(state.floatingips) if everything else set(work.get("floatingips", ()))
    fip_ids |= {f["id"] for f in state.floatingips.values() if f.get("router_id") in router_ids}
    for pid in port_ids:
        port = state.ports.get(pid)
        if port is None:
            continue
        if consumer(state, port, names, host) is None and pid not in unwired:
            continue  # not a port this agent wires: someone else reports on it
        want: str | None
        if pid in failed.get("ports", ()):
            want = "ERROR"
        elif pid in fabric.wired and port.get("admin_state_up", True):
            want = "ACTIVE"
        else:
            want = "DOWN"
        if port.get("status") != want:
            out["ports"][pid] = want
    for sid in sandbox_ids:
        sb = state.sandboxes.get(sid)
        if sb is None or not on_host(sb, host):
            continue
        mine = [p.get("port_id") for p in sb.get("ports") or () if p.get("port_id") in state.ports]
        if sid in failed.get("sandboxes", ()) or any(p in failed.get("ports", ()) for p in mine):
            want = "ERROR"
        elif all(p in fabric.wired for p in mine) and netns.exists(names.sandbox(sid)):
            want = "ACTIVE"
        else:
            want = "BUILD"
        if sb.get("status") != want:
            out["sandboxes"][sid] = want
    has_routers = any(r.name == "routers" for r in realizers)
    for rid in router_ids:
        router = state.routers.get(rid)
        if router is None:
            continue
        ok = outcomes.get("routers", {}).get(rid, not has_routers)
        want = "ACTIVE" if ok else ("ERROR" if rid in failed.get("routers", ()) else router.get("status"))
        if want and router.get("status") != want:
            out["routers"][rid] = want
    for fid in fip_ids:
        fip = state.floatingips.get(fid)
        if fip is None:
            continue
        fip_router: str | None = fip.get("router_id")
        realized = bool((fip.get("port_id") or fip.get("port_forwardings")) and fip_router and has_routers
                        and outcomes.get("routers", {}).get(fip_router)
                        and outcomes.get("floatingips", {}).get(fid, True))
        want = "ACTIVE" if realized else "DOWN"
        if fip.get("status") != want:
            out["floatingips"][fid] = want
    for r in realizers:
        own = getattr(r, "statuses", None)
        if own is not None:
            for coll, items in own(state, work, everything, outcomes, failed).items():
                out[coll].update(items)
    return {k: v for k, v in out.items() if v}
