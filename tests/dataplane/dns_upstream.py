"""The DNS tests' own upstream server: dnslib in the external network's namespace (the
outside world; never the host's resolver), and a query sent from inside a namespace."""

from __future__ import annotations

import socketserver
from collections.abc import Iterator
from contextlib import contextmanager

from dnslib import QTYPE, RCODE, RR, A, DNSRecord
from dnslib.server import BaseResolver, DNSLogger, DNSServer

from netbay.dataplane import netns

from .agent_fixtures import Cloud, wait_for

UPSTREAM_NAME, UPSTREAM_ADDRESS = "www.example.test", "192.0.2.7"


class Upstream(BaseResolver):
    """The test's upstream DNS server: one name; NXDOMAIN for every other."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def resolve(self, request: DNSRecord, handler: object) -> DNSRecord:
        name = str(request.q.qname).rstrip(".")
        self.asked.append(name)
        reply = request.reply()
        if name == UPSTREAM_NAME and request.q.qtype in (QTYPE.A, QTYPE.ANY):
            reply.add_answer(RR(request.q.qname, QTYPE.A, rdata=A(UPSTREAM_ADDRESS), ttl=60))
        elif name != UPSTREAM_NAME:
            reply.header.rcode = RCODE.NXDOMAIN
        return reply


@contextmanager
def upstream_server(cloud: Cloud) -> Iterator[tuple[str, Upstream]]:
    """(its address, the server): dnslib on port 53 in the external network's namespace."""
    public = cloud.ok(cloud.http.get("/network/v2.0/networks", params={"name": "public"}))["networks"][0]
    outside = cloud.names.external(public["id"])
    wait_for(lambda: netns.exists(outside), 10, what="the external namespace")
    port = cloud.ok(cloud.http.get("/network/v2.0/ports", params={"network_id": public["id"],
                                                                  "device_owner": "netbay:external"}))["ports"][0]
    address, resolver = port["fixed_ips"][0]["ip_address"], Upstream()
    with netns.entered(outside):   # the socket lives there; its thread may run anywhere
        server = DNSServer(resolver, address=address, port=53, logger=DNSLogger("-request,-reply", prefix=False),
                           server=socketserver.ThreadingUDPServer)
    server.start_thread()
    try:
        yield address, resolver
    finally:
        server.stop()
        server.server.server_close()


def query(ns: str, server: str, name: str, qtype: str, tcp: bool = False) -> DNSRecord:
    """One query from inside namespace ``ns`` (dnslib encodes and decodes)."""
    with netns.entered(ns):
        raw = DNSRecord.question(name, qtype).send(server, 53, tcp=tcp, timeout=2)
    return DNSRecord.parse(raw)
