"""``netbay down`` waits for the stopped server's locks, not only for its main thread.

A process whose main thread has exited shows as a zombie while its other threads are
still dying, and its open files — so its ``flock``s — go only with the last of them.
``down`` once judged the agent's prefix "served by another netbay" in that window and
kept the namespaces it should have removed (CI, stop 20)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

from netbay.cli import instance


def test_a_zombie_leader_keeps_its_lock_until_its_last_thread_is_gone(tmp_path: Path) -> None:
    lock = tmp_path / "agent-x.lock"
    child = textwrap.dedent(f"""
        import ctypes, os, threading, time
        from pathlib import Path
        from netbay.cli import instance
        instance.hold(Path({str(lock)!r}), "test", {{}})
        threading.Thread(target=lambda: (time.sleep(1.0), os._exit(0))).start()
        print("held", flush=True)
        ctypes.CDLL(None).pthread_exit(None)  # the main thread ends; the other one lives on
    """)
    proc = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        deadline = time.monotonic() + 5
        while instance._alive(proc.pid):
            assert time.monotonic() < deadline, "the main thread did not end"
            time.sleep(0.01)
        assert instance.holder(lock) == {"pid": proc.pid}, "the window this test is about did not open"
        started = time.monotonic()
        assert instance.released(lock, proc.pid, timeout=10)
        assert time.monotonic() - started > 0.3
        assert instance.holder(lock) is None
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_released_gives_up_after_its_timeout(tmp_path: Path) -> None:
    lock = tmp_path / "agent-y.lock"
    child = f"from pathlib import Path; from netbay.cli import instance; import time; " \
            f"instance.hold(Path({str(lock)!r}), 'test', {{}}); print('held', flush=True); time.sleep(30)"
    proc = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        started = time.monotonic()
        assert not instance.released(lock, proc.pid, timeout=0.3)
        assert 0.3 <= time.monotonic() - started < 5
    finally:
        proc.kill()
        proc.wait(timeout=10)
