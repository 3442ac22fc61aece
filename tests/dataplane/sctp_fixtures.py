"""SCTP from inside pods, for the Kubernetes packet tests: a responder answering INITs with
an INIT ACK and a client's INIT (:func:`netbay.dataplane.sctp.check`), over raw sockets
of both families — this kernel has no SCTP stack; its conntrack and NAT do SCTP."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable

from netbay.dataplane import netns, sctp

SCTP_PORT = 3868   # Diameter's


class SctpResponder:
    """Answers every SCTP INIT to :data:`SCTP_PORT` in ``ns`` with an INIT ACK, over raw
    sockets of both families (a thread; :meth:`close` stops it, bounded)."""

    def __init__(self, ns: str) -> None:
        with netns.entered(ns):
            self.socks = [socket.socket(f, socket.SOCK_RAW, sctp.PROTO) for f in (socket.AF_INET, socket.AF_INET6)]
        for s in self.socks:
            s.settimeout(0.1)
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(s,), daemon=True) for s in self.socks]
        for t in self.threads:
            t.start()

    def _run(self, sock: socket.socket) -> None:
        while not self.stop.is_set():
            try:
                data, peer = sock.recvfrom(65535)
            except TimeoutError:
                continue
            except OSError:
                return
            answer_init(sock, data, peer[0])

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(2)
        for s in self.socks:
            s.close()


def answer_init(sock: socket.socket, data: bytes, peer: str, before: Callable[[], None] = lambda: None) -> bool:
    """Answer ``data`` with an INIT ACK if it is a valid INIT to :data:`SCTP_PORT`
    (a responder's one step; True if it answered). ``before`` runs before the answer
    goes: a count the client reads once answered is already taken."""
    got = sctp.parse(data, sock.family)
    if not (got and got.valid and got.chunk == sctp.INIT and got.dport == SCTP_PORT and got.init_tag):
        return False
    before()
    sock.sendto(sctp.init_ack(SCTP_PORT, got.sport, got.init_tag, 7), (peer, 0))
    return True


def sctp_answers(ns: str, ip: str, port: int, timeout: float = 1.0) -> bool:
    """An INIT from ``ns`` to ``ip:port`` gets an INIT ACK (one try, within ``timeout``)."""
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    with netns.entered(ns):
        sock = socket.socket(family, socket.SOCK_RAW, sctp.PROTO)
    with sock:
        return sctp.check(sock, ip, port, timeout)
