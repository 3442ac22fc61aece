"""A daemon's private Unix socket: root's alone (or an operator's group's), one server per path.

Whoever reaches netbay's sockets acts with the daemon's rights (the Docker driver
holds admin credentials; the CNI daemon plugs veths), so every socket netbay serves
is made here: mode 0600, or 0660 to the group the operator names; bound under a
umask, so it never exists with a wider mode; in a directory netbay makes 0700 (0710
to that group) when it makes it — a directory that exists already (Docker's
``/run/docker/plugins``, which dockerd must read) is left as it is.

The socket's path is guarded by a lock file beside it (``<socket>.lock``,
:mod:`netbay.locks`): a second server on the same path refuses and names the first
one's PID; only a socket whose server is gone (its lock free) is replaced. Standard
library only: both plugins use it.
"""

from __future__ import annotations

import contextlib
import grp
import os
import socket
from pathlib import Path

from netbay.locks import Lock, hold

SOCKET_MODE, GROUP_SOCKET_MODE = 0o600, 0o660
DIR_MODE, GROUP_DIR_MODE = 0o700, 0o710


def group_id(name: str | None) -> int | None:
    """The gid of the group ``name`` (None: no group); an unknown name is a ``ValueError``."""
    if name is None:
        return None
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        raise ValueError(f"no group named {name!r} on this host") from None


def lock_path(path: Path) -> Path:
    return path.with_name(path.name + ".lock")


class Listener:
    """A bound socket (not listening yet: the server calls ``listen``) and the lock on
    its path. :meth:`close` removes both, the socket first; so does the process's exit."""

    def __init__(self, path: Path, sock: socket.socket, lock: Lock) -> None:
        self.path, self.sock, self.lock = path, sock, lock

    def close(self) -> None:
        self.sock.close()
        self.lock.release()   # the socket's file first (its ``before_release``), in the process that made it


def _unlinker(path: Path):  # noqa: ANN202
    def unlink() -> None:
        with contextlib.suppress(FileNotFoundError):
            if path.is_socket():
                os.unlink(path)
    return unlink


def _make_dir(directory: Path, gid: int | None) -> None:
    """``directory`` and missing parents, when netbay makes them: 0700 (0710 to ``gid``)."""
    if directory.exists():
        return
    _make_dir(directory.parent, gid)
    with contextlib.suppress(FileExistsError):
        os.mkdir(directory, DIR_MODE)
        if gid is not None:
            os.chown(directory, -1, gid)
        os.chmod(directory, DIR_MODE if gid is None else GROUP_DIR_MODE)   # the umask may have narrowed it


def bind(path: Path, what: str, group: str | None = None) -> Listener:
    """Claim ``path`` (or raise :class:`netbay.locks.Held` naming its server), and bind a
    fresh socket there, 0600 (0660 to ``group``). ``ValueError``: an unknown group."""
    gid = group_id(group)
    _make_dir(path.parent, gid)
    lock = hold(lock_path(path), what, {"socket": str(path)})
    try:
        if path.is_socket():
            path.unlink()   # its server is gone: we hold the lock
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            old = os.umask(0o177)   # born 0600: no moment where another user may connect
            try:
                sock.bind(str(path))
            finally:
                os.umask(old)
            try:
                if gid is not None:
                    os.chown(path, -1, gid)
                    os.chmod(path, GROUP_SOCKET_MODE)
            except BaseException:
                path.unlink()
                raise
        except BaseException:
            sock.close()
            raise
        lock.before_release = _unlinker(path)   # also at SIGTERM before the server handles it
    except BaseException:
        lock.release()
        raise
    return Listener(path, sock, lock)


__all__ = ["Listener", "bind", "group_id", "lock_path"]
