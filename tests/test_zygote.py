"""The tests' forked starts (``tests/zygote.py``) behave as ``subprocess`` would: the
command's own exit status, output, environment and directory; a signal ends it as it
ends a fresh process; and it costs a fraction of a fresh interpreter's CPU."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest


from tests import zygote

NETBAY = [sys.executable, "-m", "netbay.cli.main"]


def test_a_command_exits_and_prints_as_it_would_fresh(tmp_path: Path) -> None:
    seen = []
    for run in (zygote.run, subprocess.run):
        ok = run([*NETBAY, "admin", "--help"], capture_output=True, text=True, timeout=60,
                 env={**os.environ, "COLUMNS": "200"}, cwd=tmp_path)
        bad = run([*NETBAY, "no-such-command"], capture_output=True, text=True, timeout=60)
        seen.append((ok.returncode, ok.stdout, ok.stderr, bad.returncode, bad.stdout, bad.stderr))
    assert seen[0] == seen[1]
    assert seen[0][0] == 0 and "Manage projects, users and roles." in seen[0][1]
    assert seen[0][3] == 2 and "No such command" in seen[0][5]


@pytest.mark.slow   # a zygote of its own and two doctor runs: 10 s of CPU, not for the quick tier
def test_a_forked_commands_consoles_take_its_own_width(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``doctor``'s rich console is made when its module is imported — in the zygote, whose
    ``COLUMNS`` (80 here, as in an xdist worker) it would keep: the child's own (100) wins."""
    monkeypatch.setenv("COLUMNS", "80")
    own = zygote._Zygote()   # a zygote started now, with COLUMNS=80
    try:
        out = tmp_path / "out"
        args = [*NETBAY, "doctor"]
        child = own.fork(args, {**os.environ, "COLUMNS": "100"}, str(tmp_path), os.devnull, str(out), str(out))
        assert child.wait(timeout=60) == 0, out.read_text()
    finally:
        own.close()
    fresh = subprocess.run(args, capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "100"})
    assert out.read_text() == fresh.stdout + fresh.stderr
    tables = [line for line in fresh.stdout.splitlines() if line.startswith("┏")]
    assert tables and max(len(line) for line in tables) == 100


def test_the_child_has_the_given_environment_directory_and_input(tmp_path: Path) -> None:
    """``netbay k8s apply`` refuses an unknown kind naming it: read from stdin
    (``/dev/stdin``), then from a path relative to the directory given."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "COLUMNS": "200"}
    (tmp_path / "gizmo.yaml").write_text("apiVersion: v1\nkind: Gizmo\nmetadata: {name: g}\n")
    for args, given in ((["/dev/stdin"], "apiVersion: v1\nkind: Gadget\nmetadata: {name: g}\n"),
                        (["gizmo.yaml"], None)):
        r = zygote.run([*NETBAY, "k8s", "apply", "-f", *args, "--cluster", "x"], input=given, capture_output=True,
                       text=True, timeout=60, env=env, cwd=tmp_path)
        assert r.returncode != 0 and ("Gadget" if given else "Gizmo") in r.stdout + r.stderr, r


@pytest.mark.slow   # a fresh server start beside a forked one
def test_a_signal_ends_a_forked_server_as_it_ends_a_fresh_one(tmp_path: Path) -> None:
    from tests.conftest import _wait_port, free_port

    log = tmp_path / "log"
    refused = zygote.popen([*NETBAY, "serve", "--port", str(free_port()), "--data-dir", str(tmp_path),
                            "--database-url", f"sqlite:///{tmp_path / 'none.db'}"], stdout=log,
                           stderr=subprocess.STDOUT)
    assert isinstance(refused, zygote.Forked) == zygote.enabled()
    assert refused.wait(timeout=60) == 2   # the empty schema refused, as tests/test_cli.py sees it fresh
    assert "Run: netbay db upgrade" in log.read_text()
    codes = {}
    for start in (zygote.popen, subprocess.Popen):
        port, data = free_port(), tmp_path / start.__name__
        data.mkdir()
        proc = start([*NETBAY, "up", "--no-agent", "--port", str(port), "--data-dir", str(data)],
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     env={**os.environ, "NETBAY_ADMIN_PASSWORD": "zygote-test-secret"})
        _wait_port(port, 120, proc)
        proc.send_signal(signal.SIGTERM)
        codes[start.__name__] = proc.wait(timeout=60)
        proc.kill()   # gone: a no-op, never another process's signal
    assert codes == {"popen": -signal.SIGTERM, "Popen": -signal.SIGTERM}, codes   # uvicorn re-raises it
