"""Pods on clusters, end to end through the product: throughput, pod create, scale.

    sudo python bench/cluster_pods.py [--reps 5] [--seconds 5] [--samples 30] [--pods 100]
                                      [--scale 10] [--json /tmp/cluster_pods.json]

Issue 5's targets, all measured in one run against ``netbay up --no-agent`` (SQLite)
with the dataplane agent on a thread of this process (its namespaces named
``nbb<hex>-…``, swept at the end, also on failure; iperf3 stopped by PID). Every
cluster is made through the container-infra API (1 master, flannel, no load
balancer, no floating IPs), its nodes wired by the agent into the fabric (bridge per
network, security groups in nftables), its pods placed through ``POST
/netbay/v1/pods``:

* **throughput** — iperf3 TCP (one stream, ``--seconds`` after 1 s omitted), each
  repetition running the paths in a rotating order: ``underlay`` — minion 0's
  namespace → minion 1's ``eth0`` address on the host-gw cluster (veth, fabric bridge,
  security groups, veth); ``host-gw`` — pod on minion 0 → pod on minion 1 of that
  cluster; ``vxlan`` — the same on a vxlan cluster. Targets: host-gw ≥ 90% of the
  underlay, vxlan ≥ 75% of host-gw.
* **pod create → first packet** — on a 4-minion vxlan cluster with an anchor pod on
  minion 0: ``POST /netbay/v1/pods`` on one of the other minions, until the new pod's
  ICMP echo to the anchor is answered (the agent sees the change, makes the namespace,
  plugs it into cni0, reports ACTIVE). Baseline, alternating in the same run: the
  driver alone (``Flannel.attach_pod`` into the same nodes, no API, no agent). Target
  p50 ≤ 30 ms.
* **100 pods across 4 nodes** — created back to back through the API (the scheduler
  spreads them), until every one answers ICMP from a pod on another node. Baseline:
  the driver alone for as many pods. Target ≤ 3 s.
* **scale +10 → every pod pair reachable** — a 2-minion vxlan cluster with a pod per
  minion; ``PATCH node_count`` +10, then (as soon as the cluster says
  ``UPDATE_COMPLETE``) a pod on each new node; the clock stops when each of the 12
  pods has had an ICMP answer from each other one (132 ordered pairs). Reported with
  its parts: the scale alone (conductor: 10 nodes, their ports and namespaces), pods
  placed and ACTIVE, all pairs. Target ≤ 3 s.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import sys
import time
from itertools import permutations
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import agent_thread
import harness
from iperf import Iperf
from pod_network import first_answer as _first_answer

from netbay.dataplane import bigtcp, netns
from netbay.drivers import registry
from netbay.dataplane.names import Names
from netbay.dataplane.rtnl import rtnl
from netbay.drivers import leases
from netbay.drivers.node import Node

PREFIX = f"nbb{secrets.token_hex(3)}-"
PATHS = ("underlay", "host-gw", "vxlan")
SETTLE = 120.0   # s: the longest a cluster or a pod may take to settle before the bench gives up


class Product:
    """The API calls the bench makes, and the names of the namespaces behind them."""

    def __init__(self, srv: harness.Server, names: Names) -> None:
        headers = {"X-Auth-Token": srv.token()}
        self.http = httpx.Client(base_url=srv.url, headers=headers, timeout=60)
        self.ci = httpx.Client(base_url=f"{srv.url}/container-infra/v1", headers=headers, timeout=60)
        self.names = names

    def ok(self, r: httpx.Response, *status: int) -> Any:
        if r.status_code not in (status or (200,)):
            raise RuntimeError(f"{r.request.method} {r.request.url}: {r.status_code} {r.text[:300]}")
        return r.json() if r.content else None

    def settle(self, cid: str, done: tuple[str, ...]) -> dict:
        deadline = time.monotonic() + SETTLE
        while time.monotonic() < deadline:
            r = self.ci.get(f"/clusters/{cid}")
            if r.status_code == 404 and "GONE" in done:
                return {"status": "GONE"}
            body = self.ok(r)
            if body["status"] in done:
                if body["status"].endswith("FAILED"):
                    raise RuntimeError(f"cluster {cid}: {body['status']}: {body.get('status_reason')}")
                return body
            time.sleep(0.005)
        raise RuntimeError(f"cluster {cid} not in {done} after {SETTLE} s")

    def cluster(self, name: str, backend: str, minions: int) -> str:
        t = self.ok(self.ci.post("/clustertemplates", json={
            "name": name, "coe": "kubernetes", "network_driver": "flannel", "external_network_id": "public",
            "master_lb_enabled": False, "floating_ip_enabled": False,
            "labels": {"flannel_backend": backend}}), 201)
        c = self.ok(self.ci.post("/clusters", json={
            "name": name, "cluster_template_id": t["uuid"], "node_count": minions}), 202)
        self.settle(c["uuid"], ("CREATE_COMPLETE", "CREATE_FAILED"))
        return c["uuid"]

    def scale(self, cid: str, count: int) -> None:
        self.ok(self.ci.patch(f"/clusters/{cid}", json=[
            {"op": "replace", "path": "/node_count", "value": count}]), 202)
        self.settle(cid, ("UPDATE_COMPLETE", "UPDATE_FAILED"))

    def delete(self, cid: str) -> None:
        self.ok(self.ci.delete(f"/clusters/{cid}"), 204)
        self.settle(cid, ("GONE", "DELETE_FAILED"))

    def clusternet(self, cid: str) -> dict:
        nets = self.ok(self.http.get("/netbay/v1/state"))["clusternets"]
        return next(n for n in nets if n["id"] == cid)

    def post_pod(self, cid: str, name: str, node: str | None = None) -> dict:
        body = {"name": name, "cluster_id": cid, **({"node": node} if node else {})}
        return self.ok(self.http.post("/netbay/v1/pods", json={"pod": body}), 201)["pod"]

    def wait_active(self, cid: str, ids: set[str]) -> None:
        deadline = time.monotonic() + SETTLE
        while time.monotonic() < deadline:
            active = self.ok(self.http.get("/netbay/v1/pods", params={
                "cluster_id": cid, "status": "ACTIVE", "fields": "id"}))["pods"]
            if ids <= {p["id"] for p in active}:
                return
            time.sleep(0.005)
        raise RuntimeError(f"{len(ids)} pods not ACTIVE after {SETTLE} s")

    def pod(self, cid: str, name: str, node: str | None = None) -> dict:
        made = self.post_pod(cid, name, node)
        self.wait_active(cid, {made["id"]})
        return made

    def ns(self, pod: dict) -> str:
        return self.names.pod(pod["id"])

    def nodes(self, cid: str) -> list[dict]:
        return self.clusternet(cid)["nodes"]

    def close(self) -> None:
        self.http.close()
        self.ci.close()


def first_answer(ns: str, dst: str, timeout: float = 10.0) -> float:
    """Seconds until an ICMP echo from ``ns`` to ``dst`` is answered, waiting first (within
    the same ``timeout``) for the namespace, which the agent makes after the API call."""
    t0 = time.monotonic()
    while not netns.exists(ns):
        if time.monotonic() - t0 > timeout:
            raise RuntimeError(f"namespace {ns} not made within {timeout} s")
        time.sleep(0.0005)
    return _first_answer(ns, dst, timeout=max(0.1, timeout - (time.monotonic() - t0)))


def minions(p: Product, cid: str) -> list[dict]:
    return [n for n in p.nodes(cid) if n["role"] == "minion"]


def ms(values: list[float]) -> dict[str, float]:
    v = sorted(x * 1e3 for x in values)
    return {"n": len(v), "p50": round(statistics.median(v), 2), "p90": round(v[int(0.9 * (len(v) - 1))], 2),
            "max": round(v[-1], 2)}


# --- the measurements -----------------------------------------------------------------------


def throughput(p: Product, args: argparse.Namespace, tag: str) -> dict[str, Any]:
    hg, vx = p.cluster(f"tp-hostgw-{tag}", "host-gw", 2), p.cluster(f"tp-vxlan-{tag}", "vxlan", 2)
    hg_nodes = minions(p, hg)
    hg_pods = [p.pod(hg, f"hg{i}", n["name"]) for i, n in enumerate(hg_nodes)]
    vx_pods = [p.pod(vx, f"vx{i}", n["name"]) for i, n in enumerate(minions(p, vx))]
    node_ns = [p.names.sandbox(n["sandbox_id"]) for n in hg_nodes]
    node_ip = hg_nodes[1]["address"].split("/")[0]
    targets = {"underlay": (node_ns[0], node_ns[1], node_ip),
               "host-gw": (p.ns(hg_pods[0]), p.ns(hg_pods[1]), hg_pods[1]["address"]),
               "vxlan": (p.ns(vx_pods[0]), p.ns(vx_pods[1]), vx_pods[1]["address"])}
    gso = {k: rtnl(client).link("eth0").gso_max_size for k, (client, _s, _ip) in targets.items()}
    iperf = Iperf()
    samples: dict[str, list[float]] = {k: [] for k in PATHS}
    try:
        for client, server, ip in targets.values():
            first_answer(client, ip, timeout=10)
            iperf.serve(server, ip)
        for rep in range(args.reps):
            for path in PATHS[rep % 3:] + PATHS[:rep % 3]:
                client, _server, ip = targets[path]
                samples[path].append(iperf.run(client, ip, args.seconds, 1)["gbps"])
            print(f"  {tag} rep {rep + 1}: " + ", ".join(f"{k} {samples[k][-1]:.1f}" for k in PATHS), flush=True)
    finally:
        iperf.close()
    for cid in (hg, vx):
        p.delete(cid)
    med = {k: statistics.median(v) for k, v in samples.items()}
    return {
        "gso_max_size": gso, "samples_gbps": samples, "median_gbps": med,
        "hostgw_over_underlay": med["host-gw"] / med["underlay"],
        "hostgw_over_underlay_paired": statistics.median(h / u for h, u in zip(samples["host-gw"],
                                                                                samples["underlay"])),
        "vxlan_over_hostgw": med["vxlan"] / med["host-gw"],
        "vxlan_over_hostgw_paired": statistics.median(v / h for v, h in zip(samples["vxlan"], samples["host-gw"])),
    }


def driver_nodes(p: Product, cid: str) -> tuple[Any, list[Node]]:
    """The cluster's driver and its minions as the driver sees them (for the baselines)."""
    net = p.clusternet(cid)
    driver = registry.make(net["driver"], net.get("config") or {})
    return driver, [Node(p.names.sandbox(n["sandbox_id"]), n["address"], n["lease"])
                    for n in net["nodes"] if n["role"] == "minion"]


def first_packet(p: Product, cid: str, anchor: dict, args: argparse.Namespace) -> dict[str, Any]:
    driver, nodes = driver_nodes(p, cid)
    others = [n["name"] for n in minions(p, cid) if n["name"] != anchor["node"]]
    api, api_call, base = [], [], []
    for i in range(args.samples):
        for kind in (("api", "base") if i % 2 == 0 else ("base", "api")):
            k = 1 + i % (len(nodes) - 1)
            t0 = time.monotonic()
            if kind == "api":
                made = p.post_pod(cid, f"fp{i}", others[k - 1])
                api_call.append(time.monotonic() - t0)
                first_answer(p.ns(made), anchor["address"], timeout=10)
                api.append(time.monotonic() - t0)
            else:
                pod_ns = f"{PREFIX}fb{i}"
                netns.create(pod_ns)
                driver.attach_pod(nodes[k], pod_ns, leases.host(nodes[k].lease, 200 + i // (len(nodes) - 1)))
                first_answer(pod_ns, anchor["address"], timeout=10)
                base.append(time.monotonic() - t0)
    return {"api_to_first_packet_ms": ms(api), "api_call_alone_ms": ms(api_call), "driver_baseline_ms": ms(base)}


def hundred_pods(p: Product, cid: str, count: int) -> dict[str, Any]:
    driver, nodes = driver_nodes(p, cid)
    names = [n["name"] for n in minions(p, cid)]
    partner = {}   # a pod on every node, to answer from another node
    for i, name in enumerate(names):
        partner[name] = p.pod(cid, f"partner{i}", name)
    t0 = time.monotonic()
    made = [p.post_pod(cid, f"h{i}") for i in range(count)]
    t_api = time.monotonic() - t0
    p.wait_active(cid, {m["id"] for m in made})
    t_active = time.monotonic() - t0
    per_node = {name: sum(m["node"] == name for m in made) for name in names}
    for m in made:
        other = partner[names[(names.index(m["node"]) + 1) % len(names)]]
        first_answer(p.ns(m), other["address"], timeout=10)
    t_all = time.monotonic() - t0
    # Baseline: the driver alone, as many pods, same nodes, answered the same way.
    t1 = time.monotonic()
    pods = []
    for i in range(count):
        k = i % len(nodes)
        pod_ns = f"{PREFIX}hb{i}"
        netns.create(pod_ns)
        driver.attach_pod(nodes[k], pod_ns, leases.host(nodes[k].lease, 150 + i // len(nodes)))
        pods.append((pod_ns, k))
    b_wired = time.monotonic() - t1
    for pod_ns, k in pods:
        first_answer(pod_ns, partner[names[(k + 1) % len(names)]]["address"], timeout=10)
    b_all = time.monotonic() - t1
    for pod_ns, _k in pods:
        netns.delete(pod_ns)
    return {"pods": count, "per_node": per_node, "api_calls_s": round(t_api, 3), "all_active_s": round(t_active, 3),
            "all_answer_s": round(t_all, 3), "driver_baseline_wired_s": round(b_wired, 3),
            "driver_baseline_all_answer_s": round(b_all, 3)}


def scale_out(p: Product, add: int) -> dict[str, Any]:
    cid = p.cluster("scale", "vxlan", 2)
    before = {n["name"] for n in minions(p, cid)}
    pods = [p.pod(cid, f"s{i}", name) for i, name in enumerate(sorted(before))]
    t0 = time.monotonic()
    p.scale(cid, len(before) + add)
    t_scaled = time.monotonic() - t0
    new = [n["name"] for n in minions(p, cid) if n["name"] not in before]
    made = [p.post_pod(cid, f"n{i}", name) for i, name in enumerate(new)]
    p.wait_active(cid, {m["id"] for m in made})
    t_active = time.monotonic() - t0
    pods += made
    for a, b in permutations(pods, 2):
        first_answer(p.ns(a), b["address"], timeout=10)
    t_all = time.monotonic() - t0
    return {"added_nodes": len(new), "pods": len(pods), "pairs": len(pods) * (len(pods) - 1),
            "scale_to_update_complete_s": round(t_scaled, 3), "pods_active_s": round(t_active, 3),
            "all_pairs_answer_s": round(t_all, 3)}


# --- the run --------------------------------------------------------------------------------


def measure(p: Product, args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    print("throughput (iperf3 TCP, Gbit/s):", flush=True)
    out["throughput"] = throughput(p, args, "shipped")
    # Like for like: every veth with the kernel's 64 KiB GSO limit (no BIG TCP), as VXLAN
    # pods have it anyway; clusters made after this point are wired that way.
    bigtcp.disable()
    out["throughput_kernel_gso"] = throughput(p, args, "kernel-gso")
    bigtcp.enable()
    cid = p.cluster("speed", "vxlan", 4)
    anchor = p.pod(cid, "anchor", minions(p, cid)[0]["name"])
    out["first_packet"] = first_packet(p, cid, anchor, args)
    fresh = p.cluster("hundred", "vxlan", 4)
    out["hundred_pods"] = hundred_pods(p, fresh, args.pods)
    out["scale"] = scale_out(p, args.scale)
    return out


def report(r: dict[str, Any], args: argparse.Namespace) -> None:
    f, h, s = r["first_packet"], r["hundred_pods"], r["scale"]
    print(f"\nload {r['load_before_after'][0]} → {r['load_before_after'][1]} (1-min averages, "
          f"{os.cpu_count()} CPUs); {r['database']}")
    rows = []
    for key, label in (("throughput", "as shipped"), ("throughput_kernel_gso", "64 KiB GSO everywhere")):
        t = r[key]
        m, g = t["median_gbps"], {k: v // 1024 for k, v in t["gso_max_size"].items()}
        rows += [
            [f"{label}: underlay, minion → minion (eth0, fabric, security groups)", f"{g['underlay']} KiB",
             f"{m['underlay']:.1f}", "", ""],
            [f"{label}: host-gw, pod → pod", f"{g['host-gw']} KiB", f"{m['host-gw']:.1f}",
             f"{t['hostgw_over_underlay']:.0%} of underlay ({t['hostgw_over_underlay_paired']:.0%})", "≥ 90%"],
            [f"{label}: vxlan, pod → pod", f"{g['vxlan']} KiB", f"{m['vxlan']:.1f}",
             f"{t['vxlan_over_hostgw']:.0%} of host-gw ({t['vxlan_over_hostgw_paired']:.0%})", "≥ 75%"]]
    print(harness.markdown_table(["path", "GSO limit", "median Gbit/s", "ratio of medians (paired)", "target"],
                                 rows))
    print()
    print(harness.markdown_table(["pod create → first packet", "p50 ms", "p90 ms", "max ms"], [
        [k, f"{f[key]['p50']:.1f}", f"{f[key]['p90']:.1f}", f"{f[key]['max']:.1f}"] for k, key in (
            ("POST /netbay/v1/pods → first ICMP answer", "api_to_first_packet_ms"),
            ("… of which the API call", "api_call_alone_ms"),
            ("baseline: Flannel.attach_pod alone", "driver_baseline_ms"))]))
    print()
    print(harness.markdown_table([f"{h['pods']} pods across 4 nodes", "s"], [
        ["API calls (back to back)", f"{h['api_calls_s']:.2f}"], ["all ACTIVE", f"{h['all_active_s']:.2f}"],
        ["all answered from another node", f"{h['all_answer_s']:.2f}"],
        ["baseline: driver alone, wired", f"{h['driver_baseline_wired_s']:.2f}"],
        ["baseline: driver alone, all answered", f"{h['driver_baseline_all_answer_s']:.2f}"]]))
    print()
    print(harness.markdown_table([f"scale +{s['added_nodes']} nodes ({s['pods']} pods, {s['pairs']} pairs)", "s"], [
        ["PATCH → UPDATE_COMPLETE", f"{s['scale_to_update_complete_s']:.2f}"],
        ["… → a pod on every new node ACTIVE", f"{s['pods_active_s']:.2f}"],
        ["… → every pod pair answered", f"{s['all_pairs_answer_s']:.2f}"]]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--samples", type=int, default=30)
    ap.add_argument("--pods", type=int, default=100)
    ap.add_argument("--scale", type=int, default=10)
    ap.add_argument("--json")
    args = ap.parse_args()
    if not (1 <= args.reps <= 50 and 1 <= args.seconds <= 60 and 2 <= args.samples <= 200
            and 4 <= args.pods <= 200 and 1 <= args.scale <= 40):
        ap.error("out of range: --reps 1..50, --seconds 1..60, --samples 2..200, --pods 4..200, --scale 1..40")
    if os.geteuid() != 0:
        raise SystemExit("root is needed (network namespaces, raw ICMP sockets)")
    load0 = os.getloadavg()[0]
    result: dict[str, Any] = {"machine": harness.machine(), "prefix": PREFIX, "args": vars(args)}
    try:
        with harness.netbay("sqlite") as srv, agent_thread.running(srv, Names(PREFIX)):
            result["database"] = srv.database
            product = Product(srv, Names(PREFIX))
            try:
                result.update(measure(product, args))
            finally:
                product.close()
    finally:
        agent_thread.sweep(PREFIX)
    result["load_before_after"] = [round(load0, 2), round(os.getloadavg()[0], 2)]
    report(result, args)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
