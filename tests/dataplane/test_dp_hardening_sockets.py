"""Issue 30: ``netbay up`` left its agent's lock file (``/run/netbay/agent-<prefix>.lock``)
behind at every stop — dozens after a day of tests. A clean stop now removes it (the
data dir's ``server.lock`` stays: ``netbay down`` reads the last run's prefix there)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from conftest import ADMIN_PASSWORD, _wait_port, free_port

from .agent_fixtures import sweep_prefix, wait_for
from .dp_helpers import PREFIX, netbay_up


def test_a_stopped_netbay_up_leaves_no_agent_lock(tmp_path: Path) -> None:
    prefix, run = f"{PREFIX}lk-", tmp_path / "run"
    env = {**os.environ, "NETBAY_ADMIN_PASSWORD": ADMIN_PASSWORD, "NETBAY_RUN_DIR": str(run)}
    env.pop("NETBAY_AGENT_PREFIX", None)
    port = free_port()
    proc = netbay_up(tmp_path / "data", port, prefix, env, tmp_path / "up.log")
    try:
        _wait_port(port, 60, proc)
        lock = run / f"agent-{prefix}.lock"
        wait_for(lock.exists, 10, what="the agent's lock")
        assert f'"pid": {proc.pid}' in lock.read_text()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) in (0, -signal.SIGTERM), (tmp_path / "up.log").read_text()[-3000:]
        assert sorted(p.name for p in run.iterdir()) == [], "a lock file outlived its netbay"
        assert (tmp_path / "data" / "server.lock").exists(), "the last run's record is gone"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        sweep_prefix(prefix)
