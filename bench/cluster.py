"""Cluster create, scale and delete on the embedded default, end to end.

    sudo python bench/cluster.py --runs 5 --big 50 --json /tmp/cluster.json

Starts ``netbay up --no-agent`` (bench/harness.py, SQLite) and runs the dataplane
agent in this process with its own namespace prefix ``nbb<hex>-`` (swept at the end),
so every node is a wired namespace and the load balancers really become ACTIVE.
Times, through the container-infra API, from the request until the cluster's status
settles:

* **create** — 1 master + 2 minions, ``master_lb_enabled``, floating IPs (``--runs`` times);
* **create big** — 1 master + ``--big`` minions (same template);
* **scale +10** — the big cluster's ``node_count`` + 10;
* **delete** — of the small clusters and of the big one (until the cluster is gone).

Baseline in the same run: the same client creating one port (``POST /ports``), so a
cluster's time can be read as "so many port creates". Targets (issue 4): create ≤ 2 s;
50 minions ≤ 10 s; scale by +10 ≤ 2 s; delete ≤ 1 s. Anchor: Magnum took 2.5 min for
2 nodes (CERN).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import agent_thread
import harness

from netbay.dataplane.names import Names

PREFIX = f"nbb{secrets.token_hex(3)}-"
TEMPLATE = {"coe": "kubernetes", "network_driver": "flannel", "external_network_id": "public",
            "master_lb_enabled": True, "floating_ip_enabled": True, "labels": {"flannel_backend": "vxlan"}}


def settle(ci: httpx.Client, cid: str, done: tuple[str, ...], timeout: float = 300) -> tuple[float, dict]:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        r = ci.get(f"/clusters/{cid}")
        if r.status_code == 404 and "GONE" in done:
            return time.monotonic() - t0, {"status": "GONE"}
        body = r.json()
        if body.get("status") in done:
            return time.monotonic() - t0, body
        time.sleep(0.01)
    raise RuntimeError(f"cluster {cid} not in {done} after {timeout}s")


def timed(ci: httpx.Client, method: str, path: str, done: tuple[str, ...], **kw) -> tuple[float, dict]:
    t0 = time.monotonic()
    r = ci.request(method, path, **kw)
    if r.status_code not in (202, 204):
        raise RuntimeError(f"{method} {path}: {r.status_code} {r.text}")
    cid = r.json()["uuid"] if r.content else path.rsplit("/", 1)[-1]
    _, body = settle(ci, cid, done)
    if body["status"].endswith("FAILED"):
        raise RuntimeError(f"{method} {path}: {body['status']}: {body.get('status_reason')}")
    return time.monotonic() - t0, {**body, "uuid": cid}


def measure(srv: harness.Server, args: argparse.Namespace) -> dict:
    token = srv.token()
    ci = httpx.Client(base_url=f"{srv.url}/container-infra/v1", headers={"X-Auth-Token": token}, timeout=60)
    net = httpx.Client(base_url=srv.network, headers={"X-Auth-Token": token}, timeout=60)
    network, _ = harness.make_network(net, "baseline", "10.233.0.0/16")
    ports = []
    for _ in range(30):
        t0 = time.monotonic()
        r = net.post("/ports", json={"port": {"network_id": network}})
        ports.append(time.monotonic() - t0)
        assert r.status_code == 201, r.text
    r = ci.post("/clustertemplates", json={"name": "bench", **TEMPLATE})
    assert r.status_code == 201, r.text
    tid = r.json()["uuid"]
    creates, deletes = [], []
    for i in range(args.runs):
        t, body = timed(ci, "POST", "/clusters", ("CREATE_COMPLETE", "CREATE_FAILED"),
                        json={"name": f"small{i}", "cluster_template_id": tid, "node_count": 2})
        creates.append(t)
        t, _ = timed(ci, "DELETE", f"/clusters/{body['uuid']}", ("GONE", "DELETE_FAILED"))
        deletes.append(t)
    t_big, big = timed(ci, "POST", "/clusters", ("CREATE_COMPLETE", "CREATE_FAILED"),
                       json={"name": "big", "cluster_template_id": tid, "node_count": args.big})
    t_scale, _ = timed(ci, "PATCH", f"/clusters/{big['uuid']}", ("UPDATE_COMPLETE", "UPDATE_FAILED"),
                       json=[{"op": "replace", "path": "/node_count", "value": args.big + 10}])
    t_big_delete, _ = timed(ci, "DELETE", f"/clusters/{big['uuid']}", ("GONE", "DELETE_FAILED"))
    ci.close()
    net.close()
    ms = lambda v: round(v * 1e3, 1)  # noqa: E731
    return {
        "baseline_port_create_p50_ms": ms(statistics.median(ports)),
        "create_1m2n_lb_fip_s": {"p50": round(statistics.median(creates), 3), "all": [round(x, 3) for x in creates]},
        "delete_1m2n_s": {"p50": round(statistics.median(deletes), 3), "all": [round(x, 3) for x in deletes]},
        f"create_1m{args.big}n_s": round(t_big, 3),
        "scale_plus_10_s": round(t_scale, 3),
        f"delete_1m{args.big + 10}n_s": round(t_big_delete, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--big", type=int, default=50)
    parser.add_argument("--json")
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("root is needed (the agent wires namespaces)")
    if not (1 <= args.runs <= 50 and 1 <= args.big <= 200):
        raise SystemExit("--runs 1..50, --big 1..200")
    load0 = os.getloadavg()[0]
    result: dict = {"machine": harness.machine(), "prefix": PREFIX}
    try:
        with harness.netbay("sqlite") as srv, agent_thread.running(srv, Names(PREFIX)):
            result.update(measure(srv, args))
    finally:
        agent_thread.sweep(PREFIX)
    result["load_before_after"] = [round(load0, 2), round(os.getloadavg()[0], 2)]
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
