"""Processes netbay starts and leaves running (haproxy, cluster resolvers), found again.

A process is known by its pid file and is only ever signalled after its ``/proc``
entry proves it is the one that file names: its command line carries the marks its
starter gave it (a binary, a config or state path of that object alone), it is not
a zombie, and it started before the pid file was written — a pid the kernel handed
to another process since fails one of the three. Never by name alone.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Sequence
from pathlib import Path

SLACK = 1.0   # s: the boot time in /proc/stat has whole seconds


def read(pidfile: Path) -> int | None:
    try:
        return int(pidfile.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _boot_time() -> float:
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    raise OSError("no btime in /proc/stat")


def started_at(pid: int) -> float | None:
    """When ``pid`` started (seconds since the epoch), None if it is gone or a zombie."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        if fields[0] == "Z":
            return None
        return _boot_time() + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def matches(pid: int, marks: Sequence[bytes], argv0: bytes | None = None) -> bool:
    """``pid`` is live (not a zombie) and its command line holds every mark (and, with
    ``argv0``, its program's base name is that)."""
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    if started_at(pid) is None or not args or not args[0]:
        return False
    if argv0 is not None and os.path.basename(args[0]) != argv0:
        return False
    return all(m in args for m in marks)


def owner(pidfile: Path, marks: Sequence[bytes], argv0: bytes | None = None) -> int | None:
    """The pid the file names, if that process is the one that wrote it (see the module)."""
    pid = read(pidfile)
    if pid is None or not matches(pid, marks, argv0):
        return None
    try:
        written = pidfile.stat().st_mtime
    except OSError:
        return None
    began = started_at(pid)
    return pid if began is not None and began <= written + SLACK else None


def terminate(pid: int, still_ours: Callable[[], bool], timeout: float) -> None:
    """SIGTERM, then SIGKILL after ``timeout`` s; each signal only while ``still_ours()``."""
    if not still_ours():
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while still_ours() and time.monotonic() < deadline:
        time.sleep(0.01)
    if still_ours():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


__all__ = ["matches", "owner", "read", "started_at", "terminate"]
