"""Docker-runtime pods on a kuryr cluster, against sandbox pods in the same run.

    sudo python bench/k8s_docker_pods.py [--samples 15] [--pods 20] [--json /tmp/k8s_docker_pods.json]

Against ``netbay up --no-agent`` (SQLite) with the dataplane agent on a thread of this
process (namespaces ``nbb<hex>-…``, swept at the end, also on failure), the controller
in-process, a kuryr cluster of 1 master + 1 minion, and a private dockerd
(:mod:`netbay.runtime.dockerd`: off the host's network, ``vfs`` storage, busybox
imported), all in one run:

* **Docker pod create → first packet** — ``apply`` of one Pod annotated
  ``netbay.io/runtime: docker`` (the controller's whole pass: desired state, port made
  bound, sandbox container started, its namespace named and plugged, app container
  started), until the new pod's ICMP echo to an anchor pod is answered.
* **baselines, same run** — the same with a sandbox pod (``netbay.io/runtime:
  sandbox``), and Docker's own floor: create + start of the two containers (sandbox
  with network ``none``, app with ``--net=container:``) with no netbay in the way.
* **N Docker pods at once** — one Deployment of ``--pods`` replicas, until each answers
  the anchor's ICMP.
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import agent_thread
import harness
from k8s_pods import kuryr_cluster, ms
from pod_network import first_answer

from netbay.client import NET, Api
from netbay.dataplane.names import Names
from netbay.k8s.controller import Controller
from netbay.k8s.objects import parse
from netbay.runtime import dockerd
from netbay.runtime.docker import SANDBOX_COMMAND
from netbay.store.db import Store

PREFIX = f"nbb{secrets.token_hex(3)}-"


def pod(name: str, runtime: str) -> str:
    return (f"apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: bench, "
            f"annotations: {{netbay.io/runtime: {runtime}}}}}\n"
            f"spec: {{containers: [{{name: c, image: \"{dockerd.IMAGE}\", command: [sleep], args: [\"600\"]}}]}}\n")


def docker_floor(d: dockerd.Dockerd) -> float:
    """Create + start a sandbox (network none) and an app joined to it; then remove both."""
    api = d.client.api
    t0 = time.monotonic()
    sb = api.create_container(dockerd.IMAGE, SANDBOX_COMMAND, host_config=api.create_host_config(network_mode="none"))
    api.start(sb["Id"])
    app = api.create_container(dockerd.IMAGE, ["sleep", "600"],
                               host_config=api.create_host_config(network_mode=f"container:{sb['Id']}"))
    api.start(app["Id"])
    spent = time.monotonic() - t0
    api.remove_container(app["Id"], force=True)
    api.remove_container(sb["Id"], force=True)
    return spent


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=15)
    ap.add_argument("--pods", type=int, default=20)
    ap.add_argument("--json")
    args = ap.parse_args()
    names = Names(PREFIX)
    out: dict[str, Any] = {"machine": harness.machine()}
    d = dockerd.start()
    try:
        with harness.netbay("sqlite") as srv, agent_thread.running(srv, names):
            cid = kuryr_cluster(srv)
            api = Api(srv.url, srv.token)
            store = Store(f"sqlite:///{srv.data_dir / 'netbay.db'}")
            ctrl = Controller(api, store, cid, names)
            ctrl.dockerpods.use(d.client)

            def ns_of(name: str) -> str:
                return ctrl.sandboxes.ns(api.call("GET", f"{NET}/ports", name=f"bench/{name}")["ports"][0]["id"])

            def ip_of(name: str) -> str:
                return api.call("GET", f"{NET}/ports", name=f"bench/{name}")["ports"][0]["fixed_ips"][0]["ip_address"]

            ctrl.apply(parse(pod("anchor", "sandbox")))
            anchor_ip, anchor_ns = ip_of("anchor"), ns_of("anchor")
            docs = [pod("anchor", "sandbox")]
            timings: dict[str, list[float]] = {"docker": [], "sandbox": [], "docker_floor": []}
            for i in range(args.samples):   # alternated, so both see the same load
                for runtime in ("docker", "sandbox"):
                    name = f"{runtime[0]}{i}"
                    docs.append(pod(name, runtime))
                    t0 = time.monotonic()
                    ctrl.apply(parse("---\n".join(docs)))
                    first_answer(ns_of(name), anchor_ip, timeout=10)
                    timings[runtime].append(time.monotonic() - t0)
                timings["docker_floor"].append(docker_floor(d))
            out["docker_pod_create_first_packet_ms"] = ms(timings["docker"])
            out["sandbox_pod_create_first_packet_ms"] = ms(timings["sandbox"])
            out["docker_floor_two_containers_ms"] = ms(timings["docker_floor"])

            dep = ("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: many, namespace: bench}\n"
                   f"spec:\n  replicas: {args.pods}\n  selector: {{matchLabels: {{app: many}}}}\n"
                   "  template:\n    metadata: {labels: {app: many}, annotations: {netbay.io/runtime: docker}}\n"
                   f"    spec: {{containers: [{{name: c, image: \"{dockerd.IMAGE}\", command: [sleep, \"600\"]}}]}}\n")
            t0 = time.monotonic()
            ctrl.apply(parse("---\n".join([*docs, dep])))
            applied = time.monotonic() - t0
            for j in range(args.pods):
                first_answer(anchor_ns, ip_of(f"many-{j}"), timeout=10)
            out["docker_pods_at_once_s"] = {"pods": args.pods, "apply_s": round(applied, 3),
                                            "all_answer_s": round(time.monotonic() - t0, 3),
                                            "per_pod_ms": round((time.monotonic() - t0) / args.pods * 1000, 1)}
            ctrl.delete_all()
            left = d.client.api.containers(all=True, filters={"label": "netbay.k8s.cluster"})
            out["containers_left_after_delete"] = len(left)
            ctrl.close()
            api.close()
            store.dispose()
    finally:
        agent_thread.sweep(PREFIX)
        dockerd.stop(d)
    out["docker_vs_sandbox_p50"] = round(out["docker_pod_create_first_packet_ms"]["p50"]
                                         / out["sandbox_pod_create_first_packet_ms"]["p50"], 2)
    print(json.dumps(out, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
