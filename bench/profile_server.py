"""Where the server's time goes: py-spy samples a ``netbay up`` under load.

    pip install py-spy
    python bench/profile_server.py --db sqlite --op create --seconds 20

Runs a closed loop of ``--clients`` (default 8) against one operation while
``py-spy record`` samples the server process (and its threads), then prints
the functions with the most inclusive and self samples. ``--stacks PATH`` keeps
the collapsed stacks (input for flamegraph.pl or speedscope).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402


async def load(srv: harness.Server, token: str, op: str, seconds: float, clients: int) -> int:
    headers = {"X-Auth-Token": token}
    with httpx.Client(base_url=srv.network, headers=headers, timeout=60) as sync:
        net, _ = harness.make_network(sync, "profile", "10.250.0.0/16")
    done = 0
    deadline = time.monotonic() + seconds
    limits = httpx.Limits(max_connections=clients, keepalive_expiry=2.0)
    async with httpx.AsyncClient(base_url=srv.network, headers=headers, limits=limits, timeout=60) as client:

        async def worker() -> None:
            nonlocal done
            while time.monotonic() < deadline:
                if op == "create":
                    r = await client.post("/ports", json={"port": {"network_id": net}})
                else:
                    r = await client.get("/networks", params={"limit": 1})
                r.raise_for_status()
                done += 1

        await asyncio.gather(*(worker() for _ in range(clients)))
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
    parser.add_argument("--op", default="create", choices=["create", "get"])
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--gil", action="store_true", help="only samples holding the GIL (Python CPU time)")
    parser.add_argument("--stacks", type=Path, help="keep py-spy's collapsed stacks here")
    parser.add_argument("--pg-fsync", choices=["on", "off"], default="on")
    args = parser.parse_args()
    if args.seconds > 120:
        raise SystemExit("--seconds ≤ 120")
    if shutil.which("py-spy") is None:
        raise SystemExit("py-spy not found: pip install py-spy")
    out = Path(tempfile.mkdtemp(prefix="nbprof-"))
    with harness.netbay(args.db, pg_fsync=args.pg_fsync == "on") as srv:
        token = srv.token()
        raw = out / "stacks.txt"
        spy = subprocess.Popen(["py-spy", "record", "--pid", str(srv.proc.pid), "--format", "raw",
                                "--output", str(raw), "--duration", str(int(args.seconds) + 5), "--rate", "200",
                                "--nonblocking", *(["--gil"] if args.gil else [])],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1)
        t0 = time.perf_counter()
        done = asyncio.run(load(srv, token, args.op, args.seconds, args.clients))
        wall = time.perf_counter() - t0
        spy.wait(timeout=60)
        print(f"{args.op}: {done} requests in {wall:.1f} s = {done / wall:.0f}/s ({args.clients} clients, "
              f"{srv.database})\n")
        print(summarize(raw, args.top))
        if args.stacks:
            shutil.copyfile(raw, args.stacks)
    shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
