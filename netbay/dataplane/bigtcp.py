"""BIG TCP on the veths netbay makes: one decision for fabric ports and pods alike.

TCP in a namespace builds GSO packets of up to :data:`GSO_MAX_SIZE` bytes instead of
the kernel's 64 KiB when both ends of its veth allow it. A packet through netbay's
paths pays a fixed cost whatever its size (a second veth hop, a bridge,
br_netfilter, conntrack, the security-group lookups, a node's routing), so 3x larger
packets divide that cost by 3: without it a sandbox-to-sandbox TCP stream gets ~80%
of a bare veth pair's throughput (bench/throughput.py), and a pod behind a node gets
less than the node itself. Segmentation, where a packet leaves for a smaller MTU
(VXLAN) or a device that cannot take it, stays the kernel's job (GSO), as for 64 KiB.

Only asked of kernels with IPv4 BIG TCP (6.3+; the limit is 65536 before 5.19); a
kernel that refuses it once (EINVAL/ERANGE) is not asked again by this process.
"""

from __future__ import annotations

import errno
import logging
import os

log = logging.getLogger(__name__)

GSO_MAX_SIZE = 196608


def _kernel_at_least(major: int, minor: int) -> bool:
    try:
        found = tuple(int(x) for x in os.uname().release.split("-")[0].split(".")[:2])
    except ValueError:
        return False
    return found >= (major, minor)


_state = {"ok": _kernel_at_least(6, 3)}


def gso_max_size() -> int | None:
    """The GSO limit to ask for on a new veth, or None for the kernel's default."""
    return GSO_MAX_SIZE if _state["ok"] else None


def refused(exc: OSError, asked: int | None) -> bool:
    """True (and BIG TCP off from now on) if ``exc`` is the kernel refusing ``asked``:
    the caller then makes the link again without it."""
    if asked and getattr(exc, "errno", None) in (errno.EINVAL, errno.ERANGE):
        log.info("kernel refuses GSO packets of %d bytes (%s); using its default", asked, exc)
        _state["ok"] = False
        return True
    return False


def disable() -> None:
    """Use the kernel's default from now on (benchmarks compare both)."""
    _state["ok"] = False


def enable() -> None:
    """Ask for BIG TCP again where the kernel has it (after :func:`disable`)."""
    _state["ok"] = _kernel_at_least(6, 3)


__all__ = ["GSO_MAX_SIZE", "disable", "enable", "gso_max_size", "refused"]
