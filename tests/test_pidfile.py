"""A process netbay left running is known by its pid file, proven in /proc (issue 30):
its command line, not a zombie, started before the file was written — never its name."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from netbay.dataplane import pidfile

MARK = "netbay-pidfile-test-mark"


def _sleeper(mark: str = MARK) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", mark])
    for _ in range(500):   # until /proc shows the command it runs
        if pidfile.matches(proc.pid, [mark.encode()]):
            break
        time.sleep(0.01)
    return proc


def test_owner_is_the_process_the_file_names_and_nothing_else(tmp_path: Path) -> None:
    proc = _sleeper()
    try:
        path = tmp_path / "x.pid"
        path.write_text(f"{proc.pid}\n")
        assert pidfile.owner(path, [MARK.encode()]) == proc.pid
        assert pidfile.owner(path, [b"another-mark"]) is None            # another command line
        assert pidfile.owner(path, [MARK.encode()], b"haproxy") is None  # another program
        # A file older than the process: the pid was handed to it after the file's writer died.
        past = time.time() - 3600
        os.utime(path, (past, past))
        assert pidfile.owner(path, [MARK.encode()]) is None
        path.write_text("not a pid")
        assert pidfile.owner(path, [MARK.encode()]) is None
        assert pidfile.owner(tmp_path / "missing.pid", [MARK.encode()]) is None
    finally:
        proc.kill()
        proc.wait()


def test_a_zombie_is_no_owner_and_terminate_signals_only_while_it_is_ours(tmp_path: Path) -> None:
    proc = _sleeper()
    path = tmp_path / "x.pid"
    path.write_text(f"{proc.pid}\n")
    checks = []

    def ours() -> bool:
        checks.append(1)
        return pidfile.matches(proc.pid, [MARK.encode()])

    pidfile.terminate(proc.pid, ours, timeout=5)
    for _ in range(500):          # not reaped yet: a zombie, which no longer counts
        if pidfile.owner(path, [MARK.encode()]) is None:
            break
        time.sleep(0.01)
    assert pidfile.owner(path, [MARK.encode()]) is None
    assert pidfile.started_at(proc.pid) is None
    proc.wait(timeout=5)
    count = len(checks)
    pidfile.terminate(proc.pid, ours, timeout=5)   # gone: not signalled again
    assert len(checks) == count + 1
