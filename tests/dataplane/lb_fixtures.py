"""The load-balancer dataplane tests' module cloud and helpers (``env``: a network with
three member sandboxes serving TCP/HTTP and UDP, two client sandboxes, a router to
``public``; the LB API's create-and-settle calls; ``Holder``, a member's TCP server that
keeps connections open, and the least-connections element's readers). Used by test_dp_loadbalancer.py,
test_dp_lb_amphora.py, test_dp_lb_octavia.py and test_dp_lb_leastconn.py, which share the ``lb`` cloud tag.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

import pytest

from netbay.dataplane import lbstats, netns, sctp
from netbay.dataplane.lb.table import LC_ADDR, TABLE
from netbay.dataplane.nft import Nft

from .agent_fixtures import Cloud, wait_for
from .sctp_fixtures import SCTP_PORT, answer_init

LB = "/load-balancer/v2/lbaas"
HTTP_PORT = 8080
UDP_PORT = 5353
HOLD_PORT = 8081      # Holder: TCP connections kept open
HOLD_SECONDS = 30.0   # at most, per connection


# --- members: a tiny server in a namespace ---------------------------------------------------


@dataclass
class Backend:
    """A member's server: answers every TCP connection with an HTTP response whose body
    is the member's name, every UDP datagram with the name, and every SCTP INIT to
    SCTP_PORT with an INIT ACK (a raw socket: this kernel may have no SCTP stack), counted."""
    ns: str
    name: str
    stop_event: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)
    socks: list[socket.socket] = field(default_factory=list)
    sctp_inits: int = 0

    def start(self) -> Backend:
        self.stop_event = threading.Event()
        with netns.entered(self.ns):
            tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, sctp.PROTO)
        tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        tcp.bind(("0.0.0.0", HTTP_PORT))
        tcp.listen(64)
        udp.bind(("0.0.0.0", UDP_PORT))
        for s in (tcp, udp, raw):
            s.settimeout(0.1)
        self.socks = [tcp, udp, raw]
        self.threads = [threading.Thread(target=self._tcp, args=(tcp,), daemon=True),
                        threading.Thread(target=self._udp, args=(udp,), daemon=True),
                        threading.Thread(target=self._sctp, args=(raw,), daemon=True)]
        for t in self.threads:
            t.start()
        return self

    def _tcp(self, sock: socket.socket) -> None:
        body = self.name.encode()
        while not self.stop_event.is_set():
            try:
                conn, _ = sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with conn:
                try:
                    conn.settimeout(1.0)
                    conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
                    conn.shutdown(socket.SHUT_WR)
                    for _ in range(16):  # drain the request (if any) until the peer closes
                        if not conn.recv(4096):
                            break
                except OSError:
                    pass

    def _udp(self, sock: socket.socket) -> None:
        while not self.stop_event.is_set():
            try:
                _, peer = sock.recvfrom(2048)
                sock.sendto(self.name.encode(), peer)
            except TimeoutError:
                continue
            except OSError:
                return

    def _sctp(self, sock: socket.socket) -> None:
        while not self.stop_event.is_set():
            try:
                data, (peer, _) = sock.recvfrom(65535)
            except TimeoutError:
                continue
            except OSError:
                return
            answer_init(sock, data, peer, before=self._count_init)

    def _count_init(self) -> None:
        self.sctp_inits += 1

    def stop(self) -> None:
        self.stop_event.set()
        for t in self.threads:
            t.join(5)
        for s in self.socks:
            s.close()
        self.socks, self.threads = [], []


class Holder:
    """A member's hold-open TCP server on HOLD_PORT: it says the member's name and keeps
    each connection until the client closes it (at most HOLD_SECONDS), on a thread per
    connection: the long-lived connections least connections counts."""

    def __init__(self, ns: str, name: str, family: int = socket.AF_INET) -> None:
        self.name = name
        with netns.entered(ns):
            self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("::" if family == socket.AF_INET6 else "0.0.0.0", HOLD_PORT))
        self.sock.listen(64)
        self.sock.settimeout(0.1)
        self.stopped = threading.Event()
        self.open = 0   # connections held now: the load balancer's side of each closes it
        self._lock = threading.Lock()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._hold, args=(conn,), daemon=True).start()

    def _hold(self, conn: socket.socket) -> None:
        with self._lock:
            self.open += 1
        try:
            with conn:
                conn.settimeout(HOLD_SECONDS)
                try:
                    conn.sendall(self.name.encode())
                    while conn.recv(1024):
                        pass
                except OSError:
                    pass
        finally:
            with self._lock:
                self.open -= 1

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(5)
        self.sock.close()


def hold(ns: str, ip: str, port: int, timeout: float = 3.0) -> tuple[socket.socket, str]:
    """A TCP connection from ``ns`` to a Holder behind ``ip``, left open: (socket, the member's name)."""
    with netns.entered(ns):
        s = socket.socket(socket.AF_INET6 if ":" in ip else socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.settimeout(timeout)
        s.connect((ip, port))
        return s, s.recv(64).decode()
    except OSError:
        s.close()
        raise


def held(ns: str, listener_id: str, family: str = "ip") -> str | None:
    """The member address a least-connections listener's map element names now."""
    with Nft(ns) as nft:
        out = nft.run([{"list": {"map": {"family": family, "table": TABLE, "name": LC_ADDR}}}]) or {}
    mark = lbstats.mark(listener_id)
    for item in out.get("nftables", ()):
        for key, value in (item.get("map") or {}).get("elem") or ():
            if key == mark:
                return str(ipaddress.ip_address(value))
    return None


def wait_held(ns: str, listener_id: str, address: str, family: str = "ip") -> None:
    """Wait until the listener's element names ``address`` (the watcher counted the last flow)."""
    want = str(ipaddress.ip_address(address))
    wait_for(lambda: held(ns, listener_id, family) == want, 10, 0.05, f"the least-connections element at {address}")


def fetch(ns: str, ip: str, port: int, timeout: float = 2.0) -> str:
    """One TCP connection from ``ns``: the body the member answered."""
    with netns.entered(ns):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.settimeout(timeout)
        s.connect((ip, port))
        data = b""
        for _ in range(64):
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        return data.split(b"\r\n\r\n", 1)[-1].decode()
    finally:
        s.close()


def try_fetch(ns: str, ip: str, port: int, timeout: float = 1.0) -> str | None:
    try:
        return fetch(ns, ip, port, timeout)
    except OSError:
        return None


def ask_udp(ns: str, ip: str, port: int, timeout: float = 1.0) -> str:
    with netns.entered(ns):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.settimeout(timeout)
        s.sendto(b"who", (ip, port))
        return s.recvfrom(2048)[0].decode()
    finally:
        s.close()


# --- the cloud ----------------------------------------------------------------------------------


@dataclass
class Env:
    cloud: Cloud
    network: dict
    subnet: dict
    public: dict
    router: dict
    members: list[tuple[str, str, Backend]]   # (name, address, server)
    clients: list[str]                          # client namespaces

    def member(self, name: str) -> tuple[str, str, Backend]:
        return next(m for m in self.members if m[0] == name)



@pytest.fixture(scope="module")
def env(cloud: Cloud) -> Iterator[Env]:
    http = cloud.http
    network, subnet = cloud.network("lb-net", "10.5.0.0/24")
    public = cloud.ok(http.get("/network/v2.0/networks", params={"name": "public"}))["networks"][0]
    router = cloud.ok(http.post("/network/v2.0/routers", json={"router": {
        "name": "lb-r", "external_gateway_info": {"network_id": public["id"]}}}), 201)["router"]
    cloud.ok(http.put(f"/network/v2.0/routers/{router['id']}/add_router_interface",
                      json={"subnet_id": subnet["id"]}))
    web = cloud.ok(http.post("/network/v2.0/security-groups", json={"security_group": {
        "name": "web"}}), 201)["security_group"]
    for proto, port in (("tcp", HTTP_PORT), ("udp", UDP_PORT), ("sctp", SCTP_PORT), ("icmp", None)):
        rule = {"security_group_id": web["id"], "direction": "ingress", "ethertype": "IPv4", "protocol": proto}
        if port:
            rule.update(port_range_min=port, port_range_max=port)
        cloud.ok(http.post("/network/v2.0/security-group-rules", json={"security_group_rule": rule}), 201)
    backends: list[Backend] = []
    members = []
    try:
        for name in ("m1", "m2", "m3"):
            port = cloud.ok(http.post("/network/v2.0/ports", json={"port": {
                "network_id": network["id"], "name": name}}), 201)["port"]
            cloud.ok(http.put(f"/network/v2.0/ports/{port['id']}", json={"port": {
                "security_groups": [*port["security_groups"], web["id"]]}}))
            sb = cloud.sandbox(name, ports=[port["id"]])
            cloud.wait_status(f"/network/v2.0/ports/{port['id']}", "ACTIVE")
            backend = Backend(cloud.sandbox_ns(sb["id"]), name).start()
            backends.append(backend)
            members.append((name, port["fixed_ips"][0]["ip_address"], backend))
        clients = []
        for name in ("c1", "c2"):
            sb = cloud.sandbox(name, networks=[network["id"]])
            cloud.wait_status(f"/network/v2.0/ports/{sb['ports'][0]['port_id']}", "ACTIVE")
            clients.append(cloud.sandbox_ns(sb["id"]))
        yield Env(cloud, network, subnet, public, router, members, clients)
    finally:
        for b in backends:
            b.stop()


# --- API helpers ----------------------------------------------------------------------------------


def get(cloud: Cloud, path: str) -> dict:
    body = cloud.ok(cloud.http.get(f"{LB}/{path}"))
    return next(iter(body.values()))


def wait_lb(cloud: Cloud, lb_id: str, provisioning: str = "ACTIVE", operating: str | None = None,
            timeout: float = 15.0) -> dict:
    def check() -> dict | None:
        lb = get(cloud, f"loadbalancers/{lb_id}")
        ok = lb["provisioning_status"] == provisioning and (operating is None or lb["operating_status"] == operating)
        return lb if ok else None
    return wait_for(check, timeout, 0.02, f"load balancer {lb_id} {provisioning}/{operating}")


def wait_op(cloud: Cloud, path: str, operating: str, timeout: float = 10.0) -> dict:
    return wait_for(lambda: (o := get(cloud, path))["operating_status"] == operating and o, timeout, 0.05,
                    f"{path} operating_status {operating}")


def post(cloud: Cloud, path: str, key: str, body: dict, lb_id: str) -> dict:
    """Create, then wait until the load balancer settles (Octavia: the next change needs it)."""
    obj = cloud.ok(cloud.http.post(f"{LB}/{path}", json={key: body}), 201)[key]
    wait_lb(cloud, lb_id)
    return obj


def put(cloud: Cloud, path: str, key: str, body: dict, lb_id: str) -> dict:
    obj = cloud.ok(cloud.http.put(f"{LB}/{path}", json={key: body}))[key]
    wait_lb(cloud, lb_id)
    return obj


def make_lb(env: Env, name: str, *, provider: str | None = None, protocol: str = "TCP", port: int = 80,
            algorithm: str = "ROUND_ROBIN", members: Iterable[str] | Mapping[str, dict] = ("m1", "m2", "m3"),
            member_port: int = HTTP_PORT) -> dict:
    """A load balancer (of ``provider``, else the default) with one listener, its pool and
    ``members`` (names, or name -> extra member attributes); all ACTIVE."""
    cloud = env.cloud
    body = {"name": name, "vip_subnet_id": env.subnet["id"], **({"provider": provider} if provider else {})}
    lb = cloud.ok(cloud.http.post(f"{LB}/loadbalancers", json={"loadbalancer": body}), 201)["loadbalancer"]
    wait_lb(cloud, lb["id"])
    listener = post(cloud, "listeners", "listener", {"loadbalancer_id": lb["id"], "protocol": protocol,
                                                      "protocol_port": port}, lb["id"])
    pool = post(cloud, "pools", "pool", {"listener_id": listener["id"], "protocol": protocol,
                                         "lb_algorithm": algorithm}, lb["id"])
    made = {}
    extras = members if isinstance(members, Mapping) else dict.fromkeys(members, {})
    for m, extra in extras.items():
        _, address, _ = env.member(m)
        made[m] = post(cloud, f"pools/{pool['id']}/members", "member", {
            "address": address, "protocol_port": member_port, "subnet_id": env.subnet["id"], **extra}, lb["id"])
    return {"lb": get(cloud, f"loadbalancers/{lb['id']}"), "listener": listener, "pool": pool, "members": made}


def spread(ns: str, vip: str, port: int, n: int) -> Counter:
    return Counter(fetch(ns, vip, port) for _ in range(n))
