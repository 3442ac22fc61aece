"""Stand-ins for the Kubernetes API server and etcd on each cluster master.

netbay's cluster nodes are namespaces, not VMs running Kubernetes, so nothing would
answer where the master load balancer's health monitors check (the API port 6443,
etcd's 2379) and its members would show ``ERROR``. The agent opens a listening
socket on each of those ports in every master's namespace; a connection gets a
tiny HTTP ``200 ok`` and is closed. A stand-in — named as such — for the real
kube-apiserver and etcd, not an implementation of either.
"""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
import threading

from netbay.dataplane import netns

log = logging.getLogger(__name__)

# port -> the service it stands in for
PORTS = {6443: "kube-apiserver stand-in", 2379: "etcd stand-in"}
_REPLY = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n"


class MasterStandIns:
    """Listening sockets in master namespaces, served by one thread."""

    def __init__(self) -> None:
        self._sockets: dict[str, list[socket.socket]] = {}
        self._lock = threading.Lock()
        self._selector = selectors.DefaultSelector()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        netns.on_delete(self.forget)  # a socket would keep a deleted namespace alive

    def ensure(self, ns: str) -> None:
        """Listen on every stand-in port in ``ns`` (idempotent)."""
        with self._lock:
            if ns in self._sockets:
                return
            opened = []
            try:
                with netns.entered(ns):
                    for port in PORTS:
                        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                        opened.append(sock)
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                        sock.bind(("0.0.0.0", port))
                        sock.listen(64)
                        sock.setblocking(False)
            except OSError:
                for sock in opened:
                    sock.close()
                raise
            for sock in opened:
                self._selector.register(sock, selectors.EVENT_READ)
            self._sockets[ns] = opened
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="netbay-master-standins", daemon=True)
                self._thread.start()

    def forget(self, ns: str) -> None:
        with self._lock:
            for sock in self._sockets.pop(ns, []):
                with contextlib.suppress(KeyError, ValueError):
                    self._selector.unregister(sock)
                sock.close()

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
                    conn.send(_REPLY)
                conn.close()
