"""Stand-ins for a COE's API server and etcd on each cluster master.

netbay's cluster nodes are namespaces, not VMs running a COE, so nothing would answer
where the master load balancers' health monitors check and their members would show
``ERROR``. The agent opens a listening socket on each port the cluster's COE uses for
them in every master's namespace — Kubernetes' 6443 and etcd's 2379, swarm's 2376,
Mesos' 5050 and Marathon's 8080, the template's ``apiserver_port``
(:func:`netbay.coe.fragments.standins`, given with the cluster network); a connection
gets an HTTP ``200`` whose body names the stand-in, and is closed. A stand-in — named
as such — for the real services, not an implementation of any.
"""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
import threading
from collections.abc import Mapping

from netbay.dataplane import netns

log = logging.getLogger(__name__)

# port -> the service it stands in for (a cluster network that names none: Kubernetes')
PORTS = {6443: "kube-apiserver", 2379: "etcd"}


def reply(service: str) -> bytes:
    """What a connection gets: HTTP 200 (what health monitors check), saying what it is."""
    body = f"ok: netbay's stand-in for {service} (no {service} runs here)\n".encode()
    return (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
            % len(body)) + body


class MasterStandIns:
    """Listening sockets in master namespaces, served by one thread."""

    def __init__(self) -> None:
        self._sockets: dict[str, dict[int, socket.socket]] = {}
        self._replies: dict[socket.socket, bytes] = {}
        self._lock = threading.Lock()
        self._selector = selectors.DefaultSelector()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        netns.on_delete(self.forget)  # a socket would keep a deleted namespace alive

    def ensure(self, ns: str, ports: Mapping[int, str] | None = None) -> None:
        """Listen on every port of ``ports`` (default :data:`PORTS`) in ``ns``, and on no
        other (idempotent)."""
        want = dict(ports or PORTS)
        with self._lock:
            have = self._sockets.get(ns, {})
            if have.keys() == want.keys():
                return
            for port in set(have) - set(want):
                self._close(have.pop(port))
            opened: dict[int, socket.socket] = {}
            try:
                with netns.entered(ns):
                    for port in sorted(set(want) - set(have)):
                        sock = opened[port] = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                        sock.bind(("0.0.0.0", port))
                        sock.listen(64)
                        sock.setblocking(False)
            except OSError:
                for sock in opened.values():
                    sock.close()
                raise
            for port, sock in opened.items():
                self._replies[sock] = reply(want[port])
                self._selector.register(sock, selectors.EVENT_READ)
            self._sockets[ns] = {**have, **opened}
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="netbay-master-standins", daemon=True)
                self._thread.start()

    def _close(self, sock: socket.socket) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(sock)
        self._replies.pop(sock, None)
        sock.close()

    def forget(self, ns: str) -> None:
        with self._lock:
            for sock in self._sockets.pop(ns, {}).values():
                self._close(sock)

    def ports(self, ns: str) -> set[int]:
        with self._lock:
            return set(self._sockets.get(ns, {}))

    def listening(self) -> set[str]:
        with self._lock:
            return set(self._sockets)

    def stop(self) -> None:
        self._stop.set()
        for ns in list(self.listening()):
            self.forget(ns)
        if self._thread is not None:
            self._thread.join(timeout=2)

    def _serve(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                empty = not self._sockets
            if empty:
                self._stop.wait(0.2)
                continue
            try:
                events = self._selector.select(timeout=0.2)
            except (OSError, ValueError):  # a socket closed under us: next round
                continue
            for key, _ in events:
                try:
                    conn, _ = key.fileobj.accept()  # type: ignore[union-attr]
                except OSError:
                    continue
                with contextlib.suppress(OSError):
                    conn.setblocking(False)
                    conn.send(self._replies.get(key.fileobj, reply("a COE service")))  # type: ignore[call-overload]
                conn.close()
