"""A pod's network namespace, wired to its port as a container's is.

Like :mod:`netbay.runtime.attach`, one netlink request makes the pair: ``tap<port>``
enslaved to the network's bridge in the fabric and its peer — created directly in
the pod's namespace as ``eth0`` (no runtime has to move it, so it never passes
through the host namespace) — with the port's MAC and MTU; then the port's addresses
and a default route per family through its subnets' gateways (a dual-stack pod's
IPv6 address goes in without duplicate address detection: IPAM made it unique). The dataplane agent adopts the
fabric end as any container port's (``compute:kuryr`` is a container consumer):
security groups and status. Not thread-safe (netlink sockets are per thread).

On a cloud (``vifs``, :mod:`netbay.runtime.vif`): the pod's port, made bound to this
host's chassis, is plugged as Neutron's ``binding:vif_type``/``binding:vif_details``
say — ``eth0`` made in the pod's namespace, its host end put into the cloud's Open
vSwitch by os-vif — instead of into the fabric; a type netbay cannot plug is refused
by name before the namespace is made. The pods' threads share one plugger (a lock).
"""

from __future__ import annotations

import errno
import ipaddress
import shutil
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from netbay.dataplane import links, netns, veth
from netbay.dataplane.fabric import Fabric
from netbay.dataplane.names import Names
from netbay.dataplane.rtnl import release, rtnl
from netbay.runtime.vif import VIF_DETAILS, VIF_TYPE, OvsVifs, Vif

IFNAME = "eth0"
CARRIER_WAIT = 0.2   # s


@dataclass(frozen=True)
class PodPort:
    port_id: str
    network_id: str
    mac: str
    cidr: str          # address/prefixlen
    gateway: str | None
    mtu: int = 1500
    #: the port's further addresses (address/prefixlen, gateway): a dual-stack pod's IPv6 one
    more: tuple[tuple[str, str | None], ...] = ()
    binding: Mapping[str, Any] = field(default_factory=dict, compare=False)   # vif_type, vif_details, device_id

    def vif(self) -> Vif:
        """How a cloud's port is plugged; :class:`netbay.runtime.vif.Unpluggable` if netbay cannot."""
        return Vif.of({"id": self.port_id, "mac_address": self.mac, "network_id": self.network_id, **self.binding},
                      self.mtu)


class PodSandboxes:
    """Makes and removes pod namespaces (``<prefix>k-<port id>``) on this host."""

    local = True   # pods live on this host (their ports are bound to it)

    def __init__(self, names: Names, vifs: OvsVifs | None = None) -> None:
        self.names, self.vifs = names, vifs
        self.fabric = Fabric(names)
        self._vifs_lock = threading.Lock()

    def ensure_network(self, network_id: str, mtu: int) -> None:
        """The network's bridge in the fabric, before pods' threads race for it (none on a cloud)."""
        if self.vifs is None:
            self.fabric.ensure_bridge(network_id, mtu)

    def ns(self, port_id: str) -> str:
        return self.names.k8s_pod(port_id)

    def existing(self) -> set[str]:
        """Port ids that have a pod namespace here."""
        head = f"{self.names.prefix}k-"
        return {n[len(head):] for n in netns.list(head)}

    def plugged(self, port_id: str) -> bool:
        ns = self.ns(port_id)
        if not (netns.exists(ns) and rtnl(ns).link(IFNAME) is not None):
            return False
        if self.vifs is None:
            return True
        with self._vifs_lock:
            return self.vifs.plugged(port_id)

    def plug(self, port: PodPort) -> str:
        """The pod's namespace with ``eth0`` on the port (made fresh if half-made)."""
        if self.vifs is not None:
            return self._plug_vif(port, port.vif())
        ns = self.ns(port.port_id)
        netns.create(ns)
        tap = Names.tap(port.port_id)
        br = self.fabric.ensure_bridge(port.network_id, port.mtu)
        fabric, inside = rtnl(self.fabric.ns), rtnl(ns)
        for attempt in range(2):
            try:
                fabric.add_veth(tap, IFNAME, ns, mtu=port.mtu, peer_mac=port.mac, master=br, up=True)
                break
            except links.LinkError as exc:
                if exc.errno != errno.EEXIST or attempt == 1:
                    raise
                fabric.delete_link(tap)   # a leftover of a crash: its peer goes with it
                inside.delete_link(IFNAME)
        eth = _address(inside, port)
        # Last in ``plug``, so the wait overlaps the rest.
        veth.await_carrier(inside, eth, fabric, tap, CARRIER_WAIT)
        return ns

    def _plug_vif(self, port: PodPort, vif: Vif) -> str:
        assert self.vifs is not None
        ns = self.ns(port.port_id)
        netns.create(ns)
        inside = rtnl(ns)
        if inside.link(IFNAME) is not None:   # a leftover of a crash: made fresh
            inside.delete_link(IFNAME)
        with self._vifs_lock:
            self.vifs.plug(vif, netns.path(ns), IFNAME)
        _address(inside, port)
        return ns

    def unplug(self, port_id: str) -> None:
        if self.vifs is not None:
            with self._vifs_lock:
                self.vifs.unplug(port_id)
        self.fabric.wired.pop(port_id, None)
        if netns.exists(self.fabric.ns):
            rtnl(self.fabric.ns).delete_link(Names.tap(port_id))
        ns = self.ns(port_id)
        release(ns)
        netns.delete(ns)
        shutil.rmtree(f"/etc/netns/{ns}", ignore_errors=True)   # its resolv.conf, environment (k8s.dns)


def _address(inside: Any, port: PodPort) -> int:
    """``lo`` and ``eth0`` up, the port's addresses and a default route per family on it; its index."""
    lo, eth = inside.link("lo"), inside.link(IFNAME)
    assert eth is not None, f"{IFNAME} was just made"
    if lo is not None and not lo.up:
        inside.set_link(lo.index, up=True)
    inside.set_link(eth.index, up=True)
    for cidr, gateway in ((port.cidr, port.gateway), *port.more):
        inside.add_address(eth.index, cidr)
        if gateway:
            default = "::/0" if ipaddress.ip_address(gateway).version == 6 else "0.0.0.0/0"
            inside.replace_route(default, gateway=gateway, oif=eth.index)
    return eth.index


def pod_port(port: dict, subnet: dict, mtu: int = 1500, more: tuple[dict, ...] = ()) -> PodPort:
    """The wiring of a Neutron port body on its (first) subnet (and its binding, for a
    cloud's); ``more``: the network's other subnets (a dual-stack namespace's IPv6 one),
    whose addresses the port also has."""
    fixed_ips = port["fixed_ips"]
    first = next((f for f in fixed_ips if f.get("subnet_id") == subnet.get("id")), fixed_ips[0])
    ip = first["ip_address"]
    plen = ipaddress.ip_network(subnet["cidr"]).prefixlen
    others = {s["id"]: s for s in more}
    extra = tuple((f"{fixed['ip_address']}/{ipaddress.ip_network(others[fixed['subnet_id']]['cidr']).prefixlen}",
                   others[fixed["subnet_id"]].get("gateway_ip"))
                  for fixed in fixed_ips if fixed is not first and fixed.get("subnet_id") in others)
    binding = {k: port[k] for k in (VIF_TYPE, VIF_DETAILS, "device_id") if k in port}
    return PodPort(port["id"], port["network_id"], port["mac_address"], f"{ip}/{plen}",
                   subnet.get("gateway_ip"), mtu, extra, binding)


def sweep_orphans(net, sandboxes: PodSandboxes) -> list[str]:  # noqa: ANN001 - a NetworkBackend
    """Delete the pod namespaces on this host whose port no longer exists (a cluster
    deleted with its pods, whose ports the cluster's sweep took). Returns the port ids."""
    stray = sandboxes.existing()
    if not stray:
        return []
    live = {p["id"] for p in net.list("port", device_owner="compute:kuryr")}
    gone = sorted(stray - live)
    for port_id in gone:
        sandboxes.unplug(port_id)
    return gone
