"""What Zun answers at once from a container's Docker app: ``execute`` (the command in
the query, as python-zunclient sends it, or in the JSON body), ``logs``, ``top``,
``stats``, ``get_archive`` and ``put_archive`` (``data`` base64 from 1.25). Each is
refused with Zun's 409 outside the states Zun allows it in."""

from __future__ import annotations

import shlex
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.concurrency import run_in_threadpool

from netbay.api.container.common import check_state, flag, get, runner
from netbay.api import versioned
from netbay.api.responses import JSONResponse
from netbay.containers import dockerops, schema
from netbay.errors import BadRequest

PATH = "/v1/containers/{ident}"
ENCODED_SINCE = (1, 25)   # archives' data is base64 from this version on
PS_ARGS = {"type": "string", "pattern": "^[a-zA-Z- ,+]*$"}
SINCE = {"type": ["string", "integer", "null"],
         "pattern": r"(^[0-9]*$)|([0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2},[0-9]{1,3})"}


async def _arguments(request: Request) -> dict[str, Any]:
    """The query's parameters, and a JSON body's beside them (Zun's API reads both)."""
    params: dict[str, Any] = dict(versioned.params(request))
    if (await request.body()).strip():
        body = await versioned.body(request)
        if not isinstance(body, dict):
            raise BadRequest("The request body must be a JSON object.")
        params.update({k: v for k, v in body.items() if k not in params})
    return params


def _text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _checked(request: Request, ident: str, action: str) -> str:
    with request.app.state.store.read() as s:
        c = get(s, request, ident)
        check_state(c, action)
        return c.id


def mount(sub: FastAPI) -> None:
    async def execute(request: Request, ident: str) -> Response:
        args = await _arguments(request)
        raw = args.get("command")
        command = raw if isinstance(raw, list) else shlex.split(str(raw or ""))
        if not command:
            raise BadRequest("Invalid input for query parameter 'command': a command is required.")
        if not flag({"run": _text(args.get("run", "true"))}, "run"):
            raise BadRequest("Interactive exec sessions (run=false) are not supported; use run=true.")
        container_id = _checked(request, ident, "execute")
        return JSONResponse(await run_in_threadpool(runner(request).execute, container_id, command))

    async def logs(request: Request, ident: str) -> Response:
        args = {k: _text(v) for k, v in (await _arguments(request)).items()}
        stdout, stderr = flag(args, "stdout", "true"), flag(args, "stderr", "true")
        timestamps = flag(args, "timestamps")
        schema.validate({"type": "object", "properties": {"since": SINCE}}, {"since": args.get("since")})
        container_id = _checked(request, ident, "logs")
        out = await run_in_threadpool(runner(request).call, container_id, lambda api, did: dockerops.logs(
            api, did, stdout=stdout, stderr=stderr, timestamps=timestamps, tail=args.get("tail", "all"),
            since=args.get("since")))
        return JSONResponse(out)

    async def top(request: Request, ident: str) -> Response:
        ps_args = versioned.params(request).get("ps_args")
        if ps_args is not None:
            schema.validate({"type": "object", "properties": {"ps_args": PS_ARGS}}, {"ps_args": ps_args})
        container_id = _checked(request, ident, "top")
        return JSONResponse(await run_in_threadpool(runner(request).call, container_id,
                                                    lambda api, did: dockerops.top(api, did, ps_args)))

    async def stats(request: Request, ident: str) -> Response:
        with request.app.state.store.read() as s:
            c = get(s, request, ident)
            check_state(c, "stats")
            container_id, name = c.id, c.name
        return JSONResponse(await run_in_threadpool(runner(request).call, container_id,
                                                    lambda api, did: dockerops.stats(api, did, name)))

    async def get_archive(request: Request, ident: str) -> Response:
        path = _path(versioned.params(request))
        container_id = _checked(request, ident, "get_archive")
        encode = versioned.version(request) >= ENCODED_SINCE
        return JSONResponse(await run_in_threadpool(runner(request).call, container_id,
                                                    lambda api, did: dockerops.get_archive(api, did, path, encode)))

    async def put_archive(request: Request, ident: str) -> Response:
        args = await _arguments(request)
        path = _path(args)
        data = args.get("data")
        if not isinstance(data, str):
            raise BadRequest("Invalid input for field 'data': the archive is required, as a string.")
        container_id = _checked(request, ident, "put_archive")
        decode = versioned.version(request) >= ENCODED_SINCE
        await run_in_threadpool(runner(request).call, container_id,
                                lambda api, did: dockerops.put_archive(api, did, path, data, decode))
        return JSONResponse(None)

    sub.add_api_route(PATH + "/execute", execute, methods=["POST"], name="container_execute")
    sub.add_api_route(PATH + "/logs", logs, methods=["GET"], name="container_logs")
    sub.add_api_route(PATH + "/top", top, methods=["GET"], name="container_top")
    sub.add_api_route(PATH + "/stats", stats, methods=["GET"], name="container_stats")
    sub.add_api_route(PATH + "/get_archive", get_archive, methods=["GET"], name="container_get_archive")
    sub.add_api_route(PATH + "/put_archive", put_archive, methods=["POST"], name="container_put_archive")


def _path(args: dict[str, Any]) -> str:
    path = args.get("path")
    if not isinstance(path, str) or not path:
        raise BadRequest("Invalid input for query parameter 'path': a path in the container is required.")
    return path
