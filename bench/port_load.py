"""Background load: port creates offered at a fixed rate, from a process of its own.

    python bench/port_load.py --network-url URL/network/v2.0 --token T --network NET \
        [--rate 200] [--seconds 120] [--connections 32] [--json out.json]

An open loop (:mod:`rawhttp` on uvloop: prebuilt requests, ~0.1 ms of client CPU
each): a ``POST /ports`` starts every 1/rate s whatever the answers do, on up to
``--connections`` keep-alive connections; latency counts from the intended start.
Prints ``ready`` once its connections are open, then runs until ``--seconds`` or
SIGTERM. Nothing is deleted (the caller lifts the project's port quota and throws
the server away afterwards: deleting thousands of ports is no part of the window). Writes the
offered rate, the achieved one (creates answered before the stop, per second), the
answers' p50/p99 (the late ones waited on afterwards, bounded) and the errors to ``--json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness
import rawhttp

MAX_SECONDS = 600


async def run(args: argparse.Namespace) -> dict:
    url = urlsplit(args.network_url)
    host = f"{url.hostname}:{url.port}"
    headers = {"X-Auth-Token": args.token, "Accept": "application/json"}
    create = rawhttp.request_bytes("POST", host, f"{url.path}/ports", {**headers, "Content-Type": "application/json"},
                                   json.dumps({"port": {"network_id": args.network}}).encode())
    probe = rawhttp.request_bytes("GET", host, f"{url.path}/networks/{args.network}", headers)
    pool = rawhttp.Pool(url.hostname or "127.0.0.1", url.port or 80, args.connections)
    await pool.warm(probe)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    print("ready", flush=True)

    now = time.perf_counter
    lat: list[float] = []
    made: list[float] = []  # when each create was answered
    errors: list[str] = []
    in_flight = peak = 0

    async def one(intended: float) -> None:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        try:
            answer = await pool.send(create)
            if answer.status == 201:
                made.append(now())
            else:
                errors.append(f"{answer.status} {answer.text[:200]}")
        except OSError as exc:
            errors.append(repr(exc))
        finally:
            in_flight -= 1
        lat.append(now() - intended)

    tasks: set[asyncio.Task] = set()
    start = now()
    limit = min(args.seconds, MAX_SECONDS)
    sent = 0
    for i in range(int(args.rate * limit)):
        intended = start + i / args.rate
        delay = intended - now()
        if delay > 0:
            try:
                await asyncio.wait_for(stop.wait(), delay)
            except TimeoutError:
                pass
        if stop.is_set():
            break
        task = asyncio.create_task(one(intended))
        sent += 1
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    stopped = now()
    offered_for = stopped - start
    if tasks:
        await asyncio.wait(set(tasks), timeout=60)
    in_window = sum(1 for t in made if t <= stopped)
    result = {**harness.summary(lat), "offered_per_s": args.rate, "sent": sent, "created": len(made),
              "achieved_per_s": in_window / offered_for if offered_for else 0.0, "seconds": offered_for,
              "errors": len(errors) + len(tasks), "first_error": errors[:1], "peak_in_flight": peak,
              "connections": args.connections}
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    pool.close()
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--network-url", required=True, help="the Network API's root (…/network/v2.0)")
    ap.add_argument("--token", required=True)
    ap.add_argument("--network", required=True, help="the network the ports are made on (a big subnet)")
    ap.add_argument("--rate", type=float, default=200.0)
    ap.add_argument("--seconds", type=float, default=120.0, help=f"at most (≤ {MAX_SECONDS}); SIGTERM stops it")
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    import uvloop

    print(json.dumps(uvloop.run(run(args))), flush=True)


if __name__ == "__main__":
    main()
