"""Every ``netbay`` command fails in one line that names what to do (issue 30).

The walk is over the typer app itself, so a new command is covered without a line of its
own: each client command (one that talks to a running server) meets no credentials, a
server that does not answer, credentials it refuses and a name it does not know; each
command that reads the data dir meets one with no database. What it may print is one
``error: …`` line and a non-zero exit — never a traceback.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import typer
from conftest import ADMIN_PASSWORD, free_port
from typer.testing import CliRunner

from netbay.cli.main import app

pytestmark = pytest.mark.shared_server   # its tests make their own objects (tests/conftest.py)

# Daemons serve until stopped; `serve`, `up` and `db upgrade` make the data dir they are given.
NOT_WALKED = {("serve",), ("up",), ("agent",), ("libnetwork",), ("cni-daemon",), ("k8s", "watch"),
              ("db", "upgrade")}
# Commands that need no server: they read this host or the data dir only (`k8s sweep`
# asks the server only about this host's pod namespaces, and deletes those whose port is
# gone: not for a shared test host).
OFFLINE = {("doctor",), ("down",), ("cni-install",), ("db", "current"), ("network-driver", "docs"),
           ("k8s", "sweep")}
# Arguments that must be well formed for the command to reach the server.
ARGS = {("cluster-template", "update"): ["nosuch", "replace", "labels/a=b"]}
FAILURES = ("no credentials", "unreachable", "bad credentials", "unknown name")


def _commands() -> list[tuple[tuple[str, ...], typer.core.TyperCommand]]:
    group = typer.main.get_command(app)
    ctx = typer.Context(group)
    found = []

    def walk(command, path: tuple[str, ...]) -> None:
        if hasattr(command, "list_commands"):
            for name in command.list_commands(ctx):
                walk(command.get_command(ctx, name), (*path, name))
        else:
            found.append((path, command))

    walk(group, ())
    return found


COMMANDS = _commands()
CLIENT = [(p, c) for p, c in COMMANDS if p not in NOT_WALKED | OFFLINE and p[0] != "admin"
          and not any(o.name == "data_dir" for o in c.params)]
DATA_DIR = [(p, c) for p, c in COMMANDS if p not in NOT_WALKED and any(o.name == "data_dir" for o in c.params)]


def _args(command, tmp_path: Path, path: tuple[str, ...] = ()) -> list[str]:
    """Each required argument and option given ``nosuch`` (a number where a number is asked)."""
    if path in ARGS:
        return ARGS[path]
    def value(param) -> str:
        kind = getattr(param.type_descriptor, "annotation", str)
        return "1" if kind in (int, float) else str(tmp_path / "nosuch") if kind is Path else "nosuch"

    args: list[str] = []
    for param in command.params:
        if not param.required:
            continue
        if param.param_type_name == "argument":
            args.append(value(param))
        else:
            args += [param.opts[0], value(param)]
    return args


def _env(failure: str, server=None) -> dict:
    env = {k: None for k in ("OS_AUTH_URL", "OS_USERNAME", "OS_PASSWORD", "OS_PROJECT_NAME", "OS_CLOUD",
                             "NETBAY_URL", "OS_CLIENT_CONFIG_FILE")}
    env.update(COLUMNS="400", NETBAY_NEW_USER_PASSWORD="x", NETBAY_DATA_DIR=None, NETBAY_DATABASE_URL=None)
    if failure == "no credentials":
        return env
    auth_url = server.auth_url if server is not None else f"http://127.0.0.1:{free_port()}/identity/v3"
    env.update(OS_AUTH_URL=auth_url, OS_USERNAME="admin", OS_PROJECT_NAME="admin", OS_USER_DOMAIN_NAME="Default",
               OS_PROJECT_DOMAIN_NAME="Default",
               OS_PASSWORD=ADMIN_PASSWORD if failure == "unknown name" else "wrong-password")
    return env


def _one_line(result, args: list[str]) -> str:
    said = (result.stdout or "") + (getattr(result, "stderr", "") or "")
    lines = [line for line in said.splitlines() if line.strip()]
    assert result.exception is None or isinstance(result.exception, SystemExit), \
        f"{args}: {type(result.exception).__name__}: {result.exception}\n{said}"
    assert result.exit_code != 0, f"{args} succeeded: {said}"
    assert "Traceback" not in said and "sqlalchemy" not in said.lower(), said
    assert len(lines) == 1 and lines[0].startswith("error:"), f"{args}:\n{said}"
    return lines[0]


def test_the_walk_sees_every_command():
    paths = {p for p, _ in COMMANDS}
    assert {("pod", "exec"), ("cluster", "connectivity"), ("k8s", "exec"), ("sandbox", "create")} <= {
        p for p, _ in CLIENT}
    assert ("admin", "user", "list") in paths or any(p[0] == "admin" for p, _ in DATA_DIR)
    assert paths >= (NOT_WALKED | OFFLINE)   # no stale exemption


@pytest.fixture(scope="module")
def runner() -> CliRunner:
    return CliRunner()


@pytest.mark.parametrize("failure", FAILURES[:2])
@pytest.mark.parametrize("path,command", CLIENT, ids=[" ".join(p) for p, _ in CLIENT])
def test_a_client_command_without_a_server_says_what_to_do(runner, tmp_path, path, command, failure):
    args = [*path, *_args(command, tmp_path, path)]
    line = _one_line(runner.invoke(app, args, env=_env(failure)), args)
    assert ("OS_AUTH_URL" in line or "openrc" in line) if failure == "no credentials" else "no netbay at" in line


@pytest.mark.parametrize("failure", FAILURES[2:])
@pytest.mark.parametrize("path,command", CLIENT, ids=[" ".join(p) for p, _ in CLIENT])
def test_a_client_command_against_a_server_says_what_to_do(runner, server, tmp_path, path, command, failure):
    args = [*path, *_args(command, tmp_path, path)]
    if failure == "unknown name" and (args == list(path) or len(args) == len(path) + 1 and path[-1] == "create"):
        pytest.skip("takes no name of an existing object (or only the name of the one it creates)")
    line = _one_line(runner.invoke(app, args, env=_env(failure, server)), args)
    if failure == "bad credentials":
        assert "authentication failed" in line, line


@pytest.mark.parametrize("path,command", DATA_DIR, ids=[" ".join(p) for p, _ in DATA_DIR])
def test_a_command_without_its_data_dir_says_what_to_do(runner, tmp_path, path, command):
    missing = tmp_path / "no" / "such" / "dir"
    args = [*path, *[a for a in _args(command, tmp_path, path)], "--data-dir", str(missing)]
    result = runner.invoke(app, args, env=_env("unreachable"))
    if result.exit_code == 0:   # a read-only command may say there is nothing (`db current`)
        assert "Traceback" not in result.output
        return
    _one_line(result, args)


def test_k8s_apply_in_a_data_dir_without_a_database_says_so_and_makes_none(runner, tmp_path):
    """An existing directory with no database: one line, and no empty SQLite file left in it
    (opening one would make it, then fail on its first table)."""
    manifest = tmp_path / "ns.yaml"
    manifest.write_text("apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n")
    empty = tmp_path / "data"
    empty.mkdir()
    args = ["k8s", "apply", "-f", str(manifest), "--cluster", "c1", "--data-dir", str(empty)]
    line = _one_line(runner.invoke(app, args, env=_env("unreachable")), args)
    assert "no netbay database at" in line and "--data-dir" in line, line
    assert list(empty.iterdir()) == []


@pytest.mark.parametrize("daemon", ["serve", "up", "agent", "libnetwork", "cni-daemon"])
def test_a_daemon_with_an_unknown_log_level_says_so_and_starts_nothing(runner, tmp_path, daemon):
    """Every daemon reads ``NETBAY_LOG_LEVEL`` first (``netbay.cli.daemon``): a typo is one line
    naming the variable and the levels, exit 2 — not a ValueError traceback from ``logging``."""
    data = tmp_path / "data"
    args = [daemon, *(["--data-dir", str(data)] if daemon in ("serve", "up") else [])]
    result = runner.invoke(app, args, env={"NETBAY_LOG_LEVEL": "LOUD"})
    line = _one_line(result, args)
    assert result.exit_code == 2 and "NETBAY_LOG_LEVEL='LOUD'" in line and "WARNING" in line, line
    assert not data.exists()


DUMPS = """
import sys, threading, time
import rich.console
from netbay.cli.daemon import configure_logging
configure_logging(rich.console.Console(stderr=True))
threading.Thread(target=lambda: time.sleep(30), name="waiter", daemon=True).start()
print("ready", flush=True)
time.sleep(30)
"""


def test_sigusr1_writes_every_threads_stack_to_the_log_and_the_daemon_goes_on() -> None:
    """What every daemon sets up (``netbay.cli.daemon``): SIGUSR1 is not the end (its
    default), but each thread's stack on stderr, the log."""
    proc = subprocess.Popen([sys.executable, "-c", DUMPS], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "NETBAY_LOG_LEVEL": "INFO"})
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        proc.send_signal(signal.SIGUSR1)
        time.sleep(0.5)
        assert proc.poll() is None, "SIGUSR1 ended the daemon"
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
    assert "\nThread 0x" in "\n" + err and "Current thread 0x" in err, err   # both threads
    assert "in <lambda>" in err and "in <module>" in err, err   # the waiter's frame, the main one's
