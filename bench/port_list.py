"""Port list with filters on a store of 10,000 ports.

    python bench/port_list.py --db sqlite,postgresql --repeat 3

Setup (timed, reported): three networks with a /16 subnet each; 10,000 ports
made by bulk POST ``{"ports": [...]}`` in chunks of 500 - 4,950 + 4,950 on two
big networks and 100 on a small one - with ``device_id`` cycling over 100
values, so every device owns 100 ports. Then, one client, sequential calls:

* baseline: GET on an empty collection (same token check and JSON path);
* ``?device_id=X`` (100 results, X varies per call);
* ``?network_id=small`` (100 results);
* ``?network_id=big&limit=100`` (a filtered page of a 4,950-port network);
* ``?limit=100`` (an unfiltered page);
* unfiltered, unpaged: all 10,000 (what ``openstack port list`` asks), fewer calls;
* POST one port into the big network's subnet, which holds 4,950 addresses
  (how create cost grows with a subnet's allocations).

The query phase is repeated ``--repeat`` times on the same data; the figures
quoted are the median of the per-run p50/p99.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness

CHUNK = 500


def populate(client: httpx.Client, total: int, devices: int) -> dict:
    big_a, _ = harness.make_network(client, "list-big-a", "10.1.0.0/16")
    big_b, _ = harness.make_network(client, "list-big-b", "10.2.0.0/16")
    small, _ = harness.make_network(client, "list-small", "10.3.0.0/16")
    small_count = min(100, total)
    plan = [small] * small_count
    rest = total - small_count
    plan += [big_a] * (rest // 2) + [big_b] * (rest - rest // 2)
    bodies = [{"network_id": net, "device_id": f"dev-{i % devices:03d}", "name": f"p{i}"}
              for i, net in enumerate(plan)]
    chunk_times = []
    t0 = time.perf_counter()
    for start in range(0, len(bodies), CHUNK):
        c0 = time.perf_counter()
        r = client.post("/ports", json={"ports": bodies[start:start + CHUNK]}, timeout=600)
        if r.status_code != 201:
            raise SystemExit(f"bulk create failed: {r.status_code} {r.text[:500]}")
        chunk_times.append(time.perf_counter() - c0)
        print(f"  bulk chunk {start // CHUNK + 1}/{-(-len(bodies) // CHUNK)}: {chunk_times[-1]:.2f} s",
              flush=True)
    elapsed = time.perf_counter() - t0
    return {"big_a": big_a, "big_b": big_b, "small": small, "setup_s": elapsed,
            "setup_rate": len(bodies) / elapsed, "chunk_s": chunk_times}


def timed(client: httpx.Client, n: int, call: Callable[[int], httpx.Response], expect_count: int | None,
          key: str = "ports", status: int = 200) -> dict:
    lat = []
    sizes = set()
    for i in range(n):
        t0 = time.perf_counter()
        r = call(i)
        lat.append(time.perf_counter() - t0)
        if r.status_code != status:
            raise SystemExit(f"unexpected {r.status_code}: {r.text[:300]}")
        if status == 200:
            sizes.add(len(r.json()[key]))
    if expect_count is not None and sizes != {expect_count}:
        raise SystemExit(f"expected {expect_count} results per call, got {sorted(sizes)}")
    return {**harness.summary(lat), "results": ",".join(map(str, sorted(sizes))) or "—"}


def queries(client: httpx.Client, data: dict, calls: int, devices: int, total: int, empty: str) -> list[dict]:
    per_device = total // devices
    rest = total - min(100, total)
    specs: list[tuple[str, int, Callable[[int], httpx.Response], int | None, str, int]] = [
        (f"GET /{empty} (empty collection, baseline)", calls, lambda i: client.get(f"/{empty}"), 0, empty, 200),
        ("GET /ports?device_id=X", calls,
         lambda i: client.get("/ports", params={"device_id": f"dev-{(i * 37) % devices:03d}"}), per_device,
         "ports", 200),
        ("GET /ports?network_id=small", calls,
         lambda i: client.get("/ports", params={"network_id": data["small"]}), min(100, total), "ports", 200),
        ("GET /ports?network_id=big&limit=100", calls,
         lambda i: client.get("/ports", params={"network_id": data["big_a"], "limit": 100}),
         min(100, rest // 2), "ports", 200),
        ("GET /ports?limit=100 (unfiltered page)", calls,
         lambda i: client.get("/ports", params={"limit": 100}), min(100, total), "ports", 200),
        (f"GET /ports (all {total}, no filter, no limit)", max(3, calls // 10),
         lambda i: client.get("/ports"), None, "ports", 200),
        (f"POST port into a subnet holding ≥ {rest - rest // 2} addresses", calls,
         lambda i: client.post("/ports", json={"port": {"network_id": data["big_b"]}}), None, "port", 201),
    ]
    rows = []
    for label, n, call, expect, key, status in specs:
        row = timed(client, n, call, expect, key, status)
        row["op"] = label
        rows.append(row)
        print(f"  {label:52} n={n:3} p50={row['p50']:8.2f} ms p99={row['p99']:8.2f} ms "
              f"results={row['results']}", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", default="sqlite,postgresql")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--ports", type=int, default=10_000)
    parser.add_argument("--devices", type=int, default=100)
    parser.add_argument("--calls", type=int, default=50, help="calls per query per run")
    parser.add_argument("--pg-fsync", choices=["on", "off"], default="on")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.ports > 50_000 or args.calls > 1000 or args.repeat > 10:
        raise SystemExit("refusing unbounded runs: --ports ≤ 50000, --calls ≤ 1000, --repeat ≤ 10")

    report: dict = {"machine": harness.machine(), "args": {k: v for k, v in vars(args).items() if k != "json"},
                    "databases": {}}
    print(f"# port list — {report['machine']}\n", flush=True)
    for db in [d for d in args.db.split(",") if d]:
        with harness.netbay(db, pg_fsync=args.pg_fsync == "on") as srv:
            print(f"## {db}: {srv.database}", flush=True)
            with httpx.Client(base_url=srv.network, headers={"X-Auth-Token": srv.token()}, timeout=120,
                              limits=httpx.Limits(keepalive_expiry=2.0)) as client:
                empty = next((c for c in ("subnetpools", "floatingips", "routers")
                              if client.get(f"/{c}").status_code == 200 and not client.get(f"/{c}").json()[c]),
                             None)
                if empty is None:
                    raise SystemExit("no empty collection to use as the baseline")
                load_before = os.getloadavg()
                data = populate(client, args.ports, args.devices)
                print(f"  setup: {args.ports} ports in {data['setup_s']:.1f} s "
                      f"({data['setup_rate']:.0f} ports/s by bulk POST of {CHUNK})", flush=True)
                runs = []
                for rep in range(args.repeat):
                    print(f" run {rep + 1}/{args.repeat}", flush=True)
                    runs.append(queries(client, data, args.calls, args.devices, args.ports, empty))
            agg = []
            for i, first in enumerate(runs[0]):
                per_run = [run[i] for run in runs]
                agg.append({"op": first["op"], "n": first["n"], "results": first["results"],
                            "p50": harness.median_of(per_run, "p50"), "p99": harness.median_of(per_run, "p99"),
                            "p50_all": [r["p50"] for r in per_run], "p99_all": [r["p99"] for r in per_run]})
            report["databases"][db] = {"database": srv.database, "load_before": load_before,
                                       "load_after": os.getloadavg(), "setup": data, "runs": runs,
                                       "aggregate": agg}
            print(f"\n### {db} — median of {args.repeat} runs ({srv.database}); setup "
                  f"{data['setup_s']:.1f} s = {data['setup_rate']:.0f} ports/s (bulk)\n")
            print(harness.markdown_table(
                ["query", "calls/run", "results", "p50 ms", "p99 ms", "p50 per run"],
                [[a["op"], str(a["n"]), a["results"], harness.fmt(a["p50"], 2), harness.fmt(a["p99"], 2),
                  " / ".join(harness.fmt(v, 2) for v in a["p50_all"])] for a in agg]), "\n", flush=True)
            filtered = [a for a in agg if "device_id" in a["op"] or "network_id=small" in a["op"]]
            worst = max(a["p50"] for a in filtered)
            print(f"{db}: filtered list of {args.ports} p50 ≤ {worst:.1f} ms (target ≤ 100 ms: "
                  f"{'met' if worst <= 100 else 'MISSED'})\n", flush=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, default=str))


if __name__ == "__main__":
    main()
