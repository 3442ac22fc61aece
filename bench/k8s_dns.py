"""Cluster DNS of a kuryr cluster (issue 12, item 4), end to end through the controller.

    sudo python bench/k8s_dns.py [--queries 2000] [--services 20] [--json /tmp/k8s_dns.json]

Against ``netbay up --no-agent`` (SQLite), the agent on a thread (namespaces
``nbb<hex>-…``, swept at the end, also on failure), the controller in-process and a
kuryr cluster (1 master + 1 minion) made through the container-infra API:

* **query latency from a pod** — A queries for a ClusterIP Service's full name, one
  at a time over UDP from a pod's namespace to the cluster resolver (through the
  router to the service network), dnslib encoding the query and decoding the reply;
  p50 / p99. Same-run baseline: the same loop to a UDP echo in another pod (the
  path's cost without the resolver).
* **Service create → name resolves** — ``apply`` of a ClusterIP Service until the
  resolver answers its name with the cluster IP (queried from the pod every 1 ms);
  split into the controller's pass (mostly the load balancer's create, as in
  ``bench/k8s_pods.py``) and the time from the pass's return to the first answer.
"""

from __future__ import annotations

import argparse
import json
import secrets
import shutil
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import agent_thread
import harness
from k8s_pods import kuryr_cluster, ms, pod, service
from pod_network import first_answer

from dnslib import DNSRecord

from netbay.client import LB, NET, Api
from netbay.dataplane import netns
from netbay.dataplane.names import Names
from netbay.k8s.controller import Controller
from netbay.k8s.dns.resolver import Process, state_root
from netbay.k8s.objects import parse
from netbay.store.db import Store

PREFIX = f"nbb{secrets.token_hex(3)}-"


def udp_socket(ns: str) -> socket.socket:
    with netns.entered(ns):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(1.0)
    return s


def echo(ns: str, port: int, stop: threading.Event) -> None:
    s = udp_socket(ns)
    s.bind(("0.0.0.0", port))
    s.settimeout(0.2)

    def run() -> None:
        while not stop.is_set():
            try:
                data, peer = s.recvfrom(2048)
            except OSError:
                continue
            s.sendto(data, peer)
        s.close()
    threading.Thread(target=run, daemon=True).start()


def round_trips(ns: str, server: tuple[str, int], name: str, n: int) -> list[float]:
    """``n`` queries, one at a time: send, receive, decode (a lost one counts its timeout)."""
    s = udp_socket(ns)
    out = []
    try:
        for i in range(n):
            q = DNSRecord.question(name, "A")
            q.header.id = i & 0xFFFF
            t0 = time.perf_counter()
            s.sendto(q.pack(), server)
            try:
                DNSRecord.parse(s.recv(2048))
            except OSError:
                pass
            out.append(time.perf_counter() - t0)
    finally:
        s.close()
    return out


def resolves(ns: str, server: str, name: str, want: str, timeout: float = 10.0) -> float:
    s = udp_socket(ns)
    s.settimeout(0.05)
    t0 = time.monotonic()
    try:
        while time.monotonic() - t0 < timeout:
            s.sendto(DNSRecord.question(name, "A").pack(), (server, 53))
            try:
                if [str(r.rdata) for r in DNSRecord.parse(s.recv(2048)).rr] == [want]:
                    return time.monotonic() - t0
            except OSError:
                pass
            time.sleep(0.001)
    finally:
        s.close()
    raise RuntimeError(f"{name} did not resolve to {want} in {timeout} s")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--queries", type=int, default=2000)
    ap.add_argument("--services", type=int, default=20)
    ap.add_argument("--json")
    args = ap.parse_args()
    names = Names(PREFIX)
    out: dict[str, Any] = {"machine": harness.machine()}
    stop = threading.Event()
    try:
        with harness.netbay("sqlite") as srv, agent_thread.running(srv, names):
            cid = kuryr_cluster(srv)
            api = Api(srv.url, srv.token)
            store = Store(f"sqlite:///{srv.data_dir / 'netbay.db'}")
            ctrl = Controller(api, store, cid, names)

            def port_of(name: str) -> dict:
                return api.call("GET", f"{NET}/ports", name=f"bench/{name}")["ports"][0]

            ctrl.apply(parse(pod("anchor", "{role: anchor}") + "---\n" + pod("client") + "---\n" + service("web")))
            anchor = port_of("anchor")
            anchor_ip, anchor_ns = anchor["fixed_ips"][0]["ip_address"], ctrl.sandboxes.ns(anchor["id"])
            client_ns = ctrl.sandboxes.ns(port_of("client")["id"])
            first_answer(client_ns, anchor_ip, timeout=10)
            dns = ctrl.discovery.resolver.address
            vip = api.call("GET", f"{LB}/loadbalancers", name="bench/web")["loadbalancers"][0]["vip_address"]
            resolves(client_ns, dns, "web.bench.svc.cluster.local", vip)
            echo(anchor_ns, 5353, stop)
            out["resolver"] = dns
            round_trips(client_ns, (dns, 53), "web.bench.svc.cluster.local", 100)   # warm-up
            out["query_ms"] = ms(round_trips(client_ns, (dns, 53), "web.bench.svc.cluster.local", args.queries), 0.99)
            out["baseline_udp_echo_ms"] = ms(round_trips(client_ns, (anchor_ip, 5353),
                                                         "web.bench.svc.cluster.local", args.queries), 0.99)

            made, passes, after = [], [], []
            for i in range(args.services):
                t0 = time.monotonic()
                ctrl.apply(parse(service(f"s{i}")))
                passes.append(time.monotonic() - t0)
                vip = ctrl.known.lbs[f"bench/s{i}"]["vip_address"]
                t1 = time.monotonic()
                resolves(client_ns, dns, f"s{i}.bench.svc.cluster.local", vip)
                made.append(time.monotonic() - t0)
                after.append(time.monotonic() - t1)
            out["service_create_resolves_ms"] = ms(made, 0.9)
            out["of_which_apply_pass_ms"] = ms(passes, 0.9)
            out["of_which_after_the_pass_ms"] = ms(after, 0.9)
            ctrl.delete_all()
            ctrl.close()
            api.close()
            store.dispose()
    finally:
        stop.set()
        root = state_root(PREFIX)
        for d in root.iterdir() if root.is_dir() else []:   # a resolver left by a failed run
            Process(root, d.name, f"{PREFIX}kd-{d.name}").remove()
        for d in Path("/etc/netns").glob(f"{PREFIX}*"):
            shutil.rmtree(d, ignore_errors=True)
        agent_thread.sweep(PREFIX)
    print(json.dumps(out, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
