"""netbay.client: one decoder reads every API's error format; the sync face renews its
token on a 401 and says a server that does not answer as httpx does."""

from __future__ import annotations

import http.server
import json
import socket
import struct
import threading
import time

import httpx
import orjson
import pytest
from conftest import free_port

from netbay.client import Api, ApiError, decode
from netbay.client.auth import Credentials, CredentialsMissing


@pytest.mark.parametrize("body,message,kind", [
    ({"NeutronError": {"type": "NetworkNotFound", "message": "Network x could not be found.", "detail": ""}},
     "Network x could not be found.", "NetworkNotFound"),
    ({"error": {"code": 401, "title": "Unauthorized", "message": "The request you have made requires "
                "authentication."}}, "The request you have made requires authentication.", None),
    ({"faultcode": "Client", "faultstring": "Load Balancer x not found.", "debuginfo": None},
     "Load Balancer x not found.", None),
    ({"errors": [{"status": 404, "code": "client", "title": "Not Found", "detail": "Cluster x could not be found."}]},
     "Cluster x could not be found.", None),
    ({"itemNotFound": {"code": 404, "message": "Instance x could not be found."}},
     "Instance x could not be found.", "itemNotFound"),
    ({"badRequest": {"code": 400, "message": "Invalid input."}}, "Invalid input.", "badRequest"),
    ({"detail": "Not Found"}, "Not Found", None),
    ({"detail": [{"loc": ["body", "x"], "msg": "field required"}]}, "field required", None),
])
def test_one_decoder_reads_every_apis_error_body(body, message, kind):
    assert decode(400, orjson.dumps(body)) == (message, kind)


def test_a_body_that_is_not_json_is_its_text_and_an_empty_one_its_status():
    assert decode(502, b"<html>bad gateway</html>") == ("<html>bad gateway</html>", None)
    assert decode(503, b"") == ("HTTP 503", None)


def test_credentials_come_from_a_clouds_yaml_when_os_cloud_names_one(tmp_path):
    (tmp_path / "clouds.yaml").write_text(json.dumps({"clouds": {"nb": {"auth": {
        "auth_url": "http://127.0.0.1:9696/identity/v3", "username": "u", "password": "p", "project_name": "pr"}}}}))
    creds = Credentials.from_env({"OS_CLOUD": "nb", "OS_CLIENT_CONFIG_FILE": str(tmp_path / "clouds.yaml")})
    assert (creds.username, creds.project_name, creds.server_url) == ("u", "pr", "http://127.0.0.1:9696")
    with pytest.raises(CredentialsMissing, match="OS_AUTH_URL"):
        Credentials.from_env({})


class _Server(http.server.BaseHTTPRequestHandler):
    tokens: list[str] = []

    def do_GET(self):
        self.tokens.append(self.headers["X-Auth-Token"])
        ok = self.headers["X-Auth-Token"] == "fresh"
        body = b'{"pods": []}' if ok else b'{"error": {"code": 401, "message": "expired"}}'
        self.send_response(200 if ok else 401)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_the_sync_face_logs_in_again_on_a_401_once():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Server)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    issued = iter(["stale", "fresh", "stale"])
    api = Api(f"http://127.0.0.1:{server.server_address[1]}", lambda: next(issued))
    try:
        assert api.call("GET", "/netbay/v1/pods") == {"pods": []}
        assert _Server.tokens == ["stale", "fresh"]
        api._token = "stale"   # a token that expires again, and again: refused after one renewal
        issued = iter(["stale"])
        api._token_source = lambda: next(issued)
        with pytest.raises(ApiError) as refused:
            api.call("GET", "/netbay/v1/pods")
        assert (refused.value.status, refused.value.message) == (401, "expired")
    finally:
        api.close()
        server.shutdown()
        server.server_close()


def test_first_calls_made_in_parallel_share_one_login():
    """The executor's workers share one client: their first calls, in parallel, wait on one login."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Server)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    logins: list[int] = []

    def login() -> str:
        logins.append(1)
        time.sleep(0.2)   # a Keystone login's round trip: the other callers arrive meanwhile
        return "fresh"

    api = Api(f"http://127.0.0.1:{server.server_address[1]}", login)
    try:
        answers: list[object] = []
        callers = [threading.Thread(target=lambda: answers.append(api.call("GET", "/netbay/v1/pods")))
                   for _ in range(4)]
        for t in callers:
            t.start()
        for t in callers:
            t.join(10)
        assert answers == [{"pods": []}] * 4 and len(logins) == 1
    finally:
        api.close()
        server.shutdown()
        server.server_close()


def test_a_server_that_does_not_answer_is_httpx_s_connect_error():
    api = Api(f"http://127.0.0.1:{free_port()}", lambda: "t", timeout=2)
    with pytest.raises(httpx.ConnectError):
        api.call("GET", "/netbay/v1/pods")


class _RawServer:
    """A bare HTTP/1.1 server on 127.0.0.1 (a thread running ``_run``), to misbehave as asked."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        raise NotImplementedError

    @staticmethod
    def head(conn: socket.socket) -> bytes:
        """A request's line and headers (empty: the client closed)."""
        data = b""
        while b"\r\n\r\n" not in data and len(data) < 65536:
            chunk = conn.recv(65536)
            if not chunk:
                return b""
            data += chunk
        return data

    def close(self) -> None:
        self.listener.shutdown(socket.SHUT_RDWR)   # wakes the accept (a close alone does not)
        self.listener.close()
        self.thread.join(timeout=5)


class _DropsFirst(_RawServer):
    """Answers ``{}`` on every connection but the first, which it closes as the request
    arrives (a kept-alive connection closed on the server's idle timeout as it is reused)."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        super().__init__()

    def _run(self) -> None:
        for n in range(8):
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(5)
                data = self.head(conn)
                self.requests.append(data.split(b" ", 1)[0].decode())
                if n == 0:
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # a reset
                    continue
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")


@pytest.mark.parametrize("face", ["sync", "async"])
def test_a_connection_reset_before_the_answer_is_sent_again_once_unless_a_post(face: str) -> None:
    import asyncio

    from netbay import errors
    from netbay.client.aio import AsyncApi

    def call(url: str, method: str):
        if face == "sync":
            api = Api(url, lambda: "t", timeout=5)
            try:
                return api.call(method, "/x", {} if method != "GET" else None)
            finally:
                api.close()

        async def once():
            api = AsyncApi(url, Credentials(auth_url=url + "/v3", username="u", password="p", project_name="p"))
            api._token = "t"
            try:
                return await api.call(method, "/x", **({"json": {}} if method != "GET" else {}))
            finally:
                await api.aclose()
        return asyncio.run(once())

    for method in ("GET", "PUT", "DELETE"):
        server = _DropsFirst()
        try:
            assert call(server.url, method) == {}
            assert server.requests == [method, method]
        finally:
            server.close()
    server = _DropsFirst()
    try:
        with pytest.raises((httpx.RemoteProtocolError, errors.NetbayError)) as failed:
            call(server.url, "POST")
        assert server.requests == ["POST"]   # not sent twice: the server may have acted on it
        assert face == "sync" or failed.value.status == 503
    finally:
        server.close()


class _ClosesIdle(_RawServer):
    """Keeps connections alive, but resets a request that arrives on one idle longer than
    ``idle`` seconds: a server's keep-alive timeout firing just as the client reuses it."""

    def __init__(self, idle: float) -> None:
        self.idle = idle
        self.connections = 0
        self.answered = 0
        super().__init__()

    def _run(self) -> None:
        for _ in range(8):
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(5)
            last = None
            for _ in range(16):
                if not self.head(conn):
                    return
                if last is not None and time.monotonic() - last > self.idle:
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    return
                self.answered += 1   # before the answer: the client's next line may read it
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
                last = time.monotonic()


@pytest.mark.parametrize("face", ["sync", "async"])
def test_a_connection_idle_for_longer_than_the_clients_keep_alive_is_not_reused(face, monkeypatch) -> None:
    """netbay's servers keep an idle connection longer than its clients do
    (:mod:`netbay.keepalive`): a POST after a pause opens a new connection rather than
    meet the server's close (which it could not safely resend)."""
    import asyncio

    from netbay import keepalive
    from netbay.client.aio import AsyncApi

    monkeypatch.setattr(keepalive, "CLIENT", 0.2)
    server = _ClosesIdle(idle=0.5)
    try:
        if face == "sync":
            api = Api(server.url, lambda: "t", timeout=5)
            try:
                api.call("POST", "/x", {})
                api.call("POST", "/x", {})   # at once: the same connection
                time.sleep(0.7)
                assert api.call("POST", "/x", {}) == {}
            finally:
                api.close()
        else:
            async def calls() -> None:
                api = AsyncApi(server.url, Credentials(auth_url=server.url + "/v3", username="u", password="p",
                                                       project_name="p"))
                api._token = "t"
                try:
                    await api.call("POST", "/x", json={})
                    await api.call("POST", "/x", json={})
                    await asyncio.sleep(0.7)
                    assert await api.call("POST", "/x", json={}) == {}
                finally:
                    await api.aclose()
            asyncio.run(calls())
        assert (server.connections, server.answered) == (2, 3)
    finally:
        server.close()

