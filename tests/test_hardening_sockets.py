"""Issue 25, defects 2 and 5, and issue 30's lock-file litter.

Defect 2: the Docker driver's socket was 0666 (uvicorn's ``uds=``) in a directory any
user could enter, while the driver holds admin credentials: as ``nobody``,
``CreateNetwork -o netbay.network=…`` added a subnet to any network. Every socket
netbay serves is now 0600 (0660 to ``--socket-group``), born so, in a directory netbay
makes 0700 when it makes it. Defect 5: a second driver (or CNI daemon) on the same
socket unlinked the first one's and, once stopped, left the first unreachable; now it
refuses and names the holder. Issue 30: lock files are removed at a clean exit, by
their holder while it still holds them, and an acquirer checks that the file it locked
is still the linked one.

The daemons run as real processes (root: both refuse to start otherwise) on sockets
in a temporary directory, never Docker's ``/run/docker/plugins``; nothing of them
talks to a netbay API (their ``--url`` answers nobody: the calls used here need none).
"""

from __future__ import annotations

import contextlib
import errno
import grp
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from netbay import locks, unixsock

NOBODY = 65534
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="the daemons need root, the probe drops to nobody")
NO_API = {"OS_AUTH_URL": "http://127.0.0.1:9/v3", "OS_USERNAME": "admin", "OS_PASSWORD": "x",
          "OS_PROJECT_NAME": "admin", "OS_USER_DOMAIN_NAME": "Default", "OS_PROJECT_DOMAIN_NAME": "Default",
          "NETBAY_LOG_LEVEL": "WARNING"}


@pytest.fixture
def base() -> Iterator[Path]:
    """A directory ``nobody`` may enter (pytest's tmp_path is root's alone: it would refuse
    every probe by itself)."""
    d = Path(tempfile.mkdtemp(prefix="netbay-sock-"))
    d.chmod(0o755)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


# -- the daemons ---------------------------------------------------------------------------


def _driver_cmd(name: str, plugin_dir: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "netbay.cli.main", "libnetwork", "--name", name, "--plugin-dir", str(plugin_dir),
            "--url", "http://127.0.0.1:9", "--prefix", "nbtsk-", "--docker-host", "unix:///nonexistent/docker.sock",
            *extra]


def _cni_cmd(sock: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "netbay.cli.main", "cni-daemon", "--socket", str(sock),
            "--url", "http://127.0.0.1:9", "--prefix", "nbtsk-", *extra]


def _activate(sock: Path) -> bytes:
    """The Docker plugin handshake, raw HTTP on the socket."""
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(5)
        s.connect(str(sock))
        s.sendall(b"POST /Plugin.Activate HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        return _read_all(s)


def _version(sock: Path) -> bytes:
    """A CNI VERSION call through the daemon (its frame: :mod:`netbay.plugins.cni.client`)."""
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(5)
        s.connect(str(sock))
        s.sendall(b"CNI_COMMAND=VERSION\0\0")
        s.shutdown(socket.SHUT_WR)
        return _read_all(s)


def _read_all(s: socket.socket) -> bytes:
    data = b""
    for _ in range(1000):
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


ANSWERS = {"driver": (_activate, b"NetworkDriver"), "cni": (_version, b"supportedVersions")}


class Daemon:
    """One daemon process, started and stopped by its PID."""

    def __init__(self, kind: str, cmd: list[str], sock: Path, log: Path) -> None:
        self.kind, self.cmd, self.sock, self.log = kind, cmd, sock, log
        self.proc: subprocess.Popen | None = None

    def start(self) -> Daemon:
        # Its state (the Docker driver's journal) in the test's directory: a killed one's stays there.
        env = {**os.environ, **NO_API, "NETBAY_STATE_DIR": str(self.log.parent / "state")}
        self.proc = subprocess.Popen(self.cmd, env=env, stdout=open(self.log, "w"),  # noqa: SIM115
                                     stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while not self.answers():
            assert self.proc.poll() is None, self.log.read_text()[-3000:]
            assert time.monotonic() < deadline, f"{self.kind} did not serve {self.sock}"
            time.sleep(0.05)
        return self

    def answers(self) -> bool:
        call, expected = ANSWERS[self.kind]
        try:
            return expected in call(self.sock)
        except OSError:
            return False

    def stop(self, sig: int = signal.SIGTERM) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(timeout=10)


@pytest.fixture
def daemons() -> Iterator[list[Daemon]]:
    started: list[Daemon] = []
    yield started
    for d in started:
        d.stop()


def _daemon(kind: str, where: Path, name: str, log: Path, *extra: str) -> Daemon:
    """The ``kind`` daemon (not started) on ``where/name.sock``."""
    if kind == "driver":
        return Daemon(kind, _driver_cmd(name, where, *extra), where / f"{name}.sock", log)
    return Daemon(kind, _cni_cmd(where / f"{name}.sock", *extra), where / f"{name}.sock", log)


def _connect_as_nobody(sock: Path, gid: int = NOBODY) -> int:
    """errno of a connect to ``sock`` from a child that is uid 65534 (0: it connected)."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 99
        try:
            os.setgroups([])
            os.setgid(gid)
            os.setuid(NOBODY)
            with socket.socket(socket.AF_UNIX) as s:
                s.settimeout(5)
                try:
                    s.connect(str(sock))
                    code = 0
                except OSError as exc:
                    code = exc.errno or 98
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o7777


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir()) if directory.exists() else []


KINDS = ["driver", "cni"]


# -- defect 2: private sockets ---------------------------------------------------------------


@root_only
@pytest.mark.parametrize("kind", KINDS)
def test_the_socket_is_roots_alone_in_a_directory_netbay_makes_0700(kind: str, base: Path, daemons: list) -> None:
    where = base / "made" / "plugins"
    d = _daemon(kind, where, "nbtsk", base / "d.log")
    daemons.append(d.start())
    assert _mode(d.sock) == 0o600
    assert _mode(where) == 0o700 and _mode(where.parent) == 0o700, "the directories netbay made"
    assert _connect_as_nobody(d.sock) == errno.EACCES


@root_only
@pytest.mark.parametrize("kind", KINDS)
def test_in_a_directory_netbay_did_not_make_the_socket_mode_alone_refuses_others(kind: str, base: Path,
                                                                                 daemons: list) -> None:
    """As in Docker's /run/docker/plugins: the directory stays as it is (dockerd reads it)."""
    where = base / "plugins"
    where.mkdir(mode=0o755)
    where.chmod(0o755)
    d = _daemon(kind, where, "nbtsk", base / "d.log")
    daemons.append(d.start())
    assert _mode(where) == 0o755, "netbay changed a directory it did not make"
    assert _mode(d.sock) == 0o600
    assert _connect_as_nobody(d.sock) == errno.EACCES, "another user reached the socket"
    assert d.answers()   # root still does


@root_only
@pytest.mark.parametrize("kind", KINDS)
def test_socket_group_makes_it_0660_to_that_group(kind: str, base: Path, daemons: list) -> None:
    group = grp.getgrgid(NOBODY).gr_name
    existing = base / "plugins"
    existing.mkdir(mode=0o755)
    existing.chmod(0o755)
    d = _daemon(kind, existing, "nbtsk", base / "d.log", "--socket-group", group)
    daemons.append(d.start())
    st = d.sock.stat()
    assert (st.st_mode & 0o7777, st.st_gid) == (0o660, NOBODY)
    assert _connect_as_nobody(d.sock, gid=NOBODY) == 0, "the group's member was refused"
    assert _connect_as_nobody(d.sock, gid=NOBODY - 1) == errno.EACCES, "not the group: refused"
    # A directory netbay makes is the group's to enter, nobody else's.
    made = base / "made"
    d2 = _daemon(kind, made, "nbtsk2", base / "d2.log", "--socket-group", group)
    daemons.append(d2.start())
    assert (_mode(made), made.stat().st_gid) == (0o710, NOBODY)
    assert _connect_as_nobody(d2.sock, gid=NOBODY) == 0


@root_only
@pytest.mark.parametrize("kind", KINDS)
def test_an_unknown_socket_group_is_refused_by_name(kind: str, base: Path) -> None:
    d = _daemon(kind, base / "plugins", "nbtsk", base / "d.log", "--socket-group", "no-such-group-nbtsk")
    done = subprocess.run(d.cmd, env={**os.environ, **NO_API}, capture_output=True, text=True, timeout=60)
    said = " ".join((done.stdout + done.stderr).split())
    assert done.returncode != 0 and "no group named 'no-such-group-nbtsk'" in said, said
    assert not d.sock.exists()


# -- defect 5: one server per socket ---------------------------------------------------------


@root_only
@pytest.mark.parametrize("kind", KINDS)
def test_a_second_daemon_on_the_socket_refuses_naming_the_first_which_keeps_answering(
        kind: str, base: Path, daemons: list) -> None:
    where = base / "plugins"
    first = _daemon(kind, where, "nbtsk", base / "first.log")
    daemons.append(first.start())
    inode = first.sock.stat().st_ino
    second = _daemon(kind, where, "nbtsk", base / "second.log")
    done = subprocess.run(second.cmd, env={**os.environ, **NO_API}, capture_output=True, text=True, timeout=60)
    said = " ".join((done.stdout + done.stderr).split())
    assert done.returncode != 0, said
    assert f"held by netbay PID {first.proc.pid}" in said and str(first.sock) in said, said
    assert first.sock.stat().st_ino == inode, "the second one replaced the first one's socket"
    assert first.answers()
    # A clean stop leaves neither the socket nor its lock.
    assert first.stop() in (0, -signal.SIGTERM)
    assert _leftovers(where) == []


@root_only
@pytest.mark.parametrize("kind", KINDS)
def test_a_killed_daemons_socket_is_replaced(kind: str, base: Path, daemons: list) -> None:
    where = base / "plugins"
    first = _daemon(kind, where, "nbtsk", base / "first.log")
    daemons.append(first.start())
    first.stop(signal.SIGKILL)
    assert first.sock.is_socket(), "a killed daemon's socket stays (its lock does not)"
    second = _daemon(kind, where, "nbtsk", base / "second.log")
    daemons.append(second.start())
    assert _mode(second.sock) == 0o600
    assert second.stop() in (0, -signal.SIGTERM)
    assert _leftovers(where) == []


# -- the lock helper -------------------------------------------------------------------------


def test_a_released_lock_leaves_no_file_unless_kept(tmp_path: Path) -> None:
    gone, kept = tmp_path / "gone.lock", tmp_path / "kept.lock"
    lock = locks.hold(gone, "gone", {"x": 1})
    record = locks.hold(kept, "kept", {"x": 2}, keep=True)
    assert locks.holder(gone) == {"pid": os.getpid(), "x": 1}
    lock.release()
    record.release()
    assert not gone.exists()
    assert kept.exists() and '"x": 2' in kept.read_text()


def test_an_acquirer_that_locked_an_unlinked_file_takes_the_linked_one(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The race: the acquirer opened the file, the holder unlinked it and let go, the
    acquirer's flock then succeeds — on a file nobody else will ever look at."""
    path = tmp_path / "agent-x.lock"
    holder_lock = locks.hold(path, "x", {})
    stale = open(path, "r+")  # noqa: SIM115 - the acquirer's open, before the release
    holder_lock.release()
    assert not path.exists()
    opened: list = []
    real_open = locks._open

    def racing_open(p: Path):
        f = stale if not opened else real_open(p)
        opened.append(f)
        return f

    monkeypatch.setattr(locks, "_open", racing_open)
    lock = locks.hold(path, "x", {"who": "acquirer"})
    assert len(opened) == 2, "the acquirer kept the lock on the unlinked file"
    assert path.exists() and os.stat(path).st_ino == os.fstat(opened[1].fileno()).st_ino
    monkeypatch.setattr(locks, "_open", real_open)
    # and so a third party sees it held (were it the unlinked one, it would get its own)
    child = subprocess.run([sys.executable, "-c", "from pathlib import Path; from netbay import locks; "
                            f"print(locks.holder(Path({str(path)!r})))"], capture_output=True, text=True, timeout=30)
    assert "'who': 'acquirer'" in child.stdout, child.stdout + child.stderr
    lock.release()
    assert not path.exists()


CONTENDER = """
import os, sys, time
from pathlib import Path
from netbay import locks
path, log, until = Path(sys.argv[1]), sys.argv[2], time.monotonic() + float(sys.argv[3])
got = 0
while time.monotonic() < until:
    try:
        lock = locks.hold(path, "x", {})
    except locks.Held:
        continue
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.write(fd, b"+%d\\n" % os.getpid())
    time.sleep(0.0005)
    os.write(fd, b"-%d\\n" % os.getpid())
    os.close(fd)
    lock.release()
    got += 1
print(got)
"""


def test_contenders_that_unlink_on_release_never_hold_at_once(tmp_path: Path) -> None:
    """Three processes take and release (unlinking) the same lock for a second and a half:
    their critical sections never overlap, and the file is gone at the end."""
    path, log = tmp_path / "agent-race.lock", tmp_path / "sections"
    procs = [subprocess.Popen([sys.executable, "-c", CONTENDER, str(path), str(log), "1.5"], stdout=subprocess.PIPE,
                              text=True) for _ in range(3)]
    try:
        counts = [int(p.communicate(timeout=60)[0]) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)
    assert all(c > 0 for c in counts), counts
    lines = log.read_text().split()
    assert len(lines) == 2 * sum(counts)
    for enter, leave in zip(lines[::2], lines[1::2], strict=True):
        assert enter[0] == "+" and leave == "-" + enter[1:], f"two holders at once: {enter} then {leave}"
    assert not path.exists()


@pytest.mark.parametrize("how", ["return", "sigterm"])
def test_a_clean_exit_removes_the_agent_lock(tmp_path: Path, how: str) -> None:
    """``netbay up``'s agent lock (``/run/netbay/agent-<prefix>.lock``, here in a private run dir)."""
    child = ("import sys, time; from netbay.cli import instance; "
             "instance.hold(instance.agent_lock_path('nbtsk-'), 'p', {}); print('held', flush=True); "
             + ("time.sleep(30)" if how == "sigterm" else "sys.exit(0)"))
    proc = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "NETBAY_RUN_DIR": str(tmp_path)})
    try:
        assert proc.stdout.readline().strip() == "held"
        if how == "sigterm":
            assert (tmp_path / "agent-nbtsk-.lock").exists()
            proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) in (0, -signal.SIGTERM)
        assert _leftovers(tmp_path) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def test_a_held_socket_is_not_unlinked_by_a_second_binder(tmp_path: Path) -> None:
    """The helper itself: the second bind raises ``Held`` (our PID) and leaves the socket."""
    sock = tmp_path / "s" / "x.sock"
    first = unixsock.bind(sock, "x")
    try:
        inode = sock.stat().st_ino
        child = subprocess.run([sys.executable, "-c", "from pathlib import Path; from netbay import unixsock, locks\n"
                                "try:\n    unixsock.bind(Path(%r), 'x')\nexcept locks.Held as e:\n    print(e)" % str(sock)],
                               capture_output=True, text=True, timeout=30)
        assert f"held by netbay PID {os.getpid()}" in child.stdout, child.stdout + child.stderr
        assert sock.stat().st_ino == inode
    finally:
        first.close()
    assert _leftovers(sock.parent) == []
    with contextlib.suppress(OSError):
        sock.parent.rmdir()


# -- Docker's idle connections ----------------------------------------------------------------


def _post(s: socket.socket, path: str) -> bytes:
    """One keep-alive request on ``s`` and its response's head (the handshake answers small)."""
    s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{{}}".encode())
    data = b""
    for _ in range(100):
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
        head, sep, body = data.partition(b"\r\n\r\n")
        length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), None)
        if sep and length is not None and len(body) >= length:
            break
    return data


@root_only
def test_an_idle_connection_from_docker_is_still_served_after_uvicorns_default_timeout(base: Path,
                                                                                       daemons: list) -> None:
    """Docker reuses idle plugin connections without limit and resends a failed call with its
    body already read: a plugin closing idle connections after 5 s turned some calls into
    empty resends (``RequestPool came without its body``)."""
    where = base / "plugins"
    d = _daemon("driver", where, "nbtsk", base / "d.log")
    daemons.append(d.start())
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(5)
        s.connect(str(d.sock))
        assert b"NetworkDriver" in _post(s, "/Plugin.Activate")
        time.sleep(6.5)   # past uvicorn's default keep-alive of 5 s
        assert b"Scope" in _post(s, "/NetworkDriver.GetCapabilities"), "the idle connection was closed"
