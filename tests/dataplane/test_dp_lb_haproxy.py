"""The haproxy (L7) provider in the kernel: real haproxy, real members, real traffic.

One server and agent for the module (tag ``lbh``). Members are sandboxes running
small servers on threads whose sockets were opened inside their namespaces: an
HTTP/1.1 server answering with its name, the path and the headers it got, and a
TCP server that parses a PROXY protocol v1 header and answers with the client
address it carried. The client is another sandbox.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from netbay.dataplane import netns
from netbay.dataplane.lb.haproxy import state_dir

from .agent_fixtures import Cloud, make_cloud, wait_for
from .lb_fixtures import HOLD_PORT, Holder

LB = "/load-balancer/v2/lbaas"
HTTP_PORT = 8080
PROXY_PORT = 8082


# --- member servers --------------------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # http.server's name
        body = json.dumps({"member": self.server.member_name, "path": self.path,  # type: ignore[attr-defined]
                           "headers": {k.lower(): v for k, v in self.headers.items()}}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


class _Quiet(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        pass   # haproxy closes idle kept-alive connections at will (a reset here is no failure)


class _Quiet6(_Quiet):
    address_family = socket.AF_INET6


@dataclass
class Member:
    """A member's servers: HTTP on 8080, hold-open TCP on 8081, PROXY-parsing TCP on 8082."""
    ns: str
    name: str
    address: str = ""
    family: int = socket.AF_INET
    http: ThreadingHTTPServer | None = None
    holder: Holder | None = None
    stop_event: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)
    socks: list[socket.socket] = field(default_factory=list)

    def start(self) -> Member:
        any_ = "::" if self.family == socket.AF_INET6 else "0.0.0.0"
        with netns.entered(self.ns):
            self.http = (_Quiet6 if self.family == socket.AF_INET6 else _Quiet)((any_, HTTP_PORT), _Handler)
            proxy = socket.socket(self.family, socket.SOCK_STREAM)
        self.http.member_name = self.name  # type: ignore[attr-defined]
        self.http.daemon_threads = True
        self.holder = Holder(self.ns, self.name, self.family)   # HOLD_PORT
        proxy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        proxy.bind((any_, PROXY_PORT))
        proxy.listen(128)
        proxy.settimeout(0.1)
        self.socks = [proxy]
        self.threads = [threading.Thread(target=self.http.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True),
                        threading.Thread(target=self._accept, args=(proxy, self._proxy), daemon=True)]
        for t in self.threads:
            t.start()
        return self

    def _accept(self, sock: socket.socket, serve) -> None:
        while not self.stop_event.is_set():
            try:
                conn, _ = sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    def _proxy(self, conn: socket.socket) -> None:
        """Parse ``PROXY TCP4 <src> <dst> <sport> <dport>\\r\\n``; answer ``name src`` (or ``name none``)."""
        with conn:
            conn.settimeout(2)
            try:
                head = b""
                while b"\r\n" not in head and len(head) < 108:
                    chunk = conn.recv(1)
                    if not chunk:
                        break
                    head += chunk
                parts = head.decode(errors="replace").split()
                src = parts[2] if len(parts) == 6 and parts[0] == "PROXY" else "none"
                conn.sendall(f"{self.name} {src}".encode())
            except OSError:
                pass

    def stop(self) -> None:
        self.stop_event.set()
        if self.http is not None:
            self.http.shutdown()
            self.http.server_close()
        if self.holder is not None:
            self.holder.stop()
        for s in self.socks:
            s.close()
        for t in self.threads:
            t.join(5)


# --- a client in a namespace ---------------------------------------------------------------------


def connect(ns: str, ip: str, port: int, timeout: float = 3.0) -> socket.socket:
    with netns.entered(ns):
        s = socket.socket(socket.AF_INET6 if ":" in ip else socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect((ip, port))
    return s


def http_get(ns: str, ip: str, port: int, path: str = "/", headers: dict[str, str] | None = None
             ) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.0 request: (status, headers, body)."""
    s = connect(ns, ip, port)
    try:
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        s.sendall(f"GET {path} HTTP/1.0\r\nHost: lb.example\r\n{extra}\r\n".encode())
        data = b""
        for _ in range(256):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    finally:
        s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    status = int(lines[0].split()[1])
    hdrs: dict[str, str] = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        hdrs.setdefault(k.strip().lower(), v.strip())
    return status, hdrs, body


def who(ns: str, ip: str, port: int, path: str = "/", headers: dict[str, str] | None = None) -> dict:
    status, _, body = http_get(ns, ip, port, path, headers)
    assert status == 200, (status, body)
    return json.loads(body)


# --- the cloud --------------------------------------------------------------------------------------


@dataclass
class Env:
    cloud: Cloud
    subnet: dict
    members: dict[str, Member]
    client: str


@pytest.fixture(scope="module")
def cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cloud]:
    gen = make_cloud(tmp_path_factory.mktemp("lbh"), "lbh")
    c = next(gen)
    try:
        yield c
    finally:
        pids_dir = state_dir(c.names.prefix)
        try:
            next(gen, None)  # stops the agent and server, sweeps the namespaces
        finally:
            from netbay.dataplane.lb.haproxy import Haproxy

            Haproxy(pids_dir).stop_all()   # by pid file, checked in /proc: only ours


@pytest.fixture(scope="module")
def env(cloud: Cloud) -> Iterator[Env]:
    http = cloud.http
    network, subnet = cloud.network("lbh-net", "10.6.0.0/24")
    web = cloud.ok(http.post("/network/v2.0/security-groups", json={"security_group": {
        "name": "lbh-web"}}), 201)["security_group"]
    cloud.ok(http.post("/network/v2.0/security-group-rules", json={"security_group_rule": {
        "security_group_id": web["id"], "direction": "ingress", "ethertype": "IPv4", "protocol": "tcp"}}), 201)
    members: dict[str, Member] = {}
    try:
        for name in ("m1", "m2"):
            port = cloud.ok(http.post("/network/v2.0/ports", json={"port": {
                "network_id": network["id"], "name": name}}), 201)["port"]
            cloud.ok(http.put(f"/network/v2.0/ports/{port['id']}", json={"port": {
                "security_groups": [*port["security_groups"], web["id"]]}}))
            sb = cloud.sandbox(name, ports=[port["id"]])
            cloud.wait_status(f"/network/v2.0/ports/{port['id']}", "ACTIVE")
            m = Member(cloud.sandbox_ns(sb["id"]), name, port["fixed_ips"][0]["ip_address"])
            members[name] = m.start()
        sb = cloud.sandbox("c1", networks=[network["id"]])
        cloud.wait_status(f"/network/v2.0/ports/{sb['ports'][0]['port_id']}", "ACTIVE")
        yield Env(cloud, subnet, members, cloud.sandbox_ns(sb["id"]))
    finally:
        for m in members.values():
            m.stop()


def get(cloud: Cloud, path: str) -> dict:
    return next(iter(cloud.ok(cloud.http.get(f"{LB}/{path}")).values()))


def wait_lb(cloud: Cloud, lb_id: str, timeout: float = 15.0) -> dict:
    def check() -> dict | None:
        lb = get(cloud, f"loadbalancers/{lb_id}")
        assert lb["provisioning_status"] != "ERROR", lb
        return lb if lb["provisioning_status"] == "ACTIVE" else None
    return wait_for(check, timeout, 0.01, f"load balancer {lb_id} ACTIVE")


def post(cloud: Cloud, path: str, key: str, body: dict, lb_id: str) -> dict:
    obj = cloud.ok(cloud.http.post(f"{LB}/{path}", json={key: body}), 201)[key]
    wait_lb(cloud, lb_id)
    return obj


def make_lb(env: Env, name: str, *, protocol: str = "HTTP", port: int = 80, pool_protocol: str | None = None,
            algorithm: str = "ROUND_ROBIN", member_port: int = HTTP_PORT, persistence: dict | None = None,
            listener: dict | None = None) -> dict:
    """A haproxy load balancer, fully populated in one request; waits for ACTIVE."""
    cloud = env.cloud
    pool = {"protocol": pool_protocol or protocol, "lb_algorithm": algorithm,
            "members": [{"address": m.address, "protocol_port": member_port} for m in env.members.values()]}
    if persistence:
        pool["session_persistence"] = persistence
    lb = cloud.ok(cloud.http.post(f"{LB}/loadbalancers", json={"loadbalancer": {
        "name": name, "vip_subnet_id": env.subnet["id"], "provider": "haproxy",
        "listeners": [{"protocol": protocol, "protocol_port": port, "default_pool": pool, **(listener or {})}]}}),
        201)["loadbalancer"]
    lb = wait_lb(cloud, lb["id"])
    li = get(cloud, f"listeners/{lb['listeners'][0]['id']}")
    return {"lb": lb, "listener": li, "pool_id": li["default_pool_id"], "vip": lb["vip_address"]}


def delete(env: Env, lb: dict) -> None:
    env.cloud.ok(env.cloud.http.delete(f"{LB}/loadbalancers/{lb['id']}", params={"cascade": "true"}), 204)


def master_pid(env: Env, lb_id: str) -> int | None:
    return env.cloud.agent.agent and _realizer(env).haproxy.master(lb_id)


def _realizer(env: Env):
    return next(r for r in env.cloud.agent.agent.realizers if r.name == "loadbalancers")


# --- tests ------------------------------------------------------------------------------------------


def test_http_round_robin_and_forwarded_headers(env: Env) -> None:
    made = make_lb(env, "rr", listener={"insert_headers": {"X-Forwarded-For": "true",
                                                           "X-Forwarded-Proto": "true"}})
    try:
        # ACTIVE means answering: the very first request reaches a member.
        seen = [who(env.client, made["vip"], 80) for _ in range(10)]
        assert Counter(s["member"] for s in seen) == {"m1": 5, "m2": 5}
        client_ip = env.cloud.ip_of(next(iter(env.cloud.ok(env.cloud.http.get(
            "/network/v2.0/ports", params={"device_id": _sandbox_id(env)}))["ports"]))["id"])
        assert {s["headers"].get("x-forwarded-for") for s in seen} == {client_ip}
        assert {s["headers"].get("x-forwarded-proto") for s in seen} == {"http"}
        # Listener statistics from haproxy's stats socket: the 10 requests and their bytes.
        stats = _realizer(env).haproxy.listener_stats(made["lb"]["id"], env.cloud.names.loadbalancer(made["lb"]["id"]))
        mine = stats[made["listener"]["id"]]
        assert mine["total_connections"] == 10 and mine["bytes_out"] > 10 * 100 and mine["bytes_in"] > 10 * 30, mine
        pid = master_pid(env, made["lb"]["id"])
        assert pid is not None and os.stat(f"/proc/{pid}/ns/net").st_ino == netns.inode(
            env.cloud.names.loadbalancer(made["lb"]["id"]))
    finally:
        delete(env, made["lb"])
    wait_for(lambda: not os.path.exists(f"/proc/{pid}") or None, 10, 0.02, "haproxy to stop with its load balancer")


def _sandbox_id(env: Env) -> str:
    return env.client[len(env.cloud.names.sandbox("")):]


def test_least_connections_prefers_the_member_with_fewer_open_connections(env: Env) -> None:
    made = make_lb(env, "lc", protocol="TCP", port=81, algorithm="LEAST_CONNECTIONS", member_port=HOLD_PORT)
    held = []
    try:
        first = connect(env.client, made["vip"], 81)
        held.append(first)
        busy = first.recv(16).decode()
        idle = ({"m1", "m2"} - {busy}).pop()
        got = []
        for _ in range(10):   # each closed before the next: the idle member stays the less loaded
            s = connect(env.client, made["vip"], 81)
            got.append(s.recv(16).decode())
            s.close()
            time.sleep(0.02)
        assert got == [idle] * 10, got
        # haproxy counts a connection until its own side to the member closes, a moment
        # after the client's close: the last one may still count on the idle member.
        holder = env.members[idle].holder
        assert holder is not None
        wait_for(lambda: holder.open == 0, 10, 0.02, "haproxy to close its side of the short connections")
        # Held there too: one each now, and the two new ones held go one to each member.
        held.append(connect(env.client, made["vip"], 81))
        assert held[-1].recv(16).decode() == idle
        more = [connect(env.client, made["vip"], 81) for _ in range(2)]
        held += more
        assert sorted(s.recv(16).decode() for s in more) == ["m1", "m2"]
    finally:
        for s in held:
            s.close()
        delete(env, made["lb"])


def test_http_cookie_keeps_a_client_on_one_member(env: Env) -> None:
    made = make_lb(env, "cookie", port=82, persistence={"type": "HTTP_COOKIE"})
    try:
        status, headers, body = http_get(env.client, made["vip"], 82)
        assert status == 200 and "set-cookie" in headers, headers
        cookie = headers["set-cookie"].split(";")[0]
        first = json.loads(body)["member"]
        sticky = [who(env.client, made["vip"], 82, headers={"Cookie": cookie})["member"] for _ in range(20)]
        assert sticky == [first] * 20
        # Without the cookie the same client is spread again.
        assert {who(env.client, made["vip"], 82)["member"] for _ in range(4)} == {"m1", "m2"}
    finally:
        delete(env, made["lb"])


def test_proxy_protocol_reaches_a_member_that_parses_it(env: Env) -> None:
    made = make_lb(env, "proxy", protocol="TCP", port=83, pool_protocol="PROXY", member_port=PROXY_PORT)
    try:
        client_ip = env.cloud.ip_of(env.cloud.ok(env.cloud.http.get(
            "/network/v2.0/ports", params={"device_id": _sandbox_id(env)}))["ports"][0]["id"])
        answers = set()
        for _ in range(4):
            s = connect(env.client, made["vip"], 83)
            try:
                answers.add(s.recv(64).decode())
            finally:
                s.close()
        # The member saw the client's address in the PROXY header (not the VIP it connected from).
        assert answers == {f"m1 {client_ip}", f"m2 {client_ip}"}, answers
    finally:
        delete(env, made["lb"])


def test_l7_policy_redirects_a_path_prefix_to_another_pool(env: Env) -> None:
    cloud = env.cloud
    made = make_lb(env, "l7", port=84)
    lb_id = made["lb"]["id"]
    try:
        other = post(cloud, "pools", "pool", {"loadbalancer_id": lb_id, "protocol": "HTTP",
                                               "lb_algorithm": "ROUND_ROBIN"}, lb_id)
        post(cloud, f"pools/{other['id']}/members", "member", {"address": env.members["m2"].address,
                                                                "protocol_port": HTTP_PORT}, lb_id)
        policy = post(cloud, "l7policies", "l7policy", {"listener_id": made["listener"]["id"],
                                                        "action": "REDIRECT_TO_POOL",
                                                        "redirect_pool_id": other["id"]}, lb_id)
        post(cloud, f"l7policies/{policy['id']}/rules", "rule", {"type": "PATH", "compare_type": "STARTS_WITH",
                                                                 "value": "/api"}, lb_id)
        cfg = _realizer(env).haproxy.config(lb_id)
        assert {who(env.client, made["vip"], 84, "/api/x")["member"] for _ in range(6)} == {"m2"}, cfg.read_text()
        assert {who(env.client, made["vip"], 84, "/web")["member"] for _ in range(6)} == {"m1", "m2"}
        assert get(cloud, f"l7policies/{policy['id']}")["provisioning_status"] == "ACTIVE"
        # A REJECT policy placed first wins over the redirect for /api/private.
        reject = post(cloud, "l7policies", "l7policy", {"listener_id": made["listener"]["id"], "action": "REJECT",
                                                        "position": 1}, lb_id)
        post(cloud, f"l7policies/{reject['id']}/rules", "rule", {"type": "PATH", "compare_type": "STARTS_WITH",
                                                                 "value": "/api/private"}, lb_id)
        assert http_get(env.client, made["vip"], 84, "/api/private")[0] == 403
        assert who(env.client, made["vip"], 84, "/api/ok")["member"] == "m2"
    finally:
        delete(env, made["lb"])


def test_reload_during_a_thousand_requests_loses_none(env: Env) -> None:
    """Member changes reload haproxy while a client sends 1,000 requests."""
    cloud = env.cloud
    made = make_lb(env, "reload", port=85)
    lb_id, pool_id = made["lb"]["id"], made["pool_id"]
    pid = master_pid(env, lb_id)
    results: list[int] = []
    errors: list[str] = []

    def loop() -> None:
        for _ in range(1000):
            try:
                results.append(http_get(env.client, made["vip"], 85)[0])
            except OSError as exc:
                errors.append(repr(exc))

    t = threading.Thread(target=loop)
    t.start()
    members = [m["id"] for m in cloud.ok(cloud.http.get(f"{LB}/pools/{pool_id}/members"))["members"]]
    reloads = 0
    try:
        deadline = time.monotonic() + 60
        while t.is_alive() and time.monotonic() < deadline and reloads < 20:
            weight = 1 + reloads % 5
            cloud.ok(cloud.http.put(f"{LB}/pools/{pool_id}/members/{members[reloads % 2]}",
                                    json={"member": {"weight": weight}}))
            wait_lb(cloud, lb_id)
            reloads += 1
    finally:
        t.join(120)
    try:
        assert reloads >= 5, reloads
        assert not errors and results == [200] * 1000, (errors[:3], Counter(results))
        assert master_pid(env, lb_id) == pid   # reloaded, never restarted
    finally:
        delete(env, made["lb"])


def test_agent_restart_adopts_the_running_haproxy(env: Env) -> None:
    cloud = env.cloud
    made = make_lb(env, "adopt", port=86)
    lb_id = made["lb"]["id"]
    pid = master_pid(env, lb_id)
    try:
        cloud.agent.stop()
        assert who(env.client, made["vip"], 86)["member"] in {"m1", "m2"}   # the dataplane outlives the agent
        cloud.agent.start()
        assert master_pid(env, lb_id) == pid
        assert who(env.client, made["vip"], 86)["member"] in {"m1", "m2"}
        # Deleted while the agent is down: the next agent stops the orphan.
        cloud.agent.stop()
        delete(env, made["lb"])
        cloud.agent.start()
        assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z"  # noqa: SIM115
    finally:
        if get_or_none(cloud, lb_id) is not None:
            delete(env, made["lb"])


def get_or_none(cloud: Cloud, lb_id: str) -> dict | None:
    r = cloud.http.get(f"{LB}/loadbalancers/{lb_id}")
    return r.json()["loadbalancer"] if r.status_code == 200 else None


# --- IPv6 (issue 28: IPv6 VIPs and members, as Octavia's amphora) ----------------------------------


@pytest.fixture(scope="module")
def env6(cloud: Cloud) -> Iterator[Env]:
    """An IPv6-only network: two members and a client, TCP open to the members over IPv6."""
    http = cloud.http
    network, subnet = cloud.network("lbh6-net", "fd00:6::/64", ip_version=6)
    web = cloud.ok(http.post("/network/v2.0/security-groups", json={"security_group": {
        "name": "lbh6-web"}}), 201)["security_group"]
    cloud.ok(http.post("/network/v2.0/security-group-rules", json={"security_group_rule": {
        "security_group_id": web["id"], "direction": "ingress", "ethertype": "IPv6", "protocol": "tcp"}}), 201)
    members: dict[str, Member] = {}
    try:
        for name in ("m61", "m62"):
            port = cloud.ok(http.post("/network/v2.0/ports", json={"port": {
                "network_id": network["id"], "name": name}}), 201)["port"]
            cloud.ok(http.put(f"/network/v2.0/ports/{port['id']}", json={"port": {
                "security_groups": [*port["security_groups"], web["id"]]}}))
            sb = cloud.sandbox(name, ports=[port["id"]])
            cloud.wait_status(f"/network/v2.0/ports/{port['id']}", "ACTIVE")
            m = Member(cloud.sandbox_ns(sb["id"]), name, port["fixed_ips"][0]["ip_address"], socket.AF_INET6)
            members[name] = m.start()
        sb = cloud.sandbox("c6", networks=[network["id"]])
        cloud.wait_status(f"/network/v2.0/ports/{sb['ports'][0]['port_id']}", "ACTIVE")
        yield Env(cloud, subnet, members, cloud.sandbox_ns(sb["id"]))
    finally:
        for m in members.values():
            m.stop()


def test_ipv6_vip_and_members_over_http_and_tcp(env6: Env) -> None:
    """haproxy binds an IPv6 VIP and reaches IPv6 members: HTTP round robin with the
    client's IPv6 address in X-Forwarded-For, and a TCP listener."""
    made = make_lb(env6, "v6", listener={"insert_headers": {"X-Forwarded-For": "true"}})
    try:
        assert ":" in made["vip"]
        seen = [who(env6.client, made["vip"], 80) for _ in range(4)]
        assert Counter(s["member"] for s in seen) == Counter({"m61": 2, "m62": 2})
        client6 = env6.cloud.ok(env6.cloud.http.get("/network/v2.0/ports", params={
            "network_id": env6.subnet["network_id"]}))["ports"]
        assert seen[0]["headers"]["x-forwarded-for"] in {f["ip_address"] for p in client6 for f in p["fixed_ips"]}
    finally:
        delete(env6, made["lb"])
    # The VIP address is reused at once: the client still holds the old MAC for it, so the
    # new load balancer's unsolicited neighbour advertisement must move it (garp.announce).
    tcp = make_lb(env6, "v6tcp", protocol="TCP", port=81, member_port=HOLD_PORT)
    try:
        assert tcp["vip"] == made["vip"]
        with connect(env6.client, tcp["vip"], 81) as s:
            assert s.recv(16).decode() in {"m61", "m62"}
    finally:
        delete(env6, tcp["lb"])


def test_ipv6_members_are_health_checked_over_ipv6(env6: Env) -> None:
    """An HTTP monitor probes IPv6 members from sockets of their family: both stay ONLINE
    and keep taking traffic (probed over IPv4, each failed and was taken out)."""
    cloud = env6.cloud
    made = make_lb(env6, "v6hm", port=83)
    lb_id = made["lb"]["id"]
    try:
        post(cloud, "healthmonitors", "healthmonitor", {
            "pool_id": made["pool_id"], "type": "HTTP", "delay": 1, "timeout": 1, "max_retries": 1,
            "max_retries_down": 1}, lb_id)
        members = cloud.ok(cloud.http.get(f"{LB}/pools/{made['pool_id']}/members"))["members"]

        def all_online() -> bool:
            got = [get(cloud, f"pools/{made['pool_id']}/members/{m['id']}")["operating_status"] for m in members]
            assert "ERROR" not in got, got
            return set(got) == {"ONLINE"}
        wait_for(all_online, 10, 0.1, "IPv6 members ONLINE")
        time.sleep(2.5)          # two more rounds of probes
        assert all_online()
        assert {who(env6.client, made["vip"], 83)["member"] for _ in range(4)} == {"m61", "m62"}
    finally:
        delete(env6, made["lb"])
