"""Named network namespaces, in-process and compatible with iproute2.

A namespace named ``NAME`` is a bind mount of an nsfs inode on ``/run/netns/NAME``,
exactly as ``ip netns add`` makes it, so ``ip netns exec NAME …`` works for
debugging. Nothing here forks: a namespace is made by ``unshare(CLONE_NEWNET)`` of the
calling thread, whose new namespace is bind-mounted before the thread ``setns``-es
back, and :func:`entered` switches *the calling thread only* into a namespace with
``setns(2)``.

Sockets (netlink, nftables, plain ones) are bound to the namespace of the thread
that creates them, for their whole life; that is how the rest of
:mod:`netbay.dataplane` reaches inside a namespace without a helper process.

Rules of use:

* :func:`entered` must not span an ``await`` — another coroutine of the same event
  loop would run inside the namespace. Use it in plain functions (or in a worker
  thread), open what you need, leave.
* Threads started while inside inherit the namespace (the kernel copies it at
  ``clone``); don't start thread pools there.
* A socket or an open namespace fd keeps a namespace alive after :func:`delete`.
  Code that caches such things registers a closer with :func:`on_delete`.
* Names are limited to ``[A-Za-z0-9_.-]``; product namespaces start with
  :data:`PREFIX`.
"""

from __future__ import annotations

import builtins
import contextlib
import ctypes
import ctypes.util
import errno
import os
import re
import threading
from collections.abc import Callable, Iterator

__all__ = [
    "NETNS_RUN_DIR", "PREFIX", "NetnsError", "create", "delete", "list", "exists",
    "entered", "path", "locate", "on_delete", "inode", "current_inode", "home_inode", "in_home",
]

NETNS_RUN_DIR = "/run/netns"
PREFIX = "nb-"

CLONE_NEWNET = 0x40000000
MS_BIND = 4096
MS_REC = 16384
MS_SHARED = 1 << 20
MNT_DETACH = 2

_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]{1,200}$")

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.setns.argtypes = [ctypes.c_int, ctypes.c_int]
_libc.unshare.argtypes = [ctypes.c_int]
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                        ctypes.c_ulong, ctypes.c_void_p]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]

# The namespace this process started in ("home"): netbay never configures it.
_HOME = os.stat("/proc/self/ns/net")
_NSFS_DEV = _HOME.st_dev

_lock = threading.Lock()
_run_dir_ready = False
_delete_hooks: builtins.list[Callable[[str], None]] = []


class NetnsError(OSError):
    """A namespace operation failed; ``errno`` and the namespace name are kept."""


def _err(what: str, name: str, err: int | None = None) -> NetnsError:
    err = ctypes.get_errno() if err is None else err
    return NetnsError(err, f"{what} for network namespace {name!r}: {os.strerror(err)}")


def _check_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME_RE.match(name) or name in (".", ".."):
        raise ValueError(f"invalid network namespace name {name!r}")
    return name


def path(name: str) -> str:
    """The bind-mount path of namespace ``name`` (``/run/netns/NAME``)."""
    return os.path.join(NETNS_RUN_DIR, _check_name(name))


def locate(ns: str) -> str:
    """The file of ``ns``: a name's bind mount, or — an absolute path — a namespace a
    container runtime made and named by its file (CNI's ``CNI_NETNS``), used as is."""
    return ns if ns.startswith("/") else path(ns)


def current_inode() -> int:
    """Inode of the calling thread's network namespace."""
    return os.stat("/proc/thread-self/ns/net").st_ino


def home_inode() -> int:
    """Inode of the network namespace the process started in."""
    return _HOME.st_ino


def in_home() -> bool:
    """True when the calling thread is in the process's starting namespace."""
    return current_inode() == _HOME.st_ino


def _mount_point(p: str) -> None:
    """The empty file a namespace is bind-mounted on, under a ready ``/run/netns``."""
    _ensure_run_dir()
    try:
        os.close(os.open(p, os.O_RDONLY | os.O_CREAT | os.O_EXCL, 0))
    except FileExistsError:
        pass  # a stale, unmounted file (crash between open and mount): reuse it


def _ensure_run_dir() -> None:
    """``mkdir /run/netns`` and make it a shared mount point, as iproute2 does.

    Sharing lets an unmount in one mount namespace propagate to the others (``ip
    netns exec`` makes its own), so a deleted namespace is really freed.
    """
    global _run_dir_ready
    if _run_dir_ready:
        return
    os.makedirs(NETNS_RUN_DIR, mode=0o755, exist_ok=True)
    d = NETNS_RUN_DIR.encode()
    made_mount = False
    for _ in range(2):
        if _libc.mount(b"", d, b"none", MS_SHARED | MS_REC, None) == 0:
            _run_dir_ready = True
            return
        err = ctypes.get_errno()
        if err != errno.EINVAL or made_mount:
            raise _err("mount --make-shared " + NETNS_RUN_DIR, "*", err)
        # Not a mount point yet: bind it onto itself, then share it.
        if _libc.mount(d, d, b"none", MS_BIND | MS_REC, None) != 0:
            raise _err("mount --bind " + NETNS_RUN_DIR, "*")
        made_mount = True
    raise _err("mount --make-shared " + NETNS_RUN_DIR, "*", errno.EINVAL)


def inode(name: str) -> int | None:
    """Inode of namespace ``name`` (identifies it: a re-created namespace differs),
    or None if it does not exist."""
    try:
        st = os.stat(locate(name))
    except FileNotFoundError:
        return None
    return st.st_ino if st.st_dev == _NSFS_DEV else None


def exists(name: str) -> bool:
    """True if ``/run/netns/NAME`` exists and is a mounted namespace."""
    try:
        st = os.stat(path(name))
    except FileNotFoundError:
        return False
    return st.st_dev == _NSFS_DEV


def create(name: str) -> bool:
    """Create network namespace ``name``; idempotent.

    Returns True if it was created, False if it already existed. The new namespace
    has only ``lo``, down — see :func:`netbay.dataplane.links.set_up`.
    """
    p = path(name)
    with _lock:
        if exists(name):
            return False
        _mount_point(p)
        # unshare(CLONE_NEWNET) moves only the calling thread; bind-mount its new
        # namespace, then return the thread to where it was (iproute2's
        # netns_save/netns_restore, without the fork).
        failure: tuple[str, int] | None = None
        back = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        try:
            try:
                if _libc.unshare(CLONE_NEWNET) != 0:
                    failure = ("unshare(CLONE_NEWNET)", ctypes.get_errno())
                elif _libc.mount(b"/proc/thread-self/ns/net", p.encode(), b"none",
                                 MS_BIND, None) != 0:
                    failure = ("bind mount", ctypes.get_errno())
            finally:
                # Unconditionally (also if an exception struck right after unshare):
                # setns to where we already are is harmless.
                _return_to(back, name)
        finally:
            os.close(back)
        if failure is not None:
            with contextlib.suppress(OSError):
                os.unlink(p)
            raise _err(failure[0], name, failure[1])
        return True


def attach(name: str, source: str) -> bool:
    """Name an existing namespace (``ip netns attach``): bind-mount ``source`` (e.g.
    ``/proc/PID/ns/net`` of a container's process) onto ``/run/netns/NAME``, so it can
    be entered by name. :func:`delete` unmounts the name only; the namespace lives on
    while its process does. True if named now, False if ``name`` already was."""
    p = path(name)
    with _lock:
        if exists(name):
            return False
        _mount_point(p)
        if _libc.mount(source.encode(), p.encode(), b"none", MS_BIND, None) != 0:
            err = ctypes.get_errno()
            with contextlib.suppress(OSError):
                os.unlink(p)
            raise _err(f"bind mount {source}", name, err)
        return True


def on_delete(hook: Callable[[str], None]) -> None:
    """Register ``hook(name)``, called before a namespace is deleted.

    Used to close cached sockets, which would otherwise keep a deleted namespace
    (and everything in it) alive.
    """
    if hook not in _delete_hooks:
        _delete_hooks.append(hook)


def delete(name: str) -> bool:
    """Delete namespace ``name`` (close cached sockets, unmount, unlink); idempotent.

    Returns True if something was removed. The kernel tears down the namespace's
    interfaces asynchronously once nothing references it.
    """
    p = path(name)
    for hook in builtins.list(_delete_hooks):
        with contextlib.suppress(Exception):
            hook(name)
    with _lock:
        if not os.path.lexists(p):
            return False
        if _libc.umount2(p.encode(), MNT_DETACH) != 0:
            err = ctypes.get_errno()
            if err not in (errno.EINVAL, errno.ENOENT):  # EINVAL: not mounted
                raise _err("umount", name, err)
        try:
            os.unlink(p)
        except FileNotFoundError:
            pass
        return True


def list(prefix: str = "") -> builtins.list[str]:  # noqa: A001 - the module's verb
    """Names of the mounted namespaces under /run/netns starting with ``prefix``."""
    try:
        names = os.listdir(NETNS_RUN_DIR)
    except FileNotFoundError:
        return []
    return sorted(n for n in names if n.startswith(prefix) and _NAME_RE.match(n)
                  and exists(n))


def _setns(fd: int, name: str) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        raise _err("setns", name)


def _return_to(back: int, name: str) -> None:
    """setns back to ``back``. Failing would leave this thread in the wrong namespace
    for everything it does next, so retry, then raise SystemExit (not an Exception:
    nobody should catch it and carry on)."""
    for _ in range(3):
        if _libc.setns(back, CLONE_NEWNET) == 0:
            return
    raise SystemExit(f"netbay: cannot return from network namespace {name!r}: "
                     f"{os.strerror(ctypes.get_errno())}")


@contextlib.contextmanager
def entered(name: str) -> Iterator[None]:
    """Switch the calling thread into namespace ``name``, and back on exit.

    Other threads are unaffected. Sockets opened inside stay bound to ``name``.
    Nests. Raises :class:`NetnsError` (ENOENT) if the namespace does not exist, as
    :func:`exists` says: a name whose file is there but not mounted is one another
    thread or process is creating or deleting (not a caller's error).
    ``name`` may be a runtime's namespace file (:func:`locate`).
    """
    p = locate(name)
    try:
        target = os.open(p, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise NetnsError(errno.ENOENT, f"network namespace {name!r} does not exist") from None
    try:
        if os.fstat(target).st_dev != _NSFS_DEV:
            if not name.startswith("/"):   # our own name's file between create's or delete's two steps
                raise NetnsError(errno.ENOENT, f"network namespace {name!r} does not exist (its file {p} is "
                                               "not mounted: being made or deleted)")
            raise NetnsError(errno.EINVAL, f"{p} is not a mounted network namespace")
        back = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        try:
            try:
                _setns(target, name)
                yield
            finally:
                _return_to(back, name)  # harmless if setns did not happen
        finally:
            os.close(back)
    finally:
        os.close(target)
