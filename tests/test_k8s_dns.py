"""Cluster DNS records, the resolver's answers over a real socket, and the pods'
Service variables (issue 12, item 4); the packets-in-pods checks are in
tests/dataplane/test_dp_k8s_dns.py."""

from __future__ import annotations

import json
import socket
import socketserver
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from dnslib import QTYPE, RCODE, RR, A, DNSRecord
from dnslib.server import BaseResolver, DNSLogger, DNSServer

from netbay.k8s.dns import podfiles, records
from netbay.k8s.dns.process import write_atomic
from netbay.k8s.dns.server import ClusterResolver, UdpServer
from netbay.k8s.objects import desired, parse

OBJS = """
apiVersion: v1
kind: Pod
metadata: {name: a, namespace: shop, labels: {app: db}}
spec: {containers: [{name: c, image: busybox}]}
---
apiVersion: v1
kind: Pod
metadata: {name: b, namespace: shop, labels: {app: db}}
spec: {containers: [{name: c, image: busybox}]}
---
apiVersion: v1
kind: Service
metadata: {name: my-api, namespace: shop}
spec:
  selector: {app: api}
  ports: [{name: http-alt, port: 8080}, {port: 53, protocol: UDP, name: dns}]
---
apiVersion: v1
kind: Service
metadata: {name: db, namespace: shop}
spec: {clusterIP: None, selector: {app: db}, ports: [{name: sql, port: 5432}]}
---
apiVersion: v1
kind: Service
metadata: {name: other, namespace: elsewhere}
spec: {selector: {app: x}, ports: [{port: 1}]}
"""


def port(ip: str, bound: bool = True) -> dict:
    return {"fixed_ips": [{"ip_address": ip}], "device_id": "d" if bound else ""}


def build() -> dict:
    want = desired(parse(OBJS))
    ports = {("shop", "a"): port("10.0.0.5"), ("shop", "b"): port("10.0.0.4")}
    vips = {("shop", "my-api"): "10.96.0.20", ("elsewhere", "other"): "10.96.0.21"}
    return records.build(want, ports, vips)


def test_records_cluster_ip_headless_and_srv() -> None:
    r = build()
    assert r["A"]["my-api.shop.svc.cluster.local"] == ["10.96.0.20"]
    assert r["A"]["db.shop.svc.cluster.local"] == ["10.0.0.4", "10.0.0.5"]
    assert r["A"]["10-0-0-4.db.shop.svc.cluster.local"] == ["10.0.0.4"]
    assert r["SRV"]["_http-alt._tcp.my-api.shop.svc.cluster.local"] == [[0, 100, 8080, "my-api.shop.svc.cluster.local"]]
    assert r["SRV"]["_dns._udp.my-api.shop.svc.cluster.local"] == [[0, 100, 53, "my-api.shop.svc.cluster.local"]]
    assert [t for *_, t in r["SRV"]["_sql._tcp.db.shop.svc.cluster.local"]] == \
        ["10-0-0-4.db.shop.svc.cluster.local", "10-0-0-5.db.shop.svc.cluster.local"]
    assert "_._tcp.other.elsewhere.svc.cluster.local" not in r["SRV"]   # unnamed port: no SRV


def test_headless_lists_only_ready_pods() -> None:
    want = desired(parse(OBJS))
    r = records.build(want, {("shop", "a"): port("10.0.0.5"), ("shop", "b"): port("10.0.0.4", bound=False)}, {})
    assert r["A"]["db.shop.svc.cluster.local"] == ["10.0.0.5"]


def test_service_env_kubernetes_names() -> None:
    want = desired(parse(OBJS))
    env = podfiles.service_env("shop", want.services, {("shop", "my-api"): "10.96.0.20"})
    assert env["MY_API_SERVICE_HOST"] == "10.96.0.20" and env["MY_API_SERVICE_PORT"] == "8080"
    assert env["MY_API_SERVICE_PORT_HTTP_ALT"] == "8080" and env["MY_API_SERVICE_PORT_DNS"] == "53"
    assert env["MY_API_PORT"] == "tcp://10.96.0.20:8080"
    assert env["MY_API_PORT_53_UDP"] == "udp://10.96.0.20:53" and env["MY_API_PORT_53_UDP_PROTO"] == "udp"
    assert not [k for k in env if k.startswith(("DB_", "OTHER_"))]   # headless; another namespace
    # An IPv6 (primary) cluster IP: bracketed in the URL forms, as kubelet's net.JoinHostPort does.
    env6 = podfiles.service_env("shop", want.services, {("shop", "my-api"): "fd00:96::20"})
    assert env6["MY_API_SERVICE_HOST"] == "fd00:96::20" and env6["MY_API_PORT"] == "tcp://[fd00:96::20]:8080"
    assert env6["MY_API_PORT_53_UDP"] == "udp://[fd00:96::20]:53" and env6["MY_API_PORT_53_UDP_ADDR"] == "fd00:96::20"


def test_write_once_keeps_a_pods_first_environment(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(podfiles, "ETC_NETNS", tmp_path)
    want = desired(parse(OBJS))
    assert podfiles.write_once("nb-k-1", "shop", ["10.96.0.10"], "cluster.local", want.services, {})
    assert (tmp_path / "nb-k-1" / "environment").read_text() == ""
    assert "search shop.svc.cluster.local svc.cluster.local cluster.local" in \
        (tmp_path / "nb-k-1" / "resolv.conf").read_text()
    # A Service made later: the pod keeps what it was made with (Kubernetes semantics).
    assert not podfiles.write_once("nb-k-1", "shop", ["10.96.0.10"], "cluster.local", want.services,
                                   {("shop", "my-api"): "10.96.0.20"})
    assert (tmp_path / "nb-k-1" / "environment").read_text() == ""


@contextmanager
def serving(resolver: BaseResolver, server_class: type = UdpServer, address: str = "127.0.0.1") -> Iterator[int]:
    """``resolver`` behind the cluster resolver's real UDP server on ``address`` (an ephemeral port)."""
    server = DNSServer(resolver, address=address, port=0, logger=DNSLogger("-request,-reply", prefix=False),
                       server=server_class)
    t = threading.Thread(target=server.server.serve_forever, daemon=True)
    t.start()
    try:
        yield server.server.server_address[1]
    finally:
        server.server.shutdown()
        server.server.server_close()


def ask(resolver: ClusterResolver, name: str, qtype: str, port: int | None = None) -> DNSRecord:
    """A query through the resolver's real UDP server (``port``: one already serving)."""
    if port is not None:
        return DNSRecord.parse(DNSRecord.question(name, qtype).send("127.0.0.1", port, timeout=5))
    with serving(resolver) as port:
        return ask(resolver, name, qtype, port)


def test_resolver_answers_and_rereads_its_file(tmp_path: Path) -> None:
    path = tmp_path / "records.json"
    write_atomic(path, json.dumps(build()))
    resolver = ClusterResolver(path)
    a = ask(resolver, "my-api.shop.svc.cluster.local", "A")
    assert [str(r.rdata) for r in a.rr] == ["10.96.0.20"] and a.header.aa   # authoritative
    srv = ask(resolver, "_sql._tcp.db.shop.svc.cluster.local", "SRV")
    assert sorted(str(r.rdata) for r in srv.ar) == ["10.0.0.4", "10.0.0.5"]
    nx = ask(resolver, "nope.shop.svc.cluster.local", "A")
    assert nx.header.rcode == RCODE.NXDOMAIN and nx.auth[0].rtype == QTYPE.SOA
    empty = ask(resolver, "shop.svc.cluster.local", "A")     # an empty non-terminal: no data, not NXDOMAIN
    assert empty.header.rcode == RCODE.NOERROR and not empty.rr
    assert ask(resolver, "example.org", "A").header.rcode == RCODE.REFUSED
    # The controller rewrites the file (the Service deleted): the next query sees it.
    r = build()
    del r["A"]["my-api.shop.svc.cluster.local"]
    r["SRV"] = {k: v for k, v in r["SRV"].items() if "my-api" not in k}
    write_atomic(path, json.dumps(r))
    assert ask(resolver, "my-api.shop.svc.cluster.local", "A").header.rcode == RCODE.NXDOMAIN


class Upstream(BaseResolver):
    """The test's own upstream: one name, NXDOMAIN for the rest."""

    def resolve(self, request: DNSRecord, handler) -> DNSRecord:
        reply = request.reply()
        if str(request.q.qname).rstrip(".") == "www.example.test":
            reply.add_answer(RR(request.q.qname, QTYPE.A, rdata=A("192.0.2.7"), ttl=60))
        else:
            reply.header.rcode = RCODE.NXDOMAIN
        return reply


def test_names_outside_the_domain_go_upstream(tmp_path: Path) -> None:
    path = tmp_path / "records.json"
    write_atomic(path, json.dumps(records.build(desired(parse(OBJS)), {}, {("shop", "my-api"): "10.96.0.20"},
                                                upstream=["127.0.0.1"])))
    resolver = ClusterResolver(path)
    with serving(Upstream(), socketserver.ThreadingUDPServer) as upstream_port, serving(resolver) as port:
        resolver.upstream_port = upstream_port
        got = ask(resolver, "www.example.test", "A", port)
        assert got.header.rcode == RCODE.NOERROR and [str(r.rdata) for r in got.rr] == ["192.0.2.7"]
        assert ask(resolver, "nowhere.example.test", "A", port).header.rcode == RCODE.NXDOMAIN   # as upstream says
        assert [str(r.rdata) for r in ask(resolver, "my-api.shop.svc.cluster.local", "A", port).rr] == ["10.96.0.20"]
        assert ask(resolver, "nope.svc.cluster.local", "A", port).header.rcode == RCODE.NXDOMAIN   # never forwarded

        # An upstream that never answers: SERVFAIL after its timeout, and meanwhile the
        # cluster's names are answered at once (forwarding runs off the server's thread).
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as silent:
            silent.bind(("127.0.0.1", 0))
            resolver.upstream_port = silent.getsockname()[1]
            slow: list[DNSRecord] = []
            t = threading.Thread(target=lambda: slow.append(ask(resolver, "www.example.test", "A", port)))
            t.start()
            time.sleep(0.2)
            t0 = time.monotonic()
            assert ask(resolver, "my-api.shop.svc.cluster.local", "A", port).rr
            assert time.monotonic() - t0 < 1.0
            t.join(10)
            assert slow and slow[0].header.rcode == RCODE.SERVFAIL


def test_forwards_in_flight_are_capped_and_the_rest_refused_at_once(tmp_path: Path, monkeypatch) -> None:
    """A flood toward a silent upstream holds at most ``max_forwards`` threads; a query past
    that is REFUSED at once (CoreDNS' max_concurrent), and a slot freed is used again."""
    monkeypatch.setattr(UdpServer, "max_forwards", 2)
    path = tmp_path / "records.json"
    write_atomic(path, json.dumps(records.build(desired(parse(OBJS)), {}, {("shop", "my-api"): "10.96.0.20"},
                                                upstream=["127.0.0.1"])))
    resolver = ClusterResolver(path)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as silent, serving(resolver) as port:
        silent.bind(("127.0.0.1", 0))
        resolver.upstream_port = silent.getsockname()[1]
        slow: list[DNSRecord] = []
        held = [threading.Thread(target=lambda n=n: slow.append(ask(resolver, f"w{n}.example.test", "A", port)))
                for n in range(2)]
        for t in held:
            t.start()
        time.sleep(0.3)
        t0 = time.monotonic()
        assert ask(resolver, "www.example.test", "A", port).header.rcode == RCODE.REFUSED
        assert time.monotonic() - t0 < 1.0
        assert ask(resolver, "my-api.shop.svc.cluster.local", "A", port).rr   # cluster names still answered
        for t in held:
            t.join(10)
        assert [r.header.rcode for r in slow] == [RCODE.SERVFAIL] * 2
        t0 = time.monotonic()
        assert ask(resolver, "www.example.test", "A", port).header.rcode == RCODE.SERVFAIL   # a slot again
        assert time.monotonic() - t0 >= 1.5


def test_a_dual_stack_resolver_is_every_nameserver_line() -> None:
    """A dual-stack cluster's pods are told both resolver addresses, IPv4 first, in
    resolv.conf and in Docker's --dns alike."""
    conf = podfiles.resolv_conf("shop", ["10.96.0.10", "fd00:96::a"], "cluster.local")
    assert conf.splitlines()[:2] == ["nameserver 10.96.0.10", "nameserver fd00:96::a"]
    assert podfiles.docker_options("shop", ["10.96.0.10", "fd00:96::a"], "cluster.local", {}, {})["dns"] == [
        "10.96.0.10", "fd00:96::a"]


def test_docker_options_match_the_sandbox_files() -> None:
    want = desired(parse(OBJS))
    vips = {("shop", "my-api"): "10.96.0.20"}
    opts = podfiles.docker_options("shop", ["10.96.0.10"], "cluster.local", want.services, vips)
    assert opts["dns"] == ["10.96.0.10"] and opts["dns_opt"] == ["ndots:5"]
    assert opts["dns_search"] == ["shop.svc.cluster.local", "svc.cluster.local", "cluster.local"]
    assert opts["environment"] == podfiles.service_env("shop", want.services, vips)


def test_dual_stack_services_get_aaaa_and_ipv4_clusters_no_aaaa_key(tmp_path: Path) -> None:
    """A Service with an IPv6 cluster IP (a dual-stack cluster) is answered AAAA; a headless
    one with its endpoints' IPv6 addresses; an IPv4-only cluster's records stay as they were."""
    assert "AAAA" not in build()
    want = desired(parse(OBJS))
    dual = {("fixed_ips"): [{"ip_address": "10.0.0.5"}, {"ip_address": "fd00:10::5"}], "device_id": "d"}
    ports = {("shop", "a"): dual, ("shop", "b"): port("10.0.0.4")}
    vips = {("shop", "my-api"): "10.96.0.20"}
    r = records.build(want, ports, vips, cluster_ips={("shop", "my-api"): ("10.96.0.20", "fd00:96::20")})
    assert r["A"]["my-api.shop.svc.cluster.local"] == ["10.96.0.20"]
    assert r["AAAA"]["my-api.shop.svc.cluster.local"] == ["fd00:96::20"]
    assert r["AAAA"]["db.shop.svc.cluster.local"] == ["fd00:10::5"]
    assert r["A"]["db.shop.svc.cluster.local"] == ["10.0.0.4", "10.0.0.5"]
    path = tmp_path / "records.json"
    write_atomic(path, json.dumps(r))
    resolver = ClusterResolver(path)
    with serving(resolver) as udp:
        aaaa = ask(resolver, "my-api.shop.svc.cluster.local", "AAAA", udp)
        assert [(r.rtype, str(r.rdata)) for r in aaaa.rr] == [(QTYPE.AAAA, "fd00:96::20")]
        a = ask(resolver, "my-api.shop.svc.cluster.local", "A", udp)
        assert [str(r.rdata) for r in a.rr] == ["10.96.0.20"]


def test_the_udp_server_answers_over_ipv6(tmp_path: Path) -> None:
    """A dual-stack cluster's resolver also listens on its IPv6 address: AAAA over IPv6."""
    path = tmp_path / "records.json"
    write_atomic(path, json.dumps({**build(), "AAAA": {"my-api.shop.svc.cluster.local": ["fd00:96::20"]}}))
    with serving(ClusterResolver(path), address="::1") as port:
        raw = DNSRecord.question("my-api.shop.svc.cluster.local", "AAAA").send("::1", port, timeout=5, ipv6=True)
    assert [(r.rtype, str(r.rdata)) for r in DNSRecord.parse(raw).rr] == [(QTYPE.AAAA, "fd00:96::20")]
