"""netbay's processes for the tests, forked from an interpreter that imported netbay once.

A fresh ``python -m netbay.cli.main up`` spends about 2 s of CPU importing (FastAPI,
SQLAlchemy, the API's modules) before it serves, and the suite starts a few hundred
netbay processes. Each pytest process therefore keeps one *zygote*: ``python -m
tests.zygote`` imports what the commands import, then forks a child per request. The
child is the CLI's own entry (``netbay.cli.main.app``) with its own argv, environment,
working directory and output files, and it exits as the interpreter would (non-daemon
threads joined, ``atexit`` run): to the tests and to netbay nothing else differs. This
is how the process starts, not what it runs — no part is stood in for.

:func:`popen` and :func:`run` take the arguments ``subprocess`` takes (a subset) and
fall back to it for any other command, or for all with ``NETBAY_TEST_ZYGOTE=0`` (to
tell a failure's cause, or time the difference). A forked child is not the test
process's own: :class:`Forked` signals it through a pidfd (no PID reuse can misdirect
a signal) and reads the exit status the zygote, its parent, writes when it reaps it.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ENTRY = ("-m", "netbay.cli.main")
# What the commands the tests start import at the top of their work: the server (``up``,
# ``serve``), the dataplane agent, the Docker and CNI daemons, ``k8s``, ``doctor``.
PRELOAD = ("netbay.cli.main", "netbay.cli.server", "netbay.cli.bootstrap", "netbay.cli.agent",
           "netbay.cli.instance", "netbay.cli.libnetwork", "netbay.cli.cni", "netbay.cli.k8s",
           "netbay.cli.doctor", "netbay.cli.tap", "netbay.api.app", "netbay.store.migrate",
           "netbay.identity.service", "netbay.coe.conductor", "netbay.agent", "netbay.k8s.controller",
           "netbay.k8s.watch", "netbay.backends.openstack", "netbay.plugins.cni.server",
           "netbay.plugins.libnetwork.server", "lightkube", "uvicorn", "alembic.command")
REPO = Path(__file__).resolve().parent.parent


# --- the test process's side ------------------------------------------------------------


def enabled() -> bool:
    return os.environ.get("NETBAY_TEST_ZYGOTE", "1") != "0"


class Forked:
    """A child of the zygote, as much of ``subprocess.Popen`` as the tests use."""

    def __init__(self, pid: int, rc_file: Path, args: Sequence[str]) -> None:
        self.pid, self.args, self._rc_file = pid, list(args), rc_file
        self.returncode: int | None = None
        try:
            self._pidfd: int | None = os.pidfd_open(pid)
        except ProcessLookupError:   # gone already: its status is (or will be) in the file
            self._pidfd = None

    def poll(self) -> int | None:
        if self.returncode is None:
            with contextlib.suppress(FileNotFoundError, ValueError):
                self.returncode = int(self._rc_file.read_text())
                self._rc_file.unlink()
                self._close()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            left = 1.0 if deadline is None else deadline - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            if self._pidfd is not None:   # readable once the process has exited
                select.select([self._pidfd], [], [], min(left, 1.0))
            time.sleep(0.01)   # then the zygote reaps it and writes its status
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None and self._pidfd is not None:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self._pidfd, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def _close(self) -> None:
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None

    def __del__(self) -> None:
        self._close()


class _Zygote:
    """This process's zygote: started on first use, ended with this process."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.proc: subprocess.Popen | None = None
        self.rc_dir: Path | None = None   # made with the zygote: where it writes its children's statuses

    def fork(self, args: Sequence[str], env: Mapping[str, str], cwd: str, stdin: str, stdout: str,
             stderr: str) -> Forked:
        """The CLI command ``args`` (``python -m netbay.cli.main …``), forked."""
        request = json.dumps({"argv": list(args[3:]), "env": dict(env), "cwd": cwd, "stdin": stdin,
                              "stdout": stdout, "stderr": stderr}) + "\n"
        with self.lock:
            if self.proc is None or self.proc.poll() is not None:
                if self.rc_dir is None:
                    self.rc_dir = Path(tempfile.mkdtemp(prefix="nbtest-zygote-"))
                    atexit.register(self.close)
                self.proc = subprocess.Popen([sys.executable, "-m", "tests.zygote", str(self.rc_dir)],
                                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=REPO,
                                             env={**os.environ, "PYTHONPATH": _pythonpath()})
            assert self.proc.stdin is not None and self.proc.stdout is not None
            self.proc.stdin.write(request.encode())
            self.proc.stdin.flush()
            answer = json.loads(self.proc.stdout.readline() or b'{"error": "the zygote exited"}')
            rc_dir = self.rc_dir
        assert rc_dir is not None   # made above with the zygote
        if "pid" not in answer:
            raise RuntimeError(f"zygote: {answer.get('error')}")
        return Forked(int(answer["pid"]), rc_dir / str(answer["pid"]), args)

    def close(self) -> None:
        with self.lock:
            if self.proc is not None and self.proc.poll() is None:
                assert self.proc.stdin is not None
                self.proc.stdin.close()   # its loop ends on EOF
                try:
                    self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(timeout=10)
            self.proc = None
            if self.rc_dir is not None:   # only the directory fork made, never a default
                shutil.rmtree(self.rc_dir, ignore_errors=True)
                self.rc_dir = None


_ZYGOTE = _Zygote()


def close() -> None:
    """End this process's zygote now rather than at exit (tests/conftest.py, at the session's end)."""
    _ZYGOTE.close()


def _pythonpath() -> str:
    return os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)


def _forks(args: Sequence[str]) -> bool:
    return enabled() and len(args) > 2 and args[0] == sys.executable and tuple(args[1:3]) == ENTRY


def _path(target: Any, default: str) -> str:
    """Where a child's stream goes: a path, an open file's path, DEVNULL or inherit (None)."""
    if target is None:
        return default
    if target == subprocess.DEVNULL:
        return os.devnull
    if isinstance(target, (str, Path)):
        return str(target)
    if hasattr(target, "name") and isinstance(target.name, str) and os.path.exists(target.name):
        target.flush()
        return target.name
    raise ValueError(f"cannot hand {target!r} to a forked child")


def popen(args: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: str | Path | None = None,
          stdin: Any = None, stdout: Any = None, stderr: Any = None, **rest: Any) -> Any:
    """``subprocess.Popen(args, …)``; a ``python -m netbay.cli.main`` command forked from the zygote."""
    def fresh() -> subprocess.Popen:
        with contextlib.ExitStack() as files:   # a path (this module's own way) opened for Popen
            def opened(target: Any, mode: str) -> Any:
                return files.enter_context(open(target, mode)) if isinstance(target, (str, Path)) else target

            return subprocess.Popen(args, env=env, cwd=cwd, stdin=opened(stdin, "rb"), stdout=opened(stdout, "ab"),
                                    stderr=opened(stderr, "ab"), **rest)

    if not _forks(args) or rest or subprocess.PIPE in (stdin, stdout, stderr):
        return fresh()
    mine = f"/proc/{os.getpid()}/fd"   # inherited streams: this process's own, as Popen's are
    try:
        out = _path(stdout, f"{mine}/1")
        err = out if stderr == subprocess.STDOUT else _path(stderr, f"{mine}/2")
        into = _path(stdin, os.devnull)
    except ValueError:   # a raw descriptor: only a real Popen can hand it over
        return fresh()
    return _ZYGOTE.fork(args, env if env is not None else os.environ, str(cwd or os.getcwd()), into, out, err)


def run(args: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: str | Path | None = None,
        capture_output: bool = False, text: bool = False, timeout: float | None = None,
        input: str | bytes | None = None, check: bool = False, **rest: Any) -> subprocess.CompletedProcess:  # noqa: A002
    """``subprocess.run(args, …)``; a ``python -m netbay.cli.main`` command forked from the zygote,
    its output captured through files."""
    if not _forks(args) or rest:
        return subprocess.run(args, env=env, cwd=cwd, capture_output=capture_output, text=text, timeout=timeout,
                              input=input, check=check, **rest)
    with tempfile.TemporaryDirectory(prefix="nbtest-run-") as tmp:
        where = Path(tmp)
        stdin = None
        if input is not None:
            (where / "in").write_bytes(input.encode() if isinstance(input, str) else input)
            stdin = where / "in"
        outs = (where / "out", where / "err") if capture_output else (None, None)
        proc = popen(args, env=env, cwd=cwd, stdin=stdin, stdout=outs[0], stderr=outs[1])
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
            raise
        got: list[Any] = [None, None]
        if capture_output:
            got = [p.read_bytes() if p.exists() else b"" for p in outs]
            if text:
                got = [b.decode() for b in got]
    done = subprocess.CompletedProcess(list(args), code, got[0], got[1])
    if check:
        done.check_returncode()
    return done


# --- the zygote's side ----------------------------------------------------------------------


def _reap(rc_dir: Path) -> None:
    """Write each exited child's status (as ``Popen.returncode`` says it) to ``rc_dir/<pid>``."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        code = os.waitstatus_to_exitcode(status)
        tmp = rc_dir / f".{pid}"
        tmp.write_text(str(code))
        tmp.rename(rc_dir / str(pid))


def _child(request: dict[str, Any]) -> None:
    """Become the command: its streams, directory, environment and argv; exit as Python does."""
    code = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
        os.chdir(request["cwd"])
        os.dup2(os.open(request["stdin"], os.O_RDONLY), 0)
        os.dup2(os.open(request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644), 1)
        if request["stderr"] == request["stdout"]:
            os.dup2(1, 2)
        else:
            os.dup2(os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644), 2)
        os.closerange(3, 65536)   # the zygote's pipes and anything else it held
        os.environ.clear()
        os.environ.update(request["env"])
        from tests.clihelp import _size_consoles

        _size_consoles(dict(os.environ))   # made at import, in the zygote: sized as this process's
        import netbay.cli.main as entry

        sys.argv = [entry.__file__, *request["argv"]]
        try:
            entry.app(args=request["argv"], prog_name="python -m netbay.cli.main")   # as click names it
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except KeyboardInterrupt:   # Python's exit on an unhandled one: killed by SIGINT
            code = -signal.SIGINT
        threading._shutdown()   # type: ignore[attr-defined]  # non-daemon threads, as at exit
        atexit._run_exitfuncs()
        if code == -signal.SIGINT:
            sys.stdout.flush()
            sys.stderr.flush()
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
    except BaseException:   # noqa: BLE001 - reported in the child's own stderr
        import traceback

        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def main(rc_dir: str) -> None:
    for name in (*PRELOAD, "tests.clihelp"):
        __import__(name)
    where = Path(rc_dir)
    signal.signal(signal.SIGCHLD, lambda *_: _reap(where))
    requests, answers = sys.stdin.buffer, sys.stdout.buffer
    while line := requests.readline():
        request = json.loads(line)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})   # no reap between fork and cleanup
        try:
            answers.flush()
            pid = os.fork()
            if pid == 0:
                _child(request)
            (where / str(pid)).unlink(missing_ok=True)   # an earlier child's, under a reused PID
            reply = {"pid": pid}
        except OSError as exc:
            reply = {"error": str(exc)}
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
        answers.write((json.dumps(reply) + "\n").encode())
        answers.flush()


if __name__ == "__main__":
    main(sys.argv[1])
