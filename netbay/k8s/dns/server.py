"""The cluster resolver: dnslib's UDP and TCP servers answering from a records file.

Run by :mod:`.resolver` as ``python -m netbay.k8s.dns.server`` inside the resolver's
namespace. Authoritative for the cluster domain: names it has → their records, names
under the domain it has not → NXDOMAIN with the zone's SOA (negative caching). Other
names are forwarded to the file's ``upstream`` servers in turn (the cluster template's
``dns_nameserver``, else its nodes' subnet's nameservers: CoreDNS' ``forward . /etc/resolv.conf``)
and their answer relayed as it is — NXDOMAIN included; none answering → SERVFAIL; no
upstream at all → REFUSED. Cluster names are answered on the UDP server's one thread,
forwarded ones on a thread each, so a slow upstream holds up no cluster answer — at most
:data:`MAX_FORWARDS` at once; a query beyond that is answered REFUSED at once (CoreDNS'
``forward`` with ``max_concurrent``), so a flood toward a silent upstream cannot pile up
threads. The file is re-read when its inode, size or mtime changes — a stat per query, so a
controller pass's atomic rewrite is answered from the next query on, and a restarted
controller needs no signal or socket to reach this process.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import socketserver
import threading
from pathlib import Path
from typing import Any

from dnslib import AAAA, QTYPE, RCODE, RR, SOA, SRV, A, DNSError, DNSLabel, DNSRecord
from dnslib.server import BaseResolver, DNSLogger, DNSServer

TTL = 5          # seconds: answers follow scaling within this (CoreDNS' kubernetes plugin: 5)
NEGATIVE_TTL = 5
FORWARD_TIMEOUT = 2.0   # seconds per upstream (CoreDNS' forward: 2 s dial timeout)
MAX_FORWARDS = 150      # forwarded queries in flight (dnsmasq's dns-forward-max default)


def qname(data: bytes) -> str | None:
    """The first question's name of a raw query, lower-cased (None: not a plain one)."""
    labels: list[str] = []
    i = 12
    while i < len(data):
        n = data[i]
        if n == 0:
            return ".".join(labels).lower()
        if n & 0xC0:
            return None
        labels.append(data[i + 1:i + 1 + n].decode("ascii", "replace"))
        i += 1 + n
    return None


class ClusterResolver(BaseResolver):
    def __init__(self, records: Path) -> None:
        self.path = records
        self._stamp: tuple[int, int, int] | None = None
        self._lock = threading.Lock()
        self.domain = "cluster.local"
        self.a: dict[str, list[str]] = {}
        self.aaaa: dict[str, list[str]] = {}   # a dual-stack cluster's IPv6 cluster IPs and endpoints
        self.srv: dict[str, list[list[Any]]] = {}
        self.names: set[str] = set()     # every name that exists (with the empty non-terminals)
        self.upstream: list[str] = []    # where names outside the domain are forwarded
        self.upstream_port = 53

    def _fresh(self) -> None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return
        stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
        if stamp == self._stamp:
            return
        with self._lock:
            data = json.loads(self.path.read_text())
            self.domain = data["domain"]
            self.a, self.aaaa, self.srv = data.get("A", {}), data.get("AAAA", {}), data.get("SRV", {})
            self.upstream = list(data.get("upstream") or ())
            names = {self.domain}
            for name in [*self.a, *self.aaaa, *self.srv]:
                labels = name.split(".")
                names.update(".".join(labels[i:]) for i in range(len(labels)))
            self.names = names
            self._stamp = stamp

    def resolve(self, request: DNSRecord, handler: Any) -> DNSRecord:  # dnslib's signature
        self._fresh()
        reply = request.reply()
        q = request.q
        name = str(q.qname).rstrip(".").lower()
        if not self.local(name):
            if self.upstream:
                return self.forward(request)
            reply.header.rcode = RCODE.REFUSED
            return reply
        if q.qtype in (QTYPE.A, QTYPE.ANY):
            for ip in self.a.get(name, []):
                reply.add_answer(RR(q.qname, QTYPE.A, rdata=A(ip), ttl=TTL))
        if q.qtype in (QTYPE.AAAA, QTYPE.ANY):
            for ip in self.aaaa.get(name, []):
                reply.add_answer(RR(q.qname, QTYPE.AAAA, rdata=AAAA(ip), ttl=TTL))
        if q.qtype in (QTYPE.SRV, QTYPE.ANY):
            for priority, weight, port, target in self.srv.get(name, []):
                reply.add_answer(RR(q.qname, QTYPE.SRV, rdata=SRV(priority, weight, port, target), ttl=TTL))
                for ip in self.a.get(target, []):
                    reply.add_ar(RR(target, QTYPE.A, rdata=A(ip), ttl=TTL))
                for ip in self.aaaa.get(target, []):
                    reply.add_ar(RR(target, QTYPE.AAAA, rdata=AAAA(ip), ttl=TTL))
        if q.qtype == QTYPE.SOA and name == self.domain:
            reply.add_answer(self._soa())
        if not reply.rr:
            if name not in self.names:
                reply.header.rcode = RCODE.NXDOMAIN
            reply.add_auth(self._soa())     # NXDOMAIN or no data: negative-cacheable
        return reply

    def local(self, name: str) -> bool:
        return name == self.domain or name.endswith("." + self.domain)

    def forwards(self, data: bytes) -> bool:
        """Whether this raw query goes upstream (the UDP server's choice of thread)."""
        self._fresh()
        name = qname(data)
        return bool(self.upstream) and name is not None and not self.local(name)

    def forward(self, request: DNSRecord) -> DNSRecord:
        """The first upstream's answer (over TCP when it was truncated); SERVFAIL if none answers."""
        for server in self.upstream:
            try:
                answer = DNSRecord.parse(request.send(server, self.upstream_port, timeout=FORWARD_TIMEOUT))
                if answer.header.tc:
                    answer = DNSRecord.parse(request.send(server, self.upstream_port, tcp=True,
                                                            timeout=FORWARD_TIMEOUT))
                return answer
            except (OSError, DNSError, ValueError):
                continue
        reply = request.reply()
        reply.header.rcode = RCODE.SERVFAIL
        return reply

    def _soa(self) -> RR:
        zone = DNSLabel(self.domain)
        return RR(zone, QTYPE.SOA, ttl=NEGATIVE_TTL, rdata=SOA(
            f"ns.dns.{self.domain}", f"hostmaster.{self.domain}",
            (self._stamp[2] // 1_000_000_000 % 2**32 if self._stamp else 1, 7200, 1800, 86400, NEGATIVE_TTL)))


class UdpServer(socketserver.ThreadingMixIn, socketserver.UDPServer):
    """Cluster names on the server's one thread (dnslib's thread per query: 8x the
    latency); forwarded names on a thread each (:meth:`ClusterResolver.forwards`), at
    most ``max_forwards`` of them; past that, REFUSED on the server's thread."""

    daemon_threads = True
    resolver: ClusterResolver   # set by dnslib's DNSServer
    max_forwards = MAX_FORWARDS

    def __init__(self, server_address: tuple[str, int], handler: Any) -> None:
        if ":" in server_address[0]:          # a dual-stack cluster's IPv6 address (as dnslib's own)
            self.address_family = socket.AF_INET6
        super().__init__(server_address, handler)

    def server_activate(self) -> None:
        super().server_activate()
        self._slots = threading.BoundedSemaphore(self.max_forwards)

    def process_request(self, request: Any, client_address: Any) -> None:
        if self.resolver.forwards(request[0]):
            if self._slots.acquire(blocking=False):
                super().process_request(request, client_address)
                return
            refuse(request, client_address)
            return
        self.finish_request(request, client_address)
        self.shutdown_request(request)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


def refuse(request: Any, client_address: Any) -> None:
    """Answer a raw UDP query REFUSED (unparseable: no answer, as a resolver drops it)."""
    data, sock = request
    try:
        reply = DNSRecord.parse(data).reply()
    except (DNSError, ValueError):
        return
    reply.header.rcode = RCODE.REFUSED
    sock.sendto(reply.pack(), client_address)


def serve(addresses: list[str], records: Path, pidfile: Path, port: int = 53) -> None:
    """Answer on each of ``addresses`` (a dual-stack cluster's IPv4 and IPv6 ones) on
    ``port``, UDP and TCP, until SIGTERM; the pid file is written once every socket is
    bound (the starter waits for it)."""
    resolver = ClusterResolver(records)
    quiet = DNSLogger("-request,-reply,-truncated,-recv,-send,-data", prefix=False)
    # UDP: see UdpServer; TCP, whose clients may hold a connection, a thread per connection.
    servers = [server for address in addresses for server in (
        DNSServer(resolver, address=address, port=port, logger=quiet, server=UdpServer),
        DNSServer(resolver, address=address, port=port, tcp=True, logger=quiet))]
    for s in servers:
        s.start_thread()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    tmp = pidfile.with_suffix(".tmp")
    tmp.write_text(f"{os.getpid()}\n")
    os.replace(tmp, pidfile)
    stop.wait()
    for s in servers:
        s.server.server_close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="netbay.k8s.dns.server", description=__doc__.splitlines()[0])
    parser.add_argument("--netns", required=True, help="the namespace to answer in")
    parser.add_argument("--address", required=True, action="append", help="repeated: one per family")
    parser.add_argument("--records", required=True, type=Path)
    parser.add_argument("--pidfile", required=True, type=Path)
    parser.add_argument("--port", type=int, default=53)
    args = parser.parse_args(argv)
    from netbay.dataplane import netns

    with netns.entered(args.netns):   # the sockets and the server threads live there
        serve(args.address, args.records, args.pidfile, args.port)


if __name__ == "__main__":
    main()
