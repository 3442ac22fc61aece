"""The CNI daemon's socket: one call per connection (frames: :mod:`.client`).

No HTTP: ``netbay-cni`` is forked per call and should not pay for an HTTP client (or
even for ``json``): it forwards the environment and stdin, and the checks a plugin
makes before its real work (:mod:`.spec`) happen here. Every call is bounded
(:data:`CALL_BOUND`): a runtime that gets no answer holds its pod's sandbox lock.
A request frame is capped while it is read (:data:`MAX_FRAME`): a larger one is
answered with a CNI error, the rest of it read on and dropped, never buffered.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
from pathlib import Path
from typing import Any

from netbay import unixsock
from netbay.bodylimit import MAX_BODY
from netbay.plugins.cni import spec
from netbay.plugins.cni.service import Cni
from netbay.plugins.cni.spec import DECODING_FAILURE, TRY_AGAIN_LATER, CniError

log = logging.getLogger("netbay.cni")

CALL_BOUND = 50.0          # below the client's 60 s: the runtime gets our error, not a timeout
READ_BOUND = 10.0          # to read a request frame (the client sends it at once)
MAX_FRAME = MAX_BODY       # a frame is the CNI_* variables and a network configuration: a few kB


def _frame(status: int, body: dict[str, Any] | None) -> bytes:
    return str(status).encode() + (json.dumps(body).encode() if body is not None else b"")


async def answer(cni: Cni, raw: bytes) -> bytes:
    """The answer frame to one request frame (:mod:`.client`)."""
    head, sep, stdin = raw.partition(b"\0\0")
    if not sep:
        head, stdin = raw.rstrip(b"\0"), b""  # no stdin at all
    env = dict(item.decode(errors="replace").partition("=")[::2] for item in head.split(b"\0") if item)
    version = None
    try:
        args = spec.read_env(env)
        cmd = args["CNI_COMMAND"]
        if cmd == "VERSION":
            return _frame(0, spec.version_info())
        conf = spec.read_config(stdin)
        if cmd not in spec.COMMANDS:
            raise CniError(spec.INVALID_ENV, f"unknown CNI_COMMAND: {cmd}")
        version = spec.check_version(cmd, conf)
        request = {"command": cmd, "containerID": args["CNI_CONTAINERID"], "netns": args["CNI_NETNS"],
                   "ifname": args["CNI_IFNAME"], "args": args["CNI_ARGS"], "config": conf}
        try:
            out = await asyncio.wait_for(cni.handle(request), CALL_BOUND)
        except TimeoutError:
            raise CniError(TRY_AGAIN_LATER, f"netbay-cni: {cmd} did not finish within {CALL_BOUND:.0f} s") from None
    except CniError as exc:
        return _frame(1, exc.body(version))
    if "error" in out:
        return _frame(1, out["error"])
    return _frame(0, out.get("result"))


async def read_frame(reader: asyncio.StreamReader, limit: int = MAX_FRAME) -> bytes | None:
    """The request frame, read to EOF (the client half-closes); None when it passes
    ``limit`` bytes — then read on to EOF and dropped, so that the client, which sends
    the whole frame before it reads, gets the answer."""
    chunks, size = [], 0
    while chunk := await reader.read(1 << 16):
        size += len(chunk)
        if size > limit:
            while await reader.read(1 << 16):
                pass
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def too_large(limit: int = MAX_FRAME) -> bytes:
    return _frame(1, CniError(DECODING_FAILURE, f"netbay-cni: the request is larger than {limit} bytes").body())


async def _serve_one(cni: Cni, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        raw = await asyncio.wait_for(read_frame(reader), READ_BOUND)
        writer.write(too_large() if raw is None else await answer(cni, raw))
        await writer.drain()
    except (ConnectionError, TimeoutError) as exc:
        log.info("a client went away: %s", exc)
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


async def run(cni: Cni, listener: unixsock.Listener, stop: asyncio.Event) -> None:
    """Serve on ``listener`` (:func:`netbay.unixsock.bind`) until ``stop``; the socket
    and its lock are removed on the way out."""
    try:
        server = await asyncio.start_unix_server(lambda r, w: _serve_one(cni, r, w), sock=listener.sock)
        async with server:
            await stop.wait()
    finally:
        listener.close()
        await cni.aclose()


def serve(cni: Cni, path: Path, socket_group: str | None = None) -> None:
    """Run until SIGTERM/SIGINT, on ``path``: root's (0600), or 0660 to ``socket_group``
    (whoever reaches it plugs ports). :class:`netbay.locks.Held`: another daemon serves it."""
    listener = unixsock.bind(path, f"CNI daemon socket {path}", socket_group)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await run(cni, listener, stop)

    try:
        asyncio.run(main())
    finally:
        listener.close()


__all__ = ["CALL_BOUND", "MAX_FRAME", "answer", "read_frame", "run", "serve"]
