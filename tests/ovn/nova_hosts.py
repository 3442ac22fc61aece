"""The OVN lab's chassis as compute hosts of the Nova stand-in (``tests/peers/nova_standin.py``).

A server is a network namespace holding its port, plugged the way netbay plugs a
container's or a pod's port on a cloud: ``eth0`` made in the server's namespace, its
host end put into the chassis's ``br-int`` by os-vif as Neutron's
``binding:vif_type``/``binding:vif_details`` say, the port's address and a default
route through its subnet's gateway — :class:`netbay.k8s.sandbox.PodSandboxes` over
:class:`netbay.runtime.vif.OvsVifs`, no plugging code of its own. A ``vif_type`` netbay
cannot plug is refused by name before the namespace is made.

The namespace is named as a cluster node's is on this host (``<prefix>s-<server id>``,
:meth:`netbay.dataplane.names.Names.sandbox`), so ``netbay cluster connectivity
--prefix <prefix>`` probes from a cluster's nodes booted on the stand-in.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from netbay.dataplane.names import Names
from netbay.dataplane.rtnl import release
from netbay.k8s.sandbox import PodSandboxes, pod_port
from netbay.runtime.vif import OvsVifs

from .lab import Hypervisor, OvnLab


class _ServerSandboxes(PodSandboxes):
    """PodSandboxes whose namespace for a port is its server's (one plugged port per server)."""

    def __init__(self, names: Names, vifs: OvsVifs) -> None:
        super().__init__(names, vifs)
        self.server_of: dict[str, str] = {}   # port id -> server id

    def ns(self, port_id: str) -> str:
        return self.names.sandbox(self.server_of[port_id])


class ChassisHost:
    """One lab chassis as a compute host (:class:`tests.peers.nova_standin.ServerHost`)."""

    def __init__(self, hv: Hypervisor, names: Names, plugin: Any) -> None:
        self.hv, self.name = hv, hv.chassis
        self.sandboxes = _ServerSandboxes(names, OvsVifs(hv.ovsdb, hv.ns, plugin=plugin))
        self._lock = threading.Lock()   # the stand-in builds servers on threads; one plug at a time

    def namespace(self, server_id: str) -> str:
        return self.sandboxes.names.sandbox(server_id)

    def plug(self, server_id: str, port: dict[str, Any], subnet: dict[str, Any], mtu: int) -> None:
        with self._lock:
            self.sandboxes.server_of[port["id"]] = server_id
            ns = self.sandboxes.plug(pod_port(port, subnet, mtu))
            release(ns)   # this thread's netlink socket there: the namespace must be deletable

    def unplug(self, server_id: str, port_id: str) -> None:
        with self._lock:
            self.sandboxes.server_of.setdefault(port_id, server_id)
            self.sandboxes.unplug(port_id)
            self.sandboxes.server_of.pop(port_id, None)


@contextmanager
def chassis_hosts(lab: OvnLab, names: Names) -> Iterator[list[ChassisHost]]:
    """A host per chassis of ``lab`` (os-vif's plugin with an OVSDB connection of its own
    each, :mod:`tests.ovn.osvif_plug`), the connections closed after."""
    from .osvif_plug import OsVifPlugger

    pluggers = [OsVifPlugger(hv) for hv in lab.hvs]
    try:
        yield [ChassisHost(p.hv, names, p.plugin) for p in pluggers]
    finally:
        for p in pluggers:
            p.plugin.ovsdb._ovsdb.ovsdb_connection.stop(timeout=10)
