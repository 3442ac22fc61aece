"""The Octavia peer's WSGI wrapper (``tests/peers/octavia_peer.py``) runs a request again
when SQLite refused its lock upgrade, with the same body, and only then."""

from __future__ import annotations

import io
import time

from tests.peers.octavia_peer import _API_ON_SQLITE


def _wrapper(answers: list[tuple[str, bytes]]):
    scope: dict = {}
    exec(compile(_API_ON_SQLITE, "netbay_peer_octavia_api", "exec"), scope)  # the peer's module
    scope["time"] = type("NoWait", (), {"sleep": staticmethod(lambda seconds: None)})  # not the real module's
    bodies: list[bytes] = []

    def app(environ, start_response):
        bodies.append(environ["wsgi.input"].read())
        status, out = answers.pop(0)
        start_response(status, [("Content-Type", "application/json")])
        return [out]

    scope["_app"] = app
    return scope["application"], bodies


def _call(application) -> tuple[str, bytes]:
    seen = {}
    out = b"".join(application({"wsgi.input": io.BytesIO(b'{"member": {}}')},
                               lambda status, headers, exc_info=None: seen.update(status=status)))
    return seen["status"], out


def test_a_refused_lock_upgrade_is_run_again_with_the_same_body() -> None:
    locked = ("500 Internal Server Error", b'{"faultstring": "(sqlite3.OperationalError) database is locked"}')
    application, bodies = _wrapper([locked, locked, ("201 Created", b'{"member": {"id": "m"}}')])
    assert _call(application) == ("201 Created", b'{"member": {"id": "m"}}')
    assert bodies == [b'{"member": {}}'] * 3


def test_other_errors_and_a_lock_that_stays_are_answered_as_they_are() -> None:
    other = ("500 Internal Server Error", b'{"faultstring": "boom"}')
    application, bodies = _wrapper([other])
    assert _call(application) == other and len(bodies) == 1
    locked = ("500 Internal Server Error", b"database is locked")
    application, bodies = _wrapper([locked] * 6)
    assert _call(application) == locked and len(bodies) == 6
    assert time.sleep.__module__ == "time"   # the real module is untouched
