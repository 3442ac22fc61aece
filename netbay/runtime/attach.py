"""Plug a container's port into the fabric, for a runtime to move into its container.

One netlink request makes the pair: ``tap<port>`` enslaved to the network's bridge
in the fabric namespace, and its peer ``nbc<port>`` in the host namespace with the
port's MAC and MTU — the only moment a netbay interface is in the host namespace:
the runtime moves it into the container at once (Docker does so at Join and renames
it ``eth0``). The dataplane agent then adopts the fabric end as it adopts any port
(:mod:`netbay.dataplane.fabric`'s ``container`` consumer): security groups, status.

A runtime that knows the namespace before the port (CNI ADD) may make the pair while
the API makes the port: :meth:`Attacher.prepare` under a provisional fabric-end name,
down, then :meth:`Attacher.claim` renames it ``tap<port>`` and brings it up (one
request). Until then the agent does not see it (it adopts ``tap…`` ends only); a pair
never claimed lives no longer than the runtime's namespace, where its inner end is.

Not thread-safe (netlink sockets are per thread): call it from one thread.
"""

from __future__ import annotations

import errno
import secrets
from dataclasses import dataclass

from netbay.dataplane import netns, veth
from netbay.dataplane.fabric import Fabric
from netbay.dataplane.names import Names
from netbay.dataplane.rtnl import LinkError, rtnl



@dataclass(frozen=True)
class Plug:
    """What plugging needs to know of a port."""
    port_id: str
    network_id: str
    mac: str
    mtu: int = 1500


class Attacher:
    """Plugs and unplugs container ports in one host's fabric."""

    def __init__(self, names: Names) -> None:
        self.names = names
        self.fabric = Fabric(names)

    def plug(self, plug: Plug, into: str | None = None, ifname: str | None = None) -> str:
        """Make the pair (again, if one is in the way); returns the inner end's name.

        ``into``: a runtime's namespace file (CNI's ``CNI_NETNS``): the inner end is
        made there directly, named ``ifname`` — never in the host namespace. The
        caller checks first that ``ifname`` is free there (EEXIST is then the tap's)."""
        tap = Names.tap(plug.port_id)
        inner = ifname if into else Names.container_end(plug.port_id)
        br = self.fabric.ensure_bridge(plug.network_id, plug.mtu)
        fabric = rtnl(self.fabric.ns)

        def clear() -> None:
            # A retry, or a leftover of a crash: make it fresh (deleting the tap takes
            # its peer along; a lone inner end in the host namespace goes too).
            fabric.delete_link(tap)
            if not into:
                _delete_host_link(inner)

        veth.make_pair(fabric, tap, inner, into, mtu=plug.mtu, peer_mac=plug.mac or None, master=br,
                       up=True, gso_path="fabric", clear=clear)   # a container port is a fabric port
        return inner

    def prepare(self, network_id: str, mtu: int, into: str, ifname: str) -> str:
        """The pair for a port not made yet: its inner end ``ifname`` in ``into`` (down,
        the kernel's MAC), its fabric end on the network's bridge, down, under a
        provisional name (returned). The caller checks first that ``ifname`` is free."""
        provisional = Names.provisional(secrets.token_hex(6))
        br = self.fabric.ensure_bridge(network_id, mtu)
        veth.make_pair(rtnl(self.fabric.ns), provisional, ifname, into, mtu=mtu, master=br, up=False,
                       gso_path="fabric", clear=lambda: None)   # a fresh random name: nothing in the way
        return provisional

    def claim(self, provisional: str, port_id: str) -> None:
        """The prepared pair's fabric end named for ``port_id`` and up (a leftover of an
        earlier attempt under that name is deleted first). ENODEV: the pair is gone."""
        fabric = rtnl(self.fabric.ns)
        link = fabric.link(provisional)
        if link is None:
            raise LinkError(errno.ENODEV, f"{provisional} vanished from {self.fabric.ns}")
        tap = Names.tap(port_id)
        try:
            fabric.set_link(link.index, name=tap, up=True)
        except LinkError as exc:
            if exc.errno != errno.EEXIST:
                raise
            fabric.delete_link(tap)
            fabric.set_link(link.index, name=tap, up=True)

    def unplug(self, port_id: str, host_end: bool = True) -> bool:
        """Delete the pair wherever its inner end is (host or container namespace).
        ``host_end=False``: the inner end was never in the host namespace (CNI)."""
        self.fabric.wired.pop(port_id, None)
        netns.delete(self.names.container(port_id))   # the container's namespace keeps living
        gone = self.fabric.remove_port(port_id)
        return (host_end and _delete_host_link(Names.container_end(port_id))) or gone

    def mark(self, port_id: str, note: str) -> bool:
        """Write ``note`` on the port's fabric end (its ifalias; ``""`` clears it): a
        record that lives exactly as long as the pair, for a restarted runtime to read.
        False if the pair is gone. Safe from any thread (netlink sockets are per thread)."""
        fabric = rtnl(self.fabric.ns)
        tap = fabric.link(Names.tap(port_id)) if netns.exists(self.fabric.ns) else None
        if tap is None:
            return False
        fabric.set_link(tap.index, alias=note)
        return True

    def marks(self, prefix: str) -> list[str]:
        """The notes starting with ``prefix`` on fabric ends (see :meth:`mark`)."""
        if not netns.exists(self.fabric.ns):
            return []
        return [link.alias for link in rtnl(self.fabric.ns).links()
                if link.ifname.startswith("tap") and link.alias.startswith(prefix)]

    def host_ends(self) -> list[str]:
        """The inner ends in the host namespace whose fabric end is in this fabric (the
        peer of ``tap<x>`` here is ``nbc<x>``): the ones this host's runtime may collect.
        Another netbay's on the same machine (or a test's) are not, though named alike."""
        if not netns.exists(self.fabric.ns):
            return []
        peers = {Names.container_end(link.ifname.removeprefix("tap")): link.peer   # the name its peer must have
                 for link in rtnl(self.fabric.ns).links() if link.ifname.startswith("tap")}
        return sorted(name for name, index in veth.host_ends("nbc").items() if peers.get(name) == index)

    def plugged(self, port_id: str) -> bool:
        return netns.exists(self.fabric.ns) and rtnl(self.fabric.ns).link(Names.tap(port_id)) is not None


def delete_host_end(ifname: str) -> bool:
    """Delete an inner end left in the host namespace (its fabric end goes with it)."""
    return _delete_host_link(ifname)


def _delete_host_link(ifname: str) -> bool:
    """Delete ``ifname`` from the host namespace if it is one of ours (``nbc…`` veth)."""
    if not ifname.startswith("nbc"):
        raise ValueError(f"{ifname!r} is not a container end")
    return veth.delete_host_end(ifname)


__all__ = ["Attacher", "Plug", "delete_host_end"]
