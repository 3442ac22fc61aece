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


def test_ownership_tags_are_made_read_back_and_stripped() -> None:
    from netbay.runtime import tags

    own = tags.Owner("netbay.t")
    pool = own.family("pool", lambda cidr: cidr.replace("/", "_"))
    ctr = own.family("ctr")
    port = {"tags": [own.made, ctr("c1"), pool("10.0.0.0/24"), "user-tag", "netbay.other:x"]}
    assert (own.made, ctr("c1"), pool("10.0.0.0/24")) == ("netbay.t.made", "netbay.t.ctr:c1", "netbay.t.pool:10.0.0.0_24")
    assert ctr.value(port) == "c1" and pool.values(port) == ["10.0.0.0_24"] and own.made_it(port)
    assert ctr.value({"tags": None}) == "" and not pool.on({}) and not own.made_it({"tags": ["user-tag"]})
    assert own.without_ours(port["tags"]) == ["user-tag", "netbay.other:x"]
    assert [tags.on_host_or_unbound({"binding:host_id": h}, "h1") for h in ("h1", "", "h2")] == [True, True, False]


def test_cni_and_docker_tags_keep_their_spelling() -> None:
    """Tags are what a restarted daemon finds its ports by: an upgrade must read the old ones."""
    from netbay.plugins.cni import service as cni
    from netbay.plugins.libnetwork import directory as docker

    assert (cni.MADE, cni.DEVICE_SET, cni.ctr_tag("c"), cni.if_tag("eth0"), cni.net_tag("k")) == (
        "netbay.cni.made", "netbay.cni.device", "netbay.cni.ctr:c", "netbay.cni.if:eth0", "netbay.cni.net:k")
    assert (docker.MADE, docker.PENDING, docker.net_tag("n"), docker.pool_tag("10.1.0.0/16"),
            docker.pending_pool_tag("10.1.0.0/16"), docker.ep_tag("e"), docker.owner_tag("netbay", "h")) == (
        "netbay.docker.made", "netbay.docker.pending", "netbay.docker.net:n", "netbay.docker.pool:10.1.0.0_16",
        "netbay.docker.pending:10.1.0.0_16", "netbay.docker.ep:e", "netbay.docker.by:netbay@h")
    assert docker.endpoint_of({"tags": [docker.ep_tag("e1")], "device_id": "d"}) == "e1"
    assert docker.endpoint_of({"device_id": "d"}) == "d"
    assert docker.is_pool({"tags": [docker.pool_tag("10.1.0.0/16")]}) and not docker.is_pool({"tags": []})


def test_a_port_is_bound_keeping_a_named_device_and_given_back_clearing_only_ours() -> None:
    from netbay.runtime import binding

    assert binding.bind({}, "c1", "compute:netbay", "h1") == {
        "device_id": "c1", "device_owner": "compute:netbay", "binding:host_id": "h1"}
    # a controller named the device already: it stays; no owner given: the port's stays
    assert binding.bind({"device_id": "pod-uid"}, "c1", host="h1") == {"binding:host_id": "h1"}
    assert binding.bind({"device_id": ""}, "c1", "kuryr:container") == {"device_id": "c1",
                                                                        "device_owner": "kuryr:container"}
    assert binding.unbind(False) == {"binding:host_id": ""}
    assert binding.unbind(True) == {"binding:host_id": "", "device_id": "", "device_owner": ""}
    assert binding.unbind(True, host=False) == {"device_id": "", "device_owner": ""}
