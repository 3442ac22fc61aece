"""Flannel backends: one module per backend behind one interface (flannel's ``backend/``).

    >>> from netbay.drivers.flannel import backend
    >>> b = backend.get("vxlan")
    >>> b.pod_mtu(1500)
    1450

A backend configures what carries pod traffic between nodes; the lease, the
``cni0`` bridge and the pods are the driver's (:mod:`netbay.drivers.flannel`).
Every verb is idempotent; ``sync_peers`` takes the *complete* peer list.
"""

from __future__ import annotations

import importlib
from typing import Protocol, runtime_checkable

from netbay.drivers.node import Node

__all__ = ["Backend", "BackendError", "UnsupportedBackend", "BACKENDS", "get"]

# label value -> module (``udp`` is known but refused, see udp.py)
BACKENDS = {"vxlan": "vxlan", "host-gw": "hostgw", "udp": "udp"}


class BackendError(RuntimeError):
    """A backend cannot do what was asked (e.g. host-gw with a peer on another subnet)."""


class UnsupportedBackend(BackendError, ValueError):
    """A backend netbay does not offer; the message says why and what to use instead."""


@runtime_checkable
class Backend(Protocol):
    name: str
    #: kernel features (names in :mod:`netbay.dataplane.features`) the backend needs
    requires: frozenset[str]
    #: whether pods may build BIG TCP packets (:mod:`netbay.dataplane.bigtcp`): not
    #: through a VXLAN device, whose encapsulation of a packet above 64 KiB fails
    big_packets: bool

    def pod_mtu(self, underlay_mtu: int) -> int:
        """The MTU pods (and cni0) get on an underlay of ``underlay_mtu``."""

    def setup_node(self, node: Node) -> None:
        """Create the backend's devices in the node (idempotent)."""

    def sync_peers(self, node: Node, peers: list[Node]) -> object:
        """Program exactly ``peers`` in ``node``: add missing, replace changed, remove stale."""

    def teardown(self, node: Node) -> None:
        """Remove everything the backend made in the node."""


def get(name: str) -> Backend:
    """The backend for label value ``name``; :class:`UnsupportedBackend` otherwise."""
    module = BACKENDS.get(name)
    if module is None:
        raise UnsupportedBackend(f"unknown flannel backend {name!r}; "
                                 f"choose one of {', '.join(b for b in BACKENDS if b != 'udp')}")
    mod = importlib.import_module(f"{__name__}.{module}")
    return mod.backend()
