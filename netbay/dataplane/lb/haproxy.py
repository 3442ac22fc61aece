"""The haproxy provider: one haproxy per load balancer, inside its namespace.

The configuration is rendered from the :class:`LoadBalancerSpec` alone (as
Octavia's amphora renders its template from the tree): a frontend per enabled
listener bound to the VIP (``mode http`` for HTTP, ``mode tcp`` for TCP and
HTTPS passthrough), a backend per (listener, pool) it can reach (its default
pool and its L7 policies' pools, in the frontend's mode), a server per member
that takes traffic (enabled, weight > 0, not found down by the health monitor:
netbay's monitors decide, as for nftables, so statuses come from one place).

UDP listeners are not haproxy's: the realizer hands them to the nftables
table beside it, as the amphora hands UDP to LVS.

The process (``Haproxy``) runs in master-worker mode: ``-W -D`` returns once
the listeners are bound (so "started" means "answering"), and a reload is
``SIGUSR2`` to the master, which starts new workers on the same listening
sockets while the old ones finish their connections — nothing is dropped. Its
files (config, pid file, master socket) live in ``<state dir>/<lb id>/``, so an
agent restart finds and adopts it, and a process is only ever signalled after
its ``/proc`` entry shows it is the haproxy of that config.
"""

from __future__ import annotations

import contextlib
import logging
import os
import resource
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from netbay.dataplane import netns

if TYPE_CHECKING:
    from netbay.dataplane.lb.spec import (
        ListenerSpec,
        LoadBalancerSpec,
        MemberSpec,
        PoolSpec,
    )

log = logging.getLogger(__name__)

BINARY = "haproxy"
START_TIMEOUT = 10.0
RELOAD_TIMEOUT = 5.0
STOP_TIMEOUT = 5.0
# Octavia's default connection limit, within what this host lets a process open
# (haproxy needs two descriptors per connection and refuses to start otherwise).
MAXCONN = max(100, min(50000, (resource.getrlimit(resource.RLIMIT_NOFILE)[1] - 200) // 2))

_BALANCE = {"ROUND_ROBIN": "roundrobin", "LEAST_CONNECTIONS": "leastconn", "SOURCE_IP": "source"}
_MATCH = {"REGEX": "reg", "STARTS_WITH": "beg", "ENDS_WITH": "end", "CONTAINS": "sub", "EQUAL_TO": "str"}
_PROXY = {"PROXY": " send-proxy", "PROXYV2": " send-proxy-v2"}


def state_dir(prefix: str) -> Path:
    """Where this agent keeps its haproxy files (per names prefix: runs never share)."""
    return Path(os.environ.get("NETBAY_STATE_DIR", "/run/netbay")) / f"{prefix}haproxy"


# --- the configuration ---------------------------------------------------------------------------


def haproxy_listeners(spec: LoadBalancerSpec) -> list[ListenerSpec]:
    """The listeners haproxy serves (enabled, not UDP) of an enabled load balancer."""
    if not spec.enabled:
        return []
    return [li for li in spec.listeners if li.enabled and li.protocol != "udp"]


def _acl(rule_id: str, rule_type: str, compare: str, key: str | None, value: str) -> str:
    m = _MATCH.get(compare, "str")
    if rule_type == "PATH":
        fetch = f"path -m {m}"
    elif rule_type == "HOST_NAME":
        fetch = f"req.hdr(host),field(1,:) -i -m {m}"
    elif rule_type == "HEADER":
        fetch = f"req.hdr({key}) -m {m}"
    elif rule_type == "COOKIE":
        fetch = f"req.cook({key}) -m {m}"
    elif rule_type == "FILE_TYPE":
        if compare == "EQUAL_TO":
            return f"    acl r_{rule_id} path_end -i .{value}"
        fetch = "path -m reg"
    else:
        raise ValueError(f"L7 rule type {rule_type} cannot be realized")
    return f"    acl r_{rule_id} {fetch} {value}"


def _backend_name(listener: ListenerSpec, pool_id: str) -> str:
    return f"{listener.id}:{pool_id}"


def _frontend(spec: LoadBalancerSpec, li: ListenerSpec) -> tuple[list[str], list[str]]:
    """The frontend's lines and the pools its backends must exist for."""
    http = li.kind == "HTTP"
    client, _, _, inspect = li.timeouts
    out = [f"frontend {li.id}",
           f"    bind {spec.vip_address}:{li.port}",
           f"    mode {'http' if http else 'tcp'}",
           f"    maxconn {min(li.connection_limit, MAXCONN) if li.connection_limit > 0 else MAXCONN}",
           f"    timeout client {client}"]
    if li.allowed_cidrs:
        out.append(f"    tcp-request connection reject unless {{ src {' '.join(li.allowed_cidrs)} }}")
    if inspect > 0 and not http:
        out.append(f"    tcp-request inspect-delay {inspect}")
    headers = dict(li.insert_headers)
    if http:
        if str(headers.get("X-Forwarded-For", "")).lower() == "true":
            out.append("    option forwardfor")
        if str(headers.get("X-Forwarded-Port", "")).lower() == "true":
            out.append(f"    http-request set-header X-Forwarded-Port {li.port}")
        if str(headers.get("X-Forwarded-Proto", "")).lower() == "true":
            out.append("    http-request set-header X-Forwarded-Proto http")
    pools: list[str] = []
    deny, redirects, uses = [], [], []
    if http:
        for policy in sorted(li.l7policies, key=lambda p: p.position):
            rules = [r for r in policy.rules if r.enabled]
            if not policy.enabled or not rules:
                continue  # Octavia: a policy without rules matches nothing
            for r in rules:
                out.append(_acl(r.id, r.type, r.compare_type, r.key, r.value))
            cond = " ".join(("!" if r.invert else "") + f"r_{r.id}" for r in rules)
            if policy.action == "REJECT":
                deny.append(f"    http-request deny if {cond}")
            elif policy.action == "REDIRECT_TO_URL" and policy.url:
                redirects.append(f"    redirect location {policy.url} code {policy.code} if {cond}")
            elif policy.action == "REDIRECT_PREFIX" and policy.url:
                redirects.append(f"    redirect prefix {policy.url} code {policy.code} if {cond}")
            elif policy.action == "REDIRECT_TO_POOL" and policy.pool_id and spec.pool(policy.pool_id):
                uses.append(f"    use_backend {_backend_name(li, policy.pool_id)} if {cond}")
                pools.append(policy.pool_id)
    out += deny + redirects + uses
    if li.pool_id and spec.pool(li.pool_id) is not None:
        out.append(f"    default_backend {_backend_name(li, li.pool_id)}")
        pools.append(li.pool_id)
    return out, list(dict.fromkeys(pools))


def _backend(li: ListenerSpec, pool: PoolSpec, servers: Iterable[MemberSpec]) -> list[str]:
    http = li.kind == "HTTP"
    _, connect, member, _ = li.timeouts
    out = [f"backend {_backend_name(li, pool.id)}",
           f"    mode {'http' if http else 'tcp'}",
           f"    balance {_BALANCE.get(pool.algorithm, 'roundrobin')}",
           f"    timeout connect {connect}",
           f"    timeout server {member}"]
    cookie = ""
    if pool.persistence == "SOURCE_IP":
        out += ["    stick-table type ip size 10k", "    stick on src"]
    elif pool.persistence == "HTTP_COOKIE" and http:
        out.append("    cookie SRV insert indirect nocache")
    elif pool.persistence == "APP_COOKIE" and http and pool.cookie_name:
        out += ["    stick-table type string len 64 size 10k",
                f"    stick store-response res.cook({pool.cookie_name})",
                f"    stick match req.cook({pool.cookie_name})"]
    proxy = _PROXY.get(pool.protocol, "")
    for m in servers:
        if pool.persistence == "HTTP_COOKIE" and http:
            cookie = f" cookie {m.id}"
        out.append(f"    server {m.id} {m.address}:{m.port} weight {min(m.weight, 256)}{cookie}{proxy}")
    return out


def render(spec: LoadBalancerSpec, run_dir: Path, in_map: Callable[[PoolSpec, MemberSpec], bool]) -> str:
    """The whole configuration; ``in_map(pool, member)`` says whether a member takes traffic."""
    lines = ["# netbay: rendered from the load balancer's tree; rewritten on every change",
             "global",
             f"    maxconn {MAXCONN}",
             f"    stats socket {run_dir / 'stats.sock'} mode 600 level admin",
             "    hard-stop-after 60s",
             "",
             "defaults",
             "    retries 3",
             "    option redispatch",
             "    timeout queue 5s",
             "    timeout http-request 10s",
             ""]
    for li in haproxy_listeners(spec):
        front, pool_ids = _frontend(spec, li)
        lines += front + [""]
        for pool_id in pool_ids:
            pool = spec.pool(pool_id)
            if pool is None:
                continue
            servers = [m for m in pool.members if pool.enabled and in_map(pool, m)]
            lines += _backend(li, pool, servers) + [""]
    return "\n".join(lines)


# --- the process -------------------------------------------------------------------------------------


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
        """The master's pid if it runs (checked in /proc: haproxy, this config)."""
        try:
            pid = int(self._pidfile(lb_id).read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None
        return pid if _is_ours(pid, self.config(lb_id)) else None

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
        d.mkdir(parents=True, exist_ok=True)
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
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + STOP_TIMEOUT
            while _is_ours(pid, self.config(lb_id)) and time.monotonic() < deadline:
                time.sleep(0.01)
            if _is_ours(pid, self.config(lb_id)):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
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
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    if stat.rsplit(")", 1)[-1].split()[0] == "Z":
        return False
    args = raw.split(b"\0")
    return bool(args) and os.path.basename(args[0]) == b"haproxy" and str(cfg).encode() in args


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


__all__ = ["Haproxy", "haproxy_listeners", "render", "state_dir"]
