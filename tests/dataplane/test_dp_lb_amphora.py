"""Octavia's amphora provider behaviours with the real agent and real packets (issue 29):
a backup member takes traffic only while the primary is down (haproxy and nftables),
HTTPS and TLS-HELLO monitors tell a TLS member from a plain one, UDP-CONNECT finds a
closed UDP port, SOURCE_IP_PORT spreads one client's flows, a served pool with no
members is ONLINE, and an amphora failover rebuilds the namespace. Reuses the load
balancer tests' cloud: members m1-m3 (TCP 8080, UDP 5353), two clients (tag ``lb``).
"""

from __future__ import annotations

import socket
import ssl
import subprocess
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from netbay.dataplane import netns
from netbay.dataplane.loadbalancer import TABLE

from .lb_fixtures import (  # noqa: F401 (fixtures)
    HTTP_PORT, LB, UDP_PORT, Env, ask_udp, env, get, make_lb, post, spread, try_fetch, wait_lb, wait_op)

CLOUD_TAG = "lb"   # the shared `cloud` fixture (conftest.py), on test_dp_loadbalancer's prefix


def make(env: Env, name: str, provider: str, *, members: dict[str, dict] | None = None, **lb: object) -> dict:
    """A load balancer of ``provider`` with one listener, its pool and ``members``
    (name -> extra member attributes, none by default), all ACTIVE."""
    return make_lb(env, name, provider=provider, members=members or {}, **lb)


def monitor(env: Env, made: dict, kind: str, delay: int = 1) -> dict:
    return post(env.cloud, "healthmonitors", "healthmonitor", {
        "pool_id": made["pool"]["id"], "type": kind, "delay": delay, "timeout": 1, "max_retries": 1,
        "max_retries_down": 1}, made["lb"]["id"])


def member_path(made: dict, name: str) -> str:
    return f"pools/{made['pool']['id']}/members/{made['members'][name]['id']}"


def drop(env: Env, made: dict) -> None:
    env.cloud.ok(env.cloud.http.delete(f"{LB}/loadbalancers/{made['lb']['id']}", params={"cascade": "true"}), 204)


# --- backup members ------------------------------------------------------------------------------


@pytest.mark.parametrize("provider", ["amphora", "ovn"])
def test_backup_member_serves_only_while_the_primary_is_down(env: Env, provider: str) -> None:
    port = 90 if provider == "amphora" else 91
    made = make(env, f"backup-{provider}", provider, port=port, members={"m1": {}, "m2": {"backup": True}})
    vip = made["lb"]["vip_address"]
    assert made["members"]["m2"]["backup"] is True
    monitor(env, made, "TCP")
    wait_op(env.cloud, member_path(made, "m1"), "ONLINE")
    assert spread(env.clients[0], vip, port, 6) == Counter({"m1": 6})   # the backup idles
    _, _, primary = env.member("m1")
    primary.stop()
    try:
        wait_op(env.cloud, member_path(made, "m1"), "ERROR", timeout=8)
        answers = Counter(try_fetch(env.clients[0], vip, port) for _ in range(6))
        assert answers == Counter({"m2": 6}), answers   # the backup takes over
    finally:
        primary.start()
    wait_op(env.cloud, member_path(made, "m1"), "ONLINE", timeout=8)
    assert spread(env.clients[0], vip, port, 6) == Counter({"m1": 6})
    drop(env, made)


# --- TLS members: HTTPS and TLS-HELLO monitors ------------------------------------------------------


@dataclass
class TlsServer:
    """An HTTPS server (self-signed) on a member's port 8080, in place of its plain one."""
    ns: str
    cert: Path
    key: Path
    stop_event: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None
    sock: socket.socket | None = None

    def start(self) -> TlsServer:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self.cert, self.key)
        with netns.entered(self.ns):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("0.0.0.0", HTTP_PORT))
        s.listen(16)
        s.settimeout(0.1)
        self.sock = s
        self.thread = threading.Thread(target=self._serve, args=(ctx,), daemon=True)
        self.thread.start()
        return self

    def _serve(self, ctx: ssl.SSLContext) -> None:
        assert self.sock is not None
        while not self.stop_event.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                conn.settimeout(2)
                with ctx.wrap_socket(conn, server_side=True) as tls:
                    tls.recv(4096)
                    tls.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\ntls")
            except OSError:
                conn.close()

    def stop(self) -> None:
        self.stop_event.set()
        if self.thread is not None:
            self.thread.join(5)
        if self.sock is not None:
            self.sock.close()


@pytest.fixture
def tls_m3(env: Env, tmp_path: Path) -> Iterator[None]:
    """Member m3 speaks TLS on 8080 for the test (its plain server is back afterwards)."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=m3",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True, timeout=60)
    _, _, plain = env.member("m3")
    plain.stop()
    server = TlsServer(plain.ns, cert, key).start()
    try:
        yield
    finally:
        server.stop()
        plain.start()


@pytest.mark.parametrize("kind", ["HTTPS", "TLS-HELLO"])
def test_tls_monitors_tell_a_tls_member_from_a_plain_one(env: Env, tls_m3: None, kind: str) -> None:
    made = make(env, f"tls-{kind.lower()}", "amphora", protocol="HTTPS", port=443,
                members={"m1": {}, "m3": {}})
    monitor(env, made, kind)
    wait_op(env.cloud, member_path(made, "m3"), "ONLINE", timeout=8)
    wait_op(env.cloud, member_path(made, "m1"), "ERROR", timeout=8)   # plain HTTP: no TLS hello back
    wait_op(env.cloud, f"pools/{made['pool']['id']}", "DEGRADED")
    # Only the TLS member is served (passthrough: the client speaks TLS to it).
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    for _ in range(4):
        with netns.entered(env.clients[0]):
            raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        raw.settimeout(3)
        raw.connect((made["lb"]["vip_address"], 443))
        with ctx.wrap_socket(raw) as tls:
            tls.sendall(b"GET / HTTP/1.0\r\n\r\n")
            assert tls.recv(4096).endswith(b"tls")
    drop(env, made)


# --- UDP: UDP-CONNECT, SOURCE_IP_PORT --------------------------------------------------------------


def test_udp_connect_monitor_finds_a_closed_port(env: Env) -> None:
    made = make(env, "udpmon", "amphora", protocol="UDP", port=5300, member_port=UDP_PORT,
                members={"m1": {}, "m2": {}})
    monitor(env, made, "UDP-CONNECT", delay=3)
    for m in ("m1", "m2"):
        wait_op(env.cloud, member_path(made, m), "ONLINE", timeout=10)
    _, _, backend = env.member("m2")
    backend.stop()   # its UDP port closes: the member's kernel answers port unreachable
    try:
        wait_op(env.cloud, member_path(made, "m2"), "ERROR", timeout=12)
        answers = Counter(ask_udp(env.clients[0], made["lb"]["vip_address"], 5300) for _ in range(6))
        assert answers == Counter({"m1": 6}), answers
    finally:
        backend.start()
    wait_op(env.cloud, member_path(made, "m2"), "ONLINE", timeout=12)
    drop(env, made)


def test_source_ip_port_spreads_one_clients_flows(env: Env) -> None:
    made = make(env, "sip", "ovn", port=92, algorithm="SOURCE_IP_PORT", members={"m1": {}, "m2": {}, "m3": {}})
    ns = env.cloud.names.loadbalancer(made["lb"]["id"])
    ruleset = subprocess.run(["ip", "netns", "exec", ns, "nft", "list", "table", "ip", TABLE],
                             capture_output=True, text=True, timeout=10, check=True).stdout
    assert "jhash ip saddr . tcp sport mod 3" in ruleset, ruleset
    # One client, one address: new source ports land on every member (SOURCE_IP would stick).
    assert set(spread(env.clients[0], made["lb"]["vip_address"], 92, 24)) == {"m1", "m2", "m3"}
    drop(env, made)


# --- statuses and the amphora API ---------------------------------------------------------------------


def test_served_empty_pool_is_online_and_amphora_failover_rebuilds(env: Env) -> None:
    cloud = env.cloud
    made = make(env, "emptyamp", "amphora", port=93)
    wait_op(cloud, f"pools/{made['pool']['id']}", "ONLINE")   # no members: still ONLINE, as the amphora says
    amps = cloud.ok(cloud.http.get("/load-balancer/v2/octavia/amphorae",
                                   params={"loadbalancer_id": made["lb"]["id"]}))["amphorae"]
    [amp] = amps
    _, address, _ = env.member("m1")
    post(cloud, f"pools/{made['pool']['id']}/members", "member", {
        "address": address, "protocol_port": HTTP_PORT, "subnet_id": env.subnet["id"]}, made["lb"]["id"])
    vip = made["lb"]["vip_address"]
    assert try_fetch(env.clients[0], vip, 93) == "m1"
    r = cloud.http.put(f"/load-balancer/v2/octavia/amphorae/{amp['id']}/failover")
    assert r.status_code == 202, r.text
    wait_lb(cloud, made["lb"]["id"], "ACTIVE", timeout=30)
    [new] = cloud.ok(cloud.http.get("/load-balancer/v2/octavia/amphorae",
                                    params={"loadbalancer_id": made["lb"]["id"]}))["amphorae"]
    assert new["id"] != amp["id"] and new["ha_ip"] == vip
    assert try_fetch(env.clients[0], vip, 93, timeout=3) == "m1"
    drop(env, made)


def test_prometheus_listener_serves_haproxys_metrics(env: Env) -> None:
    cloud = env.cloud
    lb = cloud.ok(cloud.http.post(f"{LB}/loadbalancers", json={"loadbalancer": {
        "name": "prom", "vip_subnet_id": env.subnet["id"], "provider": "amphora"}}), 201)["loadbalancer"]
    wait_lb(cloud, lb["id"])
    post(cloud, "listeners", "listener", {"loadbalancer_id": lb["id"], "protocol": "PROMETHEUS",
                                          "protocol_port": 9100}, lb["id"])

    def scrape(path: str) -> bytes:
        with netns.entered(env.clients[0]):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.settimeout(3)
            s.connect((lb["vip_address"], 9100))
            s.sendall(f"GET {path} HTTP/1.0\r\nHost: lb\r\n\r\n".encode())
            data = b""
            for _ in range(4096):
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
            return data
        except ConnectionResetError:
            return b""
        finally:
            s.close()

    metrics = scrape("/metrics")
    assert metrics.startswith(b"HTTP/1.1 200") and b"haproxy_process_" in metrics, metrics[:300]
    assert not scrape("/other").startswith(b"HTTP/1.1 200")   # only /metrics is served
    env.cloud.ok(cloud.http.delete(f"{LB}/loadbalancers/{lb['id']}", params={"cascade": "true"}), 204)
