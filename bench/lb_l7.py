"""The haproxy (L7) provider: create -> VIP answers HTTP, and requests/s through it
against the same haproxy run by hand.

    sudo python bench/lb_l7.py [--runs 20] [--seconds 5] [--repeat 3] [--json out.json]
    (needs haproxy, and wrk for the requests/s part: apt-get install haproxy wrk)

Starts ``netbay up`` with its agent (SQLite, temporary data dir, namespace prefix
``nbb<hex>-``; as ``bench/lb_create.py``, whose helpers it uses), a network, a member
sandbox and a client sandbox.

1. **Create -> VIP answers HTTP**: Octavia's fully populated create (one ``POST``:
   provider ``haproxy``, an HTTP listener on 80, an HTTP pool, the member) until an
   HTTP request from the client through the VIP gets the member's ``200``; the
   load balancer is deleted between runs. Same run, same way, the L4 default
   (provider ``nftables``, TCP) until the member's HTTP answer comes back through it
   (``bench/lb_create.py`` measures the L4 provider's own figure, ~58 ms).
2. **Requests/s**: wrk (in the client's namespace; 2 threads, 32 keep-alive
   connections) against the product's load balancer (VIP:80, the agent's haproxy,
   its rendered configuration), and against haproxy run by hand in the same load
   balancer namespace with a minimal hand-written configuration (VIP:8088, same
   member), alternated ``--repeat`` times. The member is a haproxy answering every
   request itself (``http-request return``), so the member is not the bottleneck.

Every process the bench starts is stopped by PID; namespaces with its prefix are
swept at the end, also on error.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.abspath(os.path.dirname(__file__)))

import lb_create
from harness import machine
from lb_create import LB, PREFIX, Client, pct, server, sweep

from netbay.dataplane import netns
from netbay.dataplane.lb.haproxy import Haproxy as ProductHaproxy
from netbay.dataplane.lb.haproxy import state_dir

MEMBER_PORT = 8080
HAND_PORT = 8088


# --- processes of the bench ---------------------------------------------------------------------


class Haproxy:
    """A haproxy the bench runs by hand in ``ns`` (``-D``, its pid file), stopped by PID."""

    def __init__(self, ns: str, config: str, root: Path, name: str) -> None:
        self.dir = root / name
        self.dir.mkdir(parents=True, exist_ok=True)
        cfg = self.dir / "haproxy.cfg"
        cfg.write_text(config)
        self.pidfile = self.dir / "haproxy.pid"
        with netns.entered(ns):
            done = subprocess.run(["haproxy", "-D", "-f", str(cfg), "-p", str(self.pidfile)],
                                  capture_output=True, text=True, timeout=20)
        if done.returncode != 0:
            raise RuntimeError(f"haproxy ({name}) did not start: {done.stderr[-400:]}")

    def stop(self) -> None:
        try:
            pids = [int(p) for p in self.pidfile.read_text().split()]
        except (OSError, ValueError):
            return
        for pid in pids:
            cmdline = Path(f"/proc/{pid}/cmdline")
            if cmdline.exists() and str(self.dir).encode() in cmdline.read_bytes():
                os.kill(pid, signal.SIGTERM)


MEMBER_CONFIG = """global
    maxconn 4000
defaults
    mode http
    timeout connect 5s
    timeout client 30s
    timeout server 30s
frontend member
    bind 0.0.0.0:{port}
    http-request return status 200 content-type text/plain string member
"""

HAND_CONFIG = """global
    maxconn 4000
defaults
    mode http
    timeout connect 5s
    timeout client 50s
    timeout server 50s
frontend hand
    bind {vip}:{port}
    default_backend members
backend members
    balance roundrobin
    server m1 {member}:{member_port}
"""


# --- the client ------------------------------------------------------------------------------------


def http_answer(ns: str, ip: str, port: int, timeout: float = 0.05) -> int | None:
    with netns.entered(ns):
        s = socket.socket()
    try:
        s.settimeout(timeout)
        s.connect((ip, port))
        s.sendall(b"GET / HTTP/1.0\r\n\r\n")
        data = s.recv(4096)
        return int(data.split()[1]) if data.startswith(b"HTTP/") and b"member" in data else None
    except (OSError, ValueError, IndexError):
        return None
    finally:
        s.close()


def until_http(ns: str, ip: str, port: int, limit: float = 20.0) -> None:
    t0 = time.monotonic()
    for _ in range(1_000_000):
        if http_answer(ns, ip, port) == 200:
            return
        if time.monotonic() - t0 > limit:
            break
        time.sleep(0.0005)
    raise RuntimeError(f"no HTTP 200 from {ip}:{port} after {limit}s")


def wrk(ns: str, url: str, seconds: int) -> float:
    """Requests/s wrk measured (2 threads, 32 connections) from namespace ``ns``."""
    done = subprocess.run(["ip", "netns", "exec", ns, "wrk", "-t2", "-c32", f"-d{seconds}s", url],
                          capture_output=True, text=True, timeout=seconds + 30)
    m = re.search(r"Requests/sec:\s*([\d.]+)", done.stdout)
    if done.returncode != 0 or m is None:
        raise RuntimeError(f"wrk failed: {done.stdout[-300:]} {done.stderr[-300:]}")
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)|Socket errors: (.*)", done.stdout)
    if errors:
        raise RuntimeError(f"wrk saw errors: {errors.group(0)}")
    return float(m.group(1))


# --- the measurement --------------------------------------------------------------------------------


def populated(api: Client, env: dict[str, Any], client_ns: str, provider: str) -> float:
    http = provider == "haproxy"
    proto = "HTTP" if http else "TCP"
    t0 = time.monotonic()
    lb = api.create(f"{LB}/loadbalancers", "loadbalancer", {
        "name": f"bench-{provider}", "vip_subnet_id": env["subnet"]["id"], "provider": provider,
        "listeners": [{"protocol": proto, "protocol_port": 80, "default_pool": {
            "protocol": proto, "lb_algorithm": "ROUND_ROBIN",
            "members": [{"address": env["member_ip"], "protocol_port": MEMBER_PORT}]}}]})
    until_http(client_ns, lb["vip_address"], 80)   # through L4 too: the member speaks HTTP
    elapsed = time.monotonic() - t0
    api.wait_active(lb["id"])
    api.call("DELETE", f"{LB}/loadbalancers/{lb['id']}", params={"cascade": "true"})
    return elapsed


def throughput(api: Client, env: dict[str, Any], client_ns: str, root: Path, seconds: int,
               repeat: int) -> dict[str, Any]:
    lb = api.create(f"{LB}/loadbalancers", "loadbalancer", {
        "name": "bench-rps", "vip_subnet_id": env["subnet"]["id"], "provider": "haproxy",
        "listeners": [{"protocol": "HTTP", "protocol_port": 80, "default_pool": {
            "protocol": "HTTP", "lb_algorithm": "ROUND_ROBIN",
            "members": [{"address": env["member_ip"], "protocol_port": MEMBER_PORT}]}}]})
    until_http(client_ns, lb["vip_address"], 80)
    api.wait_active(lb["id"])
    lb_ns = f"{PREFIX}lb-{lb['id']}"
    hand = Haproxy(lb_ns, HAND_CONFIG.format(vip=lb["vip_address"], port=HAND_PORT, member=env["member_ip"],
                                             member_port=MEMBER_PORT), root, "hand")
    try:
        until_http(client_ns, lb["vip_address"], HAND_PORT)
        product, by_hand = [], []
        for _ in range(repeat):
            product.append(wrk(client_ns, f"http://{lb['vip_address']}:80/", seconds))
            by_hand.append(wrk(client_ns, f"http://{lb['vip_address']}:{HAND_PORT}/", seconds))
    finally:
        hand.stop()
    api.call("DELETE", f"{LB}/loadbalancers/{lb['id']}", params={"cascade": "true"})
    return {"product_rps": product, "by_hand_rps": by_hand,
            "ratio_of_medians": statistics.median(product) / statistics.median(by_hand)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=20, help="load balancers created per provider (>= 5)")
    ap.add_argument("--seconds", type=int, default=5, help="seconds per wrk run")
    ap.add_argument("--repeat", type=int, default=3, help="wrk runs per side, alternated")
    ap.add_argument("--json", type=Path, help="write the raw figures here")
    args = ap.parse_args()
    if not 5 <= args.runs <= 200 or not 1 <= args.seconds <= 60 or not 1 <= args.repeat <= 10:
        raise SystemExit("--runs 5..200, --seconds 1..60, --repeat 1..10")
    if os.geteuid() != 0:
        raise SystemExit("needs root (network namespaces)")
    for tool in ("haproxy", "wrk"):
        if shutil.which(tool) is None:
            raise SystemExit(f"needs {tool} (apt-get install {tool})")
    root = Path(tempfile.mkdtemp(prefix="nbbench-l7-"))
    load_before = os.getloadavg()
    member = None
    try:
        with server(False) as url:
            api = Client(url)
            env = lb_create.setup(api)
            member_ns = f"{PREFIX}s-{env['member_sandbox']['id']}"
            client_ns = f"{PREFIX}s-{env['client']['id']}"
            member = Haproxy(member_ns, MEMBER_CONFIG.format(port=MEMBER_PORT), root, "member")
            populated(api, env, client_ns, "haproxy")    # warm-up, not counted
            l7 = [populated(api, env, client_ns, "haproxy") for _ in range(args.runs)]
            populated(api, env, client_ns, "nftables")   # warm-up
            l4 = [populated(api, env, client_ns, "nftables") for _ in range(args.runs)]
            rps = throughput(api, env, client_ns, root, args.seconds, args.repeat)
    finally:
        if member is not None:
            member.stop()
        # The agent keeps haproxy running across its own restarts; this run's go with it.
        ProductHaproxy(state_dir(PREFIX)).stop_all()
        swept = sweep()
        shutil.rmtree(root, ignore_errors=True)
    load_after = os.getloadavg()
    out = {
        "machine": machine(), "runs": args.runs, "load_before": load_before, "load_after": load_after,
        "l7_create_to_http_answer_ms": {"p50": pct(l7, 50), "p90": pct(l7, 90), "max": max(l7) * 1e3},
        "l4_create_to_answer_ms": {"p50": pct(l4, 50), "p90": pct(l4, 90), "max": max(l4) * 1e3},
        **rps, "namespaces_swept": len(swept),
    }
    print(f"machine: {out['machine']}; load {load_before[0]:.2f} -> {load_after[0]:.2f}")
    for key, label in (("l7_create_to_http_answer_ms", "haproxy provider: populated create -> VIP answers HTTP"),
                       ("l4_create_to_answer_ms", "nftables provider: populated create -> VIP answers")):
        f = out[key]
        print(f"{label} (n={args.runs}): p50 {f['p50']:.1f} ms, p90 {f['p90']:.1f} ms, max {f['max']:.1f} ms")
    print("requests/s through the product's haproxy: " + ", ".join(f"{r:.0f}" for r in rps["product_rps"]))
    print("requests/s through haproxy run by hand:   " + ", ".join(f"{r:.0f}" for r in rps["by_hand_rps"]))
    print(f"ratio of medians: {rps['ratio_of_medians']:.2f}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
