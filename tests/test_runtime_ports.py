"""The container-port core of :mod:`netbay.runtime` that the Docker driver, the CNI
daemon and the container API share, on fake backends (no root, no server)."""

from __future__ import annotations

import asyncio


def test_kernel_work_runs_in_order_on_one_thread_off_the_loop() -> None:
    import threading

    from netbay.runtime.kernel import KernelThread

    kernel, seen = KernelThread("test-kernel"), []

    def work(i: int) -> int:
        seen.append((i, threading.get_ident()))
        return i * 2

    async def main() -> list[int]:
        return list(await asyncio.gather(*(kernel(work, i) for i in range(20))))

    try:
        assert asyncio.run(main()) == [i * 2 for i in range(20)]
    finally:
        kernel.close()
    assert [i for i, _ in seen] == list(range(20))                 # in the order asked
    assert len({t for _, t in seen}) == 1 != threading.get_ident()  # one thread, not the caller's
