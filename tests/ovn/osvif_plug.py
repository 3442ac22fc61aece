"""Plugging a Neutron port into a lab chassis with os-vif itself (its ``ovs`` plugin),
the library kuryr plugs with and netbay's binding will.

os-vif keeps one ``ovs`` plugin per process, configured for the host's one Open
vSwitch. The lab has several chassis in one process, so each gets a plugin instance of
its own, with its own ``[os_vif_ovs]`` options: ``ovsdb_interface = native`` (ovsdbapp,
no ovs-vsctl) and ``ovsdb_connection`` = that chassis's ovsdb-server Unix socket.

- ovsdbapp keeps one OVSDB connection per backend *class* (``_ovsdb_connection`` is
  a class attribute), so a second chassis's plugin would silently talk to the first
  one's database. Each plugin therefore gets os-vif's own IDL backend
  (``vif_plug_ovs.ovsdb.impl_idl``) through a subclass of its own, built with
  os-vif's own ``api_factory`` pieces. One chassis per process — a real host — needs
  none of this.
- The veth is made by the caller (as kuryr makes it); os-vif adds its host end to
  ``br-int`` with ``external_ids`` iface-id, iface-status, attached-mac and vm-uuid
  (``VIFPortProfileOpenVSwitch.create_port``: without it, the generic plug only
  ensures the bridge and leaves the port to the hypervisor), and sets the device's
  MTU.
- That MTU is set through os-vif's privsep context; the tests run as root, so its
  calls run in-process (privsep client mode off) instead of through a
  ``privsep-helper`` daemon, and inside the chassis's namespace, where the device is.
"""

from __future__ import annotations

import uuid

from netbay.dataplane import netns

from .lab import Container, Hypervisor


def _vif(port, box: Container, bridge: str, datapath_type: str, mtu: int):
    from os_vif import objects

    network = objects.network.Network(id=port.network_id, bridge=bridge, mtu=mtu)
    profile = objects.vif.VIFPortProfileOpenVSwitch(interface_id=port.id, datapath_type=datapath_type,
                                                    create_port=True)
    return objects.vif.VIFOpenVSwitch(id=port.id, address=port.mac_address, vif_name=box.host_end,
                                      bridge_name=bridge, network=network, port_profile=profile,
                                      plugin="ovs", has_traffic_filtering=True, preserve_on_delete=False)


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
        import os_vif
        from oslo_config import cfg
        from vif_plug_ovs import ovs, privsep

        os_vif.objects.register_all()
        privsep.vif_plug.set_client_mode(False)  # root already: no privsep-helper daemon
        conf = cfg.ConfigOpts()
        conf.register_opts(ovs.OvsPlugin.CONFIG_OPTS, group="os_vif_ovs")
        conf([], project="netbay-ovn-lab")
        conf.set_override("ovsdb_interface", "native", group="os_vif_ovs")
        conf.set_override("ovsdb_connection", hv.ovsdb, group="os_vif_ovs")
        self.hv = hv
        self.plugin = ovs.OvsPlugin(conf.os_vif_ovs)
        self.plugin.ovsdb._ovsdb = _own_connection(self.plugin.ovsdb, hv.ns)

    def _instance(self, port):
        from os_vif import objects

        device = port.device_id or str(uuid.uuid4())
        return objects.instance_info.InstanceInfo(uuid=device, name=device, project_id=port.project_id)

    def plug(self, port, box: Container, mtu: int) -> None:
        """Plug ``box``'s host end as ``port``'s ``binding:vif_details`` say (bridge,
        datapath type)."""
        details = port.binding_vif_details
        vif = _vif(port, box, details["bridge_name"], details.get("datapath_type", "system"), mtu)
        with netns.entered(self.hv.ns):
            self.plugin.plug(vif, self._instance(port))

    def unplug(self, port, box: Container, mtu: int) -> None:
        details = port.binding_vif_details
        vif = _vif(port, box, details["bridge_name"], details.get("datapath_type", "system"), mtu)
        with netns.entered(self.hv.ns):
            self.plugin.unplug(vif, self._instance(port))
