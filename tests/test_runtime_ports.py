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
    from netbay.runtime.claim import Claims

    # the flag a claim puts on a given port whose device it set (cleared when given back)
    assert [Claims(None, own, "", "").device_set for own in (cni.OWN, docker.OWN)] == [  # type: ignore[arg-type]
        cni.DEVICE_SET, "netbay.docker.device"] == ["netbay.cni.device", "netbay.docker.device"]
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


class AsyncPorts:
    """An async backend of ports: made, updated, tagged, deleted; counts its calls."""

    def __init__(self, *ports: dict) -> None:
        self.ports = {p["id"]: {"tags": [], **p} for p in ports}
        self.calls: list[str] = []

    def _get(self, obj_id: str) -> dict:
        if obj_id not in self.ports:
            raise NotFound(f"port {obj_id} not found")
        return self.ports[obj_id]

    async def create(self, member: str, body: dict) -> dict:
        self.calls.append("create")
        port = self.ports[f"p{len(self.ports) + 1}"] = {"id": f"p{len(self.ports) + 1}", "device_id": "",
                                                        "binding:host_id": "", **body}
        return dict(port)

    async def update(self, member: str, obj_id: str, body: dict) -> dict:
        self.calls.append("update")
        self._get(obj_id).update(body)
        return dict(self.ports[obj_id])

    async def add_tag(self, member: str, obj_id: str, tag: str) -> None:
        self.calls.append("add_tag")
        self._get(obj_id)["tags"].append(tag)

    async def set_tags(self, member: str, obj_id: str, tags: list[str]) -> list[str]:
        self.calls.append("set_tags")
        self._get(obj_id)["tags"] = list(tags)
        return list(tags)

    async def delete(self, member: str, obj_id: str) -> None:
        self.calls.append("delete")
        self._get(obj_id)
        del self.ports[obj_id]


def test_a_claim_binds_and_tags_and_giving_back_undoes_only_what_it_did() -> None:
    """One claim for the Docker driver and the CNI daemon: a port made here is deleted
    when given back; a given one is unbound, its device cleared only if the claim set it,
    and only the claimer's tags stripped; each in as few calls as the case needs."""
    from netbay.runtime import tags
    from netbay.runtime.claim import Claims

    own = tags.Owner("netbay.t")
    ctr = own.family("ctr")
    backend = AsyncPorts({"id": "given", "device_id": "", "device_owner": "", "tags": ["user"]},
                         {"id": "named", "device_id": "pod-uid", "device_owner": "compute:kuryr", "tags": []})
    claims = Claims(backend, own, "compute:netbay", "h1")  # type: ignore[arg-type]

    async def main() -> None:
        made = await claims.make({"network_id": "n", "name": "x"}, [ctr("c0")], device="c0")
        assert (made["device_id"], made["device_owner"], made["binding:host_id"]) == ("c0", "compute:netbay", "h1")
        assert made["tags"] == [own.made, ctr("c0")]
        unbound = await claims.make({"network_id": "n"})
        assert (unbound["device_owner"], unbound["device_id"], unbound["binding:host_id"]) == ("compute:netbay", "", "")

        backend.calls.clear()
        given = await claims.claim(backend.ports["given"], "c1", [ctr("c1")])
        assert (given["device_id"], given["binding:host_id"]) == ("c1", "h1")
        assert sorted(given["tags"]) == sorted(["user", ctr("c1"), claims.device_set])
        assert backend.calls == ["update", "set_tags"]                # two tags missing: one call
        backend.calls.clear()
        again = await claims.claim(backend.ports["given"], "c1", [ctr("c1")])
        assert backend.calls == ["update"] and again["tags"] == given["tags"]  # all there: no tag call
        backend.calls.clear()
        named = await claims.claim(backend.ports["named"], "c2", [ctr("c2")], keep_owner=True)
        assert (named["device_id"], named["device_owner"], named["tags"]) == ("pod-uid", "compute:kuryr", [ctr("c2")])
        assert backend.calls == ["update", "add_tag"]                 # one tag missing: one call
        unbound = await claims.claim(unbound, "e1", also={"mac_address": "fa:16:3e:00:00:01"})
        assert unbound["tags"] == [own.made] and unbound["mac_address"] == "fa:16:3e:00:00:01"  # made: no flag

        await claims.give_back(backend.ports["given"])
        assert backend.ports["given"] == {"id": "given", "device_id": "", "device_owner": "", "binding:host_id": "",
                                          "tags": ["user"]}
        await claims.give_back(backend.ports["named"])                 # the controller's device stays
        assert (backend.ports["named"]["device_id"], backend.ports["named"]["binding:host_id"]) == ("pod-uid", "")
        backend.ports["named"]["device_id"] = "e9"                     # a claim from before the flag
        await claims.give_back(backend.ports["named"], device="e9")
        assert backend.ports["named"]["device_id"] == "" and backend.ports["named"]["tags"] == []
        await claims.give_back(made)
        await claims.give_back(made)                                   # a retried call: gone already
        assert made["id"] not in backend.ports

    asyncio.run(main())


def test_the_collector_gives_back_orphans_bound_here_or_nowhere() -> None:
    from netbay.runtime import tags
    from netbay.runtime.claim import Claims

    own = tags.Owner("netbay.t")
    ports = [{"id": "here", "binding:host_id": "h1", "tags": []}, {"id": "nowhere", "binding:host_id": "", "tags": []},
             {"id": "there", "binding:host_id": "h2", "tags": []}, {"id": "kept", "binding:host_id": "h1", "tags": []}]
    backend = AsyncPorts(*ports)
    released: list[str] = []

    async def release(port: dict) -> None:
        released.append(port["id"])

    claims = Claims(backend, own, "compute:netbay", "h1")  # type: ignore[arg-type]
    assert asyncio.run(claims.collect(ports, lambda p: p["id"] != "kept", release)) == ["here", "nowhere"]
    assert released == ["here", "nowhere"]
    assert asyncio.run(claims.collect(ports, lambda p: p["id"] == "nowhere")) == ["nowhere"]
    assert "nowhere" in backend.ports and backend.ports["nowhere"]["binding:host_id"] == ""   # given back: unbound
