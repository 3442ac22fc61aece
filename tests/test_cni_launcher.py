"""The two ``netbay-cni`` launchers ``netbay cni-install`` writes — compiled
(``launcher.c``) and the Python script — run as a runtime runs them (fork + exec,
config on stdin) and held to the same answers: VERSION, the caller's mistakes and an
unreachable daemon with no daemon at all, and against a stand-in daemon the same
request frame sent and its answer (or its absence) printed alike. No root."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from netbay.plugins.cni import client, spec
from netbay.plugins.cni.launcher import c_string, install, is_compiled

CONF = {"cniVersion": "1.0.0", "name": "n", "type": "netbay-cni", "network": "x"}
ENV = {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "abc", "CNI_NETNS": "/run/netns/x", "CNI_IFNAME": "eth0",
       "CNI_PATH": "/opt/cni/bin", "CNI_ARGS": "K8S_POD_NAME=a;IgnoreUnknown=1"}


@pytest.fixture(scope="module")
def launchers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    if not (shutil.which("cc") or shutil.which("gcc")):
        pytest.skip("no C compiler: only the Python launcher can be installed")
    d = tmp_path_factory.mktemp("cnibin")
    compiled, script = install(d / "c"), install(d / "py", compiled=False)
    assert is_compiled(compiled) and not is_compiled(script)
    return {"compiled": compiled, "python": script}


def call(plugin: Path, env: dict[str, str], stdin: bytes = b"") -> tuple[int, bytes, str]:
    p = subprocess.run([str(plugin)], input=stdin, env=env, capture_output=True, timeout=30)
    return p.returncode, p.stdout, p.stderr.decode()


class StandIn:
    """A daemon that records each request frame and answers ``reply``."""

    def __init__(self, path: Path) -> None:
        self.path, self.reply = path, b""
        self.frames: list[bytes] = []
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(path))
        self.sock.listen(8)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                chunks = []
                while chunk := conn.recv(65536):
                    chunks.append(chunk)
                self.frames.append(b"".join(chunks))
                conn.sendall(self.reply)

    def close(self) -> None:
        self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self.thread.join(5)


@pytest.fixture
def stand_in(tmp_path: Path) -> Iterator[StandIn]:
    s = StandIn(tmp_path / "d.sock")
    yield s
    s.close()


def test_without_a_daemon_both_answer_alike(launchers: dict[str, Path], tmp_path: Path) -> None:
    sock = str(tmp_path / "none.sock")
    conf = json.dumps(CONF).encode()
    cases = [({"CNI_COMMAND": "VERSION"}, b""),
             ({**ENV, "NETBAY_CNI_SOCKET": sock}, conf),                               # 11: not running
             ({**ENV, "NETBAY_CNI_SOCKET": sock}, b"{"),                               # 6: bad config
             ({**ENV, "CNI_NETNS": "", "NETBAY_CNI_SOCKET": sock}, conf),              # 4: no netns
             ({"CNI_COMMAND": "STATUS", "CNI_PATH": "/x"}, json.dumps({**CONF, "cniVersion": "1.1.0",
                                                                       "socket": sock}).encode()),  # 50
             ({}, b"")]                                                                # by hand
    for env, stdin in cases:
        answers = {name: call(p, env, stdin) for name, p in launchers.items()}
        assert answers["compiled"] == answers["python"], (env, answers)
    rc, out, _ = call(launchers["compiled"], {"CNI_COMMAND": "VERSION"})
    assert rc == 0 and out == client.VERSION.encode() + b"\n" and json.loads(out) == spec.version_info()
    codes = [json.loads(call(launchers["compiled"], env, stdin)[1])["code"] for env, stdin in cases[1:5]]
    assert codes == [11, 6, 4, 50]
    rc, out, err = call(launchers["compiled"], {})
    assert rc == 0 and out == b"" and "netbay-cni" in err and "1.1.0" in err


def test_the_same_frame_and_answer_through_a_daemon(launchers: dict[str, Path], stand_in: StandIn) -> None:
    """The socket from the configuration; only CNI_* variables travel; the daemon's
    status and body come back as they are."""
    conf = json.dumps({**CONF, "socket": str(stand_in.path)}).encode()
    env = {**ENV, "OTHER": "not sent"}
    for reply, want_rc in ((b'0{"cniVersion": "1.0.0", "ips": []}', 0), (b'1{"code": 7, "msg": "m"}', 1),
                           (b"0", 0)):
        stand_in.reply = reply
        answers = {name: call(p, env, conf) for name, p in launchers.items()}
        assert answers["compiled"] == answers["python"]
        rc, out, _ = answers["compiled"]
        assert rc == want_rc and out == (reply[1:] + b"\n" if len(reply) > 1 else b"")
    frames = set(stand_in.frames)
    assert len(frames) == 1  # both launchers sent the very same bytes
    head, _, body = stand_in.frames[0].partition(b"\0\0")
    assert body == conf
    assert sorted(head.split(b"\0")) == sorted(f"{k}={v}".encode() for k, v in ENV.items())


def test_a_daemon_that_answers_nothing_is_999(launchers: dict[str, Path], stand_in: StandIn) -> None:
    env = {**ENV, "NETBAY_CNI_SOCKET": str(stand_in.path)}
    for reply in (b"", b"garbage"):
        stand_in.reply = reply
        answers = {name: call(p, env, json.dumps(CONF).encode()) for name, p in launchers.items()}
        assert answers["compiled"] == answers["python"]
        rc, out, _ = answers["compiled"]
        assert rc == 1 and json.loads(out)["code"] == 999 and str(stand_in.path) in json.loads(out)["msg"]


def test_a_configuration_over_the_bound_is_refused_unsent(launchers: dict[str, Path], stand_in: StandIn) -> None:
    """Stdin is read up to the daemon's frame cap and no further: past it, a decoding
    failure from the launcher itself, nothing sent to the daemon."""
    from netbay.plugins.cni.server import MAX_FRAME
    assert client.MAX_STDIN == MAX_FRAME   # the launchers refuse what the daemon would
    conf = json.dumps({**CONF, "socket": str(stand_in.path), "pad": "x" * client.MAX_STDIN}).encode()
    answers = {name: call(p, ENV, conf) for name, p in launchers.items()}
    assert answers["compiled"] == answers["python"]
    rc, out, _ = answers["compiled"]
    assert rc == 1 and json.loads(out)["code"] == spec.DECODING_FAILURE
    assert str(client.MAX_STDIN) in json.loads(out)["msg"]
    assert stand_in.frames == []


def test_an_unusual_socket_path_is_read_by_python(launchers: dict[str, Path], stand_in: StandIn) -> None:
    """A path written with a JSON escape is left to client.py's json (stdin replayed)."""
    escaped = json.dumps(str(stand_in.path)).replace("/", "\\/")
    conf = json.dumps(CONF)[:-1].encode() + b', "socket": ' + escaped.encode() + b"}"
    stand_in.reply = b'0{"ok": 1}'
    assert call(launchers["compiled"], ENV, conf) == (0, b'{"ok": 1}\n', "")
    assert stand_in.frames[-1].partition(b"\0\0")[2] == conf


def test_c_string_escapes_what_c_would_misread() -> None:
    assert c_string('a"b\\c??/é') == '"a\\042b\\134c\\077\\077/\\303\\251"'


def test_without_a_compiler_the_python_launcher_is_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    plugin = install(tmp_path / "bin")
    assert not is_compiled(plugin) and plugin.read_text().startswith(f"#!{sys.executable} -IS\n")
    rc, out, _ = call(plugin, {"CNI_COMMAND": "VERSION"})
    assert rc == 0 and json.loads(out) == spec.version_info()
