"""Flannel's ``udp`` backend: not offered.

flannel's udp backend moves every packet through a user-space daemon on a TUN
device; upstream flannel keeps it only for debugging and old kernels without
VXLAN. This host has VXLAN, so netbay refuses the backend rather than emulate a
slow path nobody should run — the API answers 400 with the same reason.
"""

from __future__ import annotations

from typing import NoReturn

from netbay.drivers.flannel.backend import UnsupportedBackend

REASON = ("flannel backend 'udp' is not offered: it relays every packet through a "
          "user-space daemon (upstream keeps it for debugging only); use 'vxlan' "
          "(encapsulation in the kernel) or 'host-gw' (plain routes, nodes on one L2 network)")


def backend() -> NoReturn:
    raise UnsupportedBackend(REASON)
