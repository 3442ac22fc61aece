"""The plugin's HTTP side: ``POST /<Method>`` on a Unix socket, JSON in and out.

Every call is bounded (:data:`CALL_BOUND`, :data:`CLOUD_CALL_BOUND` on a cloud): dockerd
holds locks while it waits on a plugin, so a slow or dead API must become an ``Err``, never
a hang.
Errors are ``{"Err": message}`` with status 500, which Docker prints as is: worded for
a Docker user, a body of the wrong shape refused by call and field (:mod:`.calls`),
never a Python exception's name. Bodies are capped while they are read
(:mod:`netbay.bodylimit`): 413, ``{"Err": …}`` too. Docker's resend of a call cut short
by a crash comes without its body; it is answered from :mod:`.journal`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from netbay import unixsock
from netbay.backends.aio import AsyncNetworkBackend
from netbay.client.aio import AsyncApi
from netbay.bodylimit import BodyLimit
from netbay.dataplane.names import PRODUCT_PREFIX, Names
from netbay.errors import NetbayError
from netbay.plugins.libnetwork.calls import SHAPES, check, verb
from netbay.plugins.libnetwork.directory import CONTAINER_OWNER, Directory, owner_tag
from netbay.plugins.libnetwork.dockerview import DockerView
from netbay.plugins.libnetwork.gc import Collector
from netbay.plugins.libnetwork.ipam import Ipam
from netbay.plugins.libnetwork.journal import REPLAYED, REPLAYING, Journal
from netbay.plugins.libnetwork.resources import PluginError, Resources
from netbay.plugins.libnetwork.network import ANSWER_SENT, NetworkDriver
from netbay.runtime.attach import Attacher
from netbay.runtime.vif import OvsVifs

log = logging.getLogger("netbay.libnetwork")

CONTENT_TYPE = "application/vnd.docker.plugins.v1.2+json"
CALL_BOUND = 8.0
#: A cloud's calls: a Neutron binding takes 0.4-0.7 s idle and over 8 s on a loaded cloud
#: (seen: ML2/OVN on two busy CPUs), an API shared with others and out of netbay's hands.
#: Docker's own client waits without a limit (kuryr-libnetwork's calls too): the bound only
#: keeps dockerd's locks from being held for ever.
CLOUD_CALL_BOUND = 25.0
WARM_BOUND, WARM_THREADS = 30.0, 3   # a cloud's first answers at start (see _warm)
PLUGIN_DIR = Path("/run/docker/plugins")


def journal_dir(name: str) -> Path:
    """Where the plugin ``name`` keeps its calls in flight (tmpfs: gone with a reboot, as Docker's state)."""
    return Path(os.environ.get("NETBAY_STATE_DIR", "/run/netbay")) / "libnetwork" / f"{name}.calls"

Handler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


def _reply(body: Any, status: int = 200, sent: asyncio.Event | None = None, entry: Path | None = None) -> Response:
    """``sent``: set once the answer is written (a background step of starlette's); then
    the call's journal ``entry`` goes (a crash before that leaves it for Docker's resend)."""
    return Response(orjson.dumps(body), status_code=status, media_type=CONTENT_TYPE,
                    background=BackgroundTask(_answered, sent, entry) if sent is not None else None)


async def _answered(event: asyncio.Event, entry: Path | None) -> None:
    Journal.end(entry)
    event.set()


def _refuse(_scope: Any, message: str) -> Response:
    return _reply({"Err": f"netbay: {message}"}, 413)


async def _http_error(_request: Request, exc: HTTPException) -> Response:
    """Starlette's own refusals (a body over the limit, an unknown path) in Docker's format."""
    return _reply({"Err": f"netbay: {exc.detail}"}, exc.status_code)


def call_bound(backend: AsyncNetworkBackend) -> float:
    """How long each of Docker's calls may take on ``backend``."""
    return CALL_BOUND if backend.traits.own_services else CLOUD_CALL_BOUND


def handlers(ipam: Ipam, net: NetworkDriver) -> dict[str, Handler]:
    async def activate(_req: dict[str, Any]) -> dict[str, Any]:
        return {"Implements": ["NetworkDriver", "IpamDriver"]}

    return {
        "Plugin.Activate": activate,
        "NetworkDriver.GetCapabilities": net.capabilities,
        "NetworkDriver.CreateNetwork": net.create_network,
        "NetworkDriver.DeleteNetwork": net.delete_network,
        "NetworkDriver.AllocateNetwork": net.nothing,
        "NetworkDriver.FreeNetwork": net.nothing,
        "NetworkDriver.CreateEndpoint": net.create_endpoint,
        "NetworkDriver.EndpointOperInfo": net.endpoint_info,
        "NetworkDriver.DeleteEndpoint": net.delete_endpoint,
        "NetworkDriver.Join": net.join,
        "NetworkDriver.Leave": net.nothing,
        "NetworkDriver.DiscoverNew": net.nothing,
        "NetworkDriver.DiscoverDelete": net.nothing,
        "NetworkDriver.ProgramExternalConnectivity": net.nothing,
        "NetworkDriver.RevokeExternalConnectivity": net.nothing,
        "IpamDriver.GetCapabilities": ipam.capabilities,
        "IpamDriver.GetDefaultAddressSpaces": ipam.default_address_spaces,
        "IpamDriver.RequestPool": ipam.request_pool,
        "IpamDriver.ReleasePool": ipam.release_pool,
        "IpamDriver.RequestAddress": ipam.request_address,
        "IpamDriver.ReleaseAddress": ipam.release_address,
    }


def create_app(backend: AsyncNetworkBackend, attacher: Attacher, host: str | None = None, *, name: str = "netbay",
               netbay_api: AsyncApi | None = None, device_owner: str = CONTAINER_OWNER, bound: float | None = None,
               grace: float = 30.0, docker_host: str | None = None,
               on_exit: Callable[[], None] | None = None, journal_dir: Path | None = None,
               vifs: OvsVifs | None = None) -> Starlette:
    """``backend``: where networks, subnets and ports are made (netbay's own, or a cloud's
    Neutron); ``journal_dir``: where calls in flight are kept for Docker's resends after a
    crash (:mod:`.journal`; None: not kept); ``netbay_api``: netbay's other APIs, for ``-o netbay.cluster`` (None: refused);
    ``device_owner``: of the ports made and bound here (the backend's convention); ``vifs``: a
    cloud's ports plugged with os-vif into its Open vSwitch (None: into the fabric); ``bound``:
    of each call (None: :data:`CALL_BOUND`, or :data:`CLOUD_CALL_BOUND` on a cloud)."""
    host = host or socket.gethostname()
    on_cloud = not backend.traits.own_services
    bound = call_bound(backend) if bound is None else bound
    api = "the cloud's API" if on_cloud else "the netbay API"
    neutron = Resources(backend)
    directory = Directory(neutron, owner_tag(name, host), device_owner)
    docker = DockerView(docker_host, name) if docker_host else None
    net = NetworkDriver(neutron, directory, attacher, host, docker, netbay_api, vifs)
    table = handlers(Ipam(neutron, directory, net.claims, net.prepare, net.unprepare), net)
    journal = Journal(journal_dir)
    journal.adopt()
    collector = Collector(neutron, net, grace, docker, journal.macs)

    async def dispatch(request: Request) -> Response:
        method = request.path_params["method"]
        handler = table.get(method)
        if handler is None:
            return _reply({"Err": f"netbay: {method} is not implemented"}, 404)
        raw = await request.body()
        replayed: list[dict[str, Any]] = []
        try:
            return await answer(method, handler, raw, replayed)
        finally:
            for req in replayed:   # its half-made port is the sweep's again (or adopted: spared)
                journal.finished(req)

    async def answer(method: str, handler: Handler, raw: bytes, replayed: list[dict[str, Any]]) -> Response:
        sent = asyncio.Event()
        ANSWER_SENT.set(sent)
        started = time.perf_counter()
        entry = None
        try:
            if raw.strip():
                try:
                    req = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    return _reply({"Err": f"netbay: {verb(method)}: the body is not JSON"}, 400)
                entry = journal.begin(method, raw) if isinstance(req, dict) and method in REPLAYED else None
            elif (req := journal.take(method) if method in REPLAYED else None) is not None:
                REPLAYING.set(True)  # Docker's resend after a restart: the body it lost, from the journal
                replayed.append(req)
                entry = journal.begin(method, orjson.dumps(req))  # for a resend after yet another crash
                log.info("%s: answering Docker's resend of a call cut short by the last stop", method)
            elif method in SHAPES:
                raise PluginError(f"netbay: {verb(method)} came without its body (Docker resends a call that "
                                  "a plugin restart cut short that way); run the Docker command again")
            else:
                req = {}
            body = await asyncio.wait_for(handler(check(method, req)), bound)
            log.debug("%s: %.2f ms", method, 1000 * (time.perf_counter() - started))
        except NetbayError as exc:  # the plugin's refusal, or the backend's (its own message)
            log.info("%s: %s", method, exc)
            return _reply({"Err": str(exc)}, 500, sent, entry)
        except TimeoutError:
            log.warning("%s: no answer within %.0f s", method, bound)
            return _reply({"Err": f"netbay: {method} did not finish within {bound:.0f} s "
                                  f"(is {api} overloaded?)"}, 500, sent, entry)
        except Exception:  # Docker must get an answer, not a dropped connection
            log.exception("%s failed", method)
            return _reply({"Err": f"netbay: {verb(method)} failed inside the plugin (its log says why)"},
                          500, sent, entry)
        return _reply(body, sent=sent, entry=entry)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        if on_cloud:
            await _warm(neutron)
        sweeping = asyncio.create_task(collector.run())
        try:
            yield
        finally:
            if on_exit is not None:
                on_exit()
            sweeping.cancel()
            journal.close()
            net.close()
            await neutron.aclose()

    return Starlette(routes=[Route("/{method}", dispatch, methods=["POST"])], lifespan=lifespan,
                     middleware=[Middleware(BodyLimit, refuse=_refuse)],
                     exception_handlers={HTTPException: _http_error})


async def _warm(neutron: Resources) -> None:
    """Calls to a cloud before the first of Docker's: the backend's connections (one per
    worker thread) are opened and authenticated here — seconds on a loaded host, against
    Keystone — not inside a call's :data:`CALL_BOUND`; a restarted plugin's first
    DeleteEndpoint, beside the first sweep, would otherwise fail on it. :data:`WARM_THREADS`
    at once, so as many threads are warm. Docker's calls wait meanwhile (the socket listens)."""
    try:
        await asyncio.wait_for(asyncio.gather(*(neutron.list("network", name="netbay-warm-up")
                                                for _ in range(WARM_THREADS))), WARM_BOUND)
    except Exception as exc:  # noqa: BLE001 - the calls will say what is wrong; serve anyway
        log.warning("the cloud did not answer at start (%s); serving anyway", exc)


def socket_path(name: str, plugin_dir: Path = PLUGIN_DIR) -> Path:
    return plugin_dir / f"{name}.sock"


#: How long an idle connection from dockerd stays open. Docker's plugin client keeps idle
#: connections with no time limit and resends a call whose connection failed with the
#: same, already read body: were the plugin to close an idle connection (uvicorn's 5 s
#: default) just as Docker reuses it, the resend would arrive empty. Docker closes first.
IDLE_KEEP_ALIVE = 24 * 3600


def serve(backend: AsyncNetworkBackend, name: str = "netbay", *, prefix: str = PRODUCT_PREFIX, host: str | None = None,
          netbay_api: AsyncApi | None = None, device_owner: str = CONTAINER_OWNER, plugin_dir: Path = PLUGIN_DIR,
          grace: float = 30.0, docker_host: str | None = None, socket_group: str | None = None,
          vifs: OvsVifs | None = None) -> None:
    """Serve until SIGTERM/SIGINT; the socket (0600, or 0660 to ``socket_group``) and its
    lock are removed on the way out. :class:`netbay.locks.Held`: another driver serves it."""
    import uvicorn

    path = socket_path(name, plugin_dir)
    listener = unixsock.bind(path, f"Docker plugin socket {path}", socket_group)
    # The socket goes at shutdown, inside the app: uvicorn re-raises SIGTERM once it has
    # stopped, so nothing after Server.run() would run.
    try:
        app = create_app(backend, Attacher(Names(prefix)), host, name=name, netbay_api=netbay_api,
                         device_owner=device_owner, grace=grace, docker_host=docker_host, on_exit=listener.close,
                         journal_dir=journal_dir(name), vifs=vifs)
        config = uvicorn.Config(app, log_level="warning", access_log=False, timeout_graceful_shutdown=2,
                                timeout_keep_alive=IDLE_KEEP_ALIVE)
        uvicorn.Server(config).run(sockets=[listener.sock])
    finally:
        listener.close()


__all__ = ["CALL_BOUND", "CLOUD_CALL_BOUND", "IDLE_KEEP_ALIVE", "call_bound", "create_app", "journal_dir", "serve",
           "socket_path"]
