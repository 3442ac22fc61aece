"""The fabric's share of a reconcile: bridges, sandbox namespaces and port legs made
or removed to match the ids a batch of work names, and the namespaces nothing wants
any more dropped. Each step goes through the agent's ``attempt`` (a failure is logged
and retried later, never stops the rest)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from netbay.agent.plugwait import PlugWait
from netbay.dataplane import netns, rtnl
from netbay.dataplane.fabric import Fabric, PortSpec, on_host
from netbay.dataplane.names import Names
from netbay.dataplane.realizers import Work
from netbay.dataplane.state import State

# The agent's ``_attempt``: (collection, id, step) -> whether the step succeeded.
Attempt = Callable[[str, str, Callable[[], object]], bool]


def reconcile_fabric(state: State, names: Names, host: str, fabric: Fabric, work: Work,
                     specs: Mapping[str, PortSpec], attempt: Attempt, plugs: PlugWait) -> set[str]:
    """Make the fabric match ``work``; returns the ports it unwired."""
    for nid in sorted(work.get("networks", ())):
        net = state.networks.get(nid)
        if net is not None:
            attempt("networks", nid, lambda: fabric.ensure_bridge(nid, int(net.get("mtu") or 1500)))
    for sid in sorted(work.get("sandboxes", ())):
        sb = state.sandboxes.get(sid)
        if sb is not None and on_host(sb, host):
            attempt("sandboxes", sid, lambda: ensure_namespace(names.sandbox(sid)))
    # Ports: unwire first (a port moving between consumers frees its names), then wire.
    gone_consumers = set()
    unwired = set()
    for pid in sorted(work.get("ports", ())):
        if pid not in specs and pid in fabric.wired:
            gone_consumers.add(fabric.wired[pid].ns)
            unwired.add(pid)
            attempt("ports", pid, lambda: fabric.remove_port(pid))
    for pid in sorted(work.get("ports", ()), key=lambda p: (specs[p].ns, specs[p].ifname) if p in specs else ("", "")):
        spec = specs.get(pid)
        if spec is not None and fabric.wired.get(pid) != spec:
            if attempt("ports", pid, lambda: fabric.ensure_port(spec)) \
                    and spec.consumer.kind == "container" and pid not in fabric.wired:
                plugs.watch(pid)
        if spec is None or pid in fabric.wired:
            plugs.done(pid)
    # Namespaces and bridges nothing wants any more.
    for sid in sorted(work.get("sandboxes", ())):
        sb = state.sandboxes.get(sid)
        if sb is None or not on_host(sb, host):
            drop_namespace(fabric, names.sandbox(sid), attempt)
    for rid in sorted(work.get("routers", ())):
        if rid not in state.routers:
            drop_namespace(fabric, names.router(rid), attempt)
    for lb in sorted(work.get("loadbalancers", ())):
        if lb not in state.loadbalancers:
            drop_namespace(fabric, names.loadbalancer(lb), attempt)
    # An external network's namespace goes with its last port (looked for only then:
    # a set of every wired port's namespace costs ~1 ms per pass at 1,000 pods).
    gone_external = {ns for ns in gone_consumers if ns.startswith(names.external(""))}
    if gone_external:
        gone_external -= {s.ns for s in fabric.wired.values()}
    for ns in sorted(gone_external):
        drop_namespace(fabric, ns, attempt)
    for nid in sorted(work.get("networks", ())):
        if nid not in state.networks:
            attempt("networks", nid, lambda: fabric.remove_bridge(nid))
    if not state.networks and netns.exists(names.fabric):
        attempt("fabric", "", fabric.remove)
    return unwired


def drop_namespace(fabric: Fabric, ns: str, attempt: Attempt) -> None:
    """Unwire the ports whose consumer end is in ``ns``, then delete it."""
    for pid, spec in list(fabric.wired.items()):
        if spec.ns == ns:
            attempt("ports", pid, lambda: fabric.remove_port(pid))
    netns.delete(ns)


def release_sockets(names: Names, specs: Iterable[PortSpec], work: Work) -> None:
    """Close this thread's netlink sockets of the sandbox namespaces just
    configured: one per namespace would otherwise stay open (thousands of
    sandboxes, thousands of descriptors). The fabric's stays: every change uses it.
    Other threads' sockets are theirs (closing one under a thread hangs it)."""
    touched = {s.ns for s in specs if s.consumer.kind == "sandbox"}
    touched |= {names.sandbox(i) for i in work.get("sandboxes", ())}
    for ns in touched:
        rtnl.release(ns)


def ensure_namespace(ns: str) -> None:
    """A sandbox's namespace, with its loopback up."""
    if netns.create(ns):
        rtnl.rtnl(ns).set_link(1, up=True)  # lo
