"""Cluster networks and pods for the agent: the container network drivers, driven by state.

For each ``clusternet`` (:mod:`netbay.coe.clusternet`) the realizer programs the
nodes whose namespace and ``eth0`` exist: the driver's ``setup_node`` and then
``sync_peers`` with the *complete* node list, so a node added by a scale is
programmed on every peer and a node removed disappears from every peer. Each
``pod`` gets its own namespace (``names.pod(id)``) plugged into its node by the
driver's ``attach_pod``; a pod that goes is detached and its namespace deleted.
A pod's change that does not move it — the agent's own status report coming back
on the stream — is not attached again (``attach_pod`` is idempotent but costs a
dozen netlink requests, on the new pod's path); a change of its cluster network
(a node made again, a lease moved) always re-attaches, and so does a resync.
The kernel work is the drivers' (:mod:`netbay.drivers`); this module only maps
state onto it. Pods are reported ``ACTIVE`` (or ``ERROR``) through the agent.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Mapping
from typing import Any

from netbay.dataplane import netns, rtnl
from netbay.dataplane.names import Names
from netbay.dataplane.realizers import Outcome, Work
from netbay.drivers import registry

log = logging.getLogger(__name__)


class ClusterNetRealizer:
    """Realizer of ``clusternets`` and ``pods`` (see :class:`netbay.dataplane.realizers.Realizer`)."""

    name = "clusternets"
    before_fabric = False   # node eth0s are wired by the fabric first

    def __init__(self, names: Names) -> None:
        self.names = names
        self.drivers: dict[str, tuple[Any, registry.Driver]] = {}   # cluster id -> (config, driver)
        self.placed: dict[str, str] = {}                 # pod id -> node namespace
        self.attached: dict[str, tuple] = {}             # pod id -> what its last attach was given
        self.waiting: set[str] = set()                   # pods whose node is not ready yet
        self.errors: dict[str, str] = {}                 # pod id -> why its last attach failed
        from netbay.dataplane.standin import MasterStandIns
        self.standins = MasterStandIns()                 # what the master load balancer checks

    # -- helpers -----------------------------------------------------------------------------

    def driver(self, net: Mapping[str, Any]) -> registry.Driver:
        """The cluster's driver object, built from its stored typed config (kept while it holds)."""
        key = (net.get("driver"), tuple(sorted((net.get("config") or {}).items())))
        cached = self.drivers.get(net["id"])
        if cached is None or cached[0] != key:
            cached = self.drivers[net["id"]] = (key, registry.make(net.get("driver"), net.get("config") or {}))
        return cached[1]

    def nodes(self, net: Mapping[str, Any]) -> dict[str, Any]:
        """Logical node name -> :class:`netbay.drivers.node.Node`, in the cluster's order."""
        from netbay.drivers.node import Node
        return {n["name"]: Node(self.names.sandbox(n["sandbox_id"]), n["address"], n["lease"])
                for n in net.get("nodes") or () if n.get("lease")}

    @staticmethod
    def ready(node: Any) -> bool:
        return netns.exists(node.ns) and rtnl.rtnl(node.ns).link(node.underlay) is not None

    # -- the agent's verbs ---------------------------------------------------------------------

    def resync(self, state: Any, fabric: Any, specs: Mapping[str, Any]) -> Outcome:
        self.drivers.clear()
        self.attached.clear()   # a resync attaches every pod again (converges what drifted)
        wanted = {self.names.pod(p) for p in state.table("pods")}
        head = self.names.pod("")
        for ns in self._present(head):
            if ns not in wanted:
                netns.delete(ns)
                shutil.rmtree(f"/etc/netns/{ns}", ignore_errors=True)
        work = {"clusternets": set(state.table("clusternets")), "pods": set(state.table("pods"))}
        return self.apply(state, fabric, work, specs)

    def apply(self, state: Any, fabric: Any, work: Work, specs: Mapping[str, Any]) -> Outcome:
        nets, pods = state.table("clusternets"), state.table("pods")
        done: Outcome = {"clusternets": {}, "pods": {}}
        for cid in sorted(work.get("clusternets", ())):
            if cid in nets:
                done["clusternets"][cid] = self._ensure_net(nets[cid])
            else:
                self.drivers.pop(cid, None)
        moved = work.get("clusternets", set())   # their pods attach again, placed or not
        for pid in sorted(work.get("pods", ())):
            pod = pods.get(pid)
            if pod is None:
                self._remove_pod(pid)
            else:
                net = nets.get(pod.get("cluster_id") or "")
                if pod.get("cluster_id") not in moved and self.attached.get(pid) == _placing(net, pod):
                    done["pods"][pid] = True   # only its status changed (the agent's own report)
                    continue
                done["pods"][pid] = self._ensure_pod(net, pod)
        return {k: v for k, v in done.items() if v}

    def expand(self, state: Any, t: Any, w: Work) -> None:
        """What a change concerns beyond itself: a node's sandbox or port → its cluster
        network; a cluster network → its pods (a node became ready, a lease moved)."""
        nets = state.table("clusternets")
        if t.collection in ("sandboxes", "ports"):
            devices = t.values("device_id") if t.collection == "ports" else {t.id}
            for cid, net in nets.items():
                if any(n.get("sandbox_id") in devices for n in net.get("nodes") or ()):
                    w["clusternets"].add(cid)
        if t.collection == "clusternets":
            w["pods"].update(p for p, pod in state.table("pods").items() if pod.get("cluster_id") == t.id)

    def statuses(self, state: Any, work: Work, everything: bool, outcomes: Any, failed: Any) -> dict[str, dict[str, str]]:
        pods = state.table("pods")
        ids = set(pods) if everything else set(work.get("pods", ()))
        out: dict[str, str] = {}
        for pid in ids:
            pod = pods.get(pid)
            ok = outcomes.get("pods", {}).get(pid)
            if pod is None or ok is None:
                continue
            want = "ACTIVE" if ok else ("BUILD" if pid in self.waiting else "ERROR")
            reason = self.errors.get(pid, "") if want == "ERROR" else ""
            if (pod.get("status"), pod.get("status_reason") or "") != (want, reason):
                out[pid] = f"{want}: {reason}" if reason else want
        return {"pods": out} if out else {}

    # -- work ------------------------------------------------------------------------------------

    def _ensure_net(self, net: Mapping[str, Any]) -> bool:
        """Every ready node set up and given the full peer list; False (retried) while a
        node is not ready yet or a step failed."""
        try:
            driver, nodes = self.driver(net), list(self.nodes(net).values())
        except Exception as exc:  # noqa: BLE001 - a bad config is this cluster's error only
            log.warning("netbay agent: cluster network %s: %s", net.get("id"), exc)
            return False
        masters = {self.names.sandbox(n["sandbox_id"]) for n in net.get("nodes") or () if n.get("role") == "master"}
        ok = True
        for node in nodes:
            if not self.ready(node):
                ok = False
                continue
            try:
                driver.setup_node(node)
                driver.sync_peers(node, nodes)
                if node.ns in masters:
                    self.standins.ensure(node.ns, {int(p): what for p, what in net.get("standins") or ()} or None)
            except Exception as exc:  # noqa: BLE001 - reported, retried; other nodes go on
                log.warning("netbay agent: cluster %s node %s: %s", net.get("id"), node.ns, exc)
                ok = False
        return ok

    def _ensure_pod(self, net: Mapping[str, Any] | None, pod: Mapping[str, Any]) -> bool:
        if net is None:
            return False
        if pod.get("runtime"):
            return True   # a container its runtime's plugin plugged into the node (netbay.plugins)
        node = self.nodes(net).get(pod.get("node") or "")
        if node is None or not self.ready(node):
            self.waiting.add(pod["id"])   # stays BUILD; retried
            return False
        self.waiting.discard(pod["id"])
        ns = self.names.pod(pod["id"])
        try:
            self.driver(net).attach_pod(node, ns, pod["address"])
        except Exception as exc:  # noqa: BLE001 - the pod's ERROR (with this reason), retried
            log.warning("netbay agent: pod %s: %s", pod["id"], exc)
            self.errors[pod["id"]] = f"{type(exc).__name__}: {exc}"[:240]
            return False
        finally:
            rtnl.release(ns)
        self.errors.pop(pod["id"], None)
        self.placed[pod["id"]] = node.ns
        self.attached[pod["id"]] = _placing(net, pod)
        return True

    def _remove_pod(self, pod_id: str) -> None:
        ns = self.names.pod(pod_id)
        self.waiting.discard(pod_id)
        self.errors.pop(pod_id, None)
        self.attached.pop(pod_id, None)
        node_ns = self.placed.pop(pod_id, None)
        if node_ns is not None:
            from netbay.drivers import pods
            pods.detach(node_ns, ns)
        netns.delete(ns)
        shutil.rmtree(f"/etc/netns/{ns}", ignore_errors=True)   # its resolv.conf, environment (netbay.k8s.dns)

    def stop(self) -> None:
        """The agent stops: close the masters' stand-in listeners."""
        self.standins.stop()

    @staticmethod
    def _present(head: str) -> list[str]:
        try:
            return sorted(n for n in os.listdir(netns.NETNS_RUN_DIR) if n.startswith(head))
        except FileNotFoundError:
            return []


def _placing(net: Mapping[str, Any] | None, pod: Mapping[str, Any]) -> tuple:
    """What a pod's attach depends on: its node, address and runtime, and its cluster
    network's driver, config, nodes and leases (not its status)."""
    if net is None:
        return ()
    return (pod.get("node"), pod.get("address"), pod.get("runtime"), net.get("driver"), repr(net.get("config")),
            repr(net.get("nodes")), repr(net.get("leases")))


__all__ = ["ClusterNetRealizer"]
