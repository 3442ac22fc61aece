"""The haproxy provider's processes: one master-worker haproxy per load balancer.

``haproxy -W -D`` returns once the listeners are bound (so "started" means
"answering"); a reload is ``SIGUSR2`` to the master, which starts new workers on
the same listening sockets while the old ones finish their connections — nothing
is dropped — and the realizer waits until the master CLI reports the new worker.
Files (config, pid file, master and stats sockets) live in ``<state dir>/<lb id>/``,
so an agent restart finds and adopts a running haproxy; a process is only ever
signalled after its ``/proc`` entry shows it is the haproxy of that config.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from netbay.dataplane import netns, pidfile

BINARY = "haproxy"
START_TIMEOUT = 10.0
RELOAD_TIMEOUT = 5.0
STOP_TIMEOUT = 5.0


def state_dir(prefix: str) -> Path:
    """Where this agent keeps its haproxy files (per names prefix: runs never share)."""
    return Path(os.environ.get("NETBAY_STATE_DIR", "/run/netbay")) / f"{prefix}haproxy"


class Haproxy:
    """The haproxy processes of one agent, one per load balancer (by id)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def dir(self, lb_id: str) -> Path:
        return self.root / lb_id

    def config(self, lb_id: str) -> Path:
        return self.dir(lb_id) / "haproxy.cfg"

    def _pidfile(self, lb_id: str) -> Path:
        return self.dir(lb_id) / "haproxy.pid"

    def master(self, lb_id: str) -> int | None:
        """The master's pid if it runs (checked in /proc: haproxy, this config, started
        before its pid file was written)."""
        return pidfile.owner(self._pidfile(lb_id), [str(self.config(lb_id)).encode()], b"haproxy")

    def known(self) -> set[str]:
        """Ids of the load balancers that have a directory here (running or not)."""
        try:
            return {p.name for p in self.root.iterdir() if p.is_dir()}
        except FileNotFoundError:
            return set()

    def ensure(self, lb_id: str, ns: str, text: str) -> None:
        """Run haproxy with ``text`` in ``ns``: start it, or reload it if its config
        changed, or restart it if its namespace is not ``ns`` any more (re-made)."""
        d = self.dir(lb_id)
        d.mkdir(mode=0o700, parents=True, exist_ok=True)   # its master socket: root's alone
        cfg = self.config(lb_id)
        pid = self.master(lb_id)
        if pid is not None and _net_inode(pid) != netns.inode(ns):
            self.stop(lb_id, keep_dir=True)
            pid = None
        try:
            old = cfg.read_text()
        except FileNotFoundError:
            old = None
        if old != text:
            tmp = cfg.with_suffix(".tmp")
            tmp.write_text(text)
            os.replace(tmp, cfg)
        try:
            if pid is None:
                self._start(lb_id, ns)
            elif old != text:
                self._reload(lb_id, ns, pid)
        except Exception:
            cfg.unlink(missing_ok=True)   # not what runs: the next attempt starts or reloads again
            raise

    def _start(self, lb_id: str, ns: str) -> None:
        cmd = [_binary(), "-W", "-D", "-f", str(self.config(lb_id)), "-p", str(self._pidfile(lb_id)),
               "-S", str(self.dir(lb_id) / "master.sock")]
        with netns.entered(ns):   # the forked child starts in the load balancer's namespace
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=START_TIMEOUT,
                                  stdin=subprocess.DEVNULL, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"haproxy for load balancer {lb_id} did not start: "
                               f"{(done.stderr or done.stdout).strip()[-500:]}")
        # The launcher may exit before the daemonized master has written its pid file:
        # until then a next ensure would not see it and start a second master.
        deadline = time.monotonic() + START_TIMEOUT
        while self.master(lb_id) is None:
            if time.monotonic() > deadline:
                raise RuntimeError(f"haproxy for load balancer {lb_id} started but wrote no pid file")
            time.sleep(0.002)

    def _workers(self, lb_id: str, ns: str) -> tuple[int, int, list[int]] | None:
        """(the master's reload count, failed reloads, current worker pids) from the master CLI."""
        text = _ask(ns, self.dir(lb_id) / "master.sock", "show proc")
        if text is None:
            return None
        reloads, failed, workers, section = 0, 0, [], "master"
        for line in text.splitlines():
            if line.startswith("#"):
                section = "old" if "old" in line else ("workers" if "worker" in line else section)
                continue
            parts = line.split()
            if len(parts) >= 3 and parts[0].isdigit():
                if parts[1] == "master":
                    reloads = int(parts[2]) if parts[2].isdigit() else 0
                    if "[failed:" in line:
                        failed = int(line.split("[failed:", 1)[1].split("]", 1)[0].strip() or 0)
                elif parts[1] == "worker" and section == "workers":
                    workers.append(int(parts[0]))
        return reloads, failed, workers

    def _reload(self, lb_id: str, ns: str, pid: int) -> None:
        """SIGUSR2, then wait (bounded) until the master reports the new workers."""
        deadline = time.monotonic() + RELOAD_TIMEOUT
        before = self._workers(lb_id, ns)
        while before is None and time.monotonic() < deadline:   # a just-started master opens it late
            time.sleep(0.01)
            before = self._workers(lb_id, ns)
        if before is None:
            raise RuntimeError(f"haproxy for load balancer {lb_id}: its master socket does not answer")
        os.kill(pid, signal.SIGUSR2)
        deadline = time.monotonic() + RELOAD_TIMEOUT
        while time.monotonic() < deadline:
            time.sleep(0.005)
            now = self._workers(lb_id, ns)
            if now is None or now[0] <= before[0]:
                continue
            if now[1] > before[1]:
                raise RuntimeError(f"haproxy for load balancer {lb_id} refused its new configuration")
            if now[2] and now[2] != before[2]:
                return
        raise RuntimeError(f"haproxy for load balancer {lb_id} did not reload within {RELOAD_TIMEOUT:.0f} s "
                           "(configuration refused?)")

    def stop(self, lb_id: str, *, keep_dir: bool = False) -> None:
        """Stop the master (its workers go with it) and remove its files."""
        pid = self.master(lb_id)
        if pid is not None:
            pidfile.terminate(pid, lambda: _is_ours(pid, self.config(lb_id)), STOP_TIMEOUT)
        if not keep_dir:
            shutil.rmtree(self.dir(lb_id), ignore_errors=True)

    def listener_stats(self, lb_id: str, ns: str) -> dict[str, dict[str, int]]:
        """Octavia's listener statistics from the stats socket (``show stat``), by
        listener id: ``bytes_in``, ``bytes_out``, ``active_connections``,
        ``total_connections``, ``request_errors``. They count since the current
        worker started (a reload starts new workers, as in Octavia's amphora)."""
        text = _ask(ns, self.dir(lb_id) / "stats.sock", "show stat -1 1 -1")
        if not text or not text.startswith("# "):
            return {}
        rows = text[2:].strip().splitlines()
        head = rows[0].split(",")
        out: dict[str, dict[str, int]] = {}
        for line in rows[1:]:
            row = dict(zip(head, line.split(","), strict=False))
            if row.get("svname") != "FRONTEND":
                continue

            def num(key: str, row: dict[str, str] = row) -> int:
                return int(row.get(key) or 0)

            out[row["pxname"]] = {"bytes_in": num("bin"), "bytes_out": num("bout"),
                                  "active_connections": num("scur"), "total_connections": num("stot"),
                                  "request_errors": num("ereq")}
        return out

    def stop_all(self) -> None:
        """Every haproxy of this agent, and its files (the agent stops; ``netbay down``)."""
        for lb_id in self.known():
            self.stop(lb_id)
        with contextlib.suppress(OSError):
            self.root.rmdir()


def _binary() -> str:
    found = shutil.which(BINARY) or shutil.which(BINARY, path="/usr/sbin:/sbin")
    if found is None:
        raise RuntimeError("haproxy is not installed (Debian package 'haproxy'; scripts/setup.sh installs it)")
    return found


def _is_ours(pid: int, cfg: Path) -> bool:
    """``pid`` is a live haproxy started with ``cfg`` (never signal anything else)."""
    return pidfile.matches(pid, [str(cfg).encode()], b"haproxy")


def _net_inode(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


def _ask(ns: str, path: Path, command: str, timeout: float = 1.0) -> str | None:
    """One command on a haproxy socket (made in ``ns``: the master refuses other namespaces' peers)."""
    try:
        with netns.entered(ns):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    except OSError:
        return None
    try:
        s.settimeout(timeout)
        s.connect(str(path))
        s.sendall(command.encode() + b"\n")
        s.shutdown(socket.SHUT_WR)   # one command: the master answers and closes
        data = b""
        for _ in range(256):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        return data.decode(errors="replace")
    except OSError:
        return None
    finally:
        s.close()


__all__ = ["Haproxy", "state_dir"]
