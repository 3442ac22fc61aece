"""Where the server's time goes: py-spy samples a ``netbay up`` under load.

    pip install py-spy
    python bench/profile_server.py --db sqlite --op create --seconds 20

Runs a closed loop of ``--clients`` (default 8) against one operation, or with
``--rate N`` an open loop of N requests/s, through the lean client of
``port_create.py`` (bench/rawhttp.py), while ``py-spy record`` samples the
server process (and its threads), then prints the functions with the most
inclusive and self samples. ``--stacks PATH`` keeps the collapsed stacks (input
for flamegraph.pl or speedscope).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from urllib.parse import urlsplit

import httpx
import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness
import rawhttp


async def load(srv: harness.Server, token: str, op: str, seconds: float, clients: int, rate: float) -> int:
    with httpx.Client(base_url=srv.network, headers={"X-Auth-Token": token}, timeout=60) as sync:
        net, _ = harness.make_network(sync, "profile", "10.250.0.0/16")
    url = urlsplit(srv.network)
    headers = {"X-Auth-Token": token, "Accept": "application/json"}
    if op == "create":
        request = rawhttp.request_bytes("POST", f"{url.hostname}:{url.port}", f"{url.path}/ports",
                                        {**headers, "Content-Type": "application/json"},
                                        json.dumps({"port": {"network_id": net}}).encode())
    else:
        request = rawhttp.request_bytes("GET", f"{url.hostname}:{url.port}", f"{url.path}/networks?limit=1",
                                        headers)
    pool = rawhttp.Pool(url.hostname or "127.0.0.1", url.port or 80, clients)
    done = 0
    deadline = time.monotonic() + seconds

    async def one() -> None:
        nonlocal done
        answer = await pool.send(request)
        if answer.status >= 300:
            raise RuntimeError(f"{answer.status} {answer.text[:200]}")
        done += 1

    async def worker() -> None:
        while time.monotonic() < deadline:
            await one()

    try:
        if rate:
            tasks = []
            start = time.perf_counter()
            for i in range(int(rate * seconds)):
                delay = start + i / rate - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                tasks.append(asyncio.create_task(one()))
            await asyncio.gather(*tasks)
        else:
            await asyncio.gather(*(worker() for _ in range(clients)))
    finally:
        pool.close()
    return done


def summarize(raw: Path, top: int) -> str:
    """Inclusive and self sample counts per function from py-spy's collapsed stacks."""
    inclusive: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        n = int(count)
        total += n
        frames = stack.split(";")
        for frame in set(frames):
            inclusive[frame] += n
        own[frames[-1]] += n
    out = [f"{total} samples", "", "inclusive (% of samples):"]
    out += [f"  {100 * n / total:5.1f}%  {f}" for f, n in inclusive.most_common(top)]
    out += ["", "self (% of samples):"]
    out += [f"  {100 * n / total:5.1f}%  {f}" for f, n in own.most_common(top)]
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", default="sqlite", choices=["sqlite", "postgresql"])
    parser.add_argument("--pg-socket", choices=["tcp", "unix"], default="tcp",
                        help="the server reaches PostgreSQL over TCP loopback or its Unix socket")
    parser.add_argument("--op", default="create", choices=["create", "get"])
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--clients", type=int, default=8, help="connections (closed loop: clients)")
    parser.add_argument("--rate", type=float, default=0, help="open loop at this many requests/s")
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--gil", action="store_true", help="only samples holding the GIL (Python CPU time)")
    parser.add_argument("--stacks", type=Path, help="keep py-spy's collapsed stacks here")
    parser.add_argument("--pg-fsync", choices=["on", "off"], default="on")
    args = parser.parse_args()
    if args.seconds > 120 or args.rate > 2000 or args.clients > 500:
        raise SystemExit("--seconds ≤ 120, --rate ≤ 2000, --clients ≤ 500")
    if shutil.which("py-spy") is None:
        raise SystemExit("py-spy not found: pip install py-spy")
    out = Path(tempfile.mkdtemp(prefix="nbprof-"))
    with harness.netbay(args.db, pg_fsync=args.pg_fsync == "on", pg_socket=args.pg_socket) as srv:
        token = srv.token()
        raw = out / "stacks.txt"
        spy = subprocess.Popen(["py-spy", "record", "--pid", str(srv.proc.pid), "--format", "raw",
                                "--output", str(raw), "--duration", str(int(args.seconds) + 5), "--rate", "200",
                                "--nonblocking", *(["--gil"] if args.gil else [])],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1)
        t0 = time.perf_counter()
        cpu0 = harness.proc_cpu_seconds(srv.proc.pid)
        done = uvloop.run(load(srv, token, args.op, args.seconds, args.clients, args.rate))
        wall = time.perf_counter() - t0
        cpu = harness.proc_cpu_seconds(srv.proc.pid) - cpu0
        spy.wait(timeout=60)
        mode = f"open loop {args.rate:g}/s" if args.rate else f"{args.clients} clients"
        print(f"{args.op}: {done} requests in {wall:.1f} s = {done / wall:.0f}/s ({mode}, {srv.database}); "
              f"server CPU {1000 * cpu / max(done, 1):.2f} ms/request (py-spy's own overhead included)\n")
        print(summarize(raw, args.top))
        if args.stacks:
            shutil.copyfile(raw, args.stacks)
    shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
