"""One holder per lock file: an ``flock`` that names its holder and leaves no litter.

The kernel drops an ``flock`` when its process dies, so a crash leaves nothing stale
to judge. A clean exit (normal return, ``SIGTERM``, ``SIGINT``) removes the file too,
without racing the next holder: the holder unlinks the file while it still holds the
lock, and an acquirer, once its ``flock`` succeeds, checks that the file it locked is
still the one at the path (same inode) — else it locked a file that was unlinked while
it waited, and tries again on the new one. Standard library only: the CLI and both
plugins use it.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import json
import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

ATTEMPTS = 20      # re-opens after losing the race with an unlinking holder (each one is a real change)


class Held(Exception):
    """The lock is held by another process (its description in ``info``)."""

    def __init__(self, what: str, info: dict[str, Any]) -> None:
        pid = info.get("pid", "?")
        super().__init__(f"{what} is held by netbay PID {pid}"
                         + (f" ({info['url']})" if info.get("url") else ""))
        self.info = info


class Lock:
    """A held lock file (``keep``: the file stays when released, as a record of the
    last holder)."""

    def __init__(self, path: Path, f: TextIO, keep: bool) -> None:
        self.path, self._f, self.keep, self._pid = path, f, keep, os.getpid()
        self.before_release: Callable[[], None] | None = None   # what the lock guards, undone first

    @property
    def mine(self) -> bool:
        """Held, and by this process (not by the parent a fork copied it from)."""
        return not self._f.closed and os.getpid() == self._pid

    def release(self) -> None:
        """Unlink (unless ``keep``) while still held, then unlock. Only in the process that
        took it: a forked child exiting must not remove its parent's lock."""
        if not self.mine:
            return
        if self.before_release is not None:
            self.before_release()
        if not self.keep and _linked(self._f, self.path):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
        self._f.close()
        with contextlib.suppress(ValueError):
            _held.remove(self)


_held: list[Lock] = []   # open lock files: the locks live as long as the process, or until released
_hooked = False


def _read(f: TextIO) -> dict[str, Any]:
    f.seek(0)
    try:
        return json.loads(f.read() or "{}")
    except ValueError:
        return {}


def _linked(f: TextIO, path: Path) -> bool:
    """The open file ``f`` is the one linked at ``path`` now."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(f.fileno())
    return (mine.st_ino, mine.st_dev) == (st.st_ino, st.st_dev)


def _open(path: Path) -> TextIO:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    return os.fdopen(fd, "r+")


def hold(path: Path, what: str, info: dict[str, Any], *, keep: bool = False) -> Lock:
    """Take the lock at ``path`` for this process and write ``info`` (plus our PID), or
    raise :class:`Held`. Held until :meth:`Lock.release` or the process's exit."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(ATTEMPTS):
        f = _open(path)
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder_info = _read(f)
            f.close()
            raise Held(what, holder_info) from None
        if _linked(f, path):
            break
        f.close()   # the last holder unlinked it between our open and our flock: the new file's turn
    else:
        raise Held(what, {})
    f.seek(0)
    f.truncate()
    f.write(json.dumps({"pid": os.getpid(), **info}))
    f.flush()
    lock = Lock(path, f, keep)
    _held.append(lock)
    _release_at_exit()
    return lock


def holder(path: Path) -> dict[str, Any] | None:
    """Who holds the lock at ``path`` (None: nobody, or no such file)."""
    for _ in range(ATTEMPTS):
        try:
            f = open(path)  # noqa: SIM115
        except FileNotFoundError:
            return None
        with f:
            try:
                fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return _read(f)
            fcntl.flock(f, fcntl.LOCK_UN)
            if _linked(f, path) or not path.exists():
                return None
        # unlinked and made again while we looked: look at the new one
    return None


def release_all() -> None:
    for lock in list(_held):
        lock.release()


def _release_at_exit() -> None:
    """Locks go at a normal exit (``atexit``), and at ``SIGTERM`` when nobody else
    handles it: the default death, but the locks released first. A handler installed
    later (uvicorn's, the agent's) takes over; uvicorn re-raises the signal to this one
    once it has stopped."""
    global _hooked
    if _hooked:
        return
    _hooked = True
    atexit.register(release_all)
    if threading.current_thread() is threading.main_thread() and \
            signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _die_released)


def _die_released(signum: int, _frame: Any) -> None:
    release_all()
    signal.signal(signum, signal.SIG_DFL)
    signal.raise_signal(signum)


__all__ = ["Held", "Lock", "hold", "holder", "release_all"]
