"""The Zun-compatible container API v1 under ``/container`` (catalog type ``container``).

HTTP only: the rules are in :mod:`netbay.containers`. It reuses the Magnum API's
machinery (:mod:`netbay.api.containerinfra`): a mounted sub-application whose every
answer — unknown paths and unexpected failures included — is in the
``{"errors": [...]}`` format Zun shares with Magnum, and ``OpenStack-API-Version:
container 1.x`` negotiated as Zun does (1.1 when absent, 1.1–1.40 served, 406 else).

Routes: ``networks`` (create from a netbay network, list, show, delete — 409 while
containers are attached) and ``containers`` (create, ``?run=true``, list, show,
delete, ``start``/``stop``/``reboot``/``rebuild``, ``execute`` (``run=true``), ``network_list``/
``network_attach``/``network_detach``). Creates answer 202 at once; Docker is driven by
:class:`netbay.containers.runner.Runner` and the status moves on from ``Creating``.
"""

from __future__ import annotations

import socket
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.concurrency import run_in_threadpool

from netbay.api.auth import context
from netbay.api.containerinfra import Guard, _base, _body, _install_errors, _params, _v, _version, _write
from netbay.api.responses import JSONResponse
from netbay.backends import open_backend
from netbay.containers import containers, networks
from netbay.containers.neutron import ZunNeutron
from netbay.containers.runner import Runner
from netbay.errors import BadRequest, Conflict
from netbay.store.models import Container

PREFIX = "/container"
SERVICE = "container"
MIN_VERSION = (1, 1)
MAX_VERSION = (1, 40)

# Zun's allowed states per action (zun/common/consts + the API's checks).
VALID_STATES = {
    "start": ("Created", "Stopped", "Error"),
    "stop": ("Running",),
    "reboot": ("Created", "Running", "Stopped", "Error"),
    "rebuild": ("Created", "Running", "Stopped", "Error"),
    "delete": ("Created", "Error", "Stopped"),
    "network_attach": ("Created", "Running", "Stopped"),
    "network_detach": ("Created", "Running", "Stopped"),
}


def _runner(request: Request) -> Runner:
    return request.app.state.container_runner


def _neutron(request: Request) -> ZunNeutron:
    """The network backend (netbay's own or a cloud's Neutron) acting for the caller."""
    return ZunNeutron(_runner(request).network, context(request))


def _links(request: Request, collection: str, obj_id: str) -> list[dict[str, str]]:
    base = _base(request) + PREFIX
    return [{"href": f"{base}/v1/{collection}/{obj_id}", "rel": "self"},
            {"href": f"{base}/{collection}/{obj_id}", "rel": "bookmark"}]


def _flag(params: dict[str, str], name: str) -> bool:
    value = params.get(name, "false").lower()
    if value not in ("true", "false", "1", "0", "yes", "no"):
        raise BadRequest(f"Invalid input for query parameter '{name}': '{value}' is not a boolean.")
    return value in ("true", "1", "yes")


def _check_state(c: Container, action: str) -> None:
    if c.task_state is not None and action != "delete" or c.status not in VALID_STATES[action]:
        state = c.task_state if c.task_state is not None and c.status in VALID_STATES[action] else c.status
        raise Conflict(f"Cannot {action} container {c.id} in {state} state.")


# --- networks ------------------------------------------------------------------------------------


def _mount_networks(sub: FastAPI) -> None:
    def shown(request: Request, net: Any) -> dict[str, Any]:
        out = networks.render(net)
        out["links"] = _links(request, "networks", net.id)
        return out

    def listing(request: Request) -> Response:
        ctx = context(request)
        with request.app.state.store.read() as s:
            return JSONResponse({"networks": [shown(request, n) for n in networks.listing(s, ctx)]})

    def show(request: Request, ident: str) -> Response:
        ctx = context(request)
        with request.app.state.store.read() as s:
            return JSONResponse(shown(request, networks.get(s, ctx, ident)))

    async def create(request: Request) -> Response:
        neutron = _neutron(request)
        body = await _body(request)
        out = await run_in_threadpool(networks.create, request.app.state.store, neutron, body)
        out["links"] = _links(request, "networks", out["uuid"])
        return JSONResponse(out, status_code=200)

    async def delete(request: Request, ident: str) -> Response:
        ctx = context(request)
        network_id, last = await _write(request, lambda s: networks.delete(s, ctx, ident))
        if last:
            await run_in_threadpool(_runner(request).remove_network, network_id)
        return Response(status_code=204)

    sub.add_api_route("/v1/networks", listing, methods=["GET"], name="list_networks")
    sub.add_api_route("/v1/networks", create, methods=["POST"], name="create_network")
    sub.add_api_route("/v1/networks/{ident}", show, methods=["GET"], name="show_network")
    sub.add_api_route("/v1/networks/{ident}", delete, methods=["DELETE"], status_code=204, name="delete_network")


# --- containers ----------------------------------------------------------------------------------


def _mount_containers(sub: FastAPI) -> None:
    path = "/v1/containers"

    def shown(request: Request, session: Any, c: Container) -> dict[str, Any]:
        out = containers.render(session, c)
        out["links"] = _links(request, "containers", c.id)
        return out

    def listing(request: Request) -> Response:
        ctx = context(request)
        with request.app.state.store.read() as s:
            every = _flag(_params(request), "all_projects")
            labels = request.query_params.getlist("labels")
            return JSONResponse({"containers": [shown(request, s, c)
                                                for c in containers.listing(s, ctx, every, labels)]})

    def show(request: Request, ident: str) -> Response:
        ctx = context(request)
        with request.app.state.store.read() as s:
            return JSONResponse(shown(request, s, containers.get(s, ctx, ident)))

    async def create(request: Request) -> Response:
        ctx = context(request)
        run = _flag(_params(request), "run")
        body = await _body(request)
        host = socket.gethostname()
        store = request.app.state.store
        version = _version(request)
        uuid = await run_in_threadpool(lambda: containers.create(store, _neutron(request), body, run=run, host=host,
                                                                 version=version))
        with store.read() as s:
            out = shown(request, s, containers.get(s, ctx, uuid))
        _runner(request).create(out["uuid"])
        return JSONResponse(out, status_code=202, headers={"Location": out["links"][0]["href"]})

    async def delete(request: Request, ident: str) -> Response:
        ctx = context(request)
        params = _params(request)
        force, stop = _flag(params, "force"), _flag(params, "stop")

        def check(s: Any) -> str:
            c = containers.get(s, ctx, ident, for_update=True)
            if not (force or stop):
                _check_state(c, "delete")
            c.status, c.task_state = "Deleting", "container_deleting"
            return c.id

        container_id = await _write(request, check)
        await run_in_threadpool(_runner(request).remove, container_id)
        await run_in_threadpool(containers.delete, request.app.state.store, _neutron(request), container_id)
        return Response(status_code=204)

    def action(verb: str, task: str) -> Any:
        async def handler(request: Request, ident: str) -> Response:
            ctx = context(request)
            params = _params(request)
            try:
                timeout = int(params.get("timeout") or 10)
            except ValueError:
                raise BadRequest(f"Invalid input for query parameter 'timeout': '{params['timeout']}'.") from None

            def mark(s: Any) -> str:
                c = containers.get(s, ctx, ident, for_update=True)
                _check_state(c, verb)
                c.task_state = task
                return c.id

            container_id = await _write(request, mark)
            _runner(request).action(container_id, verb, timeout)
            return Response(status_code=202)
        return handler

    async def rebuild(request: Request, ident: str) -> Response:
        """Zun's rebuild (``?image=`` optional): a new app container in the same sandbox."""
        ctx = context(request)
        params = _params(request)
        image = params.get("image")
        if params.get("image_driver") not in (None, "docker"):
            raise BadRequest("Invalid input for query parameter 'image_driver': only 'docker' is served.")

        def mark(s: Any) -> tuple[str, bool]:
            c = containers.get(s, ctx, ident, for_update=True)
            _check_state(c, "rebuild")
            run = c.status == "Running"
            if image:
                c.image = image
            c.status, c.task_state = "Rebuilding", "container_rebuilding"
            return c.id, run

        container_id, run = await _write(request, mark)
        _runner(request).rebuild(container_id, run)
        return Response(status_code=202)

    def network_list(request: Request, ident: str) -> Response:
        ctx = context(request)
        with request.app.state.store.read() as s:
            c = containers.get(s, ctx, ident)
            out = [{"net_id": net_id, "port_id": addrs[0]["port"], "fixed_ips": [
                {"ip_address": a["addr"], "version": a["version"], "subnet_id": a["subnet_id"]} for a in addrs]}
                for net_id, addrs in containers.addresses(s, c.id).items()]
        return JSONResponse({"networks": out})

    async def network_attach(request: Request, ident: str) -> Response:
        params = _params(request)
        entry = {k: v for k, v in (("network", params.get("network")), ("port", params.get("port")),
                                   ("v4-fixed-ip", params.get("fixed_ip"))) if v}
        if bool(entry.get("network")) == bool(entry.get("port")):
            raise BadRequest("Either 'network' or 'port' must be given, not both.")

        def check(c: Container) -> None:
            _check_state(c, "network_attach")
            if c.cluster_id:
                raise Conflict(f"Container {c.id} is placed on cluster {c.cluster_id}: it is plugged as a pod "
                               "is and takes no other network.")

        container_id, port_id = await run_in_threadpool(
            containers.attach, request.app.state.store, _neutron(request), ident, entry, check)
        _runner(request).network_attach(container_id, port_id)
        return Response(status_code=202)

    async def network_detach(request: Request, ident: str) -> Response:
        ctx = context(request)
        neutron = _neutron(request)
        params = _params(request)

        def mark(s: Any) -> tuple[str, str]:
            c = containers.get(s, ctx, ident, for_update=True)
            _check_state(c, "network_detach")
            att = containers.attachment_for(s, neutron, c, params.get("network"), params.get("port"))
            c.task_state = "network_detaching"
            return c.id, att.port_id

        container_id, port_id = await _write(request, mark)
        _runner(request).network_detach(container_id, port_id)
        return Response(status_code=202)

    async def execute(request: Request, ident: str) -> Response:
        import shlex

        ctx = context(request)
        params = _params(request)
        command = shlex.split(params.get("command") or "")
        if not command:
            raise BadRequest("Invalid input for query parameter 'command': a command is required.")
        if not _flag({"run": params.get("run", "true")}, "run"):
            raise BadRequest("Interactive exec sessions (run=false) are not supported; use run=true.")
        with request.app.state.store.read() as s:
            c = containers.get(s, ctx, ident)
            if c.status != "Running" or c.task_state is not None:
                raise Conflict(f"Cannot execute container {c.id} in {c.task_state or c.status} state.")
        return JSONResponse(await run_in_threadpool(_runner(request).execute, c.id, command))

    sub.add_api_route(path + "/{ident}/execute", execute, methods=["POST"], name="container_execute")
    sub.add_api_route(path + "/{ident}/network_attach", network_attach, methods=["POST"], status_code=202,
                      name="container_network_attach")
    sub.add_api_route(path + "/{ident}/network_detach", network_detach, methods=["POST"], status_code=202,
                      name="container_network_detach")
    sub.add_api_route(path, listing, methods=["GET"], name="list_containers")
    sub.add_api_route(path, create, methods=["POST"], status_code=202, name="create_container")
    sub.add_api_route(path + "/{ident}", show, methods=["GET"], name="show_container")
    sub.add_api_route(path + "/{ident}", delete, methods=["DELETE"], status_code=204, name="delete_container")
    for verb, task in (("start", "container_starting"), ("stop", "container_stopping"),
                       ("reboot", "container_rebooting")):
        sub.add_api_route(f"{path}/{{ident}}/{verb}", action(verb, task), methods=["POST"], status_code=202,
                          name=f"{verb}_container")
    sub.add_api_route(path + "/{ident}/rebuild", rebuild, methods=["POST"], status_code=202,
                      name="rebuild_container")
    sub.add_api_route(path + "/{ident}/network_list", network_list, methods=["GET"], name="container_network_list")


# --- discovery -----------------------------------------------------------------------------------


def _version_entry(request: Request) -> dict[str, Any]:
    return {"id": "v1", "status": "CURRENT", "min_version": _v(MIN_VERSION), "max_version": _v(MAX_VERSION),
            "links": [{"href": f"{_base(request)}{PREFIX}/v1/", "rel": "self"}]}


def _mount_discovery(sub: FastAPI) -> None:
    def root(request: Request) -> dict[str, Any]:
        entry = _version_entry(request)
        return {"name": "OpenStack Zun API (netbay)",
                "description": "Zun-compatible containers on netbay networks, run by Docker on this machine.",
                "versions": [entry], "default_version": entry}

    def v1(request: Request) -> dict[str, Any]:
        base = f"{_base(request)}{PREFIX}"
        out: dict[str, Any] = {
            "id": "v1",
            "media_types": [{"base": "application/json", "type": "application/vnd.openstack.zun.v1+json"}],
            "links": [{"href": f"{base}/v1/", "rel": "self"}],
        }
        for name in ("containers", "networks"):
            out[name] = [{"href": f"{base}/v1/{name}/", "rel": "self"}, {"href": f"{base}/{name}/", "rel": "bookmark"}]
        return out

    sub.add_api_route("/", root, methods=["GET"], name="container_versions")
    sub.add_api_route("/v1", v1, methods=["GET"], name="container_v1")
    sub.add_api_route("/v1/", v1, methods=["GET"], include_in_schema=False)


def install(app: FastAPI, runner: Runner | None = None,
            network: tuple[str, str | None] = ("embedded", None)) -> None:
    """Mount the API at ``/container``; ``runner`` drives Docker (from the environment if None),
    with the containers' ports in the ``network`` backend (``("openstack", cloud)``: a cloud's
    Neutron)."""
    sub = FastAPI(title="netbay container", openapi_url="/openapi.json", docs_url=None, redoc_url=None)
    sub.state = app.state
    if runner is None:
        kind, cloud = network
        options = {"cloud": cloud} if kind == "openstack" else {"store": app.state.store}
        runner = Runner(app.state.store, network=open_backend(kind, **options))
    app.state.container_runner = runner
    if runner.docker_host:
        runner.runtime()  # follow Docker's events from the start (no connection is made yet)
        runner.recover()  # statuses as Docker has them now (off the startup path)
    _install_errors(sub)
    _mount_discovery(sub)
    _mount_networks(sub)
    _mount_containers(sub)
    sub.add_middleware(Guard, service=SERVICE, min_version=MIN_VERSION, max_version=MAX_VERSION, vendor="zun")

    def bare(request: Request) -> Response:
        return Response(status_code=307, headers={"Location": f"{_base(request)}{PREFIX}/"})

    app.add_api_route(PREFIX, bare, methods=["GET"], include_in_schema=False)
    app.mount(PREFIX, sub)
