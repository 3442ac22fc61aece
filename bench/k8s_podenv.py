"""What pods' env costs the controller (issue 12, Docker-runtime pods' env): in-process, no root.

    python bench/k8s_podenv.py [--replicas 1000] [--rounds 7] [--json /tmp/k8s_podenv.json]

* **desired state per pass** — ``objects.desired`` (every controller pass reads the whole
  desired state through it) of one Deployment of ``--replicas`` replicas whose template
  has 15 chained ``$(VAR)`` values, a ``fieldRef``, a ``configMapKeyRef``, a
  ``secretKeyRef`` and an ``envFrom``, plus its ConfigMap and Secret. Same-run baseline:
  the same Deployment without env. Best of ``--rounds``.
* **resolution per container** — ``podenv.launch`` of that template (what a Docker pod's
  app creation adds): median over ``--replicas`` calls.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

from netbay.k8s.objects import desired, parse
from netbay.k8s.podenv import PodFacts, launch

ENV = "\n".join([f"        - {{name: V{i}, value: 'x$(V{i - 1})'}}" for i in range(1, 16)] + [
    "        - {name: IP, valueFrom: {fieldRef: {fieldPath: status.podIP}}}",
    "        - {name: G, valueFrom: {configMapKeyRef: {name: cfg, key: g}}}",
    "        - {name: P, valueFrom: {secretKeyRef: {name: s, key: p}}}"])
SOURCES = """---
apiVersion: v1
kind: ConfigMap
metadata: {name: cfg, namespace: n}
data: {g: hi, a: b, c: d}
---
apiVersion: v1
kind: Secret
metadata: {name: s, namespace: n}
data: {p: aHVudGVyMg==}
"""


def deployment(replicas: int, env: bool) -> str:
    extra = f"        env:\n{ENV}\n        envFrom: [{{configMapRef: {{name: cfg}}, prefix: C_}}]\n" if env else ""
    return (f"apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: d, namespace: n}}\nspec:\n"
            f"  replicas: {replicas}\n  selector: {{matchLabels: {{app: d}}}}\n  template:\n"
            f"    metadata: {{labels: {{app: d}}}}\n    spec:\n      containers:\n      - name: c\n"
            f"        image: busybox\n{extra}") + SOURCES


def best_ms(fn, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times) * 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--replicas", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--json")
    args = ap.parse_args()
    plain, with_env = parse(deployment(args.replicas, False)), parse(deployment(args.replicas, True))
    out = {"replicas": args.replicas, "load": os.getloadavg()[0],
           "desired_plain_ms": best_ms(lambda: desired(plain), args.rounds),
           "desired_env_ms": best_ms(lambda: desired(with_env), args.rounds)}
    want = desired(with_env)
    c = want.pods[("n", "d-0")].container
    facts = PodFacts("d-0", "n", "uid", pod_ips=("10.0.0.1",))
    service_env = {"S_SERVICE_HOST": "10.254.0.20", "S_SERVICE_PORT": "80"}
    per = []
    for _ in range(args.replicas):
        t0 = time.perf_counter()
        launch(c.env, c.env_from, c.command, c.args, facts, want.configmaps, want.secrets, service_env)
        per.append(time.perf_counter() - t0)
    out["launch_p50_us"] = statistics.median(per) * 1e6
    print(f"desired() of {args.replicas} replicas: plain {out['desired_plain_ms']:.1f} ms, "
          f"with env {out['desired_env_ms']:.1f} ms (best of {args.rounds})")
    print(f"launch() per container: p50 {out['launch_p50_us']:.0f} us; load {out['load']:.1f}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
