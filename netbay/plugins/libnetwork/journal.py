"""The calls being answered, on disk, so that Docker's resend after a crash can be answered.

dockerd resends a call whose connection broke (the plugin was killed mid-call, up
to about 30 s), but its plugin client reuses the request's already-drained body: the
restarted plugin gets ``POST /IpamDriver.RequestAddress`` with an *empty* body. Read
as ``{}``, that looked like an auxiliary address with none given ("an auxiliary
address needs an address") and ``docker run`` failed, while the killed call's half-made
port waited for the sweep.

So each RequestAddress (:data:`REPLAYED`) is written here (a small file on tmpfs)
until its answer is sent; a restarted plugin takes over what its predecessor left
(:meth:`Journal.adopt`) and answers an empty-bodied one from the cut-short call
(:meth:`Journal.take`); until that resend is answered (:meth:`Journal.finished`) its
MAC still counts as awaited (:meth:`Journal.macs`), so that the start's sweep, running
beside it, never takes the half-made port as an orphan between the resend's arrival
and its adoption of that port. Calls that differ only in the MAC Docker made (concurrent
RequestAddress on one pool) are interchangeable: CreateEndpoint sets the container's
MAC on whichever port it gets; calls that cannot be told apart otherwise are refused
by name rather than guessed. Other calls are not replayed: a body-less resend of one
is refused with a plain word (Docker then rolls the container back), because a
replayed CreateEndpoint was seen to leave a running container whose port did not
carry its endpoint (the full suite's 20-runs kill test).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import time
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import orjson

from netbay.plugins.libnetwork.calls import verb
from netbay.plugins.libnetwork.resources import PluginError

log = logging.getLogger("netbay.libnetwork")

RESEND_WINDOW = 60.0  # dockerd gives up resending after ~30 s
MAC_OPTION = "com.docker.network.endpoint.macaddress"
REQUEST_ADDRESS = "IpamDriver.RequestAddress"
REPLAYED = frozenset({REQUEST_ADDRESS})  # the calls kept here and answered again after a crash
REPLAYING: ContextVar[bool] = ContextVar("netbay_libnetwork_replaying", default=False)
"""True while a handler answers Docker's empty-bodied resend from the journal."""


def _sameness(req: dict[str, Any]) -> bytes:
    """What tells two cut-short calls apart (the MAC Docker made does not)."""
    opts = req.get("Options")
    if isinstance(opts, dict) and MAC_OPTION in opts:
        req = {**req, "Options": {k: v for k, v in opts.items() if k != MAC_OPTION}}
    return orjson.dumps(req, option=orjson.OPT_SORT_KEYS)


class Journal:
    def __init__(self, directory: Path | None) -> None:
        """``directory``: where the calls in flight are kept (None: nowhere, no resends answered)."""
        self.dir = directory
        self._seq = itertools.count()
        self._prefix = f"{os.getpid()}-"
        self.cut_short: dict[str, list[tuple[float, dict[str, Any]]]] = {}  # method -> (when, request)
        self.replaying: list[tuple[float, dict[str, Any]]] = []  # taken, their resend not answered yet

    def adopt(self) -> None:
        """Take over the calls a killed predecessor left unanswered (and clear them)."""
        if self.dir is None:
            return
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)  # request bodies: root's alone
        now = time.time()
        for path in sorted(self.dir.iterdir(), key=lambda p: p.stat().st_mtime):
            with contextlib.suppress(OSError, orjson.JSONDecodeError):
                when, req = path.stat().st_mtime, orjson.loads(path.read_bytes())
                method = path.name.split("-", 2)[2]
                if isinstance(req, dict) and now - when < RESEND_WINDOW:
                    self.cut_short.setdefault(method, []).append((when, req))
            with contextlib.suppress(OSError):
                path.unlink()
        if self.cut_short:
            log.info("calls cut short by the last stop: %s",
                     {m: len(c) for m, c in self.cut_short.items()})

    def begin(self, method: str, raw: bytes) -> Path | None:
        if self.dir is None:
            return None
        path = self.dir / f"{self._prefix}{next(self._seq)}-{method}"
        try:
            path.write_bytes(raw)
        except OSError as exc:  # a full or missing /run: the call is answered anyway
            log.warning("journal %s: %s", path, exc)
            return None
        return path

    @staticmethod
    def end(path: Path | None) -> None:
        if path is not None:
            with contextlib.suppress(OSError):
                path.unlink()

    def take(self, method: str) -> dict[str, Any] | None:
        """The cut-short call an empty-bodied ``method`` resends (None: there is none)."""
        now = time.time()
        left = [(w, r) for w, r in self.cut_short.get(method, ()) if now - w < RESEND_WINDOW]
        if not left:
            self.cut_short.pop(method, None)
            return None
        if len({_sameness(r) for _, r in left}) > 1:
            raise PluginError(f"netbay: {verb(method)}: Docker resent a call without its body after the plugin "
                              f"restarted, and {len(left)} different {verb(method)} calls were cut short: "
                              "cannot tell which this is; run the Docker command again")
        self.cut_short[method] = left[1:]
        self.replaying.append(left[0])
        return left[0][1]

    def finished(self, req: dict[str, Any]) -> None:
        """The resend :meth:`take` answered ``req`` for is done (answered or refused)."""
        self.replaying = [(w, r) for w, r in self.replaying if r is not req]

    def macs(self) -> set[str]:
        """The MACs of cut-short endpoint RequestAddress calls Docker may still resend, or whose
        resend is being answered: their half-made ports wait for that resend, not for the sweep."""
        now = time.time()
        calls = [*self.cut_short.get(REQUEST_ADDRESS, ()), *self.replaying]
        return {str(r["Options"][MAC_OPTION]).lower() for w, r in calls
                if now - w < RESEND_WINDOW and isinstance(r.get("Options"), dict) and r["Options"].get(MAC_OPTION)}

    def close(self) -> None:
        """A clean stop: nothing is in flight any more."""
        if self.dir is not None:
            for path in self.dir.glob(f"{self._prefix}*"):
                with contextlib.suppress(OSError):
                    path.unlink()
            with contextlib.suppress(OSError):
                self.dir.rmdir()
                self.dir.parent.rmdir()  # only if no other plugin's is left there


__all__ = ["Journal", "REPLAYED", "REPLAYING", "RESEND_WINDOW"]
