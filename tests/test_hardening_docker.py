"""Issue 25, the Docker driver's slice, without dockerd: the shape check of Docker's
calls and the journal that answers Docker's bodiless resend after a crash (the
end-to-end cases: tests/dataplane/test_dp_hardening_docker.py)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from starlette.testclient import TestClient

from netbay.backends.aio import open_async_backend
from netbay.client.auth import Credentials
from netbay.dataplane.names import Names
from netbay.plugins.libnetwork.calls import check
from netbay.plugins.libnetwork.journal import Journal
from netbay.plugins.libnetwork.resources import PluginError
from netbay.plugins.libnetwork.server import CALL_BOUND, call_bound, create_app
from netbay.runtime.attach import Attacher

MAC = "com.docker.network.endpoint.macaddress"


def _cut_short(tmp_path: Path, calls: list[tuple[str, dict]]) -> Journal:
    """A journal as a killed plugin left it, adopted by its successor."""
    killed = Journal(tmp_path)
    killed.adopt()
    for method, req in calls:
        killed.begin(method, orjson.dumps(req))
    restarted = Journal(tmp_path)
    restarted.adopt()
    assert not list(tmp_path.iterdir())  # taken over, not left for a third
    return restarted


def test_a_resend_is_answered_from_the_one_call_cut_short(tmp_path: Path) -> None:
    req = {"PoolID": "cidr:10.0.0.0/24", "Address": "", "Options": {MAC: "02:42:0a:00:00:07"}}
    j = _cut_short(tmp_path, [("IpamDriver.RequestAddress", req)])
    assert j.macs() == {"02:42:0a:00:00:07"}
    assert j.take("NetworkDriver.CreateEndpoint") is None
    assert j.take("IpamDriver.RequestAddress") == req
    assert j.take("IpamDriver.RequestAddress") is None  # answered once


def test_a_resends_mac_stays_awaited_until_it_is_answered(tmp_path: Path) -> None:
    """The start's sweep runs beside the resend: between taking the call and adopting its
    half-made port, that port must not look like an orphan (it was deleted under the
    resend, and docker run got a port that was gone)."""
    req = {"PoolID": "cidr:10.0.0.0/24", "Address": "", "Options": {MAC: "02:42:0A:00:00:08"}}
    j = _cut_short(tmp_path, [("IpamDriver.RequestAddress", req)])
    taken = j.take("IpamDriver.RequestAddress")
    assert taken == req and j.macs() == {"02:42:0a:00:00:08"}
    j.finished(taken)
    assert j.macs() == set()


def test_calls_differing_only_in_dockers_mac_are_interchangeable(tmp_path: Path) -> None:
    reqs = [{"PoolID": "cidr:10.0.0.0/24", "Address": "", "Options": {MAC: f"02:42:0a:00:00:0{i}"}} for i in (1, 2)]
    j = _cut_short(tmp_path, [("IpamDriver.RequestAddress", r) for r in reqs])
    assert [j.take("IpamDriver.RequestAddress"), j.take("IpamDriver.RequestAddress")] == reqs


def test_calls_that_cannot_be_told_apart_are_refused_not_guessed(tmp_path: Path) -> None:
    j = _cut_short(tmp_path, [("NetworkDriver.CreateEndpoint", {"NetworkID": "n", "EndpointID": e}) for e in "ab"])
    with pytest.raises(PluginError, match="2 different CreateEndpoint calls were cut short"):
        j.take("NetworkDriver.CreateEndpoint")


def test_a_clean_stop_leaves_no_journal(tmp_path: Path) -> None:
    j = Journal(tmp_path / "p.calls")
    j.adopt()
    j.end(j.begin("IpamDriver.ReleasePool", b'{"PoolID": "x"}'))
    j.begin("IpamDriver.ReleasePool", b'{"PoolID": "y"}')
    j.close()
    assert not (tmp_path / "p.calls").exists()


@pytest.mark.parametrize(("method", "req", "err"), [
    ("NetworkDriver.CreateNetwork", {}, "netbay: CreateNetwork: NetworkID is missing"),
    ("NetworkDriver.CreateNetwork", {"NetworkID": ""}, "netbay: CreateNetwork: NetworkID is missing"),
    ("NetworkDriver.CreateNetwork", {"NetworkID": "n", "IPv4Data": [7]},
     "netbay: CreateNetwork: IPv4Data[0] must be an object, not a number"),
    ("NetworkDriver.CreateNetwork", {"NetworkID": "n", "IPv4Data": [{"Gateway": "10.0.0.1/24"}]},
     "netbay: CreateNetwork: IPv4Data[0]: Pool is missing"),
    ("NetworkDriver.CreateEndpoint", {"NetworkID": "n", "EndpointID": "e", "Interface": {"MacAddress": True}},
     "netbay: CreateEndpoint: Interface: MacAddress must be a string, not true or false"),
    ("IpamDriver.RequestAddress", None, "netbay: RequestAddress: the body must be a JSON object, not null"),
    ("IpamDriver.RequestPool", {"Options": ["a=b"]}, "netbay: RequestPool: Options must be an object, not a list"),
])
def test_a_call_of_the_wrong_shape_is_refused_by_field(method: str, req: object, err: str) -> None:
    with pytest.raises(PluginError) as refused:
        check(method, req)
    assert str(refused.value) == err


def test_dockers_own_calls_pass() -> None:
    assert check("IpamDriver.RequestAddress", {"PoolID": "p", "Address": "", "Options": None})
    assert check("NetworkDriver.CreateNetwork", {"NetworkID": "n", "Options": {"com.docker.network.enable_ipv6": False},
                                                 "IPv4Data": [{"AddressSpace": "s", "Pool": "10.0.0.0/24",
                                                               "Gateway": "10.0.0.1/24", "AuxAddresses": None}],
                                                 "IPv6Data": None})


@pytest.fixture
def stalled_api() -> Iterator[str]:
    """A URL on 127.0.0.1 whose server takes connections and never answers: an API too
    loaded to answer (the kernel completes the handshakes; nothing reads them)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"


def test_a_call_the_api_does_not_answer_is_dockers_err_within_the_bound(stalled_api: str) -> None:
    creds = Credentials(f"{stalled_api}/identity/v3", "docker", "secret", "demo")
    backend = open_async_backend("embedded", url=stalled_api, creds=creds, timeout=60.0)  # the client waits on
    assert call_bound(backend) == CALL_BOUND
    app = create_app(backend, Attacher(Names("nbtbound-")), "docker-host-1", bound=1.0)
    with TestClient(app) as client:
        started = time.monotonic()
        r = client.post("/IpamDriver.RequestPool", json={"AddressSpace": "netbay", "Pool": "10.9.0.0/24",
                                                          "SubPool": "", "Options": {}, "V6": False})
        took = time.monotonic() - started
    assert r.status_code == 500
    assert r.json() == {"Err": "netbay: IpamDriver.RequestPool did not finish within 1 s "
                               "(is the netbay API overloaded?)"}
    assert 1.0 <= took < 3.0, took

