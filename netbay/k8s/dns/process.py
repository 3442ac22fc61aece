"""A cluster resolver's process and files, known by its pid file (no API, no controller).

The controller (:mod:`.resolver`) starts it detached in ``<prefix>kd-<port id>``, so
a controller that exits leaves it answering; the agent of that prefix
(:mod:`.reaper`) stops it when its port goes or the agent stops. Its files live in
``<state dir>/<prefix>k8s-dns/<port id>/``; the process is only signalled after
:func:`netbay.dataplane.pidfile.owner` proves it is the one its pid file names.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from netbay.dataplane import netns, pidfile

START_TIMEOUT = 10.0
STOP_TIMEOUT = 5.0
MODULE = "netbay.k8s.dns.server"
POD_PREFIX = "pod-"   # a node cluster's resolver's files: "pod-<its pod id>" (:mod:`.nodes`), not a port id


def state_root(prefix: str) -> Path:
    return Path(os.environ.get("NETBAY_STATE_DIR", "/run/netbay")) / f"{prefix}k8s-dns"


def namespace(prefix: str, port_id: str) -> str:
    """The resolver's namespace (``kd-``, not ``k-``: the pods' sweep leaves it)."""
    return f"{prefix}kd-{port_id}"


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class Process:
    """The server process of one resolver port (files in its state directory)."""

    def __init__(self, root: Path, port_id: str, ns: str) -> None:
        self.dir, self.ns = root / port_id, ns
        self.records, self.pidfile = self.dir / "records.json", self.dir / "resolver.pid"
        self._child: subprocess.Popen | None = None

    def publish(self, records: Mapping[str, Any], written: str | None) -> str:
        """Write ``records`` for the server to answer from, unless the file holds them
        already (``written``: its text as last written or read; None: not known, read
        now). Returns the file's text."""
        text = json.dumps(records, sort_keys=True, separators=(",", ":"))
        if written is None:
            with contextlib.suppress(OSError):
                written = self.records.read_text()
        if text != written:
            self.dir.mkdir(parents=True, exist_ok=True)
            write_atomic(self.records, text)
        return text

    def pid(self) -> int | None:
        """The running server's pid (its /proc entry: this command, these records, started
        before the pid file was written)."""
        return pidfile.owner(self.pidfile, [MODULE.encode(), str(self.records).encode()])

    def serving(self) -> int | None:
        """The pid if it runs in the namespace as it is now (a re-made one has a new inode)."""
        pid = self.pid()
        try:
            return pid if pid and os.stat(f"/proc/{pid}/ns/net").st_ino == netns.inode(self.ns) else None
        except OSError:
            return None

    def start(self, *addresses: str) -> int:
        """Start the server answering on ``addresses`` (a dual-stack cluster's two)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        self.pidfile.unlink(missing_ok=True)
        if not self.records.exists():
            write_atomic(self.records, json.dumps({"domain": "cluster.local", "A": {}, "SRV": {}}))
        with open(self.dir / "resolver.log", "ab") as log:
            self._child = subprocess.Popen(
                [sys.executable, "-m", MODULE, "--netns", self.ns,
                 *(arg for address in addresses for arg in ("--address", address)),
                 "--records", str(self.records), "--pidfile", str(self.pidfile)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT
        while (pid := self.serving()) is None:
            if self._child.poll() is not None or time.monotonic() > deadline:
                self.stop()
                tail = (self.dir / "resolver.log").read_text(errors="replace")[-500:]
                raise RuntimeError(f"the cluster resolver did not start in {self.ns}: {tail.strip()}")
            time.sleep(0.01)
        return pid

    def stop(self) -> None:
        child = self._child if self._child is not None and self._child.poll() is None else None
        pid = self.pid() or (child.pid if child is not None else None)
        if pid is not None:
            pidfile.terminate(pid, lambda: _alive(pid, self._child, self.records), STOP_TIMEOUT)
        if self._child is not None:
            try:
                self._child.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                pass
            self._child = None

    def remove(self) -> None:
        """Stop it and remove its files (and the prefix's directory once it is empty)."""
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
        try:
            self.dir.parent.rmdir()
        except OSError:
            pass


def _alive(pid: int, child: subprocess.Popen | None, records: Path) -> bool:
    """Our child not yet exited, or a live resolver of these records."""
    if child is not None and child.pid == pid:
        return child.poll() is None
    return pidfile.matches(pid, [MODULE.encode(), str(records).encode()])


def port_ids(prefix: str) -> set[str]:
    """Ports whose resolver has files or a namespace on this host."""
    root = state_root(prefix)
    found = {p.name for p in root.iterdir() if p.is_dir()} if root.is_dir() else set()
    head = namespace(prefix, "")
    return found | {n[len(head):] for n in netns.list(head)}


def stop_all(prefix: str) -> list[str]:
    """Stop every resolver of ``prefix`` on this host and remove its files (its agent
    stops, ``netbay down``); the namespaces stay for whoever removes the prefix's.
    Returns the port ids."""
    root = state_root(prefix)
    if not root.is_dir():
        return []
    gone = sorted(p.name for p in root.iterdir() if p.is_dir())
    for port_id in gone:
        Process(root, port_id, namespace(prefix, port_id)).remove()
    try:
        root.rmdir()
    except OSError:
        pass
    return gone


__all__ = ["MODULE", "POD_PREFIX", "Process", "namespace", "port_ids", "state_root", "stop_all", "write_atomic"]
