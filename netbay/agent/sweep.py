"""The resync's sweep: every namespace of this agent's kinds (sandboxes, routers,
external networks, load balancers; never another component's) and every fabric
link that nothing in the state wants is deleted.

A container runtime plugs a port's pair before the port is bound (Docker's plugin
answers CreateEndpoint first and binds after; a plugin killed in between binds it when
it starts again, from the note on the fabric end): the fabric end of a port the state
still has, bound nowhere and a runtime's (or no one's yet), is the runtime's to finish
or collect, not the sweep's."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from netbay.dataplane import netns
from netbay.dataplane.fabric import CONTAINER, KURYR_POD, Fabric, PortSpec, on_host
from netbay.dataplane.names import Names
from netbay.dataplane.state import State

log = logging.getLogger("netbay.agent.agent")   # the agent's own log lines


def wanted_namespaces(state: State, names: Names, host: str, specs: Mapping[str, PortSpec]) -> set[str]:
    wanted = {s.ns for s in specs.values()}
    wanted |= {names.sandbox(i) for i, sb in state.sandboxes.items() if on_host(sb, host)}
    wanted |= {names.router(i) for i in state.routers}
    wanted |= {names.loadbalancer(i) for i in state.loadbalancers}
    if state.networks:
        wanted.add(names.fabric)
    return wanted


def owned_kinds(state: State, names: Names) -> list[str]:
    """Namespace name heads this agent sweeps (never another component's)."""
    n = names
    heads = [n.sandbox(""), n.router(""), n.external("")]
    if "loadbalancers" in state.known:
        heads.append(n.loadbalancer(""))
    return heads


def owned_namespaces(state: State, names: Names) -> list[str]:
    """Namespaces of this agent's kinds that exist (mounted or a stale mount point)."""
    try:
        present = os.listdir(netns.NETNS_RUN_DIR)
    except FileNotFoundError:
        return []
    heads = owned_kinds(state, names)
    return sorted(n for n in present if n == names.fabric or any(n.startswith(h) for h in heads))


def runtime_taps(state: State) -> set[str]:
    """Fabric ends of ports a runtime may be plugging (see the module's docstring)."""
    return {Names.tap(pid) for pid, port in state.ports.items()
            if not port.get("binding:host_id") and (port.get("device_owner") or "") in (CONTAINER, KURYR_POD, "")}


def sweep(state: State, names: Names, host: str, fabric: Fabric, specs: Mapping[str, PortSpec]) -> None:
    wanted = wanted_namespaces(state, names, host, specs)
    for ns in owned_namespaces(state, names):
        if ns not in wanted:
            log.info("netbay agent: deleting namespace %s (nothing wants it)", ns)
            netns.delete(ns)
    if names.fabric in wanted and netns.exists(names.fabric):
        taps = {Names.tap(p) for p in specs} | runtime_taps(state)
        bridges = {Names.bridge(n) for n in state.networks}
        for name in fabric.sweep(taps, bridges):
            log.info("netbay agent: deleted fabric link %s (nothing wants it)", name)
