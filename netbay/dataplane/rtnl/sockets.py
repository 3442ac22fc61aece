"""One netlink socket per namespace and thread: the one cache both netlink layers use.

A netlink socket stays bound to the namespace its thread was in when it was opened,
so :func:`open_in` opens it inside the namespace (never the host's), and a
:class:`Sockets` keeps one per namespace and thread — the codec's
:class:`~netbay.dataplane.rtnl.core.Rtnl` and pyroute2's ``IPRoute``
(:mod:`netbay.dataplane.links`) alike. A cached socket whose namespace was deleted
and made again behind netbay's back is replaced (it would keep configuring the old,
invisible one); deleting a namespace through :func:`netbay.dataplane.netns.delete`
closes its sockets in every thread, or they would keep it (and all in it) alive.
"""

from __future__ import annotations

import contextlib
import errno
import socket
import threading
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

from netbay.dataplane import netns

__all__ = ["LinkError", "NETLINK_EXT_ACK", "SOL_NETLINK", "Sockets", "open_in"]

SOL_NETLINK, NETLINK_EXT_ACK = 270, 11
BUFFER = 1 << 20


class LinkError(OSError):
    """A netlink operation failed. ``errno`` is the kernel's error code."""


def open_in(ns: str) -> tuple[socket.socket, int]:
    """A ``NETLINK_ROUTE`` socket opened inside ``ns`` (datagram, as pyroute2 wants;
    1 MiB buffers; extended acks) and the inode of the namespace it is bound to.
    ``ns`` may not be the host's."""
    with netns.entered(ns):
        if netns.in_home():  # /run/netns/NAME pointing at the host's namespace
            raise LinkError(errno.EPERM, f"namespace {ns!r} is the host's namespace; netbay does not configure it")
        inode = netns.current_inode()
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC, socket.NETLINK_ROUTE)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, BUFFER)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, BUFFER)
        with contextlib.suppress(OSError):   # kernels before 4.12: plain acks
            sock.setsockopt(SOL_NETLINK, NETLINK_EXT_ACK, 1)
    except BaseException:
        sock.close()
        raise
    return sock, inode


class Bound(Protocol):
    """What a :class:`Sockets` caches: something over a socket of :func:`open_in`."""

    ns_inode: int
    closed: bool

    def close(self) -> None: ...


B = TypeVar("B", bound=Bound)


class Sockets(Generic[B]):
    """``open(ns)`` made once per namespace and thread, and closed with its namespace."""

    def __init__(self, open: Callable[[str], B]) -> None:  # noqa: A002 - what it opens with
        self._open = open
        self._local = threading.local()
        self._held: dict[str, list[B]] = {}   # every thread's, for closing from any thread
        self._lock = threading.Lock()
        netns.on_delete(self.close)

    def get(self, ns: str) -> B:
        """The calling thread's one for ``ns`` (opened again if ``ns`` was made again)."""
        cache: dict[str, B] | None = getattr(self._local, "by_ns", None)
        if cache is None:
            cache = self._local.by_ns = {}
        held = cache.get(ns)
        if held is not None and not held.closed and netns.inode(ns) == held.ns_inode:
            return held
        if held is not None:
            self._forget(ns, held)
        held = cache[ns] = self._open(ns)
        with self._lock:
            self._held.setdefault(ns, []).append(held)
        return held

    def held(self, ns: str) -> list[B]:
        """Every thread's open one for ``ns``."""
        with self._lock:
            return list(self._held.get(ns, ()))

    def release(self, ns: str) -> None:
        """Close the calling thread's one for ``ns`` (others' stay: they may be in use)."""
        cache: dict[str, B] | None = getattr(self._local, "by_ns", None)
        held = cache.pop(ns, None) if cache is not None else None
        if held is not None:
            self._forget(ns, held)

    def close(self, ns: str) -> None:
        """Close every thread's one for ``ns``."""
        with self._lock:
            held = self._held.pop(ns, [])
        for one in held:
            one.close()
        cache: dict[str, B] | None = getattr(self._local, "by_ns", None)
        if cache is not None:
            cache.pop(ns, None)

    def _forget(self, ns: str, held: B) -> None:
        with self._lock:
            others = self._held.get(ns)
            if others is not None and held in others:
                others.remove(held)
                if not others:
                    del self._held[ns]
        held.close()
