"""Kubernetes on a calico cluster: pod create → first packet against kuryr, and Service
create → cluster IP answers on every node as the number of Services grows.

    sudo python bench/k8s_node_services.py [--samples 10] [--sizes 10,100,1000] [--json FILE]

One run against ``netbay up --no-agent`` (SQLite) with the dataplane agent on a thread of
this process (namespaces ``nbb<hex>-…``, swept at the end, also on failure) and both
controllers in-process (issue 27's Speed):

* **pod create → first packet** — ``apply`` of one Pod manifest until its ICMP echo to an
  anchor pod is answered, on a calico cluster (:class:`netbay.k8s.nodecluster.NodeController`:
  a netbay pod on its node's block, plugged by the agent) and, as the same-run baseline,
  on a kuryr cluster (:class:`netbay.k8s.controller.Controller`: a port and a sandbox),
  the two clusters' samples alternating (and which goes first), so that both see the
  same load on a shared machine; the new pod's namespace is found from what each
  controller made (no API lookup on either timed path). Target: calico ≤ 1.2× kuryr.
* **Service create → answers on every node** — with ``n`` Services already applied (each
  in front of the anchor), ``apply`` of one more, until a TCP connection to its cluster
  IP gets the anchor's reply from a client pod on each minion and from the master's own
  namespace (the ``output`` hook). p50 per ``n`` (the curve), with the controller's pass
  and, within it, the nodes' nftables updates (``nodes_nft_ms``). Target ≤ 100 ms, flat.
* **DaemonSet → all pods answering** — on a calico cluster of ``--daemonset-nodes``
  minions (10), ``apply`` of a DaemonSet until every one of its pods (one per minion)
  answers an ICMP echo from the master's namespace; against, in the same run and
  cluster, one Pod's apply until it answers. Target: ≤ 2 s.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import agent_thread
import harness
from k8s_pods import coe_cluster, kuryr_cluster, ms, pod, serve, tcp_answers
from pod_network import first_answer

from netbay.client import NET, Api
from netbay.dataplane.names import Names
from netbay.k8s.controller import Controller
from netbay.k8s.nodecluster import NodeController
from netbay.k8s.objects import key_of, parse
from netbay.store.db import Store

PREFIX = f"nbb{secrets.token_hex(3)}-"


def node_pod(name: str, node: str, labels: str = "{}") -> str:
    return (f"apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: bench, labels: {labels}}}\n"
            f"spec: {{nodeName: {node}, containers: [{{name: c, image: busybox}}]}}\n")


def services(first: int, count: int) -> str:
    return "---\n".join(f"apiVersion: v1\nkind: Service\nmetadata: {{name: s{i}, namespace: bench}}\n"
                        "spec: {selector: {role: anchor}, ports: [{port: 80, targetPort: 8080}]}\n"
                        for i in range(first, first + count))


def daemonset_manifest(name: str) -> str:
    return (f"apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {{name: {name}, namespace: bench}}\n"
            f"spec:\n  selector: {{matchLabels: {{app: {name}}}}}\n  template:\n"
            f"    metadata: {{labels: {{app: {name}}}}}\n    spec: {{containers: [{{name: c, image: busybox}}]}}\n")


def daemonset(api: Api, store: Store, srv: Any, names: Names, nodes: int, samples: int) -> dict[str, Any]:
    """DaemonSet apply → every pod answers from the master; one Pod's apply → it answers."""
    project = api.call("GET", "/identity/v3/projects", name="admin")["projects"][0]["id"]
    api.call("PUT", f"{NET}/quotas/{project}", {"quota": {k: -1 for k in (   # a third cluster's groups and ports
        "security_group", "security_group_rule", "network", "subnet", "port")}})
    ctrl = NodeController(api, store, coe_cluster(srv, "dsbench", "calico", nodes), names)
    master = names.sandbox(next(n for n in ctrl.refs.nodes if n["role"] == "master")["sandbox_id"])
    minions = [n["name"] for n in ctrl.refs.nodes if n["role"] == "minion"]

    def answering(prefix: str) -> None:
        pods = [p for p in api.call("GET", "/netbay/v1/pods", cluster_id=ctrl.refs.cluster_id)["pods"]
                if p["labels"].get("netbay-k8s", "").startswith(prefix)]
        with ThreadPoolExecutor(max_workers=len(pods)) as pool:
            list(pool.map(lambda p: first_answer(master, p["address"], timeout=10), pods))
    all_s, one_s = [], []
    try:
        for i in range(samples):
            t0 = time.monotonic()
            ctrl.apply(parse(node_pod(f"one{i}", minions[i % len(minions)])))
            answering(f"bench/one{i}")
            one_s.append(time.monotonic() - t0)
            t0 = time.monotonic()
            ctrl.apply(parse(daemonset_manifest(f"ds{i}")))
            answering(f"bench/ds{i}-")
            all_s.append(time.monotonic() - t0)
            ctrl.delete([key_of(b) for b in parse(daemonset_manifest(f"ds{i}"))])
        return {"nodes": len(minions), "all_pods_answering_ms": ms(all_s), "one_pod_answering_ms": ms(one_s)}
    finally:
        ctrl.delete_all()
        ctrl.close()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=10)
    ap.add_argument("--sizes", default="10,100,1000")
    ap.add_argument("--daemonset-nodes", type=int, default=10, help="minions of the DaemonSet's cluster (0: skip)")
    ap.add_argument("--json")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    names = Names(PREFIX)
    out: dict[str, Any] = {"machine": harness.machine(), "load": list(os.getloadavg())}
    stop = threading.Event()
    try:
        with harness.netbay("sqlite") as srv, agent_thread.running(srv, names):
            api = Api(srv.url, srv.token)
            store = Store(f"sqlite:///{srv.data_dir / 'netbay.db'}")

            # kuryr: pod create -> first packet (the baseline)
            kctrl = Controller(api, store, kuryr_cluster(srv), names)
            kctrl.apply(parse(pod("anchor", "{role: anchor}")))
            kanchor = api.call("GET", f"{NET}/ports", name="bench/anchor")["ports"][0]["fixed_ips"][0]["ip_address"]
            kuryr_ms: list[float] = []

            def kuryr_sample(i: int) -> None:
                t0 = time.monotonic()
                kctrl.apply(parse(pod(f"k{i}")))
                assert kctrl.known is not None
                port = kctrl.known.ports[f"bench/k{i}"]   # the controller's own: no lookup on the timed path
                first_answer(kctrl.sandboxes.ns(port["id"]), kanchor, timeout=10)
                kuryr_ms.append(time.monotonic() - t0)

            # calico: the same, through the node controller (samples alternate with kuryr's)
            ctrl = NodeController(api, store, coe_cluster(srv, "calicobench", "calico", 2), names)
            minions = [n for n in ctrl.refs.nodes if n["role"] == "minion"]
            master = next(n for n in ctrl.refs.nodes if n["role"] == "master")
            ctrl.apply(parse("---\n".join([node_pod("anchor", minions[0]["name"], "{role: anchor}"),
                                           *(node_pod(f"client{j}", m["name"]) for j, m in enumerate(minions))])))
            pods = {p["labels"]["netbay-k8s"]: p for p in
                    api.call("GET", "/netbay/v1/pods", cluster_id=ctrl.refs.cluster_id)["pods"]
                    if "netbay-k8s" in p["labels"]}   # (not the cluster resolver's pod)
            anchor = pods["bench/anchor"]
            serve(names.pod(anchor["id"]), 8080, stop)
            clients = [names.pod(pods[f"bench/client{j}"]["id"]) for j in range(len(minions))]
            clients.append(names.sandbox(master["sandbox_id"]))   # the master itself (output hook)
            calico_ms, calico_pass, plugged = [], [], []
            real_await = ctrl._await

            def awaited(*a: Any, **kw: Any) -> None:
                t = time.monotonic()
                try:
                    real_await(*a, **kw)
                finally:
                    plugged.append(time.monotonic() - t)
            ctrl._await = awaited  # type: ignore[method-assign]

            def calico_sample(i: int) -> None:
                t0 = time.monotonic()
                ctrl.apply(parse(node_pod(f"c{i}", minions[i % len(minions)]["name"])))
                calico_pass.append(time.monotonic() - t0)
                made = (ctrl._made or {})[("bench", f"c{i}")]   # the controller's own, as kuryr's above
                first_answer(names.pod(made["id"]), anchor["address"], timeout=10)
                calico_ms.append(time.monotonic() - t0)

            for i in range(args.samples):   # alternating (which goes first too): both see the same machine
                for sample in ((kuryr_sample, calico_sample) if i % 2 == 0 else (calico_sample, kuryr_sample)):
                    sample(i)
            kctrl.delete_all()
            kctrl.close()
            ctrl._await = real_await  # type: ignore[method-assign]
            out["pod_create_first_packet_ms"] = {"calico": ms(calico_ms), "kuryr": ms(kuryr_ms)}
            out["calico_pod_apply_ms"] = {"pass": ms(calico_pass), "waiting for the agent's plug": ms(plugged)}

            # Service create -> cluster IP answers on every node, as Services grow
            curve: dict[str, Any] = {}
            have = 0
            for size in sizes:
                if size > have:
                    t0 = time.monotonic()
                    ctrl.apply(parse(services(have, size - have)))
                    curve.setdefault("bulk_apply_s", {})[str(size)] = round(time.monotonic() - t0, 3)
                    have = size
                took, passes, nft = [], [], []
                real = ctrl.proxy.converge

                def timed(*a: Any, **kw: Any) -> int:
                    t = time.monotonic()
                    try:
                        return real(*a, **kw)
                    finally:
                        nft.append(time.monotonic() - t)
                ctrl.proxy.converge = timed  # type: ignore[method-assign]
                for i in range(args.samples):
                    name = f"new{size}-{i}"
                    t0 = time.monotonic()
                    ctrl.apply(parse(services(0, 1).replace("name: s0", f"name: {name}")))
                    passes.append(time.monotonic() - t0)
                    vip = ctrl.vips[("bench", name)]
                    for ns in clients:
                        tcp_answers(ns, vip, 80)
                    took.append(time.monotonic() - t0)
                ctrl.proxy.converge = real  # type: ignore[method-assign]
                curve[str(size)] = {"answers_every_node_ms": ms(took), "apply_pass_ms": ms(passes),
                                    "nodes_nft_ms": ms(nft)}
                have += args.samples
            out["service_create_answers_every_node"] = curve
            ctrl.delete_all()
            if args.daemonset_nodes:
                out["daemonset"] = daemonset(api, store, srv, names, args.daemonset_nodes, min(args.samples, 5))
            out["load_after"] = list(os.getloadavg())
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
