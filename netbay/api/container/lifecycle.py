"""Zun's containers themselves: create (``?run=true``), list, show, update (``PATCH``:
rename, new cpu/memory given to Docker), delete, and the actions that change their
state — start, stop, reboot, pause, unpause, kill, rebuild. Creates and actions
answer 202 at once and write Zun's action record; the runner carries them out and
finishes the record. An admin reaches every project's containers (Zun's
``get_resource``); ``?all_projects=`` on show or delete is an admin's only (403)."""

from __future__ import annotations

import signal as signals
import socket
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.concurrency import run_in_threadpool

from netbay.api.auth import context
from netbay.api.container.common import (check_state, flag, follow, get, links, neutron, owners_neutron,
                                         policy, record, runner, scoped)
from netbay.api import versioned
from netbay.api.responses import JSONResponse
from netbay.containers import containers, dockerops, schema
from netbay.errors import BadRequest, Conflict
from netbay.store.models import Container

PATH = "/v1/containers"
TASKS = {"start": "container_starting", "stop": "container_stopping", "reboot": "container_rebooting",
         "pause": "container_pausing", "unpause": "container_unpausing", "kill": "container_killing"}
# Zun's ``signal`` parameter: every name, short name, lower case and number of Python's signals.
SIGNALS = {"None"} | {form for sig in signals.Signals for form in (
    sig.name, sig.name.removeprefix("SIG"), sig.name.lower(), sig.name.lower().removeprefix("sig"),
    str(int(sig)))}


def shown(request: Request, session: Any, c: Container) -> dict[str, Any]:
    out = containers.render(session, c)
    out["links"] = links(request, "containers", c.id)
    return out


def _timeout(params: dict[str, str]) -> int:
    try:
        return int(params.get("timeout") or 10)
    except ValueError:
        raise BadRequest(f"Invalid input for query parameter 'timeout': '{params['timeout']}'.") from None


def mount(sub: FastAPI) -> None:
    def listing(request: Request) -> Response:
        ctx = context(request)
        with request.app.state.store.read() as s:
            every = flag(versioned.params(request), "all_projects")
            labels = request.query_params.getlist("labels")
            return JSONResponse({"containers": [shown(request, s, c)
                                                for c in containers.listing(s, ctx, every, labels)]})

    def show(request: Request, ident: str) -> Response:
        scoped(request, versioned.params(request), "container:get_one_all_projects")
        with request.app.state.store.read() as s:
            return JSONResponse(shown(request, s, get(s, request, ident)))

    async def create(request: Request) -> Response:
        ctx = context(request)
        run = flag(versioned.params(request), "run")
        body = await versioned.body(request)
        host = socket.gethostname()
        store = request.app.state.store
        version = versioned.version(request)
        uuid = await run_in_threadpool(lambda: containers.create(store, neutron(request), body, run=run, host=host,
                                                                 version=version))
        record_id = await versioned.write(request, lambda s: record(request, s, s.get(Container, uuid), "create"))
        with store.read() as s:
            out = shown(request, s, containers.get(s, ctx, uuid))
        follow(request, record_id, runner(request).create(out["uuid"]))
        return JSONResponse(out, status_code=202, headers={"Location": out["links"][0]["href"]})

    async def delete(request: Request, ident: str) -> Response:
        params = versioned.params(request)
        scoped(request, params, "container:delete_all_projects")
        force, stop = flag(params, "force"), flag(params, "stop")
        if force and not stop:
            policy(request, "container:delete_force")

        def check(s: Any) -> Container:
            c = get(s, request, ident, for_update=True)
            if not (force or stop):
                check_state(c, "delete")
            c.status, c.task_state = "Deleting", "container_deleting"
            return c

        c = await versioned.write(request, check)
        await run_in_threadpool(runner(request).remove, c.id)
        await run_in_threadpool(containers.delete, request.app.state.store, owners_neutron(request, c), c.id)
        return Response(status_code=204)

    def action(verb: str) -> Any:
        async def handler(request: Request, ident: str) -> Response:
            params = versioned.params(request)
            timeout = _timeout(params)
            sig = await _signal(request, params) if verb == "kill" else None

            def mark(s: Any) -> tuple[str, str]:
                c = get(s, request, ident, for_update=True)
                check_state(c, verb)
                c.task_state = TASKS[verb]
                return c.id, record(request, s, c, verb)

            container_id, record_id = await versioned.write(request, mark)
            follow(request, record_id, runner(request).action(container_id, verb, timeout, sig))
            return Response(status_code=202)
        return handler

    async def rebuild(request: Request, ident: str) -> Response:
        """Zun's rebuild (``?image=`` optional): a new app container in the same sandbox."""
        params = versioned.params(request)
        image = params.get("image")
        if params.get("image_driver") not in (None, "docker"):
            raise BadRequest("Invalid input for query parameter 'image_driver': only 'docker' is served.")

        def mark(s: Any) -> tuple[str, bool, str]:
            c = get(s, request, ident, for_update=True)
            check_state(c, "rebuild")
            run = c.status == "Running"
            if image:
                c.image = image
            c.status, c.task_state = "Rebuilding", "container_rebuilding"
            return c.id, run, record(request, s, c, "rebuild")

        container_id, run, record_id = await versioned.write(request, mark)
        follow(request, record_id, runner(request).rebuild(container_id, run))
        return Response(status_code=202)

    async def update(request: Request, ident: str) -> Response:
        """Zun's PATCH: ``name``, and ``cpu``/``memory`` given to Docker at once; 200 with the container."""
        patch = await versioned.body(request)
        schema.validate(schema.CONTAINER_UPDATE, patch)
        if patch.get("auto_heal") in schema.TRUE:
            raise schema.invalid("auto_heal", patch["auto_heal"], "netbay does not run containers with 'auto_heal'.")
        return JSONResponse(await run_in_threadpool(_update, request, ident, patch))

    async def rename(request: Request, ident: str) -> Response:
        """Zun's ``rename?name=`` (1.1–1.13; later versions rename by ``PATCH``)."""
        if versioned.version(request) > (1, 13):
            raise BadRequest("Renaming by 'rename' is served up to 1.13: use PATCH with 'name'.")
        name = versioned.params(request).get("name") or ""
        schema.validate({"type": "object", "properties": {"name": schema.CONTAINER_NAME}}, {"name": name})
        with request.app.state.store.read() as s:
            if get(s, request, ident).name == name:
                raise Conflict("The new name for the container is the same as the old name.")
        return JSONResponse(await run_in_threadpool(_update, request, ident, {"name": name}))

    sub.add_api_route(PATH, listing, methods=["GET"], name="list_containers")
    sub.add_api_route(PATH, create, methods=["POST"], status_code=202, name="create_container")
    sub.add_api_route(PATH + "/{ident}", show, methods=["GET"], name="show_container")
    sub.add_api_route(PATH + "/{ident}", update, methods=["PATCH"], name="update_container")
    sub.add_api_route(PATH + "/{ident}", delete, methods=["DELETE"], status_code=204, name="delete_container")
    for verb in TASKS:
        sub.add_api_route(f"{PATH}/{{ident}}/{verb}", action(verb), methods=["POST"], status_code=202,
                          name=f"{verb}_container")
    sub.add_api_route(PATH + "/{ident}/rebuild", rebuild, methods=["POST"], status_code=202,
                      name="rebuild_container")
    sub.add_api_route(PATH + "/{ident}/rename", rename, methods=["POST"], name="rename_container")


async def _signal(request: Request, params: dict[str, str]) -> str | None:
    """``signal`` from the query (python-zunclient) or the JSON body; Zun's list of names."""
    value = params.get("signal")
    if value is None and (await request.body()).strip():
        body = await versioned.body(request)
        value = body.get("signal") if isinstance(body, dict) else None
    if value is not None and value not in SIGNALS:
        raise schema.invalid("signal", value, f"'{value}' is not one of the signals.")
    return value


def _update(request: Request, ident: str, patch: dict[str, Any]) -> dict[str, Any]:
    store = request.app.state.store
    ctx = context(request)
    with store.read() as s:
        c = get(s, request, ident)
        check_state(c, "update")
        container_id, docker_id = c.id, c.docker_id
    cpu = float(patch["cpu"]) if patch.get("cpu") is not None else None
    memory = str(patch["memory"]) if patch.get("memory") is not None else None
    if (cpu is not None or memory is not None) and docker_id:
        runner(request).call(container_id, lambda api, did: dockerops.update(api, did, cpu, memory))

    def write(s: Any) -> dict[str, Any]:
        found = get(s, request, container_id, for_update=True)
        name = patch.get("name")
        if name and name != found.name:
            containers.unique_name(s, ctx, name, project_id=found.project_id)
            found.name = name
        if cpu is not None:
            found.cpu = cpu
        if memory is not None:
            found.memory = memory
        s.flush()
        return shown(request, s, found)
    return store.retrying(write)
