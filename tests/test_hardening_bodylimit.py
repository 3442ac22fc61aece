"""Issue 25, defect 1: a request body is capped while it is read, on every socket.

Each test streams bodies far over the 1 MiB cap (:mod:`netbay.bodylimit`) to a real
serving process — ``netbay up``, ``netbay libnetwork``, ``netbay cni-daemon`` — generated
lazily, chunked and with a ``Content-Length``, and asserts the refusal in the surface's
own format and that the process's peak RSS (``VmHWM``) barely moved. Before the cap a
200 MiB body grew the server by as much (and was answered 400 after the fact).
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from conftest import ADMIN_PASSWORD, Server

from netbay.bodylimit import MAX_BODY
from netbay.dataplane import netns
from netbay.dataplane.names import Names

pytestmark = pytest.mark.shared_server   # its tests make their own objects (tests/conftest.py)

BIG = 200 << 20          # each oversized body
GROWTH = 30 << 20        # what the peak RSS may grow by over all of them
MESSAGE = f"Request is too large: a request body is limited to {MAX_BODY} bytes."


def peak(pid: int) -> int:
    """The process's peak resident set (``VmHWM``), bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for {pid}")


def lazy(total: int, chunk: int = 1 << 20) -> Iterator[bytes]:
    """``total`` bytes, made a chunk at a time (the test holds no big body either)."""
    block = b"x" * chunk
    for start in range(0, total, chunk):
        yield block[:min(chunk, total - start)]


def oversized(client: httpx.Client, url: str, *, declared: bool, **kw) -> httpx.Response:
    """POST ``BIG`` bytes: chunked, or with their ``Content-Length``; timed."""
    headers = {"Content-Type": "application/json", **kw.pop("headers", {})}
    if declared:
        headers["Content-Length"] = str(BIG)
    started = time.monotonic()
    r = client.post(url, content=lazy(BIG), headers=headers, timeout=60, **kw)
    assert time.monotonic() - started < 20, "the refusal should not wait for the whole upload"
    assert r.headers.get("connection") == "close", r.headers
    return r


# --- the API server --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def warm(server: Server) -> str:
    """The admin's token, after a first call of each route the tests refuse (so that their
    first use — imports, caches — is not counted as growth)."""
    token = server.token()
    for url in (f"{server.network_url}/networks", f"{server.auth_url}/auth/tokens"):
        httpx.post(url, content=b"{}", headers={"X-Auth-Token": token}, timeout=30)
    return token


def test_the_token_route_refuses_a_huge_body_unauthenticated_without_reading_it(server: Server, warm: str) -> None:
    before = peak(server.proc.pid)
    with httpx.Client() as client:
        for declared in (True, False, True, False):
            r = oversized(client, f"{server.auth_url}/auth/tokens", declared=declared)
            assert r.status_code == 413, r.text
            assert r.json() == {"error": {"code": 413, "title": "Request Entity Too Large", "message": MESSAGE}}
    grown = peak(server.proc.pid) - before
    assert grown < GROWTH, f"VmHWM grew by {grown >> 20} MiB over {4 * BIG >> 20} MiB refused"
    assert httpx.get(f"{server.url}/identity/v3", timeout=10).status_code == 200   # still serving


def test_a_members_huge_body_to_the_network_api_is_refused_in_neutrons_format(server: Server, warm: str,
                                                                             member_http: httpx.Client) -> None:
    before = peak(server.proc.pid)
    for declared in (True, False, True, False):
        r = oversized(member_http, "/networks", declared=declared)
        assert r.status_code == 413, r.text
        assert r.json() == {"NeutronError": {"type": "HTTPRequestEntityTooLarge", "message": MESSAGE,
                                             "detail": ""}}
    grown = peak(server.proc.pid) - before
    assert grown < GROWTH, f"VmHWM grew by {grown >> 20} MiB over {4 * BIG >> 20} MiB refused"
    assert member_http.get("/networks").status_code == 200


@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "chunked"])
def test_each_api_family_says_413_in_its_own_format(server: Server, warm: str, declared: bool) -> None:
    body = b"x" * (MAX_BODY + 1)
    headers = {"X-Auth-Token": warm, "Content-Type": "application/json"}

    def post(path: str) -> httpx.Response:
        content = body if declared else iter([body[:MAX_BODY], body[MAX_BODY:]])
        r = httpx.post(f"{server.url}{path}", content=content, headers=headers, timeout=30)
        assert r.status_code == 413, (path, r.text)
        return r

    assert post("/load-balancer/v2/lbaas/loadbalancers").json() == {
        "faultcode": "Client", "faultstring": MESSAGE, "debuginfo": None}
    assert post("/compute/v2.1/os-keypairs").json() == {"overLimit": {"code": 413, "message": MESSAGE}}
    assert post("/identity/v3/projects").json()["error"]["code"] == 413
    for path in ("/container-infra/v1/clustertemplates", "/container/v1/containers"):
        r = post(path)
        [err] = r.json()["errors"]
        assert err["status"] == 413 and err["detail"] == MESSAGE and err["code"] == "client", err
        assert err["request_id"] == r.headers["x-openstack-request-id"]


def test_a_body_at_the_limit_is_read_and_one_byte_more_is_not(server: Server, warm: str) -> None:
    url = f"{server.network_url}/networks"
    headers = {"X-Auth-Token": warm}
    at = httpx.post(url, content=b"[" * MAX_BODY, headers=headers, timeout=30)
    assert at.status_code == 400 and at.json()["NeutronError"]["message"] == "Malformed request body", at.text
    over = httpx.post(url, content=b"[" * (MAX_BODY + 1), headers=headers, timeout=30)
    assert over.status_code == 413, over.text


# --- the plugins' Unix sockets ---------------------------------------------------------------


@dataclass
class Daemon:
    proc: subprocess.Popen
    sock: Path
    log: Path


def _start(args: list[str], sock: Path, log: Path, env: dict[str, str]) -> Daemon:
    proc = subprocess.Popen(args, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while True:
        assert proc.poll() is None, log.read_text()[-3000:]
        if sock.is_socket():
            with socket.socket(socket.AF_UNIX) as s:
                try:
                    s.connect(str(sock))
                    return Daemon(proc, sock, log)
                except OSError:
                    pass
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.05)


def _stop(daemon: Daemon) -> None:
    daemon.proc.terminate()
    try:
        daemon.proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        daemon.proc.kill()
        daemon.proc.wait(timeout=10)
    daemon.sock.unlink(missing_ok=True)


@pytest.fixture(scope="module")
def plugin_env(server: Server) -> dict[str, str]:
    if os.geteuid() != 0:
        pytest.skip("the plugins run as root")
    return {**os.environ, "OS_AUTH_URL": server.auth_url, "OS_USERNAME": "admin", "OS_PASSWORD": ADMIN_PASSWORD,
            "OS_PROJECT_NAME": "admin", "OS_USER_DOMAIN_NAME": "Default", "OS_PROJECT_DOMAIN_NAME": "Default",
            "NETBAY_LOG_LEVEL": "WARNING"}


@pytest.fixture
def prefix() -> Iterator[str]:
    """A namespace prefix of this test's own; its fabric (if a plugin made one) goes after."""
    prefix = f"nbt{secrets.token_hex(3)}-bl-"
    yield prefix
    netns.delete(Names(prefix).fabric)
    assert not netns.list(prefix)


def test_the_docker_plugin_refuses_a_huge_body_in_dockers_format(server: Server, plugin_env: dict[str, str],
                                                                  prefix: str, tmp_path: Path) -> None:
    name = prefix.replace("-", "")
    args = [sys.executable, "-m", "netbay.cli.main", "libnetwork", "--name", name, "--prefix", prefix,
            "--plugin-dir", str(tmp_path), "--url", server.url, "--orphan-grace", "600"]
    plugin = _start(args, tmp_path / f"{name}.sock", tmp_path / "plugin.log", plugin_env)
    try:
        with httpx.Client(transport=httpx.HTTPTransport(uds=str(plugin.sock)), base_url="http://plugin") as client:
            assert client.post("/Plugin.Activate").json() == {"Implements": ["NetworkDriver", "IpamDriver"]}
            before = peak(plugin.proc.pid)
            for declared in (True, False, True, False):
                r = oversized(client, "/NetworkDriver.CreateNetwork", declared=declared)
                assert r.status_code == 413, r.text
                assert r.json() == {"Err": f"netbay: {MESSAGE}"}
            grown = peak(plugin.proc.pid) - before
            assert grown < GROWTH, f"VmHWM grew by {grown >> 20} MiB over {4 * BIG >> 20} MiB refused"
            assert client.post("/NetworkDriver.GetCapabilities").status_code == 200
    finally:
        _stop(plugin)


def test_the_cni_daemon_refuses_a_huge_frame_with_a_cni_error(server: Server, plugin_env: dict[str, str],
                                                              prefix: str, tmp_path: Path) -> None:
    from netbay.plugins.cni import client

    sock = tmp_path / "cni.sock"
    args = [sys.executable, "-m", "netbay.cli.main", "cni-daemon", "--socket", str(sock), "--url", server.url,
            "--prefix", prefix]
    daemon = _start(args, sock, tmp_path / "cni.log", plugin_env)
    head = b"CNI_COMMAND=ADD\0CNI_CONTAINERID=c1\0CNI_NETNS=/proc/1/ns/net\0CNI_IFNAME=eth0\0CNI_PATH=/x\0\0"
    try:
        before = peak(daemon.proc.pid)
        for _ in range(3):
            with socket.socket(socket.AF_UNIX) as s:
                s.settimeout(30)
                s.connect(str(sock))
                s.sendall(head)
                for chunk in lazy(BIG):
                    s.sendall(chunk)
                s.shutdown(socket.SHUT_WR)
                answer = b"".join(iter(lambda: s.recv(1 << 16), b""))
            assert answer.startswith(b"1"), answer[:200]
            err = json.loads(answer[1:])
            assert err["code"] == 6 and str(MAX_BODY) in err["msg"], err
        grown = peak(daemon.proc.pid) - before
        assert grown < GROWTH, f"VmHWM grew by {grown >> 20} MiB over {3 * BIG >> 20} MiB refused"
        ok = client.exchange(str(sock), b"CNI_COMMAND=VERSION\0\0{}")
        assert ok.startswith(b"0") and b"supportedVersions" in ok, ok
    finally:
        _stop(daemon)
