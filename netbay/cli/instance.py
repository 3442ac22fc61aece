"""One netbay per data dir, one agent per namespace prefix per host; ``netbay down``.

A running server holds an ``flock`` (:mod:`netbay.locks`) on ``DATA_DIR/server.lock``
and, with its agent, on ``/run/netbay/agent-<prefix>.lock``; each file names the
holder (PID, URL, prefix). A second ``netbay up`` on either refuses and names the
holder instead of rewriting the first one's openrc or sweeping its namespaces. The
kernel drops a lock when its process dies, so a crash leaves nothing stale; a clean
exit removes the agent's lock file (the data dir's stays: the last run's record).
``netbay down`` also stops what a killed agent left running (:func:`stop_processes`).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import time
from pathlib import Path
from typing import Any

from netbay.locks import Held, hold, holder

SERVER_LOCK = "server.lock"   # kept when released: ``netbay down`` reads the last server's prefix


def run_dir() -> Path:
    return Path(os.environ.get("NETBAY_RUN_DIR", "/run/netbay"))


def agent_lock_path(prefix: str) -> Path:
    return run_dir() / f"agent-{prefix}.lock"


def last_run(data_dir: Path) -> dict[str, Any]:
    """What the data dir's lock file says about the last server (held or not)."""
    try:
        return json.loads((data_dir / SERVER_LOCK).read_text() or "{}")
    except (OSError, ValueError):
        return {}


def listen(host: str, port: int) -> socket.socket:
    """The server's socket, bound before anything else happens (a port in use is said at
    once, with nothing written). It listens only once the server serves (uvicorn calls
    ``listen``), so nobody connects to a server still migrating."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise OSError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock


def stop(pid: int, timeout: float) -> bool:
    """SIGTERM, then SIGKILL after ``timeout``; True once the process is gone."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    for _ in range(50):
        if not _alive(pid):
            return True
        time.sleep(0.1)
    return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError):  # a zombie child of ours counts as gone
        if Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z"):
            return False
    return True


def released(path: Path, pid: int, timeout: float = 10.0) -> bool:
    """Wait until process ``pid`` no longer holds the lock at ``path``. A process whose
    main thread has exited (a zombie leader) can keep its files open a moment longer,
    while its other threads finish dying; its locks go only then."""
    deadline = time.monotonic() + timeout
    while (info := holder(path)) is not None and info.get("pid") == pid:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def served_prefixes() -> list[str]:
    """Prefixes whose agent runs now (their lock is held)."""
    out = []
    for path in run_dir().glob("agent-*.lock"):
        if holder(path) is not None:
            out.append(path.name[len("agent-"):-len(".lock")])
    return out


def remove_namespaces(prefix: str) -> list[str]:
    """Delete the namespaces named with ``prefix`` — not those of a running agent whose
    (longer) prefix merely starts with it."""
    from netbay.dataplane import netns

    others = [p for p in served_prefixes() if p != prefix and p.startswith(prefix)]
    removed = []
    for name in netns.list(prefix):
        if not any(name.startswith(p) for p in others) and netns.delete(name):
            removed.append(name)
    return removed


def stop_processes(prefix: str) -> list[str]:
    """The processes an agent of ``prefix`` ran and, killed, left behind (haproxy, cluster
    resolvers; each proven by its pid file and /proc), stopped, their files removed."""
    from netbay.dataplane.lb.process import Haproxy, state_dir
    from netbay.k8s.dns.process import stop_all

    haproxy = Haproxy(state_dir(prefix))
    lbs = sorted(haproxy.known())
    haproxy.stop_all()
    return [f"haproxy {lb}" for lb in lbs] + [f"cluster resolver {port}" for port in stop_all(prefix)]


__all__ = ["SERVER_LOCK", "Held", "agent_lock_path", "hold", "holder", "last_run", "listen", "released",
           "remove_namespaces", "run_dir", "served_prefixes", "stop", "stop_processes"]
