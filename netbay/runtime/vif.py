"""Binding a cloud's port on this host as kuryr does: plugged with os-vif into the
cloud's Open vSwitch, so that the cloud's own dataplane (OVN, in most clouds) carries
its packets.

The port is bound first (``binding:host_id`` = this host's chassis name, by the
caller, :mod:`netbay.runtime.binding`); Neutron's answer says how to plug it:
``binding:vif_type`` and ``binding:vif_details``. netbay plugs ``ovs`` (:data:`PLUGGABLE`)
and refuses any other type by name (:class:`Unpluggable`) before it makes anything.

Plugging (:meth:`OvsVifs.plug`): a veth whose inner end is made straight in the
runtime's namespace (with the port's MAC) and whose host end, ``nbv`` + the port id's
first 11 characters, os-vif's ``ovs`` plugin adds to the bridge the details name
(``br-int``) with ``external_ids`` iface-id, attached-mac, iface-status=active and
vm-uuid (``VIFPortProfileOpenVSwitch.create_port``; without it the generic plug leaves
the port to a hypervisor). The OVSDB connection is netbay's setting (``--ovsdb``,
``NETBAY_OVSDB``); os-vif talks to it natively (ovsdbapp, no ovs-vsctl). One process
serves one host: os-vif and ovsdbapp keep one plugin and one connection per process.

Restart: before os-vif runs, the host end carries a note (its ifalias) with what the
plug needs. :meth:`OvsVifs.recover` finishes the plug of a noted host end that is in
no bridge (a crash between the veth and the OVS port), and removes OVS ports of ours
whose device is gone.

``netns``: the namespace this host's Open vSwitch datapath lives in, where host ends
go (None: the process's own — a real host's). os-vif's calls on devices run there too,
in the calling thread; the caller is root, so os-vif's privsep calls run in-process.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from netbay.dataplane.names import Names
from netbay.runtime import inside

log = logging.getLogger("netbay.vif")

VIF_TYPE = "binding:vif_type"
VIF_DETAILS = "binding:vif_details"
PLUGGABLE = ("ovs",)
DEFAULT_OVSDB = "unix:/run/openvswitch/db.sock"
HOST_END = "nbv"
NOTE = "netbay-vif "
OVSDB_TIMEOUT = 10   # seconds per OVSDB transaction (os-vif's default: 120)
INTEGRATION_BRIDGE = "br-int"


class Unpluggable(ValueError):
    """Neutron bound the port to a ``vif_type`` netbay cannot plug."""

    def __init__(self, port_id: str, vif_type: str | None) -> None:
        self.vif_type = vif_type
        super().__init__(f"port {port_id} is bound with binding:vif_type {vif_type!r}, which netbay cannot plug "
                         f"(it plugs: {', '.join(PLUGGABLE)})")


def host_end(port_id: str) -> str:
    return f"{HOST_END}{port_id[:11]}"


@dataclass(frozen=True)
class Vif:
    """What plugging a bound port needs, from Neutron's answer."""
    port_id: str
    mac: str
    bridge: str
    datapath_type: str
    device_id: str
    network_id: str
    mtu: int = 1500

    @classmethod
    def of(cls, port: Mapping[str, Any], mtu: int) -> Vif:
        """The port's binding as netbay plugs it; :class:`Unpluggable` if it cannot."""
        vif_type = port.get(VIF_TYPE)
        details = port.get(VIF_DETAILS) or {}
        if vif_type not in PLUGGABLE or not details.get("bridge_name"):
            raise Unpluggable(port["id"], vif_type)
        return cls(port["id"], port["mac_address"], details["bridge_name"],
                   details.get("datapath_type") or "system", port.get("device_id") or port["id"],
                   port["network_id"], mtu)

    @property
    def host_end(self) -> str:
        return host_end(self.port_id)

    def note(self) -> str:
        return NOTE + json.dumps([self.port_id, self.mac, self.bridge, self.datapath_type, self.device_id,
                                  self.network_id, self.mtu], separators=(",", ":"))

    @classmethod
    def from_note(cls, note: str) -> Vif | None:
        if not note.startswith(NOTE):
            return None
        try:
            return cls(*json.loads(note[len(NOTE):]))
        except (ValueError, TypeError):
            return None


def os_vif_objects(vif: Vif, vif_name: str | None = None) -> tuple[Any, Any]:
    """(os-vif's VIFOpenVSwitch, its InstanceInfo) for ``vif``; its device is
    ``vif_name`` (default: netbay's host end of the port)."""
    from os_vif import objects

    network = objects.network.Network(id=vif.network_id, bridge=vif.bridge, mtu=vif.mtu)
    profile = objects.vif.VIFPortProfileOpenVSwitch(interface_id=vif.port_id, datapath_type=vif.datapath_type,
                                                    create_port=True)
    osvif = objects.vif.VIFOpenVSwitch(id=vif.port_id, address=vif.mac, vif_name=vif_name or vif.host_end,
                                       bridge_name=vif.bridge, network=network, port_profile=profile,
                                       plugin="ovs", has_traffic_filtering=True, preserve_on_delete=False)
    instance = objects.instance_info.InstanceInfo(uuid=vif.device_id, name=vif.device_id)
    return osvif, instance


def ovs_plugin(ovsdb: str) -> Any:
    """os-vif's ``ovs`` plugin, native OVSDB on ``ovsdb``; ImportError without os-vif."""
    import os_vif
    from oslo_config import cfg
    from vif_plug_ovs import ovs, privsep

    os_vif.objects.register_all()
    privsep.vif_plug.set_client_mode(False)  # root already: no privsep-helper daemon
    conf = cfg.ConfigOpts()
    conf.register_opts(ovs.OvsPlugin.CONFIG_OPTS, group="os_vif_ovs")
    conf([], project="netbay")
    conf.set_override("ovsdb_interface", "native", group="os_vif_ovs")
    conf.set_override("ovsdb_connection", ovsdb, group="os_vif_ovs")
    conf.set_override("ovs_vsctl_timeout", OVSDB_TIMEOUT, group="os_vif_ovs")
    return ovs.OvsPlugin(conf.os_vif_ovs)


def _tx_checksum_off(tool: Any, ifname: str) -> None:
    found = tool.get_features(ifname)
    for name in ("tx-checksum-ip-generic", "tx-checksum-ipv4", "tx-checksum-ipv6"):
        if name in found.features:
            found.features[name].enable = False
    tool.set_features(ifname, found)


def checksum_in_software(ns: str | None, ifname: str) -> None:
    """``ethtool -K IFNAME tx off`` inside ``ns`` (a name or a runtime's namespace file;
    None: this process's own, for an inner end the runtime moves next — the setting
    moves with it; pyroute2's ioctl, no ethtool needed), for a container end on a
    chassis whose bridge is on the userspace (``netdev``) datapath: that datapath reads
    the veth with AF_PACKET and forwards a checksum-offloaded (CHECKSUM_PARTIAL) TCP/UDP
    packet into the tunnel as is, so the receiver drops it for its bad checksum — ICMP
    works, TCP does not. The sender's kernel must finish the checksum itself."""
    from pyroute2.ethtool import Ethtool

    from netbay.dataplane import netns

    with netns.entered(ns) if ns else contextlib.nullcontext():
        tool = Ethtool()
    try:
        with netns.entered(ns) if ns else contextlib.nullcontext():
            _tx_checksum_off(tool, ifname)
    finally:
        tool.close()


class OvsVifs:
    """Plugs and unplugs bound ports on this host's Open vSwitch, with os-vif.

    Not thread-safe (it enters ``netns`` in the calling thread): call it from one thread."""

    def __init__(self, ovsdb: str = DEFAULT_OVSDB, netns: str | None = None, plugin: Any = None) -> None:
        self.ovsdb, self.netns = ovsdb, netns
        self.plugin = plugin or ovs_plugin(ovsdb)

    @property
    def api(self) -> Any:
        """ovsdbapp's Open_vSwitch API on os-vif's connection."""
        return self.plugin.ovsdb.ovsdb

    @contextlib.contextmanager
    def _there(self) -> Iterator[Any]:
        """pyroute2 in the datapath's namespace (this thread inside it meanwhile)."""
        from pyroute2 import IPRoute

        from netbay.dataplane import netns

        with netns.entered(self.netns) if self.netns else contextlib.nullcontext(), IPRoute() as ipr:
            yield ipr

    def plug(self, vif: Vif, into: str | None = None, ifname: str | None = None) -> str:
        """The veth, noted, then plugged by os-vif and up; returns the inner end's name.

        ``into``: the runtime's namespace file (CNI's ``CNI_NETNS``), the inner end made
        there as ``ifname``. None: the inner end, ``nbc<port>``, is made in this
        process's namespace for the runtime to move at once (Docker's Join), as
        :class:`netbay.runtime.attach.Attacher` does on the embedded backend."""
        self.unplug(vif.port_id)  # a retry, or a crash's leftover: made fresh
        if into is not None:
            inner = ifname or Names.container_end(vif.port_id)
            with inside.opened(into) as r:
                index = r.add_veth(inner, vif.host_end, self.netns, mtu=vif.mtu)
                r.set_link(index, mac=vif.mac)
            if vif.datapath_type == "netdev":
                checksum_in_software(into, inner)
        else:
            inner = Names.container_end(vif.port_id)
            self._pair_here(vif, inner)
        with self._there() as ipr:
            ipr.link("set", index=ipr.link_lookup(ifname=vif.host_end)[0], ifalias=vif.note())
        self._plug(vif)
        return inner

    def _pair_here(self, vif: Vif, inner: str) -> None:
        """The pair with its inner end in this process's namespace (the runtime moves it),
        its host end in the datapath's."""
        from pyroute2 import IPRoute

        peer: dict[str, Any] = {"ifname": vif.host_end, "mtu": vif.mtu}
        if self.netns:
            peer["net_ns_fd"] = self.netns
        with IPRoute() as ipr:
            found = ipr.link_lookup(ifname=inner)
            if found:  # a crash's leftover whose host end is gone
                ipr.link("del", index=found[0])
            ipr.link("add", ifname=inner, kind="veth", address=vif.mac, mtu=vif.mtu, peer=peer)
        if vif.datapath_type == "netdev":
            checksum_in_software(None, inner)

    def _plug(self, vif: Vif) -> None:
        osvif, instance = os_vif_objects(vif)
        with self._there() as ipr:
            self.plugin.plug(osvif, instance)
            ipr.link("set", index=ipr.link_lookup(ifname=vif.host_end)[0], state="up")

    def bridge_of(self, port_id: str) -> str | None:
        """The bridge the port's host end is a port of (None: none)."""
        return self._bridge_of(host_end(port_id))

    def _bridge_of(self, name: str) -> str | None:
        from ovsdbapp.backend.ovs_idl.idlutils import RowNotFound

        try:
            return self.api.iface_to_br(name).execute(check_error=True, log_errors=False) or None
        except RowNotFound:
            return None

    def plugged(self, port_id: str) -> bool:
        """The host end exists and is a port of a bridge."""
        with self._there() as ipr:
            present = bool(ipr.link_lookup(ifname=host_end(port_id)))
        return present and self.bridge_of(port_id) is not None

    def unplug(self, port_id: str) -> bool:
        """Out of the bridge (os-vif) and the veth deleted; False if there was nothing."""
        name = host_end(port_id)
        bridge = self.bridge_of(port_id)
        with self._there() as ipr:
            found = ipr.link_lookup(ifname=name)
            note = (ipr.get_links(found[0])[0].get_attr("IFLA_IFALIAS") or "") if found else ""
            if bridge is not None:  # os-vif needs the bridge and the device; the note has the rest
                vif = Vif.from_note(note) or Vif(port_id, "00:00:00:00:00:00", bridge, "system", port_id, port_id)
                self.plugin.unplug(*os_vif_objects(dataclasses.replace(vif, bridge=bridge)))  # the device too
            elif found:
                ipr.link("del", index=found[0])
        return bool(found) or bridge is not None

    def external_ids(self) -> dict[str, str]:
        """This host's ``Open_vSwitch`` external_ids (ovn-controller's system-id, hostname)."""
        return dict(self.api.db_get("Open_vSwitch", ".", "external_ids").execute(check_error=True) or {})

    def chassis_host(self) -> str | None:
        """The name ML2/OVN binds ports to this chassis by: the chassis's hostname
        (ovn-controller takes ``external_ids:hostname``, else the system's); None if
        ovn-controller has no system-id here (no chassis)."""
        import socket

        ids = self.external_ids()
        if not ids.get("system-id"):
            return None
        return ids.get("hostname") or socket.gethostname()

    def recover(self) -> list[str]:
        """Finish half-done plugs, remove OVS ports of ours whose device is gone; what
        was done, one line each."""
        done = []
        with self._there() as ipr:
            ends = {link.get_attr("IFLA_IFNAME"): link.get_attr("IFLA_IFALIAS") or ""
                    for link in ipr.get_links()
                    if (link.get_attr("IFLA_IFNAME") or "").startswith(HOST_END)}
        for name, note in sorted(ends.items()):
            vif = Vif.from_note(note)
            if vif is None or self._bridge_of(name):
                continue
            self._plug(vif)
            done.append(f"finished plugging port {vif.port_id} ({name} into {vif.bridge})")
        for bridge in self.api.list_br().execute(check_error=True):
            for port in self.api.list_ports(bridge).execute(check_error=True):
                if port.startswith(HOST_END) and port not in ends:
                    self.api.del_port(port, bridge=bridge, if_exists=True).execute(check_error=True)
                    done.append(f"removed {port} from {bridge}: its device is gone")
        for line in done:
            log.info("restart: %s", line)
        return done


def host_report(ovsdb: str, netns: str | None = None) -> dict[str, Any]:
    """Whether this host can bind a cloud's ports (``netbay doctor --backend openstack``):
    its OVS database reachable, a chassis (ovn-controller's system-id), the integration
    bridge present, the vif_types netbay plugs here. ``checks``: one line per question,
    in that order, each ``ok`` or saying what is missing; a question that cannot be asked
    (the database unreachable) is left out rather than answered "no"."""
    out: dict[str, Any] = {"ovsdb": ovsdb, "reachable": False, "system_id": None, "hostname": None,
                           "bridge": INTEGRATION_BRIDGE, "bridge_present": False, "vif_types": [], "ok": False,
                           "detail": "", "checks": []}

    def check(name: str, ok: bool, line: str) -> None:
        out["checks"].append({"check": name, "ok": ok, "line": line})

    try:
        vifs = OvsVifs(ovsdb, netns)
    except ImportError as exc:
        check("os-vif", False, f"os-vif is not installed (pip install 'netbay[cloud]'): {exc}")
        out["detail"] = out["checks"][0]["line"]
        return out
    try:
        ids = vifs.external_ids()
        out["reachable"] = True
        out["system_id"] = ids.get("system-id")
        out["hostname"] = vifs.chassis_host()
        out["bridge"] = bridge = ids.get("ovn-bridge") or INTEGRATION_BRIDGE
        out["bridge_present"] = bool(vifs.api.br_exists(bridge).execute(check_error=True))
    except Exception as exc:  # noqa: BLE001 - unreachable or not an OVS database: said, not raised
        check("ovsdb", False, f"OVS database {ovsdb} not reachable: {type(exc).__name__}: {exc}")
        out["detail"] = out["checks"][0]["line"]
        return out
    check("ovsdb", True, f"OVS database {ovsdb} reachable")
    if out["system_id"]:
        check("chassis", True, f"registered as OVN chassis {out['system_id']} "
                               f"(ports bind to it as binding:host_id {out['hostname']})")
    else:
        check("chassis", False, "not registered as an OVN chassis: no system-id in the Open_vSwitch table's "
                                "external_ids (ovn-controller sets it; is it configured and running?)")
    if out["bridge_present"]:
        check("bridge", True, f"integration bridge {bridge} present")
    else:
        check("bridge", False, f"integration bridge {bridge} missing (ovn-controller creates it)")
    if out["bridge_present"]:
        out["vif_types"] = list(PLUGGABLE)
        check("vif_types", True, f"vif_types netbay can plug here: {', '.join(PLUGGABLE)}")
    else:
        check("vif_types", False, f"no vif_type can be plugged here: ovs needs the integration bridge {bridge}")
    out["ok"] = bool(out["system_id"] and out["bridge_present"])
    failed = [c["line"] for c in out["checks"] if not c["ok"]]
    out["detail"] = "; ".join(failed) or f"chassis {out['system_id']} (binding:host_id {out['hostname']})"
    return out


__all__ = ["DEFAULT_OVSDB", "PLUGGABLE", "OvsVifs", "checksum_in_software", "Unpluggable", "Vif",
           "host_end", "host_report",
           "os_vif_objects", "ovs_plugin"]
