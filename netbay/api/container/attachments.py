"""A container's networks: ``network_list``, ``network_attach`` and ``network_detach``
(Zun's query parameters ``network``/``port``/``fixed_ip``), each attach and detach
with its action record."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.concurrency import run_in_threadpool

from netbay.api.container.common import check_state, follow, get, neutron, record, runner
from netbay.api import versioned
from netbay.api.responses import JSONResponse
from netbay.containers import containers
from netbay.errors import BadRequest, Conflict
from netbay.store.models import Container

PATH = "/v1/containers/{ident}"


def mount(sub: FastAPI) -> None:
    def network_list(request: Request, ident: str) -> Response:
        with request.app.state.store.read() as s:
            c = get(s, request, ident)
            out = [{"net_id": net_id, "port_id": addrs[0]["port"], "fixed_ips": [
                {"ip_address": a["addr"], "version": a["version"], "subnet_id": a["subnet_id"]} for a in addrs]}
                for net_id, addrs in containers.addresses(s, c.id).items()]
        return JSONResponse({"networks": out})

    async def network_attach(request: Request, ident: str) -> Response:
        params = versioned.params(request)
        entry = {k: v for k, v in (("network", params.get("network")), ("port", params.get("port")),
                                   ("v4-fixed-ip", params.get("fixed_ip"))) if v}
        if bool(entry.get("network")) == bool(entry.get("port")):
            raise BadRequest("Either 'network' or 'port' must be given, not both.")

        def check(c: Container) -> None:
            check_state(c, "network_attach")
            if c.cluster_id:
                raise Conflict(f"Container {c.id} is placed on cluster {c.cluster_id}: it is plugged as a pod "
                               "is and takes no other network.")

        container_id, port_id = await run_in_threadpool(
            containers.attach, request.app.state.store, neutron(request), ident, entry, check)
        record_id = await versioned.write(request, lambda s: record(request, s, s.get(Container, container_id),
                                                           "network_attach"))
        follow(request, record_id, runner(request).network_attach(container_id, port_id))
        return Response(status_code=202)

    async def network_detach(request: Request, ident: str) -> Response:
        backend = neutron(request)
        params = versioned.params(request)

        def mark(s: Any) -> tuple[str, str, str]:
            c = get(s, request, ident, for_update=True)
            check_state(c, "network_detach")
            att = containers.attachment_for(s, backend, c, params.get("network"), params.get("port"))
            c.task_state = "network_detaching"
            return c.id, att.port_id, record(request, s, c, "network_detach")

        container_id, port_id, record_id = await versioned.write(request, mark)
        follow(request, record_id, runner(request).network_detach(container_id, port_id))
        return Response(status_code=202)

    sub.add_api_route(PATH + "/network_attach", network_attach, methods=["POST"], status_code=202,
                      name="container_network_attach")
    sub.add_api_route(PATH + "/network_detach", network_detach, methods=["POST"], status_code=202,
                      name="container_network_detach")
    sub.add_api_route(PATH + "/network_list", network_list, methods=["GET"], name="container_network_list")
