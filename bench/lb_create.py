"""Load balancer create -> VIP answers: how long from the first API call until a client's
TCP connection to the VIP gets a member's answer.

    sudo python bench/lb_create.py [--runs 30] [--separate-agent] [--json out.json]

Starts ``netbay up`` (SQLite, in a temporary data dir) with its dataplane agent under a
throwaway namespace prefix ``nbb<hex>-`` — or with ``--separate-agent`` the server with
``--no-agent`` and ``netbay agent`` as a second process — and, through the HTTP APIs:
a network and subnet, a security group opening TCP 8080, a member sandbox whose server
(a thread of this process, its socket opened inside the member's namespace) answers
every connection with its name, and a client sandbox.

One run, as an Octavia client must do it (a load balancer accepts no change while it is
``PENDING_*``): create the load balancer, wait until ``ACTIVE``; create a TCP listener on
port 80, wait; create a pool, wait; add the member; then connect from the client to
VIP:80 until the member answers (a refused connection is retried at once). "Wait" is a
long poll of ``/netbay/v1/changes`` for the load balancer's ``ACTIVE`` (no polling
load on the server). The load balancer is deleted (cascade) between runs. Then the same
load balancer as Octavia's fully populated create (listener, pool and member in the
one ``POST``), until the member answers through the VIP.

Baseline, in the same run and the same way: a sandbox port created through the Port API
(bound to an existing empty sandbox) -> first answer from the member's address directly
(one API call, the port's wiring, one TCP connection).

Everything the run makes is in namespaces with its prefix, swept at the end, also on
error; processes are stopped by PID. Reports p50/p90 and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))
sys.path.insert(0, os.path.abspath(os.path.dirname(__file__)))

from harness import ADMIN_PASSWORD, free_port, machine, wait_port
from netbay.dataplane import netns

PREFIX = f"nbb{secrets.token_hex(3)}-"
LB = "/load-balancer/v2/lbaas"
MEMBER_PORT = 8080
VIP_PORT = 80
STEP_TIMEOUT = 20.0


# --- processes --------------------------------------------------------------------------------


@contextmanager
def server(separate_agent: bool) -> Iterator[str]:
    """``netbay up`` (+ ``netbay agent``); stopped by PID, data dir removed."""
    root = Path(tempfile.mkdtemp(prefix="nbbench-lb-"))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "NETBAY_ADMIN_PASSWORD": ADMIN_PASSWORD, "NETBAY_LOG_LEVEL": "WARNING"}
    agent_args = ["--no-agent"] if separate_agent else ["--agent", "--agent-prefix", PREFIX]
    log = open(root / "server.log", "w")  # noqa: SIM115
    procs = [subprocess.Popen([sys.executable, "-m", "netbay.cli.main", "up", *agent_args, "--port", str(port),
                               "--data-dir", str(root), "--database-url", f"sqlite:///{root / 'netbay.db'}"],
                              env=env, stdout=log, stderr=subprocess.STDOUT)]
    try:
        try:
            wait_port(port, 90, procs[0])
        except Exception:  # noqa: BLE001
            raise SystemExit("netbay did not start:\n" + (root / "server.log").read_text()) from None
        if separate_agent:
            agent_env = {**env, "OS_AUTH_URL": f"{url}/identity/v3", "OS_USERNAME": "admin",
                         "OS_PASSWORD": ADMIN_PASSWORD, "OS_PROJECT_NAME": "admin",
                         "OS_USER_DOMAIN_NAME": "Default", "OS_PROJECT_DOMAIN_NAME": "Default"}
            procs.append(subprocess.Popen([sys.executable, "-m", "netbay.cli.main", "agent", "--url", url,
                                           "--prefix", PREFIX, "--wait", "30"],
                                          env=agent_env, stdout=log, stderr=subprocess.STDOUT))
        yield url
    finally:
        for proc in reversed(procs):
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        log.close()
        shutil.rmtree(root, ignore_errors=True)


def sweep() -> list[str]:
    """Delete every namespace of this run (mounted or a stale mount point)."""
    gone = []
    if os.path.isdir(netns.NETNS_RUN_DIR):
        for name in sorted(os.listdir(netns.NETNS_RUN_DIR)):
            if name.startswith(PREFIX):
                netns.delete(name)
                gone.append(name)
    return gone


# --- the member's server and the client ------------------------------------------------------


class Backend:
    """Answers every TCP connection with ``name`` and closes."""

    def __init__(self, ns: str, name: str) -> None:
        with netns.entered(ns):
            self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("0.0.0.0", MEMBER_PORT))
        self.sock.listen(128)
        self.sock.settimeout(0.2)
        self.name = name.encode()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with conn:
                try:
                    conn.sendall(self.name)
                except OSError:
                    pass

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        self.sock.close()


def answer(ns: str, ip: str, port: int, timeout: float = 0.2) -> bytes | None:
    with netns.entered(ns):
        s = socket.socket()
    try:
        s.settimeout(timeout)
        s.connect((ip, port))
        return s.recv(64)
    except OSError:
        return None
    finally:
        s.close()


def until_answer(ns: str, ip: str, port: int, want: bytes, limit: float = STEP_TIMEOUT) -> float:
    """Seconds until ``ns`` gets ``want`` from ip:port (bounded); refusals retried at once,
    and an attempt unanswered for 20 ms (a SYN sent before the VIP existed) too."""
    t0 = time.monotonic()
    for _ in range(1_000_000):
        if answer(ns, ip, port, timeout=0.02) == want:
            return time.monotonic() - t0
        if time.monotonic() - t0 > limit:
            break
        time.sleep(0.0005)
    raise RuntimeError(f"no answer {want!r} from {ip}:{port} in {ns} after {limit}s")


# --- the API ----------------------------------------------------------------------------------------


class Client:
    def __init__(self, url: str) -> None:
        body = {"auth": {"identity": {"methods": ["password"], "password": {"user": {
            "name": "admin", "domain": {"name": "Default"}, "password": ADMIN_PASSWORD}}},
            "scope": {"project": {"name": "admin", "domain": {"name": "Default"}}}}}
        r = httpx.post(f"{url}/identity/v3/auth/tokens", json=body, timeout=30)
        r.raise_for_status()
        self.http = httpx.Client(base_url=url, headers={"X-Auth-Token": r.headers["X-Subject-Token"]}, timeout=60)
        self.revision = int(self.call("GET", "/netbay/v1/state")["revision"])

    def call(self, method: str, path: str, status: int | None = None, **kw: Any) -> Any:
        r = self.http.request(method, path, **kw)
        if r.status_code >= 400 or (status is not None and r.status_code != status):
            raise RuntimeError(f"{method} {path}: {r.status_code} {r.text[:300]}")
        return r.json() if r.content else None

    def create(self, path: str, key: str, body: dict) -> dict:
        return self.call("POST", path, 201, json={key: body})[key]

    def wait_change(self, match: Callable[[dict], bool], limit: float = STEP_TIMEOUT) -> None:
        """Follow the change stream from the last revision seen until ``match``es (bounded)."""
        deadline = time.monotonic() + limit
        for _ in range(100_000):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            body = self.call("GET", "/netbay/v1/changes", params={"since": self.revision, "wait": min(left, 10)})
            hit = False
            for change in body.get("changes") or ():
                self.revision = max(self.revision, change["revision"])
                hit = hit or match(change)
            if hit:
                return
        raise RuntimeError("the awaited change did not come")

    def wait_active(self, lb_id: str) -> None:
        """Until the load balancer settles after the change just made: its ``PENDING_*``
        rendering first, then ``ACTIVE`` (an earlier ``ACTIVE`` does not count)."""
        pending = False

        def settled(c: dict) -> bool:
            nonlocal pending
            if c["resource"] != "loadbalancer" or c["id"] != lb_id:
                return False
            status = (c.get("data") or {}).get("provisioning_status") or ""
            pending = pending or status.startswith("PENDING")
            if pending and status == "ERROR":
                raise RuntimeError(f"load balancer {lb_id} went ERROR")
            return pending and status == "ACTIVE"

        self.wait_change(settled)

    def wait_port_active(self, port_id: str) -> None:
        if self.call("GET", f"/network/v2.0/ports/{port_id}")["port"]["status"] == "ACTIVE":
            return
        self.wait_change(lambda c: c["resource"] == "port" and c["id"] == port_id
                         and (c.get("data") or {}).get("status") == "ACTIVE")


# --- the measurement -----------------------------------------------------------------------------


def setup(api: Client) -> dict[str, Any]:
    net = api.create("/network/v2.0/networks", "network", {"name": "lbbench"})
    subnet = api.create("/network/v2.0/subnets", "subnet", {"network_id": net["id"], "cidr": "10.77.0.0/22",
                                                           "ip_version": 4})
    web = api.create("/network/v2.0/security-groups", "security_group", {"name": "lbbench-web"})
    api.create("/network/v2.0/security-group-rules", "security_group_rule", {
        "security_group_id": web["id"], "direction": "ingress", "ethertype": "IPv4", "protocol": "tcp",
        "port_range_min": MEMBER_PORT, "port_range_max": MEMBER_PORT})
    port = api.create("/network/v2.0/ports", "port", {"network_id": net["id"], "name": "member"})
    api.call("PUT", f"/network/v2.0/ports/{port['id']}", json={"port": {
        "security_groups": [*port["security_groups"], web["id"]]}})
    member = api.create("/netbay/v1/sandboxes", "sandbox", {"name": "member", "ports": [port["id"]]})
    client = api.create("/netbay/v1/sandboxes", "sandbox", {"name": "client", "networks": [net["id"]]})
    api.wait_port_active(port["id"])
    api.wait_port_active(client["ports"][0]["port_id"])
    return {"network": net, "subnet": subnet, "member_sandbox": member, "member_ip": port["fixed_ips"][0]["ip_address"],
            "client": client, "host": api.call("GET", f"/netbay/v1/sandboxes/{member['id']}")["sandbox"].get("host")}


def one_lb(api: Client, env: dict[str, Any], client_ns: str) -> dict[str, float]:
    """One load balancer from nothing to an answer; its phases in seconds."""
    t0 = time.monotonic()
    lb = api.create(f"{LB}/loadbalancers", "loadbalancer", {"name": "bench", "vip_subnet_id": env["subnet"]["id"]})
    a0 = time.monotonic()
    api.wait_active(lb["id"])
    t1 = time.monotonic()
    listener = api.create(f"{LB}/listeners", "listener", {"loadbalancer_id": lb["id"], "protocol": "TCP",
                                                          "protocol_port": VIP_PORT})
    a1 = time.monotonic()
    api.wait_active(lb["id"])
    t2 = time.monotonic()
    pool = api.create(f"{LB}/pools", "pool", {"listener_id": listener["id"], "protocol": "TCP",
                                              "lb_algorithm": "ROUND_ROBIN"})
    a2 = time.monotonic()
    api.wait_active(lb["id"])
    t3 = time.monotonic()
    api.create(f"{LB}/pools/{pool['id']}/members", "member", {"address": env["member_ip"],
                                                               "protocol_port": MEMBER_PORT})
    t4 = time.monotonic()
    until_answer(client_ns, lb["vip_address"], VIP_PORT, b"member")
    t5 = time.monotonic()
    api.wait_active(lb["id"])   # settled before the delete (Octavia refuses a pending one)
    api.call("DELETE", f"{LB}/loadbalancers/{lb['id']}", params={"cascade": "true"})
    return {"total": t5 - t0, "lb": t1 - t0, "listener": t2 - t1, "pool": t3 - t2,
            "member_api": t4 - t3, "member_to_answer": t5 - t4,
            "api_calls": (a0 - t0) + (a1 - t1) + (a2 - t2) + (t4 - t3)}


def one_populated_lb(api: Client, env: dict[str, Any], client_ns: str) -> float:
    """The same load balancer in one fully populated create; seconds until the answer."""
    t0 = time.monotonic()
    lb = api.create(f"{LB}/loadbalancers", "loadbalancer", {
        "name": "bench-full", "vip_subnet_id": env["subnet"]["id"], "listeners": [{
            "protocol": "TCP", "protocol_port": VIP_PORT, "default_pool": {
                "protocol": "TCP", "lb_algorithm": "ROUND_ROBIN",
                "members": [{"address": env["member_ip"], "protocol_port": MEMBER_PORT}]}}]})
    until_answer(client_ns, lb["vip_address"], VIP_PORT, b"member")
    elapsed = time.monotonic() - t0
    api.wait_active(lb["id"])
    api.call("DELETE", f"{LB}/loadbalancers/{lb['id']}", params={"cascade": "true"})
    return elapsed


def baseline(api: Client, env: dict[str, Any], sandbox: dict) -> float:
    """A sandbox port through the Port API -> the member's first answer through it."""
    t0 = time.monotonic()
    api.create("/network/v2.0/ports", "port", {"network_id": env["network"]["id"], "device_owner": "netbay:sandbox",
                                              "device_id": sandbox["id"], "binding:host_id": env["host"]})
    ns = f"{PREFIX}s-{sandbox['id']}"
    for _ in range(100_000):
        if netns.exists(ns):
            break
        time.sleep(0.0005)
    until_answer(ns, env["member_ip"], MEMBER_PORT, b"member")
    return time.monotonic() - t0


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, -(-len(ordered) * p // 100) - 1))] * 1e3 if ordered else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=30, help="load balancers created (>= 20)")
    ap.add_argument("--separate-agent", action="store_true", help="run `netbay agent` as its own process")
    ap.add_argument("--json", type=Path, help="write the raw figures here")
    args = ap.parse_args()
    if not 20 <= args.runs <= 500:
        raise SystemExit("--runs must be between 20 and 500")
    if os.geteuid() != 0:
        raise SystemExit("needs root (network namespaces)")
    load_before = os.getloadavg()
    backend = None
    try:
        with server(args.separate_agent) as url:
            api = Client(url)
            env = setup(api)
            member_ns = f"{PREFIX}s-{env['member_sandbox']['id']}"
            client_ns = f"{PREFIX}s-{env['client']['id']}"
            backend = Backend(member_ns, "member")
            empties = [api.create("/netbay/v1/sandboxes", "sandbox", {"name": f"b{i}"}) for i in range(args.runs)]
            one_lb(api, env, client_ns)  # warm-up (imports, first nft context), not counted
            runs = [one_lb(api, env, client_ns) for _ in range(args.runs)]
            one_populated_lb(api, env, client_ns)  # warm-up
            populated = [one_populated_lb(api, env, client_ns) for _ in range(args.runs)]
            base = [baseline(api, env, sb) for sb in empties]
            gets = []
            for _ in range(args.runs):
                g0 = time.monotonic()
                api.call("GET", f"{LB}/loadbalancers", params={"limit": 1})
                gets.append(time.monotonic() - g0)
    finally:
        if backend is not None:
            backend.close()
        swept = sweep()
    load_after = os.getloadavg()
    total = [r["total"] for r in runs]
    phases = {k: statistics.median(r[k] for r in runs) * 1e3 for k in runs[0]}
    out = {
        "machine": machine(), "agent": "separate process" if args.separate_agent else "in `netbay up`",
        "runs": args.runs, "load_before": load_before, "load_after": load_after,
        "lb_create_to_answer_ms": {"p50": pct(total, 50), "p90": pct(total, 90), "max": max(total) * 1e3},
        "phases_p50_ms": phases,
        "populated_create_to_answer_ms": {"p50": pct(populated, 50), "p90": pct(populated, 90),
                                          "max": max(populated) * 1e3},
        "baseline_port_create_to_answer_ms": {"p50": pct(base, 50), "p90": pct(base, 90)},
        "baseline_get_ms": {"p50": pct(gets, 50)},
        "namespaces_swept": len(swept),
    }
    print(f"machine: {out['machine']}; agent {out['agent']}; load "
          f"{load_before[0]:.2f} -> {load_after[0]:.2f}")
    print(f"load balancer create -> VIP answers (n={args.runs}): p50 {out['lb_create_to_answer_ms']['p50']:.1f} ms, "
          f"p90 {out['lb_create_to_answer_ms']['p90']:.1f} ms, max {out['lb_create_to_answer_ms']['max']:.1f} ms")
    print("  phases (p50 ms): " + ", ".join(f"{k} {v:.1f}" for k, v in phases.items()))
    pop = out["populated_create_to_answer_ms"]
    print(f"fully populated create (one call) -> VIP answers (n={args.runs}): p50 {pop['p50']:.1f} ms, "
          f"p90 {pop['p90']:.1f} ms, max {pop['max']:.1f} ms")
    print(f"baseline: sandbox port create -> member answers directly (n={len(base)}): "
          f"p50 {out['baseline_port_create_to_answer_ms']['p50']:.1f} ms, "
          f"p90 {out['baseline_port_create_to_answer_ms']['p90']:.1f} ms; "
          f"GET /lbaas/loadbalancers?limit=1 p50 {out['baseline_get_ms']['p50']:.1f} ms")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
