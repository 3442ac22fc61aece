"""Health monitors as Octavia's amphorae run them: TCP connect, HTTP(S) request with
``expected_codes``, TLS handshake (TLS-HELLO), ICMP echo, UDP datagram (UDP-CONNECT),
SCTP INIT (``netbay.dataplane.sctp``), from inside the load balancer's namespace (the probes leave through the VIP port);
rise and fall counted per member as HAProxy does."""

from __future__ import annotations

import contextlib
import logging
import socket
import ssl
import threading
import time
from concurrent.futures import wait
from dataclasses import dataclass
from typing import Any

from netbay.dataplane import netns, sctp
from netbay.dataplane.lb.spec import MemberSpec, MonitorSpec
from netbay.dataplane.probe import ping as icmp_echo

log = logging.getLogger(__name__)

MAX_PROBE_WORKERS = 32
MIN_DELAY = 0.1          # s: a monitor with delay 0 still sleeps between rounds


def _socket_in(ns: str, address: str, kind: int, proto: int = 0) -> socket.socket:
    """A socket of namespace ``ns`` (bound there for its life: probes leave by the VIP),
    of ``address``'s family (an IPv6 VIP's members are IPv6)."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with netns.entered(ns):
        return socket.socket(family, kind, proto)


def probe_tcp(ns: str, address: str, port: int, timeout: float) -> bool:
    """A TCP connect (what Octavia's TCP monitor does)."""
    s = _socket_in(ns, address, socket.SOCK_STREAM)
    try:
        s.settimeout(timeout)
        s.connect((address, port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def _no_verify() -> ssl.SSLContext:
    """The amphora's ``check-ssl verify none``: any certificate, any name."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def probe_tls_hello(ns: str, address: str, port: int, timeout: float) -> bool:
    """A TLS handshake (HAProxy's ``ssl-hello-chk``: the member must answer a hello)."""
    s = _socket_in(ns, address, socket.SOCK_STREAM)
    try:
        s.settimeout(timeout)
        s.connect((address, port))
        with _no_verify().wrap_socket(s) as tls:
            tls.settimeout(timeout)
            return tls.version() is not None
    except (OSError, ValueError):
        return False
    finally:
        s.close()


def probe_udp(ns: str, address: str, port: int, timeout: float) -> bool:
    """UDP-CONNECT as the amphora checks it: a datagram is sent, and the member is down
    only if the kernel answers port unreachable (ICMP); silence or a reply is up."""
    s = _socket_in(ns, address, socket.SOCK_DGRAM)
    try:
        s.settimeout(timeout)
        s.connect((address, port))
        s.send(b"\n")
        try:
            s.recv(512)
        except TimeoutError:
            pass
        return True
    except ConnectionRefusedError:
        return False
    except OSError:
        return False
    finally:
        s.close()


def expected(codes: str, status: int) -> bool:
    """Whether ``status`` is in ``codes`` (``200``, ``200,202``, ``200-204``)."""
    codes = codes.replace(" ", "")
    if "-" in codes:
        low, high = codes.split("-", 1)
        return int(low) <= status <= int(high)
    return str(status) in codes.split(",")


def probe_http(ns: str, address: str, port: int, timeout: float, method: str, path: str,
               codes: str, *, tls: bool = False) -> bool:
    """An HTTP/1.0 request (over TLS, unverified, for ``tls``); healthy if the status
    code is one of ``codes``."""
    deadline = time.monotonic() + timeout
    s = _socket_in(ns, address, socket.SOCK_STREAM)
    try:
        s.settimeout(timeout)
        s.connect((address, port))
        if tls:
            s = _no_verify().wrap_socket(s)
            s.settimeout(max(deadline - time.monotonic(), 0.01))
        s.sendall(f"{method} {path} HTTP/1.0\r\nHost: {address}\r\nUser-Agent: netbay-health-check\r\n"
                  "Connection: close\r\n\r\n".encode())
        buf = b""
        for _ in range(64):  # bounded: the status line is in the first few reads
            left = deadline - time.monotonic()
            if left <= 0 or b"\r\n" in buf or len(buf) > 4096:
                break
            s.settimeout(left)
            chunk = s.recv(1024)
            if not chunk:
                break
            buf += chunk
        parts = buf.split(b"\r\n", 1)[0].split()
        return len(parts) >= 2 and parts[0].startswith(b"HTTP/") and parts[1].isdigit() \
            and expected(codes, int(parts[1]))
    except (OSError, ValueError):
        return False
    finally:
        s.close()


def probe_ping(ns: str, address: str, timeout: float) -> bool:
    """One ICMP echo request; healthy if its reply comes back in time."""
    try:
        return icmp_echo(ns, address, timeout=timeout)
    except OSError:   # the namespace went, or no route: unhealthy
        return False


def probe_sctp(ns: str, address: str, port: int, timeout: float) -> bool:
    """An SCTP INIT; up on the member's INIT ACK (Octavia's amphora check)."""
    try:
        s = _socket_in(ns, address, socket.SOCK_RAW, sctp.PROTO)
    except OSError:
        return False
    with s:
        return sctp.check(s, address, port, timeout)


def probe(ns: str, monitor: MonitorSpec, member: MemberSpec) -> bool:
    address, port = member.probe_target
    timeout = max(monitor.timeout, 0.05)
    if monitor.type == "PING":
        return probe_ping(ns, address, timeout)
    if monitor.type in ("HTTP", "HTTPS"):
        return probe_http(ns, address, port, timeout, monitor.http_method, monitor.url_path,
                          monitor.expected_codes, tls=monitor.type == "HTTPS")
    if monitor.type == "TLS-HELLO":
        return probe_tls_hello(ns, address, port, timeout)
    if monitor.type == "UDP-CONNECT":
        return probe_udp(ns, address, port, timeout)
    if monitor.type == "SCTP":
        return probe_sctp(ns, address, port, timeout)
    return probe_tcp(ns, address, port, timeout)


@dataclass
class Health:
    """One member's health as the monitor sees it (``up`` None: not probed yet —
    counted as up, as HAProxy starts its servers)."""
    up: bool | None = None
    ok: int = 0
    fail: int = 0

    def record(self, success: bool, rise: int, fall: int) -> bool:
        """Count one probe; True if the member changed between up and down."""
        if success:
            self.fail, self.ok = 0, self.ok + 1
            if self.up is None or (self.up is False and self.ok >= rise):
                self.up = True
                return True
        else:
            self.ok, self.fail = 0, self.fail + 1
            if self.up is not False and self.fail >= fall:
                self.up = False
                return True
        return False


class PoolMonitor:
    """The thread probing one pool's members; it reads the pool's current spec from
    the realizer every round, so monitor and member changes need no restart."""

    def __init__(self, owner: Any, lb_id: str, pool_id: str, monitor_id: str) -> None:
        self.owner, self.lb_id, self.pool_id, self.monitor_id = owner, lb_id, pool_id, monitor_id
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"netbay-lb-health-{pool_id[:8]}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set() and not self.owner.stopping.is_set():
            started = time.monotonic()
            target = self.owner.monitor_target(self)
            if target is None:
                return
            ns, monitor, members = target
            try:
                results = self._round(ns, monitor, members)
            except Exception:  # a bug here must not kill the checks for good
                log.exception("load balancer %s: health check of pool %s failed", self.lb_id, self.pool_id)
                results = {}
            if results and not self.stop.is_set():
                self.owner.health_results(self.lb_id, self.pool_id, monitor, results)
            delay = max(monitor.delay, MIN_DELAY)
            self.stop.wait(max(0.0, delay - (time.monotonic() - started)))

    def _round(self, ns: str, monitor: MonitorSpec, members: list[MemberSpec]) -> dict[str, bool]:
        """Probe every member in parallel; a round lasts at most the monitor's timeout
        (plus scheduling). Nothing is concluded while the namespace is missing."""
        if not members or not netns.exists(ns):
            return {}
        futures = {self.owner.pool_executor().submit(probe, ns, monitor, m): m.id for m in members}
        done, _ = wait(futures, timeout=max(monitor.timeout, 0.05) + 2.0)
        out = {}
        for fut in done:
            with contextlib.suppress(Exception):
                out[futures[fut]] = bool(fut.result())
        return out
