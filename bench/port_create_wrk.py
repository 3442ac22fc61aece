"""Port create throughput with a load generator that costs (almost) no CPU: wrk.

    apt-get install wrk
    python bench/port_create_wrk.py --db sqlite,postgresql --connections 50 --seconds 10 --repeat 3

``bench/port_create.py`` drives the server with Python (httpx), which on this
2-core machine takes 1.5–7 ms of CPU per request away from the server. wrk (C,
epoll) needs a small fraction of that, so this closed loop shows what the server
itself sustains. Each repeat, against a fresh ``netbay up --no-agent``
(bench/harness.py) and a fresh network with a /16 subnet: the baseline
``GET /networks?limit=1`` and then ``POST /ports``, each for ``--seconds`` over
``--connections`` keep-alive connections. Reported: requests/s, wrk's latency
p50/p99 (closed loop: latency = connections / throughput), non-2xx answers, and
the server's and PostgreSQL's CPU per request (from /proc).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness

LUA = """wrk.method = "{method}"
wrk.body = '{body}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["X-Auth-Token"] = "{token}"
done = function(summary, latency, requests)
  io.write(string.format("JSON {{\\"n\\": %d, \\"errors\\": %d, \\"non2xx\\": %d, \\"p50\\": %.3f, \\"p99\\": %.3f}}\\n",
    summary.requests, summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    summary.errors.status, latency:percentile(50) / 1000, latency:percentile(99) / 1000))
end
"""


def cpu_seconds(match) -> float:
    total = 0
    for d in glob.glob("/proc/[0-9]*"):
        try:
            stat = open(d + "/stat").read()  # noqa: SIM115
        except OSError:
            continue
        if match(d, stat):
            fields = stat.rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def wrk(url: str, method: str, body: str, token: str, connections: int, seconds: int, pid: int) -> dict:
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(LUA.format(method=method, body=body, token=token))
    server = lambda d, st: d == f"/proc/{pid}"  # noqa: E731
    postgres = lambda d, st: "(postgres)" in st  # noqa: E731
    s0, p0 = cpu_seconds(server), cpu_seconds(postgres)
    try:
        out = subprocess.run(["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "-s", f.name, url],
                             capture_output=True, text=True, timeout=seconds + 60)
    finally:
        os.unlink(f.name)
    s1, p1 = cpu_seconds(server), cpu_seconds(postgres)
    if "JSON " not in out.stdout:
        raise RuntimeError(f"wrk failed: {out.stdout}{out.stderr}")
    res = json.loads(out.stdout.split("JSON ", 1)[1].splitlines()[0])
    n = max(res["n"], 1)
    return {**res, "rate": res["n"] / seconds, "server_cpu_ms": 1e3 * (s1 - s0) / n,
            "postgres_cpu_ms": 1e3 * (p1 - p0) / n}


def run(db: str, args: argparse.Namespace) -> list[dict]:
    rows = []
    for rep in range(args.repeat):
        with harness.netbay(db, pg_socket=args.pg_socket) as srv:
            token = srv.token()
            with httpx.Client(base_url=srv.network, headers={"X-Auth-Token": token}, timeout=30) as c:
                net, _ = harness.make_network(c, f"wrk{rep}", "10.241.0.0/16")
            load = os.getloadavg()[0]
            get = wrk(f"{srv.network}/networks?limit=1", "GET", "", token, args.connections, args.seconds,
                      srv.proc.pid)
            post = wrk(f"{srv.network}/ports", "POST", json.dumps({"port": {"network_id": net}}), token,
                       args.connections, args.seconds, srv.proc.pid)
            rows.append({"db": db, "database": srv.database, "repeat": rep, "load": round(load, 2),
                         "get": get, "post": post})
            print(f"  [{db} {rep}] GET {get['rate']:.0f}/s  POST {post['rate']:.0f}/s "
                  f"(p50 {post['p50']:.0f} ms, p99 {post['p99']:.0f} ms, non-2xx {post['non2xx']}, "
                  f"server {post['server_cpu_ms']:.2f} ms CPU/req, postgres {post['postgres_cpu_ms']:.2f}); "
                  f"load {load:.1f}", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", default="sqlite,postgresql")
    parser.add_argument("--pg-socket", choices=["tcp", "unix"], default="tcp",
                        help="the server reaches PostgreSQL over TCP loopback or its Unix socket")
    parser.add_argument("--connections", type=int, default=50)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed (apt-get install wrk)")
    if not (1 <= args.connections <= 500 and 1 <= args.seconds <= 120 and 1 <= args.repeat <= 10):
        raise SystemExit("--connections 1..500, --seconds 1..120, --repeat 1..10")
    print(f"# port create with wrk — {harness.machine()}")
    rows = []
    for db in args.db.split(","):
        db_rows = run(db, args)
        rows += db_rows
        med = lambda path: statistics.median(r[path[0]][path[1]] for r in db_rows)  # noqa: E731
        print(f"{db}: GET {med(('get', 'rate')):.0f}/s; POST {med(('post', 'rate')):.0f}/s, p50 "
              f"{med(('post', 'p50')):.0f} ms, p99 {med(('post', 'p99')):.0f} ms, server "
              f"{med(('post', 'server_cpu_ms')):.2f} ms CPU/create (medians of {len(db_rows)})")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
