"""Run a command inside one of the agent's network namespaces, as ``ip netns exec`` does.

Shared by ``netbay sandbox exec`` and ``netbay pod exec``: setns(2) this process into
the namespace, give it a private mount namespace with that namespace's own /sys
(so tools reading /sys/class/net see its interfaces), then replace the process with
the command. Nothing forks; the exit code is the command's.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from collections.abc import Sequence
from typing import NoReturn

import typer
from rich.console import Console

err = Console(stderr=True)

CLONE_NEWNS = 0x00020000
CLONE_NEWNET = 0x40000000
MS_REC, MS_SLAVE, MNT_DETACH = 16384, 1 << 19, 2


def enter_netns(path: str) -> None:
    """setns(2) into the namespace at ``path``; then, as ``ip netns exec`` does, a
    private mount namespace with the namespace's own /sys (best effort)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e))
    finally:
        os.close(fd)
    if libc.unshare(CLONE_NEWNS) != 0:
        return
    if libc.mount(b"none", b"/", None, MS_REC | MS_SLAVE, None) != 0:
        return
    libc.umount2(b"/sys", MNT_DETACH)
    libc.mount(b"sysfs", b"/sys", b"sysfs", 0, None)


def exec_in(ns: str, command: Sequence[str]) -> NoReturn:
    """Replace this process with ``command`` running in namespace ``ns``; exit 1 when
    the namespace is missing or cannot be entered, 127 when the command cannot run."""
    from netbay.dataplane import netns

    if not command:
        err.print("[red]error:[/] no command given (put it after --)")
        raise typer.Exit(2)
    if not netns.exists(ns):
        err.print(f"[red]error:[/] namespace {ns} does not exist on this host (is the agent running here, "
                  "with this --prefix?)")
        raise typer.Exit(1)
    try:
        enter_netns(netns.path(ns))
    except OSError as exc:
        err.print(f"[red]error:[/] cannot enter {ns}: {exc} (root needed)")
        raise typer.Exit(1) from None
    try:
        os.execvp(command[0], list(command))
    except OSError as exc:
        err.print(f"[red]error:[/] {command[0]}: {exc.strerror}")
        raise typer.Exit(127) from None
