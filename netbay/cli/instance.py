"""One netbay per data dir, one agent per namespace prefix per host; ``netbay down``.

A running server holds an ``flock`` on ``DATA_DIR/server.lock`` and, with its
agent, on ``/run/netbay/agent-<prefix>.lock``; each file names the holder (PID,
URL, prefix). A second ``netbay up`` on either refuses and names the holder
instead of rewriting the first one's openrc or sweeping its namespaces. The
kernel drops a lock when its process dies, so a crash leaves nothing stale.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import time
from pathlib import Path
from typing import Any, TextIO

SERVER_LOCK = "server.lock"
_held: list[TextIO] = []  # open lock files: the locks live as long as the process


class Held(Exception):
    """The lock is held by another process (its description in ``info``)."""

    def __init__(self, what: str, info: dict[str, Any]) -> None:
        pid = info.get("pid", "?")
        super().__init__(f"{what} is held by netbay PID {pid}"
                         + (f" ({info['url']})" if info.get("url") else ""))
        self.info = info


def run_dir() -> Path:
    return Path(os.environ.get("NETBAY_RUN_DIR", "/run/netbay"))


def agent_lock_path(prefix: str) -> Path:
    return run_dir() / f"agent-{prefix}.lock"


def _read(f: TextIO) -> dict[str, Any]:
    f.seek(0)
    try:
        return json.loads(f.read() or "{}")
    except ValueError:
        return {}


def hold(path: Path, what: str, info: dict[str, Any]) -> None:
    """Take the lock at ``path`` for this process and write ``info`` (plus our PID), or raise ``Held``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    f = open(path, "a+")  # noqa: SIM115 - kept open: closing would drop the lock
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _read(f)
        f.close()
        raise Held(what, holder) from None
    f.seek(0)
    f.truncate()
    f.write(json.dumps({"pid": os.getpid(), **info}))
    f.flush()
    _held.append(f)


def holder(path: Path) -> dict[str, Any] | None:
    """Who holds the lock at ``path`` (None: nobody, or no such file)."""
    try:
        f = open(path)  # noqa: SIM115
    except FileNotFoundError:
        return None
    with f:
        try:
            fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read(f)
        fcntl.flock(f, fcntl.LOCK_UN)
        return None


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
