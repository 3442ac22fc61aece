"""What every benchmark shares: a throwaway PostgreSQL, a ``netbay up`` server
in a subprocess, a token, and latency statistics.

The server always runs in its own process so that the load generator (this
process) and the service do not share a GIL; they do share the machine's cores.
"""

from __future__ import annotations

import glob
import ipaddress
import os
import platform
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

ADMIN_PASSWORD = "bench-admin-secret"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, seconds: float, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before listening on {port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"nothing listens on {port} after {seconds}s")


# --- PostgreSQL ------------------------------------------------------------------------


@dataclass
class Postgres:
    port: int
    version: str
    settings: str
    socket_dir: Path

    def create_database(self, unix: bool = False) -> str:
        """A fresh database; its URL over TCP loopback, or over the Unix socket (``unix``)."""
        import psycopg

        name = "nbbench_" + uuid.uuid4().hex[:10]
        with psycopg.connect(host="127.0.0.1", port=self.port, user="postgres", dbname="postgres",
                             autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        if unix:
            return f"postgresql+psycopg://postgres@/{name}?host={self.socket_dir}&port={self.port}"
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{name}"


@contextmanager
def postgres(fsync: bool) -> Iterator[Postgres]:
    """A throwaway cluster run as ``postgres`` from Debian's binaries, removed afterwards."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found:
        raise SystemExit("PostgreSQL server binaries not found (/usr/lib/postgresql/*/bin)")
    bindir = Path(found[-1]).parent
    root = Path(tempfile.mkdtemp(prefix="nbbench-pg-"))
    shutil.chown(root, "postgres", "postgres")
    as_pg = ["runuser", "-u", "postgres", "--"]
    subprocess.run([*as_pg, str(bindir / "initdb"), "-D", str(root / "data"), "-A", "trust", "-U", "postgres"],
                   check=True, capture_output=True, timeout=120)
    port = free_port()
    durability = ([] if fsync else
                  ["-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"])
    proc = subprocess.Popen(
        [*as_pg, str(bindir / "postgres"), "-D", str(root / "data"), "-p", str(port), "-k", str(root),
         "-c", "listen_addresses=127.0.0.1", "-c", "max_connections=300", *durability],
        stdout=subprocess.DEVNULL, stderr=open(root / "log", "w"),  # noqa: SIM115 - the child process writes it while it runs
    )
    try:
        wait_port(port, 30, proc)
        version = subprocess.run([str(bindir / "postgres"), "--version"], capture_output=True,
                                 text=True).stdout.strip()
        settings = "fsync=on, synchronous_commit=on (defaults)" if fsync else \
            "fsync=off, synchronous_commit=off, full_page_writes=off"
        yield Postgres(port, version, settings, root)
    finally:
        _stop_postmaster(proc, root / "data" / "postmaster.pid")
        shutil.rmtree(root, ignore_errors=True)


def _stop_postmaster(proc: subprocess.Popen, pid_file: Path) -> None:
    """Fast shutdown of the postmaster itself, by the PID it wrote.

    ``proc`` is ``runuser``, which does not reliably pass SIGINT on; killing it
    alone would leave an orphaned postmaster behind.
    """
    try:
        postmaster = int(pid_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        postmaster = None
    if postmaster is not None:
        try:
            os.kill(postmaster, signal.SIGINT)
        except ProcessLookupError:
            pass
    else:
        proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        if postmaster is not None:
            try:
                os.kill(postmaster, signal.SIGQUIT)  # immediate shutdown
            except ProcessLookupError:
                pass
        proc.kill()
        proc.wait(timeout=10)


# --- netbay server ---------------------------------------------------------------------------


@dataclass
class Server:
    url: str
    proc: subprocess.Popen
    data_dir: Path
    database: str

    @property
    def network(self) -> str:
        return f"{self.url}/network/v2.0"

    def token(self) -> str:
        body = {"auth": {"identity": {"methods": ["password"], "password": {"user": {
            "name": "admin", "domain": {"name": "Default"}, "password": ADMIN_PASSWORD}}},
            "scope": {"project": {"name": "admin", "domain": {"name": "Default"}}}}}
        r = httpx.post(f"{self.url}/identity/v3/auth/tokens", json=body, timeout=30)
        r.raise_for_status()
        return r.headers["X-Subject-Token"]


@contextmanager
def netbay(db: str, pg_fsync: bool = True, extra_env: dict[str, str] | None = None,
           pg_socket: str = "tcp", agent_prefix: str | None = None) -> Iterator[Server]:
    """``netbay up`` on a fresh SQLite file or a fresh PostgreSQL cluster; torn down afterwards.

    ``pg_socket``: the server reaches PostgreSQL over TCP loopback (``tcp``) or its Unix
    socket (``unix``). ``agent_prefix``: ``up`` runs its dataplane agent too, as it does
    by default, under that namespace prefix (the caller sweeps it); else none."""
    root = Path(tempfile.mkdtemp(prefix="nbbench-"))
    try:
        if db == "sqlite":
            with _serve(f"sqlite:///{root / 'netbay.db'}", root, extra_env, agent_prefix) as srv:
                srv.database = f"SQLite {sqlite3.sqlite_version}, WAL, synchronous=NORMAL"
                yield srv
        elif db == "postgresql":
            unix = pg_socket == "unix"
            with postgres(pg_fsync) as pg, _serve(pg.create_database(unix=unix), root, extra_env,
                                                  agent_prefix) as srv:
                how = "Unix socket" if unix else "TCP loopback"
                srv.database = f"{pg.version}; {pg.settings}; over {how}"
                yield srv
        else:
            raise SystemExit(f"unknown database {db!r}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


@contextmanager
def _serve(database_url: str, data_dir: Path, extra_env: dict[str, str] | None,
           agent_prefix: str | None = None) -> Iterator[Server]:
    port = free_port()
    env = {**os.environ, "NETBAY_ADMIN_PASSWORD": ADMIN_PASSWORD, "NETBAY_LOG_LEVEL": "WARNING",
           **(extra_env or {})}
    log = open(data_dir / "server.log", "w")  # noqa: SIM115
    # API benchmarks measure the service alone: no dataplane agent (it would also wire
    # this host's kernel); dataplane ones may run it as `up` does, under their prefix.
    agent = ["--agent", "--agent-prefix", agent_prefix] if agent_prefix else ["--no-agent"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "netbay.cli.main", "up", *agent, "--port", str(port),
         "--data-dir", str(data_dir), "--database-url", database_url],
        env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    try:
        try:
            wait_port(port, 90, proc)
        except Exception:  # noqa: BLE001
            raise SystemExit("netbay did not start:\n" + (data_dir / "server.log").read_text()) from None
        yield Server(f"http://127.0.0.1:{port}", proc, data_dir, "")
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()


def make_network(client: httpx.Client, name: str, cidr: str, *more: str) -> tuple[str, str]:
    """A network with a subnet per CIDR (its IP version the CIDR's: ``more`` makes it
    dual-stack); returns (network_id, the first subnet's id)."""
    r = client.post("/networks", json={"network": {"name": name}})
    r.raise_for_status()
    net = r.json()["network"]["id"]
    ids = []
    for i, each in enumerate((cidr, *more)):
        r = client.post("/subnets", json={"subnet": {
            "network_id": net, "cidr": each, "ip_version": ipaddress.ip_network(each).version,
            "name": f"{name}-subnet{i or ''}"}})
        r.raise_for_status()
        ids.append(r.json()["subnet"]["id"])
    return net, ids[0]


def proc_cpu_seconds(pid: int) -> float:
    """utime + stime of a process (Linux /proc), to apportion the shared cores."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# --- statistics and reporting -----------------------------------------------------------------


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100) of raw samples."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * p // 100))  # ceil
    return ordered[int(rank) - 1]


def summary(latencies_s: list[float]) -> dict[str, float]:
    ms = [x * 1000 for x in latencies_s]
    return {"n": len(ms), "p50": percentile(ms, 50), "p99": percentile(ms, 99), "max": max(ms, default=0.0)}


def median_of(runs: list[dict[str, float]], key: str) -> float:
    values = [r[key] for r in runs if key in r]
    return statistics.median(values) if values else float("nan")


def machine() -> str:
    return (f"{os.cpu_count()} cores ({platform.processor() or platform.machine()}), "
            f"Linux {platform.release()}, Python {platform.python_version()}")


def markdown_table(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def fmt(value: float, digits: int = 1) -> str:
    return "—" if value != value else f"{value:.{digits}f}"  # NaN check
