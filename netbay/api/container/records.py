"""Zun's records around containers: each container's ``container_actions`` (list, and
one with its events), and this deployment's ``hosts`` and ``services`` (admin only,
as Zun's ``host:get_all`` and ``zun-service:get_all``). netbay runs containers on one
machine, so there is one host — described by Docker's ``info`` when Docker is there,
by the machine itself else — and one ``zun-compute`` service, up while Docker answers."""

from __future__ import annotations

import os
import platform
import socket
import uuid
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.concurrency import run_in_threadpool
from sqlalchemy import func, select

from netbay.api.auth import context
from netbay.api.container.common import PREFIX, get, policy, runner
from netbay.api import versioned
from netbay.api.urls import public_root
from netbay.api.responses import JSONResponse
from netbay.containers import actions
from netbay.errors import NotFound
from netbay.store.models import Container, utcnow

STARTED = actions.strtime(utcnow())   # the service's created_at: when this server started


def _host_uuid(hostname: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_DNS, f"netbay-zun-host.{hostname}"))


def _docker_info(request: Request) -> dict[str, Any] | None:
    """Docker's ``info``; None when netbay has no Docker or it does not answer."""
    r = runner(request)
    if not r.docker_host:
        return None
    try:
        return r.runtime().client.api.info()
    except Exception:  # noqa: BLE001 - Docker down: the host is described from the machine, the service down
        return None


def _memory_mib() -> int:
    try:
        with open("/proc/meminfo") as f:
            return int(f.readline().split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        return 0


def _host(request: Request, info: dict[str, Any] | None) -> dict[str, Any]:
    hostname = socket.gethostname()
    with request.app.state.store.read() as s:
        count, cpu = s.execute(select(func.count(Container.id), func.sum(Container.cpu))
                               .where(Container.host == hostname)).one()
        memories = s.scalars(select(Container.memory).where(Container.host == hostname)).all()
    uname = platform.uname()
    host_id = _host_uuid(hostname)
    base = f"{public_root(request)}{PREFIX}"
    disk = os.statvfs("/")
    return {
        "uuid": host_id, "hostname": hostname,
        "links": [{"href": f"{base}/v1/hosts/{host_id}", "rel": "self"},
                  {"href": f"{base}/hosts/{host_id}", "rel": "bookmark"}],
        "kernel_version": (info or {}).get("KernelVersion") or uname.release, "labels": {},
        "cpus": (info or {}).get("NCPU") or os.cpu_count() or 1, "cpu_used": float(cpu or 0),
        "mem_total": ((info or {}).get("MemTotal") or 0) // (1024 * 1024) or _memory_mib(),
        "mem_used": sum(int(m) for m in memories if m), "total_containers": count,
        "disk_total": disk.f_blocks * disk.f_frsize // 1024 ** 3,
        "disk_used": (disk.f_blocks - disk.f_bfree) * disk.f_frsize // 1024 ** 3,
        "os_type": (info or {}).get("OSType") or uname.system.lower(),
        "os": (info or {}).get("OperatingSystem") or uname.system,
        "architecture": (info or {}).get("Architecture") or uname.machine,
        "runtimes": sorted((info or {}).get("Runtimes") or ["runc"]), "enable_cpu_pinning": False,
        "disk_quota_supported": False,
    }


def mount(sub: FastAPI) -> None:
    def action_list(request: Request, ident: str) -> Response:
        with request.app.state.store.read() as s:
            c = get(s, request, ident)
            return JSONResponse({"containerActions": actions.listing(s, c.id, versioned.version(request))})

    def action_show(request: Request, ident: str, request_id: str) -> Response:
        tracebacks = context(request).is_admin   # Zun's container:action:events
        with request.app.state.store.read() as s:
            c = get(s, request, ident)
            return JSONResponse(actions.get(s, c.id, request_id, versioned.version(request), tracebacks=tracebacks))

    async def hosts(request: Request) -> Response:
        policy(request, "host:get_all")
        info = await run_in_threadpool(_docker_info, request)
        return JSONResponse({"hosts": [await run_in_threadpool(_host, request, info)], "next": None})

    async def host(request: Request, ident: str) -> Response:
        policy(request, "host:get")
        if ident not in (_host_uuid(socket.gethostname()), socket.gethostname()):
            raise NotFound(f"Host {ident} could not be found.")
        info = await run_in_threadpool(_docker_info, request)
        return JSONResponse(await run_in_threadpool(_host, request, info))

    async def services(request: Request) -> Response:
        policy(request, "zun-service:get_all")
        up = await run_in_threadpool(_docker_info, request) is not None
        now = actions.strtime(utcnow())
        return JSONResponse({"services": [{
            "id": 1, "binary": "zun-compute", "host": socket.gethostname(), "availability_zone": "nova",
            "state": "up" if up else "down", "disabled": False, "disabled_reason": None, "forced_down": False,
            "report_count": 1, "created_at": STARTED, "updated_at": now, "last_seen_up": now if up else None}]})

    path = "/v1/containers/{ident}/container_actions"
    sub.add_api_route(path, action_list, methods=["GET"], name="container_actions")
    sub.add_api_route(path + "/{request_id}", action_show, methods=["GET"], name="container_action")
    sub.add_api_route("/v1/hosts", hosts, methods=["GET"], name="list_hosts")
    sub.add_api_route("/v1/hosts/{ident}", host, methods=["GET"], name="show_host")
    sub.add_api_route("/v1/services", services, methods=["GET"], name="list_services")
