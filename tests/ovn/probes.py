"""Packet probes of the OVN lab's tests (and tests/both): echoes between containers,
1 MiB over TCP, a TCP server answering its name and a client asking it — run inside
the namespaces the tests made."""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import threading
from typing import TYPE_CHECKING

from netbay.dataplane import netns
from tests.dataplane.dp_helpers import ping

if TYPE_CHECKING:
    from .lab import OvnLab

MEMBER_PORT, VIP_PORT = 8080, 80   # a load balancer's members listen on the first; its VIP on the second


def reaches(src, dst, tries: int = 10) -> bool:
    """Whether ``src`` gets an echo reply from ``dst`` (lab containers) within ``tries``
    seconds (the first packet may wait for ARP and the tunnel's neighbour)."""
    return any(ping(src.ns, dst.ip, timeout=1.0) for _ in range(tries))


def tcp_arrives(src_ns: str, dst_ns: str, dst_ip: str, port: int = 5201) -> bool:
    """1 MiB sent over TCP from ``src_ns`` to ``dst_ip`` in ``dst_ns`` arrives intact."""
    payload = os.urandom(1 << 20)
    with netns.entered(dst_ns):
        server = socket.create_server((dst_ip, port))
    with netns.entered(src_ns):
        client = socket.socket()
    got = bytearray()

    def receive() -> None:
        conn, _ = server.accept()
        with conn:
            conn.settimeout(20)
            while chunk := conn.recv(65536):
                got.extend(chunk)

    reader = threading.Thread(target=receive, daemon=True)
    with server, client:
        server.settimeout(20)
        reader.start()
        client.settimeout(20)
        client.connect((dst_ip, port))
        client.sendall(payload)
        client.shutdown(socket.SHUT_WR)
        reader.join(30)
    return not reader.is_alive() and hashlib.sha256(got).digest() == hashlib.sha256(payload).digest()


class Answering:
    """A TCP server in a pod's namespace that answers each connection with its name."""

    def __init__(self, pod: str, ip: str, name: str) -> None:
        with netns.entered(netns.path(pod)):
            self.server = socket.create_server((ip, MEMBER_PORT))
        self.server.settimeout(0.5)
        self.name, self.done = name.encode(), threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.done.is_set():
            try:
                conn, _ = self.server.accept()
            except TimeoutError:
                continue
            with conn:
                conn.sendall(self.name)

    def close(self) -> None:
        self.done.set()
        self.thread.join(5)
        self.server.close()


def ask(pod: str, ip: str, port: int, timeout: float = 2.0) -> str | None:
    """What a TCP connection from ``pod`` to ``ip:port`` is answered with, or None."""
    with netns.entered(netns.path(pod)):
        s = socket.socket()
    with s:
        s.settimeout(timeout)
        try:
            s.connect((ip, port))
            return s.recv(64).decode() or None
        except OSError:
            return None


def diagnose(lab: OvnLab, src_ns: str, address: str) -> str:
    """For a failure: the source's neighbours, OVN's load balancers and NAT, and the
    logical flows that name ``address``."""
    neigh = subprocess.run(["ip", "-n", src_ns, "neigh"], capture_output=True, text=True, timeout=10).stdout
    flows = [f for f in lab.sbctl("lflow-list").splitlines() if address in f]
    return (f"neigh:\n{neigh}\nlb-list:\n{lab.nbctl('lb-list')}\nnat:\n"
            f"{lab.nbctl('--bare', '--columns=type,external_ip,logical_ip', 'list', 'NAT')}\nlflows:\n"
            + "\n".join(flows[:40]))
