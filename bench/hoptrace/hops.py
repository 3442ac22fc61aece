"""Per-hop timestamps of one change, across the server process and the bench's.

Bench-only instrumentation (nothing of it is in the product): ``install_server()`` is
run in the ``netbay up`` subprocess by this directory's ``sitecustomize.py`` when
``NETBAY_HOPTRACE`` names a file (and ``install_agent()`` there too when
``NETBAY_HOPTRACE_AGENT`` is set: ``up`` runs the agent); ``install_local()`` patches the
bench's own process (the engine's API client; the agent thread and its nft context when
the agent runs there). Each hop appends
``<pid> <monotonic seconds> <event> <detail>`` to that file; CLOCK_MONOTONIC
(``time.perf_counter`` on Linux) is one clock for both processes. With
``NETBAY_HOPPROFILE=FILE`` the server also profiles its write transactions (cProfile,
dumped to FILE when it stops); with ``NETBAY_AGENTPROFILE=FILE`` the bench profiles the
agent's passes at each pod count (``FILE.<pods>``).
"""

from __future__ import annotations

import os
import resource
import time
from contextlib import contextmanager
from typing import Any

_fd: int | None = None


def enabled() -> bool:
    return _fd is not None


def open_trace(path: str) -> None:
    global _fd
    _fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)


_PROF: dict[str, Any] = {}


def _profile_agent(event: str, detail: str) -> None:
    """``NETBAY_AGENTPROFILE=FILE``: cProfile the agent's passes from the first change
    measured at each pod count (not the growth before it), dumped to ``FILE.<pods>``."""
    if event == "bench.size":
        _PROF["size"] = detail
        _PROF.pop("cur", None)
    elif event == "bench.change" and "cur" not in _PROF and os.environ.get("NETBAY_AGENTPROFILE"):
        import atexit
        import cProfile

        size = _PROF.get("size", "")
        p = _PROF["cur"] = cProfile.Profile()
        atexit.register(lambda: p.dump_stats(f"{os.environ['NETBAY_AGENTPROFILE']}.{size}"))


def mark(event: str, detail: str = "", at: float | None = None) -> None:
    if event.startswith("bench."):
        _profile_agent(event, detail)
    if _fd is not None:
        t = time.perf_counter() if at is None else at
        os.write(_fd, f"{os.getpid()} {t:.6f} {event} {detail}\n".encode())


def _wrap(owner: Any, name: str, before: str | None, after: str | None, detail: Any = None) -> None:
    fn = getattr(owner, name)

    def wrapped(*args: Any, **kw: Any) -> Any:
        d = detail(*args, **kw) if detail else ""
        if before:
            mark(before, d)
        try:
            return fn(*args, **kw)
        finally:
            if after:
                mark(after, d)
    wrapped.__wrapped__ = fn  # type: ignore[attr-defined]
    setattr(owner, name, wrapped)


def install_server() -> None:
    """The netbay server: request in/out, the write transaction, the commit's wake-up,
    the long poll's answer."""
    from netbay.api import app as app_mod
    from netbay.api.network import batch
    from netbay.changes import ChangeFeed
    from netbay.store.db import Store

    create = app_mod.create_app

    def create_app(*a: Any, **kw: Any) -> Any:
        inner = create(*a, **kw)

        async def traced(scope: dict, receive: Any, send: Any) -> None:
            if scope.get("type") != "http":
                return await inner(scope, receive, send)
            what = f"{scope['method']}:{scope['path']}"
            mark("srv.req", what)

            async def sending(msg: dict) -> None:
                if msg.get("type") == "http.response.start":
                    mark("srv.resp", what)
                await send(msg)
            await inner(scope, receive, sending)
        traced.state = inner.state  # type: ignore[attr-defined]
        return traced
    app_mod.create_app = create_app

    parse = batch._parse

    def traced_parse(index: int, op: Any) -> Any:
        parsed = parse(index, op)
        what = f"{index}:{op.get('method')}:{str(op.get('path')).split('/')[0]}"

        def run(s: Any, ctx: Any) -> Any:
            mark("srv.op", what)
            try:
                return parsed.run(s, ctx)
            finally:
                mark("srv.op.done", what)
        return batch._Op(parsed.resource, run)
    batch._parse = traced_parse

    write = Store.write
    prof = None
    if os.environ.get("NETBAY_HOPPROFILE"):
        import atexit
        import cProfile

        prof = cProfile.Profile()
        atexit.register(lambda: prof.dump_stats(os.environ["NETBAY_HOPPROFILE"]))

    @contextmanager
    def traced_write(self: Store) -> Any:
        mark("srv.write.begin")
        with write(self) as s:
            mark("srv.write.locked")
            if prof is not None:
                prof.enable()
            try:
                yield s
            finally:
                if prof is not None:
                    prof.disable()
            mark("srv.write.body")
        mark("srv.write.done")
    Store.write = traced_write  # type: ignore[method-assign]
    _wrap(ChangeFeed, "_committed", "srv.committed", None)
    since = ChangeFeed.since

    def traced_since(self: ChangeFeed, revision: int, limit: int = 1000) -> Any:
        t = time.perf_counter()
        out = since(self, revision, limit)
        if out:
            mark("srv.feed.since", "", t)
            mark("srv.feed.read", str(len(out)))
        return out
    ChangeFeed.since = traced_since  # type: ignore[method-assign]


def install_local(agent: bool = True) -> None:
    """The bench's process: the engine's HTTP calls and (``agent``: when it runs here)
    the agent's hops."""
    from netbay.client import Api

    _wrap(Api, "call", "eng.http", "eng.http.done", lambda self, m, p, *a, **k: f"{m}:{p}")
    if agent:
        install_agent()


def install_agent() -> None:
    """The agent's process (the bench's, or ``netbay up``'s): its long poll and pass,
    the security groups' nft transaction, the conntrack worker."""
    from netbay.agent import agent as agent_mod
    from netbay.agent.api import Api as AgentApi
    from netbay.agent.api import BesideServer
    from netbay.dataplane import nft

    _wrap(AgentApi, "changes", None, "agent.changes")
    _wrap(BesideServer, "changes", None, "agent.changes")
    _wrap(agent_mod.Agent, "reconcile", "agent.reconcile", "agent.reconcile.done")
    _wrap(agent_mod.Agent, "report", None, "agent.reported")
    _wrap(nft.Nft, "run", "nft.run", "nft.run.done", lambda self, *a, **k: self.ns)
    _cpu(agent_mod.Agent, "step", "agent.step.cpu", profiled=True)  # the agent thread's CPU per pass
    from netbay.dataplane import ctkill
    _cpu(ctkill, "ct_delete", "ct.delete.cpu")  # the conntrack worker's, per batch of kills


def _cpu(owner: Any, name: str, event: str, profiled: bool = False) -> None:
    """Mark when ``owner.name`` returns, with the calling thread's CPU time in it (ms:
    total, user, system):
    a measure the machine's load does not inflate as much as wall time (``profiled``:
    under ``NETBAY_AGENTPROFILE``'s profiler)."""
    fn = getattr(owner, name)

    def wrapped(*args: Any, **kw: Any) -> Any:
        r = resource.getrusage(resource.RUSAGE_THREAD)
        prof = _PROF.get("cur") if profiled else None
        try:
            if prof is not None:
                return prof.runcall(fn, *args, **kw)
            return fn(*args, **kw)
        finally:
            now = resource.getrusage(resource.RUSAGE_THREAD)
            user, system = (now.ru_utime - r.ru_utime) * 1e3, (now.ru_stime - r.ru_stime) * 1e3
            mark(event, f"{user + system:.3f} {user:.3f} {system:.3f}")
    wrapped.__wrapped__ = fn  # type: ignore[attr-defined]
    setattr(owner, name, wrapped)
