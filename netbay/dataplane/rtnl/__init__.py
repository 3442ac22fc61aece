"""rtnetlink in-process: netbay's one netlink codec for the hot paths.

:mod:`~netbay.dataplane.rtnl.core` packs the messages with :mod:`struct` onto a
plain netlink socket per namespace and thread — links, veth pairs, addresses,
unicast routes (the fabric's port wiring) — and its codec
(:mod:`~netbay.dataplane.rtnl.codec`: message layouts, attribute packers) is
public; :mod:`~netbay.dataplane.rtnl.overlay` builds the container-network
drivers' messages with it (with :mod:`~netbay.dataplane.rtnl.neigh` and
:mod:`~netbay.dataplane.rtnl.kroutes`): bridges, VXLAN and IPIP links,
neighbours, forwarding-database entries, routes carrying netbay's protocol mark.
:mod:`~netbay.dataplane.rtnl.sockets` opens and caches every netlink socket netbay
uses, one per namespace and thread — the codec's and pyroute2's — and its errors are
:class:`LinkError`. This package is the surface the drivers use (``from
netbay.dataplane import rtnl``); pyroute2 (:mod:`netbay.dataplane.links`, on this
package's sockets) serves the rest, off the hot paths.
"""

from __future__ import annotations

from netbay.dataplane.rtnl.core import *  # noqa: F403 - the codec and the socket: core.__all__
from netbay.dataplane.rtnl.core import __all__ as _core
from netbay.dataplane.rtnl.overlay import *  # noqa: F403 - the drivers' messages: overlay.__all__
from netbay.dataplane.rtnl.overlay import __all__ as _overlay
from netbay.dataplane.rtnl.sockets import *  # noqa: F403 - the socket cache and LinkError: sockets.__all__
from netbay.dataplane.rtnl.sockets import __all__ as _sockets

__all__ = [*_core, *_overlay, *_sockets]
