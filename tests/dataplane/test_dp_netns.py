"""Named network namespaces: iproute2-compatible, per-thread entry, clean deletion."""

from __future__ import annotations

import os
import socket
import threading

import pytest

from netbay.dataplane import netns
from .dp_helpers import PREFIX, ip_netns_exec


def test_create_is_idempotent_and_visible_to_iproute2(make_ns):
    name = make_ns("ns-a")
    assert netns.exists(name)
    assert netns.create(name) is False  # already there: no error, nothing new
    assert name in netns.list(PREFIX)
    assert os.path.ismount(os.path.join(netns.NETNS_RUN_DIR, name))
    assert name in ip_netns_exec_list()
    r = ip_netns_exec(name, "ip", "-o", "link")
    assert r.returncode == 0, r.stderr
    assert [ln.split(":")[1].strip() for ln in r.stdout.splitlines()] == ["lo"]


def ip_netns_exec_list() -> list[str]:
    import subprocess

    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                         timeout=10).stdout
    return [ln.split()[0] for ln in out.splitlines() if ln.strip()]


def test_run_dir_is_a_shared_mount():
    # Like iproute2: unmounts propagate to the mount namespaces `ip netns exec` makes.
    netns.create(PREFIX + "shared")
    try:
        with open("/proc/self/mountinfo") as f:
            line = next(ln for ln in f if ln.split()[4] == netns.NETNS_RUN_DIR)
        assert "shared:" in line
    finally:
        netns.delete(PREFIX + "shared")


def test_delete_leaves_nothing():
    names = [f"{PREFIX}del-{i}" for i in range(5)]
    try:
        for n in names:
            assert netns.create(n) is True
        for n in names:
            assert netns.delete(n) is True
        for n in names:
            assert not netns.exists(n)
            assert not os.path.lexists(os.path.join(netns.NETNS_RUN_DIR, n))
            assert netns.delete(n) is False  # idempotent
        assert not set(names) & set(netns.list(PREFIX))
        assert not set(names) & set(ip_netns_exec_list())
    finally:
        for n in names:
            netns.delete(n)


def test_stale_unmounted_file_is_reused(make_ns):
    name = PREFIX + "stale"
    path = os.path.join(netns.NETNS_RUN_DIR, name)
    netns.create(PREFIX + "dummy")  # makes sure the directory exists
    netns.delete(PREFIX + "dummy")
    open(path, "w").close()  # what a crash between open and mount leaves
    try:
        assert not netns.exists(name)
        assert name not in netns.list(PREFIX)
        assert netns.create(name) is True
        assert netns.exists(name)
    finally:
        netns.delete(name)
    assert not os.path.lexists(path)


def test_entered_moves_only_the_calling_thread(make_ns):
    a, b = make_ns("ent-a"), make_ns("ent-b")
    home = netns.current_inode()
    assert netns.in_home()
    seen: dict[str, int] = {}
    go, done = threading.Event(), threading.Event()

    def other() -> None:
        go.wait(5)
        seen["other"] = netns.current_inode()
        done.set()

    t = threading.Thread(target=other)
    t.start()
    with netns.entered(a):
        ino_a = netns.current_inode()
        go.set()
        assert done.wait(5)
        with netns.entered(b):
            ino_b = netns.current_inode()
        assert netns.current_inode() == ino_a  # nesting returns to a, not home
    t.join(5)
    assert netns.current_inode() == home
    assert len({home, ino_a, ino_b}) == 3
    assert seen["other"] == home
    assert os.stat(os.path.join(netns.NETNS_RUN_DIR, a)).st_ino == ino_a


def test_entered_restores_on_exception(make_ns):
    a = make_ns("exc")
    with pytest.raises(RuntimeError), netns.entered(a):
        raise RuntimeError("boom")
    assert netns.in_home()


def test_entered_missing_namespace_raises():
    with pytest.raises(netns.NetnsError) as ei, netns.entered(PREFIX + "absent"):
        pass  # pragma: no cover
    assert ei.value.errno == 2
    assert netns.in_home()


def test_entered_a_name_being_made_or_deleted_raises_missing():
    """The file is there but not mounted (another thread between delete's unmount and
    unlink, or create's open and mount): the namespace does not exist, as exists() says
    (test_dp_agent's sweep over its prefix met one as EINVAL)."""
    name = PREFIX + "halfway"
    path = os.path.join(netns.NETNS_RUN_DIR, name)
    netns.create(PREFIX + "dummy")  # makes sure the directory exists
    netns.delete(PREFIX + "dummy")
    open(path, "w").close()
    try:
        with pytest.raises(netns.NetnsError) as ei, netns.entered(name):
            pass  # pragma: no cover
        assert ei.value.errno == 2 and not netns.exists(name)
        with pytest.raises(netns.NetnsError) as ei, netns.entered(path):   # a runtime's file: as given
            pass  # pragma: no cover
        assert ei.value.errno == 22
    finally:
        os.unlink(path)
    assert netns.in_home()


@pytest.mark.parametrize("bad", ["", "a/b", "..", ".", "x" * 300, "sp ace", "../etc"])
def test_invalid_names_are_refused(bad):
    with pytest.raises(ValueError):
        netns.create(bad)
    with pytest.raises(ValueError):
        netns.path(bad)


def test_socket_opened_inside_stays_bound(make_ns):
    """A socket made while entered keeps working in that namespace after leaving it."""
    a = make_ns("sock")
    with netns.entered(a):
        srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    # The port is held (bound, not listening) on the host's loopback, so no other
    # process there can be listening on it: a refusal below is the namespace's doing.
    held = socket.socket()
    try:
        held.bind(("127.0.0.1", 0))
        port = held.getsockname()[1]
        srv.bind(("127.0.0.1", port))  # lo of `a` is down: 127.0.0.1 still binds
        srv.listen(1)
        # The host's loopback does not reach it.
        with socket.socket() as c:
            c.settimeout(1)
            assert c.connect_ex(("127.0.0.1", port)) != 0
    finally:
        srv.close()
        held.close()


def test_threads_started_inside_inherit_the_namespace(make_ns):
    a = make_ns("inherit")
    got: list[int] = []
    with netns.entered(a):
        inside = netns.current_inode()
        t = threading.Thread(target=lambda: got.append(netns.current_inode()))
        t.start()
        t.join(5)
    assert got == [inside]
