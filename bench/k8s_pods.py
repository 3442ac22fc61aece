"""Kubernetes objects on a kuryr cluster, end to end through the mapping controller.

    sudo python bench/k8s_pods.py [--samples 20] [--pods 100] [--services 10] [--family ipv4|dual]
                                  [--json /tmp/k8s_pods.json]

Issue 12's targets, measured in one run against ``netbay up --no-agent`` (SQLite) with
the dataplane agent on a thread of this process (namespaces ``nbb<hex>-…``, swept at
the end, also on failure) and the controller in-process (``netbay.k8s``), a kuryr
cluster of 1 master + 1 minion made through the container-infra API:

* **pod create → first packet** — ``apply`` of one Pod manifest (the controller's
  whole pass: desired state written, port created already bound — one API call —,
  sandbox namespace plugged into the fabric, the agent applying the port's security
  group and adopting its fabric end), until the new pod's ICMP echo to an anchor pod
  of the same namespace is answered. Baseline in the same run: ``POST /ports`` alone.
  The pass's parts (desired-state write, ``POST /ports``, other API calls, sandbox
  plug, the rest) are timed by wrapping the controller's calls. Target p50 ≤ 30 ms
  (kuryr: 15–50 s).
* **100 pods** — one Deployment of ``--pods`` replicas applied at once, until every
  pod has had an ICMP answer from the anchor. Target ≤ 3 s.
* **Service create → cluster IP answers** — ``apply`` of a ClusterIP Service selecting
  the anchor (which serves TCP), until a TCP connection from another pod to the
  cluster IP (the one the pass made: no lookup of the bench's own in between) gets the
  anchor's reply. The apply's parts (``POST /loadbalancers``, other API calls, the rest
  of the pass, then apply → answers) are timed as the pod's. Target ≤ 100 ms (Octavia
  amphora: minutes).

``--family dual`` (issue 28): the cluster is dual-stack (labels
``kuryr_pod_subnet_pool_ipv6`` / ``kuryr_service_cidr_ipv6``) and each pod create is
also timed to the first TCP answer of the anchor over each family, the families
alternating from sample to sample (``pod_create_first_tcp_ms``: IPv6 against IPv4 in
the same run; the issue's target is within 1.1×).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import socket
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import agent_thread
import harness
from pod_network import first_answer

from netbay.client import LB, NET, Api
from netbay.dataplane import netns
from netbay.dataplane.names import Names
from netbay.k8s import desired
from netbay.k8s.controller import Controller
from netbay.k8s.objects import parse
from netbay.store.db import Store

PREFIX = f"nbb{secrets.token_hex(3)}-"
SETTLE = 120.0


def pod(name: str, labels: str = "{}") -> str:
    return (f"apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: bench, labels: {labels}}}\n"
            "spec: {containers: [{name: c, image: busybox}]}\n")


def service(name: str) -> str:
    """A ClusterIP Service in front of the anchor pod (its port named, for DNS's SRV)."""
    return (f"apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: bench}}\n"
            "spec: {selector: {role: anchor}, ports: [{name: http, port: 80, targetPort: 8080}]}\n")


DUAL_STACK = {"kuryr_pod_subnet_pool_ipv6": "fd00:10::/56", "kuryr_service_cidr_ipv6": "fd00:96::/112"}


def kuryr_cluster(srv: harness.Server, labels: dict[str, str] | None = None) -> str:
    return coe_cluster(srv, "k8sbench", "kuryr", 1, labels)


def coe_cluster(srv: harness.Server, name: str, driver: str, nodes: int, labels: dict[str, str] | None = None) -> str:
    """A kubernetes cluster of ``driver`` with ``nodes`` minions (its own template), settled."""
    ci = httpx.Client(base_url=f"{srv.url}/container-infra/v1", headers={"X-Auth-Token": srv.token()}, timeout=60)
    try:
        t = ci.post("/clustertemplates", json={"name": name, "coe": "kubernetes", "network_driver": driver,
                                               "external_network_id": "public", "master_lb_enabled": False,
                                               "floating_ip_enabled": False, "labels": labels or {}})
        t.raise_for_status()
        r = ci.post("/clusters", json={"name": name, "cluster_template_id": t.json()["uuid"], "node_count": nodes})
        r.raise_for_status()
        cid = r.json()["uuid"]
        deadline = time.monotonic() + SETTLE
        while time.monotonic() < deadline:
            body = ci.get(f"/clusters/{cid}").json()
            if body["status"] == "CREATE_COMPLETE":
                return cid
            if body["status"].endswith("FAILED"):
                raise RuntimeError(body.get("status_reason"))
            time.sleep(0.02)
        raise RuntimeError("cluster did not settle")
    finally:
        ci.close()


def serve(ns: str, port: int, stop: threading.Event) -> threading.Thread:
    """The anchor's TCP server, on both families."""
    with netns.entered(ns):
        s = socket.socket(socket.AF_INET6)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    s.bind(("::", port))
    s.listen(64)
    s.settimeout(0.2)

    def run() -> None:
        while not stop.is_set():
            try:
                c, _ = s.accept()
            except OSError:
                continue
            c.sendall(b"anchor")
            c.close()
        s.close()
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def tcp_answers(ns: str, ip: str, port: int, timeout: float = 5.0) -> float:
    t0 = time.monotonic()
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    while time.monotonic() - t0 < timeout:
        with netns.entered(ns):
            s = socket.socket(family)
        s.settimeout(0.05)
        try:
            s.connect((ip, port))
            if s.recv(16) == b"anchor":
                return time.monotonic() - t0
        except OSError:
            time.sleep(0.001)
        finally:
            s.close()
    raise RuntimeError(f"{ip}:{port} did not answer in {timeout} s")


class Stopwatch:
    """Time spent in named calls during one ``apply`` (the pass's breakdown)."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = {}

    def wrap(self, name: str, fn: Any, only: Any = None) -> Any:  # any callable
        def timed(*a: Any, **kw: Any) -> Any:
            if only is not None and not only(*a):
                return fn(*a, **kw)
            t0 = time.monotonic()
            try:
                return fn(*a, **kw)
            finally:
                self.spent[name] = self.spent.get(name, 0.0) + time.monotonic() - t0
        return timed


def ms(values: list[float], tail: float = 0.9) -> dict[str, float]:
    """Seconds → ms: p50, the ``tail`` percentile, max, n."""
    v = sorted(x * 1000 for x in values)
    return {"p50": round(statistics.median(v), 3), f"p{int(tail * 100)}": round(v[int(tail * (len(v) - 1))], 3),
            "max": round(v[-1], 3), "n": len(v)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=20)
    ap.add_argument("--pods", type=int, default=100)
    ap.add_argument("--services", type=int, default=10)
    ap.add_argument("--family", choices=("ipv4", "dual"), default="ipv4",
                    help="dual: a dual-stack cluster, first TCP answers timed over each family")
    ap.add_argument("--json")
    args = ap.parse_args()
    names = Names(PREFIX)
    out: dict[str, Any] = {"machine": harness.machine()}
    load_before = list(os.getloadavg())
    stop = threading.Event()
    try:
        with harness.netbay("sqlite") as srv, agent_thread.running(srv, names):
            dual = args.family == "dual"
            cid = kuryr_cluster(srv, DUAL_STACK if dual else None)
            api = Api(srv.url, srv.token)
            store = Store(f"sqlite:///{srv.data_dir / 'netbay.db'}")
            ctrl = Controller(api, store, cid, names)

            def port_of(name: str) -> dict:
                return api.call("GET", f"{NET}/ports", name=f"bench/{name}")["ports"][0]

            ctrl.apply(parse(pod("anchor", "{role: anchor}") + "---\n" + pod("client")))
            anchor = port_of("anchor")
            anchor_ip, anchor_ns = anchor["fixed_ips"][0]["ip_address"], ctrl.sandboxes.ns(anchor["id"])
            anchor_ips = {("IPv6" if ":" in f["ip_address"] else "IPv4"): f["ip_address"] for f in anchor["fixed_ips"]}
            first_tcp: dict[str, list[float]] = {family: [] for family in anchor_ips}
            client_ns = ctrl.sandboxes.ns(port_of("client")["id"])
            first_answer(client_ns, anchor_ip, timeout=10)
            serve(anchor_ns, 8080, stop)

            # pod create -> first packet, with POST /ports alone as the same-run baseline;
            # the pass's parts timed by wrapping the controller's calls
            net_id = anchor["network_id"]
            created, applied_only, baseline = [], [], []
            watch = Stopwatch()
            parts: dict[str, list[float]] = {k: [] for k in ("desired state write", "POST /ports", "other API calls",
                                                             "sandbox plug", "rest of the pass")}
            real_put, real_call, real_plug = desired.put, api.call, ctrl.sandboxes.plug
            desired.put = watch.wrap("desired state write", real_put)
            api.call = watch.wrap("other API calls", watch.wrap(
                "POST /ports", real_call, lambda method, path, *_: method == "POST" and path == f"{NET}/ports"),
                lambda method, path, *_: not (method == "POST" and path == f"{NET}/ports"))
            ctrl.sandboxes.plug = watch.wrap("sandbox plug", real_plug)
            for i in range(args.samples):
                watch.spent = {}
                t0 = time.monotonic()
                ctrl.apply(parse(pod(f"p{i}")))
                applied_only.append(time.monotonic() - t0)
                for k in parts:
                    if k != "rest of the pass":
                        parts[k].append(watch.spent.get(k, 0.0))
                parts["rest of the pass"].append(applied_only[-1] - sum(watch.spent.values()))
                p = port_of(f"p{i}")
                if dual:   # the families alternate: each sample's first packet is of one
                    family = ("IPv4", "IPv6")[i % 2]
                    tcp_answers(ctrl.sandboxes.ns(p["id"]), anchor_ips[family], 8080, timeout=10)
                    first_tcp[family].append(time.monotonic() - t0)
                first_answer(ctrl.sandboxes.ns(p["id"]), anchor_ip, timeout=10)
                created.append(time.monotonic() - t0)
                t0 = time.monotonic()
                b = api.call("POST", f"{NET}/ports", {"port": {"network_id": net_id, "name": f"baseline{i}"}})["port"]
                baseline.append(time.monotonic() - t0)
                api.call("DELETE", f"{NET}/ports/{b['id']}")
            desired.put, api.call, ctrl.sandboxes.plug = real_put, real_call, real_plug
            out["pod_create_first_packet_ms"] = ms(created)
            if dual:
                out["pod_create_first_tcp_ms"] = {family: ms(v) for family, v in first_tcp.items() if v}
            out["pod_apply_parts_p50_ms"] = {k: statistics.median(v) * 1000 for k, v in parts.items()}
            out["pod_apply_pass_ms"] = ms(applied_only)
            out["baseline_port_create_ms"] = ms(baseline)

            # 100 pods at once
            dep = ("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: many, namespace: bench}\n"
                   f"spec:\n  replicas: {args.pods}\n  selector: {{matchLabels: {{app: many}}}}\n"
                   "  template:\n    metadata: {labels: {app: many}}\n"
                   "    spec: {containers: [{name: c, image: busybox}]}\n")
            t0 = time.monotonic()
            ctrl.apply(parse(dep))
            applied = time.monotonic() - t0
            ips = [p["fixed_ips"][0]["ip_address"] for p in api.call("GET", f"{NET}/ports", device_owner="compute:kuryr")
                   ["ports"] if p["name"].startswith("bench/many-")]
            assert len(ips) == args.pods, len(ips)
            for ip in ips:
                first_answer(anchor_ns, ip, timeout=10)
            out["pods_100_s"] = {"pods": args.pods, "apply_s": applied, "all_answer_s": time.monotonic() - t0}

            # Service create -> cluster IP answers; the apply's parts timed as the pod's are
            svc = []
            svc_parts: dict[str, list[float]] = {k: [] for k in ("POST /loadbalancers", "other API calls",
                                                                 "rest of the pass", "apply -> answers")}
            is_lb_post = lambda method, path, *_: method == "POST" and path == f"{LB}/loadbalancers"  # noqa: E731
            api.call = watch.wrap("other API calls", watch.wrap("POST /loadbalancers", real_call, is_lb_post),
                                  lambda *a: not is_lb_post(*a))
            for i in range(args.services):
                watch.spent = {}
                t0 = time.monotonic()
                ctrl.apply(parse(service(f"s{i}")))
                applied = time.monotonic()
                spent = dict(watch.spent)
                vip = ctrl.cluster_ips[("bench", f"s{i}")][0]   # what the pass made (no lookup of the bench's)
                tcp_answers(client_ns, vip, 80)
                svc.append(time.monotonic() - t0)
                for k in ("POST /loadbalancers", "other API calls"):
                    svc_parts[k].append(spent.get(k, 0.0))
                svc_parts["rest of the pass"].append(applied - t0 - sum(spent.values()))
                svc_parts["apply -> answers"].append(time.monotonic() - applied)
            api.call = real_call
            out["service_create_answers_ms"] = ms(svc)
            out["service_apply_parts_p50_ms"] = {k: round(statistics.median(v) * 1000, 3) for k, v in svc_parts.items()}
            out["load"] = [load_before, list(os.getloadavg())]
            ctrl.delete_all()
            ctrl.close()
            api.close()
            store.dispose()
    finally:
        stop.set()
        agent_thread.sweep(PREFIX)
    print(json.dumps(out, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
