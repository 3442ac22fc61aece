"""Plugging a Neutron port into a lab chassis with os-vif itself (its ``ovs`` plugin),
as netbay's binding does (:mod:`netbay.runtime.vif`: the plugin's configuration, the
os-vif objects a bound port becomes), on a veth the lab made (``box.host_end``).

What stays here is the lab's: os-vif keeps one ``ovs`` plugin per process, for the
host's one Open vSwitch (netbay's product serves one host per process). The lab has
several chassis in one process, and ovsdbapp keeps one OVSDB connection per backend
*class* (``_ovsdb_connection`` is a class attribute), so a second chassis's plugin
would silently talk to the first one's database. Each plugin therefore gets os-vif's
own IDL backend (``vif_plug_ovs.ovsdb.impl_idl``) through a subclass of its own, built
with os-vif's own ``api_factory`` pieces. os-vif's device calls (the MTU) run inside
the chassis's namespace, where the device is.
"""

from __future__ import annotations

import uuid

from netbay.dataplane import netns
from netbay.runtime.vif import Vif, os_vif_objects, ovs_plugin

from .lab import Container, Hypervisor


def _own_connection(base, name: str):
    """os-vif's native OVSDB API for ``base`` (its ``BaseOVS``), on a connection of its
    own (see the module's docstring)."""
    from ovsdbapp.backend.ovs_idl import connection
    from vif_plug_ovs.ovsdb import impl_idl

    own = type(f"NeutronOvsdbIdl_{name}", (impl_idl.NeutronOvsdbIdl,), {"_ovsdb_connection": None})
    return own(connection.Connection(idl=impl_idl.idl_factory(base), timeout=base.timeout))


class OsVifPlugger:
    """os-vif's ``ovs`` plugin for one chassis."""

    def __init__(self, hv: Hypervisor) -> None:
        self.hv = hv
        self.plugin = ovs_plugin(hv.ovsdb)
        self.plugin.ovsdb._ovsdb = _own_connection(self.plugin.ovsdb, hv.ns)

    def _objects(self, port, box: Container, mtu: int):
        vif = Vif.of({"id": port.id, "mac_address": port.mac_address, "network_id": port.network_id,
                      "device_id": port.device_id or str(uuid.uuid4()), "binding:vif_type": port.binding_vif_type,
                      "binding:vif_details": port.binding_vif_details}, mtu)
        return os_vif_objects(vif, box.host_end)

    def plug(self, port, box: Container, mtu: int) -> None:
        """Plug ``box``'s host end as ``port``'s ``binding:vif_details`` say (bridge,
        datapath type)."""
        with netns.entered(self.hv.ns):
            self.plugin.plug(*self._objects(port, box, mtu))

    def unplug(self, port, box: Container, mtu: int) -> None:
        with netns.entered(self.hv.ns):
            self.plugin.unplug(*self._objects(port, box, mtu))
