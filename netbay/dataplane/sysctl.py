"""Sysctls of a network namespace: only the ``net.*`` subtree is per namespace, and
/proc/sys/net follows the thread that opens it, so the file is opened inside."""

from __future__ import annotations

import errno

from netbay.dataplane import netns
from netbay.dataplane.rtnl.sockets import LinkError


def _sysctl_path(key: str) -> str:
    rel = key if "/" in key else key.replace(".", "/")
    rel = rel.strip("/")
    parts = rel.split("/")
    # Only the network subtree is per namespace; everything else is the host's.
    if parts[0] != "net" or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"refusing sysctl {key!r}: only net.* is per network namespace")
    return "/proc/sys/" + rel


def sysctl(ns: str, key: str, value: str | int) -> None:
    """Write sysctl ``key`` (``net.ipv4.ip_forward`` or ``net/ipv4/conf/eth0.1/...``)
    inside ``ns``. /proc/sys/net follows the writing thread's namespace."""
    p = _sysctl_path(key)
    with netns.entered(ns):
        if netns.in_home():
            raise LinkError(errno.EPERM, f"namespace {ns!r} is the host's namespace")
        try:
            with open(p, "w") as f:
                f.write(f"{value}\n")
        except FileNotFoundError:
            raise LinkError(errno.ENOENT, f"sysctl {key} does not exist in namespace "
                                          f"{ns!r} (feature missing or not per-namespace)") from None


def read_sysctl(ns: str, key: str) -> str:
    """Read sysctl ``key`` inside ``ns``."""
    p = _sysctl_path(key)
    with netns.entered(ns):
        try:
            with open(p) as f:
                return f.read().strip()
        except FileNotFoundError:
            raise LinkError(errno.ENOENT, f"sysctl {key} does not exist in namespace "
                                          f"{ns!r}") from None
