"""The verdict prober of ``bench/k8s_policy.py``, in its own process.

WHY its own process: probing from the bench's process (which also runs the engine and
the dataplane agent on a thread) started only once the engine's call had returned, and
its Python loop competed for the GIL with the agent realizing the change; both added
the bench's latency to the product's. Here the probing starts *before* the change and
shares no interpreter with anything it measures.

It asks for the lowest real-time priority (SCHED_FIFO 1; nice -10 if refused) so that on
a loaded machine its 0.5 ms wake-ups are not deferred behind other processes — which
would delay the SYNs and add the machine's run-queue to the product's figure. It sleeps
in ``poll`` between SYNs (~5% of a core) and every probe is bounded in time.

Protocol (one line each, on stdin/stdout): ``probe <netns> <ip> <port> <timeout s>`` →
``started`` once the first SYN is out, then ``ok <sent> <seen> <before>`` (CLOCK_MONOTONIC
seconds: when the first accepted SYN left, when its connection was seen established,
when the SYN before it left — the verdict flipped between ``before`` and ``sent``) or
``fail``. A new non-blocking SYN every ``INTERVAL`` s, all kept open (bounded in
time and count): a verdict flip is seen within one interval plus a round trip.
"""

from __future__ import annotations

import errno
import os
import select
import socket
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from netbay.dataplane import netns

INTERVAL = 0.0005


def probe(ns: str, ip: str, port: int, timeout: float) -> str:
    socks: dict[int, tuple[socket.socket, float, float]] = {}
    last = 0.0
    poller = select.poll()
    t0 = time.perf_counter()
    try:
        with netns.entered(ns):
            for i in range(int(timeout / INTERVAL) + 1):
                s = socket.socket()
                s.setblocking(False)
                sent = time.perf_counter()
                if s.connect_ex((ip, port)) not in (0, errno.EINPROGRESS):
                    s.close()
                else:
                    socks[s.fileno()] = (s, sent, last)
                    last = sent
                    poller.register(s.fileno(), select.POLLOUT)
                if i == 0:
                    print("started", flush=True)
                for fd, _ev in poller.poll(INTERVAL * 1e3):
                    sock, when, before = socks[fd]
                    poller.unregister(fd)
                    if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:
                        return f"ok {when:.6f} {time.perf_counter():.6f} {before:.6f}"
                if time.perf_counter() - t0 > timeout:
                    break
        return "fail"
    finally:
        for s, *_ in socks.values():
            s.close()


def prioritize() -> str:
    """The lowest real-time priority, else a better nice value, else as it is."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
        return "SCHED_FIFO 1"
    except (OSError, AttributeError):
        pass
    try:
        os.nice(-10)
        return "nice -10"
    except OSError:
        return "default"


def main() -> None:
    print(prioritize(), flush=True)
    for line in sys.stdin:
        parts = line.split()
        if len(parts) == 5 and parts[0] == "probe":
            print(probe(parts[1], parts[2], int(parts[3]), float(parts[4])), flush=True)
        elif parts == ["quit"]:
            return


if __name__ == "__main__":
    main()
