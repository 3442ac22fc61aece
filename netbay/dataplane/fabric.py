"""The fabric: one namespace per host with a Linux bridge per network, and the ports.

A wired port is a veth pair: ``tap<port>`` enslaved to the network's bridge in the
fabric namespace, its peer in the consumer's namespace (docs/dataplane.md's
table: sandbox, router leg, external "outside world", load balancer VIP) with the
port's MAC, fixed IPs, MTU and — in sandboxes — the default route and host routes.

:func:`port_spec` (:mod:`.portspec`) turns the agent's :class:`State` into a
:class:`PortSpec` (plain data); :class:`Fabric` makes the kernel match it. Every verb is idempotent
and adopts what exists: after a crash, an existing pair is kept if it is the right
pair, its attributes fixed; anything else in the way is deleted and rebuilt.
"""

from __future__ import annotations

import errno
import ipaddress
import logging
import socket
from collections.abc import Iterable

from netbay.dataplane import bigtcp, links, netns, veth
from netbay.dataplane.names import Names
from netbay.dataplane.portspec import (
    CONTAINER, EXTERNAL, KURYR_POD, LOADBALANCER, ROUTER_GATEWAY, ROUTER_INTERFACE, SANDBOX, Consumer, PortSpec,
    consumer, default_route_ports, on_host, port_spec, sandbox_interfaces,
)
from netbay.dataplane.rtnl import LinkInfo, Rtnl, rtnl

log = logging.getLogger(__name__)

BRIDGE_NF = ("net.bridge.bridge-nf-call-iptables", "net.bridge.bridge-nf-call-ip6tables")

# Port veths get BIG TCP (both ends) where this host's probe found it faster on the
# fabric path: see netbay.dataplane.bigtcp.
GSO_MAX_SIZE = bigtcp.GSO_MAX_SIZE


# --- the kernel ----------------------------------------------------------------------------


def _covered(addr: str, cidrs: Iterable[str]) -> bool:
    ip = ipaddress.ip_address(addr)
    return any(ip in ipaddress.ip_interface(c).network for c in cidrs
               if ipaddress.ip_interface(c).version == ip.version)


class Fabric:
    """The fabric namespace of one host and every port wired through it.

    ``wired`` is what this process made or verified, by port id: a spec equal to
    the wired one costs nothing. Use one thread (netlink sockets are per thread).
    """

    def __init__(self, names: Names) -> None:
        self.names = names
        self.ns = names.fabric
        self.wired: dict[str, PortSpec] = {}
        self._bridges: dict[str, tuple[int, int]] = {}  # network id -> (ifindex, mtu)
        self._ready = False

    def reset(self) -> None:
        """Forget what was verified (a full resync checks everything again)."""
        self.wired.clear()
        self._bridges.clear()
        self._ready = False

    # -- namespace and bridges ------------------------------------------------------------

    def ensure(self) -> None:
        """The fabric namespace, ``lo`` up, bridged traffic through the inet hooks."""
        if self._ready and netns.exists(self.ns):
            return
        self._bridges.clear()
        if netns.create(self.ns):
            links.set_up(self.ns, 1)
        for key in BRIDGE_NF:
            try:
                if links.read_sysctl(self.ns, key) != "1":
                    links.sysctl(self.ns, key, 1)
            except links.LinkError as exc:  # br_netfilter not loaded: security groups will say so
                log.warning("fabric %s: cannot set %s: %s", self.ns, key, exc)
        self._ready = True

    def remove(self) -> bool:
        """Delete the fabric namespace (nothing is wired any more)."""
        self.reset()
        return netns.delete(self.ns)

    def ensure_bridge(self, network_id: str, mtu: int) -> int:
        cached = self._bridges.get(network_id)
        if cached is not None and cached[1] == mtu:
            return cached[0]
        self.ensure()
        idx = links.bridge(self.ns, Names.bridge(network_id), mtu)
        self._bridges[network_id] = (idx, mtu)
        return idx

    def remove_bridge(self, network_id: str) -> bool:
        self._bridges.pop(network_id, None)
        if not netns.exists(self.ns):
            return False
        return links.delete_link(self.ns, Names.bridge(network_id))

    # -- ports ----------------------------------------------------------------------------

    def ensure_port(self, spec: PortSpec) -> None:
        """Wire ``spec``: create what is missing, fix what differs, adopt what is right.

        A new port costs about eight rtnetlink requests (:mod:`rtnl`, no pyroute2 on
        this path): the veth pair in one, then up, the carrier check, addresses, routes.
        """
        old = self.wired.get(spec.port_id)
        if old == spec:
            return
        if spec.consumer.kind == "container":
            self._adopt_container_end(spec)
            return
        if old is not None and (old.ns, old.ifname, old.network_id) != (spec.ns, spec.ifname, spec.network_id):
            self.remove_port(spec.port_id)
            old = None
        self.wired.pop(spec.port_id, None)  # until this call succeeds
        br = self.ensure_bridge(spec.network_id, spec.mtu)
        created = netns.create(spec.ns)
        inside, fabric = rtnl(spec.ns), rtnl(self.ns)
        if created:
            inside.set_link(1, up=True)  # lo is always ifindex 1 in a new namespace
        tap = Names.tap(spec.port_id)
        kept = old is not None or (not created and self._adopt_pair(spec, tap))
        if not kept:
            self._make_pair(spec, tap, br)
        inner = inside.link(spec.ifname)
        if inner is None:
            raise links.LinkError(errno.ENODEV, f"port {spec.port_id}: {spec.ifname} vanished in {spec.ns}")
        if kept:
            self._fix_pair(spec, tap, br, inner)
        if not inner.up:
            inside.set_link(inner.index, up=True)
        if not kept and spec.up:
            # The kernel enables the bridge port and the veth's queue asynchronously
            # (linkwatch) after carrier-on; what is sent before is dropped, and a lost
            # first ARP costs its sender a second. So: no address until then.
            veth.await_carrier(inside, inner.index, fabric, tap)
        self._addresses(inside, spec, inner.index, fresh=not kept)
        if spec.consumer.kind == "sandbox":
            self._routes(inside, spec, inner.index, fresh=not kept)
        self.wired[spec.port_id] = spec

    def _adopt_container_end(self, spec: PortSpec) -> None:
        """A container's port: the runtime made the pair (its inner end is in a namespace
        only the runtime knows); keep the fabric end on the right bridge. Not there (yet):
        not wired, the port stays DOWN — never made here, the container end is not ours."""
        self.wired.pop(spec.port_id, None)
        br = self.ensure_bridge(spec.network_id, spec.mtu)
        fabric = rtnl(self.ns)
        outer = fabric.link(Names.tap(spec.port_id))
        if outer is None or outer.kind != "veth":
            log.debug("container port %s: no fabric end yet", spec.port_id)
            return
        if outer.master != br or outer.mtu != spec.mtu or outer.up != spec.up:
            fabric.set_link(outer.index, master=br if outer.master != br else None,
                            mtu=spec.mtu if outer.mtu != spec.mtu else None,
                            up=spec.up if outer.up != spec.up else None)
        self.wired[spec.port_id] = spec

    def _adopt_pair(self, spec: PortSpec, tap: str) -> bool:
        """True if ``tap`` exists and its peer is ``spec.ifname`` in ``spec.ns`` (keep it);
        whatever is in the way otherwise is deleted."""
        fabric, inside = rtnl(self.ns), rtnl(spec.ns)
        outer, inner = fabric.link(tap), inside.link(spec.ifname)
        if outer is not None and inner is not None and outer.kind == inner.kind == "veth" \
                and outer.peer == inner.index and inner.peer == outer.index:
            return True
        if outer is not None:
            fabric.delete_link(tap)
        if inner is not None:
            inside.delete_link(spec.ifname)
        return False

    def _make_pair(self, spec: PortSpec, tap: str, br: int) -> None:
        fabric = rtnl(self.ns)

        def clear() -> None:   # something else holds one of the names: clear both
            fabric.delete_link(tap)
            rtnl(spec.ns).delete_link(spec.ifname)

        veth.make_pair(fabric, tap, spec.ifname, spec.ns, mtu=spec.mtu, peer_mac=spec.mac or None,
                       master=br, up=spec.up, gso_path="fabric", clear=clear)

    def _fix_pair(self, spec: PortSpec, tap: str, br: int, inner: LinkInfo) -> None:
        fabric = rtnl(self.ns)
        outer = fabric.link(tap)
        if outer is None:
            raise links.LinkError(errno.ENODEV, f"port {spec.port_id}: {tap} vanished")
        if outer.master != br or outer.mtu != spec.mtu or outer.up != spec.up:
            fabric.set_link(outer.index, master=br if outer.master != br else None,
                            mtu=spec.mtu if outer.mtu != spec.mtu else None,
                            up=spec.up if outer.up != spec.up else None)
        mac = spec.mac if spec.mac and (inner.address or "").lower() != spec.mac else None
        if inner.mtu != spec.mtu or mac:
            rtnl(spec.ns).set_link(inner.index, mtu=spec.mtu if inner.mtu != spec.mtu else None, mac=mac)

    @staticmethod
    def _addresses(inside: Rtnl, spec: PortSpec, idx: int, fresh: bool) -> None:
        want = [str(ipaddress.ip_interface(c)) for c in spec.cidrs]
        have: set[str] = set() if fresh else {str(ipaddress.ip_interface(a)) for a in inside.addresses(idx)}
        if not fresh:
            gateway_leg = spec.ifname.startswith("qg-")
            for cidr in sorted(have - set(want)):
                iface = ipaddress.ip_interface(cidr)
                if iface.ip.is_link_local:
                    continue
                if gateway_leg and iface.network.prefixlen == iface.max_prefixlen:
                    continue  # a floating IP: the router's to manage
                inside.del_address(idx, cidr)
        for cidr in want:
            if cidr not in have:
                inside.add_address(idx, cidr)

    @staticmethod
    def _routes(inside: Rtnl, spec: PortSpec, idx: int, fresh: bool) -> None:
        """The sandbox's routes through this port: exactly ``spec.routes``."""
        want = {(str(ipaddress.ip_network(d)), str(ipaddress.ip_address(g))) for d, g in spec.routes}
        have: set[tuple[str, str]] = set()
        if not fresh:
            for family in (socket.AF_INET, socket.AF_INET6):
                for dst, gw, oif, metric in inside.routes(family):
                    if oif != idx or gw is None:
                        continue
                    key = (str(ipaddress.ip_network(dst)), str(ipaddress.ip_address(gw)))
                    if key in want:
                        have.add(key)
                    else:
                        inside.del_route(dst, gateway=gw, oif=idx, metric=metric)
        for dst, gw in spec.routes:
            key = (str(ipaddress.ip_network(dst)), str(ipaddress.ip_address(gw)))
            if key not in have:
                inside.replace_route(key[0], gateway=key[1], oif=idx, onlink=not _covered(gw, spec.cidrs))

    def remove_port(self, port_id: str) -> bool:
        """Unwire a port (deleting the fabric end takes its peer along)."""
        self.wired.pop(port_id, None)
        if not netns.exists(self.ns):
            return False
        return rtnl(self.ns).delete_link(Names.tap(port_id))

    # -- what exists ---------------------------------------------------------------------------

    def sweep(self, wanted_taps: set[str], wanted_bridges: set[str]) -> list[str]:
        """Delete every ``tap…`` veth and ``brq…`` bridge in the fabric nothing wants."""
        if not netns.exists(self.ns):
            return []
        gone = []
        for link in links.links(self.ns):
            name = link.ifname or ""
            if (name.startswith("tap") and link.kind == "veth" and name not in wanted_taps) or \
                    (name.startswith("brq") and link.kind == "bridge" and name not in wanted_bridges):
                if links.delete_link(self.ns, name):
                    gone.append(name)
        for net in [n for n in self._bridges if Names.bridge(n) not in wanted_bridges]:
            self._bridges.pop(net, None)
        return gone

    def taps(self) -> list[str]:
        """Names of the port veths in the fabric."""
        if not netns.exists(self.ns):
            return []
        return sorted(lk.ifname for lk in links.links(self.ns)
                      if lk.kind == "veth" and (lk.ifname or "").startswith("tap"))


__all__ = ["CONTAINER", "Consumer", "EXTERNAL", "Fabric", "KURYR_POD", "LOADBALANCER", "PortSpec", "ROUTER_GATEWAY",
           "ROUTER_INTERFACE", "SANDBOX", "consumer", "default_route_ports", "on_host", "port_spec",
           "sandbox_interfaces"]
