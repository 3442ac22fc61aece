"""Oversized uploads against a running server: its memory, the refusals' speed, and what
they cost everyone else (issue 25: bodies are capped while read, :mod:`netbay.bodylimit`).

    python bench/bodylimit.py [--uploads 50] [--size-mib 100] [--waves 3] [--json FILE]

One ``netbay up`` (SQLite, no agent). Baseline first: sequential port creates on an idle
server. Then ``--waves`` waves of ``--uploads`` concurrent uploads of ``--size-mib`` MiB
each (half with their ``Content-Length``, half chunked; every other one to the
unauthenticated token route, the rest to ``POST /networks`` with a token), sent from a
child process over raw sockets, only to 127.0.0.1, each written lazily a MiB at a time
until the answer comes (or 30 s); meanwhile the same port creates run again. Reported:
the server's RSS before / peak / after (``/proc``: VmRSS sampled every 5 ms and VmHWM),
the time from connect to the answer's status line (413 expected) and the bytes written
by then, and the
port create latency idle vs during the waves.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import socket
import sys
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness

UPLOAD_BOUND = 30.0   # seconds, per upload
MIB = 1 << 20


def status_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


async def upload(port: int, path: str, token: str | None, size: int, declared: bool) -> dict:
    """One upload of ``size`` bytes, written a MiB at a time until the answer's status
    line comes. On a raw socket: a write that fails on the server's close must not
    discard an answer already received (asyncio's transports do)."""
    loop = asyncio.get_running_loop()
    started = time.perf_counter()
    sock = socket.socket()
    sock.setblocking(False)
    await loop.sock_connect(sock, ("127.0.0.1", port))
    head = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json"]
    head += [f"X-Auth-Token: {token}"] if token else []
    head += [f"Content-Length: {size}"] if declared else ["Transfer-Encoding: chunked"]
    sent = 0
    block = b"x" * MIB

    async def write() -> None:
        nonlocal sent
        with contextlib.suppress(OSError):
            await loop.sock_sendall(sock, ("\r\n".join(head) + "\r\n\r\n").encode())
            while sent < size:
                n = min(MIB, size - sent)
                await loop.sock_sendall(sock, block[:n] if declared else b"%x\r\n" % n + block[:n] + b"\r\n")
                sent += n
            if not declared:
                await loop.sock_sendall(sock, b"0\r\n\r\n")

    async def status_line() -> bytes:
        got = b""
        while b"\r\n" not in got:
            chunk = await loop.sock_recv(sock, 1 << 16)
            if not chunk:
                break
            got += chunk
        return got.split(b"\r\n", 1)[0]

    writing = asyncio.ensure_future(write())
    status, seconds = 0, float("nan")
    try:
        line = await asyncio.wait_for(status_line(), UPLOAD_BOUND)
        seconds = time.perf_counter() - started
        status = int(line.split()[1]) if line else 0
    except (TimeoutError, OSError, IndexError, ValueError):
        pass
    finally:
        writing.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await writing
        sock.close()
    return {"status": status, "seconds": seconds, "sent": sent, "declared": declared}


def attack(port: int, token: str, uploads: int, size: int, waves: int, out: multiprocessing.Queue) -> None:
    """The waves, in a child process (its CPU is not the latency client's GIL)."""
    async def main() -> list[dict]:
        results = []
        for _ in range(waves):
            calls = [upload(port, "/identity/v3/auth/tokens" if i % 2 else "/network/v2.0/networks",
                            None if i % 2 else token, size, declared=i % 4 < 2) for i in range(uploads)]
            wave_started = time.perf_counter()
            done = await asyncio.gather(*calls)
            for d in done:
                d["wave_seconds"] = time.perf_counter() - wave_started
            results += done
        return results

    out.put(asyncio.run(main()))


def creates(client: httpx.Client, net: str, stop: threading.Event, limit: int, bound: float) -> list[float]:
    """Sequential port creates until ``stop`` (or ``limit`` of them, or ``bound`` s): latencies."""
    out: list[float] = []
    deadline = time.monotonic() + bound
    while not stop.is_set() and len(out) < limit and time.monotonic() < deadline:
        t0 = time.perf_counter()
        r = client.post("/ports", json={"port": {"network_id": net}})
        out.append(time.perf_counter() - t0)
        r.raise_for_status()
    return out


def sample_rss(pid: int, stop: threading.Event, peak: list[int]) -> None:
    while not stop.is_set():
        peak[0] = max(peak[0], status_kib(pid, "VmRSS"))
        time.sleep(0.005)


def run(args: argparse.Namespace) -> dict:
    size = args.size_mib * MIB
    with harness.netbay("sqlite") as srv:
        pid, port = srv.proc.pid, int(srv.url.rsplit(":", 1)[1])
        token = srv.token()
        client = httpx.Client(base_url=srv.network, headers={"X-Auth-Token": token}, timeout=60)
        net, _ = harness.make_network(client, "bl", "10.77.0.0/16")
        creates(client, net, threading.Event(), 20, 30)   # warm-up, not counted
        for path in ("/identity/v3/auth/tokens", "/network/v2.0/networks"):   # first use of the refusal
            httpx.post(srv.url + path, content=b"x" * (MIB + 1), headers={"X-Auth-Token": token}, timeout=30)
        idle = creates(client, net, threading.Event(), args.creates, 60)
        before_rss, before_hwm = status_kib(pid, "VmRSS"), status_kib(pid, "VmHWM")

        stop, peak = threading.Event(), [before_rss]
        sampler = threading.Thread(target=sample_rss, args=(pid, stop, peak), daemon=True)
        sampler.start()
        queue: multiprocessing.Queue = multiprocessing.Queue()
        child = multiprocessing.Process(target=attack, args=(port, token, args.uploads, size, args.waves, queue))
        during_box: list[list[float]] = []
        load_stop = threading.Event()
        loader = threading.Thread(target=lambda: during_box.append(
            creates(client, net, load_stop, 100_000, args.waves * (UPLOAD_BOUND + 5))), daemon=True)
        t0 = time.perf_counter()
        child.start()
        loader.start()
        results = queue.get(timeout=args.waves * (UPLOAD_BOUND + 5) + 30)
        attack_seconds = time.perf_counter() - t0
        load_stop.set()
        loader.join(timeout=60)
        child.join(timeout=30)
        stop.set()
        sampler.join()
        time.sleep(0.5)
        after_rss, after_hwm = status_kib(pid, "VmRSS"), status_kib(pid, "VmHWM")
        alive = client.get("/networks").status_code
        client.close()
        during = during_box[0] if during_box else []

    answered = [r for r in results if r["status"]]
    return {
        "machine": harness.machine(), "uploads": args.uploads, "waves": args.waves, "size_mib": args.size_mib,
        "statuses": {str(s): sum(1 for r in results if r["status"] == s) for s in {r["status"] for r in results}},
        "rss_mib": {"before": before_rss / 1024, "peak_sampled": peak[0] / 1024, "after": after_rss / 1024,
                    "hwm_before": before_hwm / 1024, "hwm_after": after_hwm / 1024},
        "to_answer_ms": {kind: harness.summary([r["seconds"] for r in answered if r["declared"] == flag])
                         for kind, flag in (("content-length", True), ("chunked", False))},
        "sent_mib_max": {kind: max((r["sent"] / MIB for r in answered if r["declared"] == flag), default=0)
                         for kind, flag in (("content-length", True), ("chunked", False))},
        "attack_seconds": attack_seconds,
        "port_create_ms": {"idle": harness.summary(idle), "during": harness.summary(during)},
        "server_answers_after": alive,
    }


def report(res: dict) -> None:
    rss, pc = res["rss_mib"], res["port_create_ms"]
    print(f"# oversized uploads — {res['machine']}\n")
    print(f"{res['waves']} waves × {res['uploads']} concurrent uploads of {res['size_mib']} MiB "
          f"(answers: {res['statuses']}), {res['attack_seconds']:.2f} s in all; "
          f"the server answers after: {res['server_answers_after']}\n")
    print(harness.markdown_table(
        ["server RSS (MiB)", "before", "peak", "after"],
        [["VmRSS (sampled every 5 ms)", f"{rss['before']:.0f}", f"{rss['peak_sampled']:.0f}", f"{rss['after']:.0f}"],
         ["VmHWM", f"{rss['hwm_before']:.0f}", f"{rss['hwm_after']:.0f}", ""]]))
    print()
    rows = []
    for kind, s in res["to_answer_ms"].items():
        rows.append([kind, str(s["n"]), harness.fmt(s["p50"]), harness.fmt(s["p99"]), harness.fmt(s["max"]),
                     f"{res['sent_mib_max'][kind]:.0f}"])
    print(harness.markdown_table(["upload", "answers", "p50 ms", "p99 ms", "max ms", "MiB written, max"], rows))
    print()
    print(harness.markdown_table(
        ["port create", "n", "p50 ms", "p99 ms", "max ms"],
        [[k, str(pc[k]["n"]), harness.fmt(pc[k]["p50"]), harness.fmt(pc[k]["p99"]), harness.fmt(pc[k]["max"])]
         for k in ("idle", "during")]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--uploads", type=int, default=50, help="concurrent uploads per wave (at most 200)")
    parser.add_argument("--size-mib", type=int, default=100)
    parser.add_argument("--waves", type=int, default=3)
    parser.add_argument("--creates", type=int, default=200, help="idle port creates (the baseline)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    args.uploads = min(args.uploads, 200)
    res = run(args)
    report(res)
    if args.json:
        args.json.write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
