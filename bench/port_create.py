"""Port create through the HTTP API: sequential, closed loop and open loop.

    python bench/port_create.py --db sqlite,postgresql --repeat 3

For each database a fresh ``netbay up`` runs in a subprocess; each repeat makes
a fresh network with a /16 subnet and measures, through one client with a pool
of ``--clients`` keep-alive connections (``--client raw``: bench/rawhttp.py,
prebuilt requests, ~0.1 ms CPU each; ``--client httpx``: one
``httpx.AsyncClient``, 1.5-6 ms CPU each, as before):

* a baseline: an authenticated ``GET /networks?limit=1`` (token check, one
  indexed read, JSON) - the floor of this HTTP stack on this machine;
* (a) sequential: one request at a time, p50/p99;
* (b) closed loop: ``--clients`` workers each sending the next request as soon
  as the previous one returned; throughput and p50/p99;
* (c) open loop: requests started at a fixed offered rate whatever the
  responses do, on up to ``--clients`` connections; latency counts from the
  *intended* start, so queueing in the client is not hidden.

By Little's law a closed loop of 50 clients has latency = 50 / throughput, so
"p50 <= 5 ms at 50 concurrent clients" can only hold at an offered load the
server sustains; (c) measures exactly that.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import urlsplit

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness
import rawhttp

# One request of a phase: sends it and returns the answer (status, body).
Request = Callable[[], Awaitable[rawhttp.Answer]]
FAILURES = (httpx.HTTPError, OSError)  # ConnectionError is an OSError


class Meter:
    """CPU seconds used by server and client during one phase."""

    def __init__(self, server_pid: int) -> None:
        self.pid = server_pid

    def __enter__(self) -> Meter:
        self.s0, self.c0, self.t0 = harness.proc_cpu_seconds(self.pid), time.process_time(), time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server = harness.proc_cpu_seconds(self.pid) - self.s0
        self.client = time.process_time() - self.c0
        self.wall = time.perf_counter() - self.t0


async def _timed(request: Request, expect: int, errors: list[str]) -> float:
    t0 = time.perf_counter()
    try:
        r = await request()
        if r.status != expect:
            errors.append(f"{r.status} {r.text[:200]}")
    except FAILURES as exc:
        errors.append(repr(exc))
    return time.perf_counter() - t0


async def sequential(request: Request, n: int, expect: int) -> dict:
    errors: list[str] = []
    lat = [await _timed(request, expect, errors) for _ in range(n)]
    return {**harness.summary(lat), "errors": len(errors), "first_error": errors[:1]}


async def closed_loop(request: Request, n: int, workers: int, expect: int) -> dict:
    errors: list[str] = []
    lat: list[float] = []
    remaining = n

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            lat.append(await _timed(request, expect, errors))

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(workers)))
    wall = time.perf_counter() - t0
    return {**harness.summary(lat), "rate": len(lat) / wall, "errors": len(errors), "first_error": errors[:1]}


async def open_loop(request: Request, rate: float, seconds: float, expect: int) -> dict:
    """Start a request every 1/rate s; latency from the intended start time.

    Times come from ``time.perf_counter``: uvloop's ``loop.time()`` has 1 ms steps.
    """
    now = time.perf_counter
    errors: list[str] = []
    lat: list[float] = []
    in_flight = peak = 0

    async def one(intended: float) -> None:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        try:
            r = await request()
            if r.status != expect:
                errors.append(f"{r.status} {r.text[:200]}")
        except FAILURES as exc:
            errors.append(repr(exc))
        finally:
            in_flight -= 1
        lat.append(now() - intended)

    count = int(rate * seconds)
    start = now() + 0.05
    tasks: dict[asyncio.Task, float] = {}
    for i in range(count):
        intended = start + i / rate
        delay = intended - now()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks[asyncio.create_task(one(intended))] = intended
    _, pending = await asyncio.wait(tasks, timeout=60)
    wall = now() - start
    answered = len(lat)
    for task in pending:  # unanswered 60 s after the last send: counted as errors, latency so far
        task.cancel()
        lat.append(now() - tasks[task])
    unanswered = [f"{len(pending)} requests unanswered 60 s after the last send"] if pending else []
    return {**harness.summary(lat), "offered": rate, "rate": answered / wall, "errors": len(errors) + len(pending),
            "peak_in_flight": peak, "first_error": (errors + unanswered)[:1]}


@asynccontextmanager
async def requests(kind: str, srv: harness.Server, token: str, net: str,
                   clients: int) -> AsyncIterator[tuple[Request, Request]]:
    """The baseline GET and the port create, sent through a pool of ``clients``
    keep-alive connections of the chosen client (the same pool for both)."""
    body = {"port": {"network_id": net}}
    if kind == "raw":
        url = urlsplit(srv.network)
        host = f"{url.hostname}:{url.port}"
        headers = {"X-Auth-Token": token, "Accept": "application/json"}
        get = rawhttp.request_bytes("GET", host, f"{url.path}/networks?limit=1", headers)
        post = rawhttp.request_bytes("POST", host, f"{url.path}/ports",
                                     {**headers, "Content-Type": "application/json"}, json.dumps(body).encode())
        pool = rawhttp.Pool(url.hostname or "127.0.0.1", url.port or 80, clients)
        try:
            yield (lambda: pool.send(get)), (lambda: pool.send(post))
        finally:
            pool.close()
        return
    # Idle connections are dropped by the client before uvicorn's 5 s keep-alive timeout closes
    # them: otherwise a request can race the server's close and fail without an answer.
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients, keepalive_expiry=2.0)
    async with httpx.AsyncClient(base_url=srv.network, headers={"X-Auth-Token": token}, limits=limits,
                                 timeout=60) as client:

        async def answer(pending: Awaitable[httpx.Response]) -> rawhttp.Answer:
            r = await pending
            return rawhttp.Answer(r.status_code, r.content)

        yield (lambda: answer(client.get("/networks", params={"limit": 1})),
               lambda: answer(client.post("/ports", json=body)))


async def run_repeat(srv: harness.Server, token: str, rep: int, args: argparse.Namespace) -> list[dict]:
    """One repeat: a fresh network, then every phase; returns result rows."""
    with httpx.Client(base_url=srv.network, headers={"X-Auth-Token": token}, timeout=60) as sync:
        net, _ = harness.make_network(sync, f"bench-create-{rep}", f"10.{100 + rep}.0.0/16")
        _set_port_quota(sync, args.port_quota)
    rows: list[dict] = []
    async with requests(args.client, srv, token, net, args.clients) as (baseline, create):
        # Warm up: open every pooled connection, touch both code paths.
        await closed_loop(baseline, args.clients * 2, args.clients, 200)
        await closed_loop(create, args.clients, args.clients, 201)

        phases: list[tuple[str, str, Callable[[], Awaitable[dict]]]] = []
        for label, req, expect in (("GET networks?limit=1 (baseline)", baseline, 200),
                                   ("POST port", create, 201)):
            phases.append((label, "(a) sequential, 1 client",
                           lambda req=req, expect=expect: sequential(req, args.sequential, expect)))
            phases.append((label, f"(b) closed loop, {args.clients} clients",
                           lambda req=req, expect=expect: closed_loop(req, args.closed, args.clients, expect)))
            for rate in args.rates:
                phases.append((label, f"(c) open loop {rate:g}/s, ≤{args.clients} conns",
                               lambda req=req, expect=expect, rate=rate:
                               open_loop(req, rate, args.open_seconds, expect)))
        for label, mode, fn in phases:
            load = os.getloadavg()[0]
            with Meter(srv.proc.pid) as m:
                result = await fn()
            result.update(op=label, mode=mode, repeat=rep, load=load,
                          server_cpu_ms=1000 * m.server / max(result["n"], 1),
                          client_cpu_ms=1000 * m.client / max(result["n"], 1))
            rows.append(result)
            print(f"  [{rep}] {label:34} {mode:32} p50={result['p50']:7.2f} ms p99={result['p99']:7.2f} ms "
                  f"rate={result.get('rate', float('nan')):7.1f}/s errors={result['errors']} "
                  f"srv_cpu={result['server_cpu_ms']:.2f} cli_cpu={result['client_cpu_ms']:.2f} ms/req "
                  f"load={load:.2f}", flush=True)
            if result["first_error"]:
                print(f"      first error: {result['first_error'][0]}", flush=True)
    return rows


def _set_port_quota(client: httpx.Client, limit: int) -> None:
    """The admin project's port limit: Neutron's default (500) would stop a run of
    thousands of creates. A server without the quotas API (an older baseline) is left as is."""
    mine = client.get("/quotas/tenant")
    if mine.status_code == 404:
        return
    project = mine.json()["tenant"]["tenant_id"]
    client.put(f"/quotas/{project}", json={"quota": {"port": limit}}).raise_for_status()


def aggregate(rows: list[dict]) -> list[dict]:
    """Median over repeats of each (op, mode)."""
    out: dict[tuple[str, str], list[dict]] = {}
    for row in rows:
        out.setdefault((row["op"], row["mode"]), []).append(row)
    result = []
    for (op, mode), runs in out.items():
        agg = {"op": op, "mode": mode, "runs": len(runs), "n": runs[0]["n"],
               "errors": sum(r["errors"] for r in runs)}
        for key in ("p50", "p99", "rate", "server_cpu_ms", "client_cpu_ms", "peak_in_flight"):
            if key in runs[0]:
                agg[key] = harness.median_of(runs, key)
                agg[key + "_all"] = [r[key] for r in runs]
        result.append(agg)
    return result


def table(agg: list[dict]) -> str:
    rows = []
    for a in agg:
        rows.append([a["op"], a["mode"], str(a["n"]), harness.fmt(a["p50"], 2), harness.fmt(a["p99"], 2),
                     harness.fmt(a.get("rate", float("nan"))), harness.fmt(a["server_cpu_ms"], 2),
                     harness.fmt(a["client_cpu_ms"], 2), str(a["errors"]),
                     " / ".join(harness.fmt(v, 2) for v in a["p50_all"])])
    return harness.markdown_table(
        ["operation", "mode", "n/run", "p50 ms", "p99 ms", "req/s", "server CPU ms/req", "client CPU ms/req",
         "errors", "p50 per run"], rows)


CLIENTS = {
    "raw": "bench/rawhttp.py on uvloop: prebuilt HTTP/1.1 requests, httptools parser, keep-alive pool",
    "httpx": "httpx.AsyncClient on asyncio, keep-alive pool",
}


def run_loop(client: str) -> Callable[..., list[dict]]:
    """The lean client runs on uvloop (less CPU per request); httpx on asyncio as before."""
    if client == "raw":
        import uvloop

        return uvloop.run
    return asyncio.run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", default="sqlite,postgresql")
    parser.add_argument("--pg-socket", choices=["tcp", "unix"], default="tcp",
                        help="the server reaches PostgreSQL over TCP loopback or its Unix socket")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--client", choices=["raw", "httpx"], default="raw",
                        help="load generator: bench/rawhttp.py (lean) or httpx.AsyncClient")
    parser.add_argument("--sequential", type=int, default=300, help="requests in (a)")
    parser.add_argument("--closed", type=int, default=2000, help="requests in (b)")
    parser.add_argument("--rates", default="25,100,200", help="offered rates of (c), per second")
    parser.add_argument("--open-seconds", type=float, default=8.0, help="duration of each (c) run")
    parser.add_argument("--pg-fsync", choices=["on", "off"], default="on")
    parser.add_argument("--json", type=Path, help="write raw and aggregated results here")
    parser.add_argument("--port-quota", type=int, default=-1,
                        help="the admin project's port quota during the run (-1: unlimited; a limit "
                             "makes every create count the project's ports, capped at limit + 1)")
    args = parser.parse_args()
    args.rates = [float(r) for r in args.rates.split(",") if r]
    if args.closed > 20_000 or args.sequential > 5_000 or args.open_seconds > 60 or args.repeat > 10:
        raise SystemExit("refusing unbounded runs: --closed ≤ 20000, --sequential ≤ 5000, "
                         "--open-seconds ≤ 60, --repeat ≤ 10")

    report: dict = {"machine": harness.machine(), "args": {k: v for k, v in vars(args).items() if k != "json"},
                    "databases": {}}
    report["client"] = CLIENTS[args.client]
    print(f"# port create — {report['machine']}\n# client: {report['client']}\n", flush=True)
    for db in [d for d in args.db.split(",") if d]:
        with harness.netbay(db, pg_fsync=args.pg_fsync == "on", pg_socket=args.pg_socket) as srv:
            print(f"## {db}: {srv.database}", flush=True)
            token = srv.token()
            load_before = os.getloadavg()
            started = time.time()
            rows: list[dict] = []
            for rep in range(args.repeat):
                rows.extend(run_loop(args.client)(run_repeat(srv, token, rep, args)))
            agg = aggregate(rows)
            report["databases"][db] = {"database": srv.database, "load_before": load_before,
                                       "load_after": os.getloadavg(), "seconds": time.time() - started,
                                       "rows": rows, "aggregate": agg}
            print(f"\n### {db} — median of {args.repeat} runs ({srv.database})\n")
            print(table(agg), "\n", flush=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, default=str))
    _verdict(report)


def _verdict(report: dict) -> None:
    """The issue's targets against the medians, per database."""
    for db, data in report["databases"].items():
        agg = {(a["op"], a["mode"]): a for a in data["aggregate"]}
        creates = {mode: a for (op, mode), a in agg.items() if op == "POST port"}
        closed = next(a for mode, a in creates.items() if mode.startswith("(b)"))
        opens = [a for mode, a in creates.items() if mode.startswith("(c)")]
        print(f"{db}: closed loop {closed['rate']:.0f} ports/s (target ≥ 200: "
              f"{'met' if closed['rate'] >= 200 else 'MISSED'}), closed-loop p50 {closed['p50']:.1f} ms / "
              f"p99 {closed['p99']:.1f} ms")
        for a in opens:
            ok = a["p50"] <= 5 and a["p99"] <= 50
            print(f"  {a['mode']}: p50 {a['p50']:.2f} ms, p99 {a['p99']:.2f} ms "
                  f"(target p50 ≤ 5, p99 ≤ 50: {'met' if ok else 'MISSED'})")


if __name__ == "__main__":
    main()
