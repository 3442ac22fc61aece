"""The Docker driver ``netbay up`` starts beside it ends with ``up`` however ``up`` ends
(issue 30: a SIGTERM'd or killed ``up`` runs no atexit; the driver was left running)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

CHILD = ("from netbay.cli.libnetwork import _stop_with_parent; _stop_with_parent(); "
         "print('asked', flush=True); import time; time.sleep(60)")
PARENT = f"""
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", {CHILD!r}], env={{**os.environ, "NETBAY_STOP_WITH": str(os.getpid())}})
print(child.pid, flush=True)
time.sleep(60)
"""


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_the_driver_gets_sigterm_when_up_is_killed() -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    lines = {parent.stdout.readline().strip(), parent.stdout.readline().strip()}   # (the two share the pipe)
    assert "asked" in lines, lines   # the child imported netbay and asked the kernel
    child = int((lines - {"asked"}).pop())
    try:
        assert not _gone(child)
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        deadline = time.monotonic() + 10
        while not _gone(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _gone(child), "the driver outlived netbay up"
    finally:
        if parent.poll() is None:
            parent.kill()
        if not _gone(child):
            os.kill(child, signal.SIGKILL)
