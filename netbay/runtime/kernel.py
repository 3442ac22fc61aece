"""The one thread a container-port service does its netlink work on.

Netlink sockets (:mod:`netbay.dataplane.rtnl`) are per thread, and one writer keeps a
host's fabric changes in order, so the Docker driver and the CNI daemon each run
their kernel work — plug, unplug, marks, the container end's addresses — on one
worker thread, awaited from their event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


class KernelThread:
    """``await kernel(fn, *args)``: ``fn(*args)`` on the one worker thread."""

    def __init__(self, name: str = "netbay-kernel") -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)

    async def __call__(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    def close(self) -> None:
        """Work not started yet is dropped: the caller is shutting down."""
        self._pool.shutdown(wait=False, cancel_futures=True)


__all__ = ["KernelThread"]
