"""Kubernetes objects from an API server (the watch source) on a kuryr cluster.

    sudo python bench/k8s_watch.py [--samples 20] [--pods 100] [--json /tmp/k8s_watch.json]

Set-up as ``bench/k8s_pods.py`` (``netbay up --no-agent`` on SQLite, the agent on a
thread, namespaces ``nbb<hex>-…`` swept at the end, a kuryr cluster of 1 master + 1
minion, the controller in-process), fed by ``netbay.k8s.watch.WatchSource`` through
lightkube from a stand-in for a Kubernetes API server (``tests/k8s_standin.py``, on
127.0.0.1: no API server can run here). Measured:

* **pod created in the API server → first packet** — the stand-in records the Pod
  (ADDED event on the open watch) until the new pod's ICMP echo to an anchor pod is
  answered; and **→ annotated** (the merge patch carrying its port arrived). Same-run
  baseline: ``apply`` of the same Pod manifest straight into the controller → first packet.
* **burst** — ``--pods`` Pods created in the API server at once, until every pod has
  answered the anchor (the source batches the events into few passes); same-run
  baseline: as many Pods applied straight into the controller.
* **re-list** — while the watches are cut, one pod created and the history compacted:
  from reconnection (410 Gone) to the re-list's last pass done, every pod kept.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT.parent / "tests"))
import agent_thread  # noqa: E402
import harness  # noqa: E402
from k8s_pods import kuryr_cluster, ms  # noqa: E402
from k8s_standin import StandinApiServer  # noqa: E402  (tests/: the stand-in for an API server)
from pod_network import first_answer  # noqa: E402

from netbay.client import NET, Api  # noqa: E402
from netbay.dataplane.names import Names  # noqa: E402
from netbay.k8s import portinfo  # noqa: E402
from netbay.k8s.controller import Controller  # noqa: E402
from netbay.k8s.objects import Key, parse  # noqa: E402
from netbay.k8s.watch import Limits, WatchSource  # noqa: E402
from netbay.store.db import Store  # noqa: E402

PREFIX = f"nbb{secrets.token_hex(3)}-"


def pod(name: str, ns: str = "bench", labels: str = "{}") -> dict:
    return parse(f"apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {ns}, labels: {labels}}}\n"
                 "spec: {containers: [{name: c, image: busybox}]}\n")[0]


def until(cond: Any, timeout: float, every: float = 0.0005) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(every)
    raise RuntimeError(f"timed out after {timeout} s")


class Running:
    """The watch source on a thread of its own (its event loop)."""

    def __init__(self, standin: StandinApiServer, ctrl: Controller) -> None:
        from lightkube import AsyncClient, KubeConfig

        path = Path(f"/tmp/{PREFIX}kubeconfig")
        path.write_text(standin.kubeconfig())
        self.config = KubeConfig.from_file(path).get()
        path.unlink()
        self.ctrl, self.source, self._client_cls = ctrl, None, AsyncClient
        self.thread = threading.Thread(target=asyncio.run, args=(self._main(),), daemon=True)
        self.thread.start()
        until(lambda: self.source is not None and self.source.ready.is_set(), 60, 0.01)

    async def _main(self) -> None:
        client = self._client_cls(config=self.config)
        self.source = WatchSource(client, Limits(server_timeout=600, backoff_first=0.01, backoff_max=0.2))
        try:
            await self.source.run(self.ctrl)
        finally:
            await client.close()

    def stop(self) -> None:
        self.source.stop()
        self.thread.join(timeout=30)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=20)
    ap.add_argument("--pods", type=int, default=100)
    ap.add_argument("--json")
    args = ap.parse_args()
    names = Names(PREFIX)
    out: dict[str, Any] = {"machine": harness.machine()}
    standin = StandinApiServer().start()
    try:
        with harness.netbay("sqlite") as srv, agent_thread.running(srv, names):
            cid = kuryr_cluster(srv)
            api = Api(srv.url, srv.token)
            store = Store(f"sqlite:///{srv.data_dir / 'netbay.db'}")
            ctrl = Controller(api, store, cid, names)

            def port_of(name: str) -> dict | None:
                found = api.call("GET", f"{NET}/ports", name=f"bench/{name}")["ports"]
                return found[0] if found and found[0].get("device_id") else None

            def ns_of(name: str) -> str:
                port = until(lambda: port_of(name), 10)
                until(lambda: ctrl.sandboxes.plugged(port["id"]), 10)
                return ctrl.sandboxes.ns(port["id"])

            def annotated(name: str) -> bool:
                obj = standin.get("Pod", "bench", name) or {}
                return portinfo.ANNOTATION in ((obj.get("metadata") or {}).get("annotations") or {})

            standin.create(pod("anchor", labels="{role: anchor}"))
            running = Running(standin, ctrl)
            try:
                anchor = until(lambda: port_of("anchor"), 10)
                anchor_ip = anchor["fixed_ips"][0]["ip_address"]
                anchor_ns = ns_of("anchor")

                created, noted, baseline = [], [], []
                for i in range(args.samples):
                    t0 = time.monotonic()
                    standin.create(pod(f"w{i}"))
                    first_answer(ns_of(f"w{i}"), anchor_ip, timeout=10)
                    created.append(time.monotonic() - t0)
                    until(lambda: annotated(f"w{i}"), 10)
                    noted.append(time.monotonic() - t0)
                    t0 = time.monotonic()   # the same pod through the manifest path, no API server
                    ctrl.apply([pod(f"m{i}")])
                    first_answer(ns_of(f"m{i}"), anchor_ip, timeout=10)
                    baseline.append(time.monotonic() - t0)
                    ctrl.delete([Key("Pod", "bench", f"m{i}")])   # not in the API server: a re-list would
                out["watch_pod_first_packet_ms"] = ms(created)
                out["watch_pod_annotated_ms"] = ms(noted)
                out["baseline_apply_pod_first_packet_ms"] = ms(baseline)

                passes = running.source.stats.passes
                t0 = time.monotonic()
                for i in range(args.pods):
                    standin.create(pod(f"b{i}"))
                created_s = time.monotonic() - t0
                for i in range(args.pods):
                    port = until(lambda: port_of(f"b{i}"), 30)
                    first_answer(anchor_ns, port["fixed_ips"][0]["ip_address"], timeout=10)
                out["burst"] = {"pods": args.pods, "create_in_api_s": created_s,
                                "all_answer_s": time.monotonic() - t0,
                                "passes": running.source.stats.passes - passes}
                until(lambda: all(annotated(f"b{i}") for i in range(args.pods)), 30, 0.01)
                out["burst"]["all_annotated_s"] = time.monotonic() - t0

                # Same-run baseline: as many pods applied straight into the controller.
                t0 = time.monotonic()
                ctrl.apply([pod(f"c{i}") for i in range(args.pods)])
                for i in range(args.pods):
                    port = until(lambda: port_of(f"c{i}"), 30)
                    first_answer(anchor_ns, port["fixed_ips"][0]["ip_address"], timeout=10)
                out["baseline_apply_burst_s"] = time.monotonic() - t0
                ctrl.delete([Key("Pod", "bench", f"c{i}") for i in range(args.pods)])

                relists, passes = running.source.stats.relists, running.source.stats.passes
                kinds = len(running.source.kinds)
                standin.partition()
                standin.create(pod("late"))   # one change the watches miss, then the history goes
                standin.compact()
                t0 = time.monotonic()
                standin.heal()
                until(lambda: running.source.stats.relists >= relists + kinds
                      and running.source.stats.last_pass > t0 and running.source._events.empty(), 30, 0.001)
                time.sleep(1.0)   # every kind's list handed over: the last pass is the one that counts
                pods = len(api.call("GET", f"{NET}/ports", device_owner="compute:kuryr")["ports"])
                out["relist"] = {"objects": len(standin.objects), "pods_kept": pods,
                                 "relist_and_pass_s": running.source.stats.last_pass - t0,
                                 "passes": running.source.stats.passes - passes}
            finally:
                running.stop()
            ctrl.delete_all()
            ctrl.close()
            api.close()
            store.dispose()
    finally:
        standin.stop()
        agent_thread.sweep(PREFIX)
    print(json.dumps(out, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
