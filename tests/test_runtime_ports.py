"""The container-port core of :mod:`netbay.runtime` that the Docker driver, the CNI
daemon and the container API share, on fake backends (no root, no server)."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from netbay.errors import NotFound
from netbay.runtime import resolve


class Networks:
    """A synchronous backend of networks; counts the calls it answers."""

    def __init__(self, *nets: dict) -> None:
        self.nets, self.calls = list(nets), []

    def show(self, member: str, obj_id: str) -> dict:
        self.calls.append(("show", obj_id))
        for n in self.nets:
            if n["id"] == obj_id:
                return n
        raise NotFound(f"{member} {obj_id} not found")

    def list(self, member: str, **where: str) -> list[dict]:
        self.calls.append(("list", where.get("name")))
        return [n for n in self.nets if all(n.get(k) == v for k, v in where.items())]


class AsyncNetworks(Networks):
    async def show(self, member: str, obj_id: str) -> dict:  # type: ignore[override]
        return Networks.show(self, member, obj_id)

    async def list(self, member: str, **where: str) -> list[dict]:  # type: ignore[override]
        return Networks.list(self, member, **where)


A, B = str(uuid.uuid4()), str(uuid.uuid4())


@pytest.mark.parametrize("face", ["sync", "async"])
def test_a_network_is_found_by_id_else_by_its_one_name(face: str) -> None:
    backend = (Networks if face == "sync" else AsyncNetworks)(
        {"id": A, "name": "web"}, {"id": B, "name": B.upper()}, {"id": "x1", "name": "twin"},
        {"id": "x2", "name": "twin"})

    def find(ref: str) -> dict:
        if face == "sync":
            return resolve.find(backend, "network", ref)  # type: ignore[arg-type]
        return asyncio.run(resolve.find_async(backend, "network", ref))  # type: ignore[arg-type]

    assert find(A)["name"] == "web"
    assert backend.calls[-1] == ("show", A)           # by id: one call
    backend.calls.clear()
    assert find("web")["id"] == A
    assert backend.calls == [("list", "web")]         # not shaped as an id: no show for nothing
    assert find(B.upper())["id"] == B                 # a UUID-shaped name that is no id: by name
    with pytest.raises(resolve.Unresolved) as none:
        find("nope")
    assert (none.value.count, str(none.value)) == (0, "no network with id or name 'nope'")
    with pytest.raises(resolve.Unresolved) as two:
        find("twin")
    assert two.value.count == 2


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
