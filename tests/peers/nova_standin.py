"""STAND-IN for Nova (no Nova can run on this machine), beside the peers' real
Keystone and Neutron (``tests/peers/openstack_cloud.py``).

It serves the part of Nova's compute API v2.1 that openstacksdk's ``compute`` proxy
uses to boot and delete servers on existing ports — the version documents,
``POST/GET/DELETE /v2.1/servers[/{id}]``, ``GET /v2.1/servers/detail`` (``name``
as a regular expression, ``status``), ``/v2.1/flavors[/detail|/{id}]`` and Nova's
image proxy ``/v2.1/images[/detail|/{id}]`` — on 127.0.0.1, microversion 2.1 only,
with Nova's error bodies (``{"itemNotFound": {"code": 404, "message": …}}``). It is
registered in the real Keystone's catalog as ``compute`` (and taken out again on
stop), and checks every caller's token with that Keystone; a server belongs to its
token's project.

What it does to the cloud is what Nova does to Neutron: a boot answers ``BUILD``,
then (on a thread, as nova-compute would) BINDS each given port in the real
Neutron — ``device_id`` = the server, ``device_owner`` = ``compute:nova``,
``binding:host_id`` = :data:`HOST` — and reports ``ACTIVE``; a delete unbinds the
ports it bound and then the server is gone (404). A port that does not exist is
refused (400) and one in use too (409), as Nova refuses them. This Neutron has no
mechanism drivers, so its binding of every port fails (``binding:vif_type`` =
``binding_failed``), where a real Nova would fail the boot: the stand-in ignores
that. :meth:`NovaStandin.fail_next` makes the next boot go ``ERROR`` with a fault,
as a scheduler finding no host does. Nothing runs on a server.

With ``hosts`` (compute hosts, :class:`ServerHost`: a Neutron with a dataplane under it,
such as the OVN lab's chassis, ``tests/ovn/nova_hosts.py``) a server is placed on one of
them in turn, and its first port is bound to that host (``binding:host_id`` = the
host's name) and plugged there as Neutron's ``binding:vif_type`` says, by the host (a
namespace holding the port, as nova-compute's VIF driver plugs a VM's tap); the boot
then waits, bounded, for the port to turn ``ACTIVE`` (Nova's ``network-vif-plugged``
event). A port Neutron could not bind (``binding_failed``, no such host) or that never
turns ACTIVE fails the boot (``ERROR``, its fault saying why) with nothing left plugged,
as Nova fails it. A delete unplugs before it unbinds.
"""

from __future__ import annotations

import json
import re
import secrets
import socket
import threading
import time
import uuid
from datetime import datetime, UTC
from collections.abc import Sequence
from typing import Any, Protocol

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from netbay import keepalive
from tests.peers.openstack_cloud import Cloud

HOST = "nova-standin"
OWNER = "compute:nova"
BOOT_DELAY = 0.3          # BUILD lasts this long, so callers really wait for ACTIVE
FLAVORS = {"m1.tiny": "1", "m1.small": "2", "m1.medium": "3"}
IMAGES = {"netbay-sandbox": "5b2a1b8e-0a55-4d6c-9e41-7c1c7e0d1a01", "cirros": "8c3f4b2e-2f5d-4c1b-a4a6-3e8b9d0c2a02"}
VIF_PLUGGED_TIMEOUT = 60.0   # s a boot waits for its port to turn ACTIVE (Nova's vif_plugging_timeout: 300)


class ServerHost(Protocol):
    """A compute host the stand-in places servers on (see the module's docstring)."""

    name: str   # what Neutron binds a port to this host by (binding:host_id)

    def plug(self, server_id: str, port: dict[str, Any], subnet: dict[str, Any], mtu: int) -> None:
        """Plug the bound ``port`` (Neutron's answer, ``binding:*`` keys included) for the
        server; raise, with nothing left, if it cannot (an unpluggable ``vif_type``)."""

    def unplug(self, server_id: str, port_id: str) -> None:
        """Undo :meth:`plug` (nothing of it left); nothing to undo is no error."""


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _fault(status: int, message: str) -> JSONResponse:
    key = {400: "badRequest", 401: "unauthorized", 404: "itemNotFound", 409: "conflictingRequest"}[status]
    return JSONResponse({key: {"code": status, "message": message}}, status_code=status)


class NovaStandin:
    """The stand-in; ``url`` (the catalog's endpoint, ending in ``/v2.1``) once started.
    ``servers`` holds what it knows, by id; every request is counted in ``requests``."""

    def __init__(self, cloud: Cloud, hosts: Sequence[ServerHost] = ()) -> None:
        self.cloud = cloud
        self.hosts = list(hosts)
        self._placed = 0
        self.servers: dict[str, dict[str, Any]] = {}
        self.requests: list[tuple[str, str]] = []
        self._faults: list[str] = []
        self._tokens: dict[str, str] = {}
        self._lock = threading.Lock()
        self._work: list[threading.Thread] = []
        self.admin = cloud.connection()
        v = "/v2.1"
        self.app = Starlette(routes=[
            Route("/", self._versions), Route(v, self._version), Route(v + "/", self._version),
            Route(v + "/servers", self._servers, methods=["GET", "POST"]),
            Route(v + "/servers/detail", self._servers_detail),
            Route(v + "/servers/{sid}", self._server, methods=["GET", "DELETE"]),
            Route(v + "/flavors", self._flavors), Route(v + "/flavors/detail", self._flavors),
            Route(v + "/flavors/{fid}", self._flavor),
            Route(v + "/images", self._images), Route(v + "/images/detail", self._images),
            Route(v + "/images/{iid}", self._image),
        ])
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._catalog: tuple[str, str] | None = None
        self.base = self.url = ""

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> NovaStandin:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.base = f"http://127.0.0.1:{sock.getsockname()[1]}"
        self.url = self.base + "/v2.1"
        self._server = uvicorn.Server(uvicorn.Config(self.app, log_level="warning", lifespan="off",
                                                     timeout_graceful_shutdown=1,
                                                     timeout_keep_alive=keepalive.SERVER))
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]}, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started and time.monotonic() < deadline:
            time.sleep(0.01)
        assert self._server.started, "the Nova stand-in did not start"
        service = self.admin.identity.create_service(name="nova-standin", type="compute")
        endpoint = self.admin.identity.create_endpoint(service_id=service.id, interface="public", url=self.url,
                                                       region_id="RegionOne")
        self._catalog = (service.id, endpoint.id)
        return self

    def stop(self) -> None:
        if self._catalog is not None:
            self.admin.identity.delete_endpoint(self._catalog[1])
            self.admin.identity.delete_service(self._catalog[0])
            self._catalog = None
        for work in list(self._work):
            work.join(timeout=30)
        if self._server is not None:
            self._server.should_exit = True
            self._thread.join(timeout=10)
        self.admin.close()

    def __enter__(self) -> NovaStandin:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def fail_next(self, message: str = "No valid host was found. There are not enough hosts available.") -> None:
        """The next boot goes ``ERROR`` with this fault (its ports left unbound)."""
        with self._lock:
            self._faults.append(message)

    # -- requests --------------------------------------------------------------------------------

    def _project(self, request: Request) -> str | None:
        """The caller's project, per Keystone (None: no valid token)."""
        self.requests.append((request.method, request.url.path))
        token = request.headers.get("x-auth-token", "")
        if not token:
            return None
        if token not in self._tokens:
            r = httpx.get(f"{self.cloud.auth_url}/auth/tokens", timeout=10,
                          headers={"X-Auth-Token": self.admin.auth_token, "X-Subject-Token": token})
            if r.status_code != 200:
                return None
            self._tokens[token] = r.json()["token"]["project"]["id"]
        return self._tokens[token]

    def _doc(self) -> dict[str, Any]:
        return {"id": "v2.1", "status": "CURRENT", "version": "2.1", "min_version": "2.1",
                "updated": "2013-07-23T11:33:21Z", "links": [{"rel": "self", "href": self.url + "/"}],
                "media-types": [{"base": "application/json",
                                 "type": "application/vnd.openstack.compute+json;version=2.1"}]}

    def _versions(self, request: Request) -> JSONResponse:
        return JSONResponse({"versions": [self._doc()]})

    def _version(self, request: Request) -> JSONResponse:
        return JSONResponse({"version": self._doc()})

    async def _servers(self, request: Request) -> Response:
        """Async only to read the body; the work runs on Starlette's thread pool, as the sync routes do."""
        try:
            body = json.loads(await request.body() or b"null") if request.method == "POST" else None
        except ValueError:
            body = None
        return await run_in_threadpool(self._servers_sync, request, body)

    def _servers_sync(self, request: Request, body: Any) -> Response:
        project = self._project(request)
        if project is None:
            return _fault(401, "The request you have made requires authentication.")
        if request.method == "GET":
            return JSONResponse({"servers": [{"id": s["id"], "name": s["name"], "links": s["links"]}
                                             for s in self._listed(request, project)]})
        return self._boot(body, project)

    def _servers_detail(self, request: Request) -> Response:
        project = self._project(request)
        if project is None:
            return _fault(401, "The request you have made requires authentication.")
        return JSONResponse({"servers": [self._view(s) for s in self._listed(request, project)]})

    def _server(self, request: Request) -> Response:
        project = self._project(request)
        if project is None:
            return _fault(401, "The request you have made requires authentication.")
        sid = request.path_params["sid"]
        with self._lock:
            server = self.servers.get(sid)
            if server is None or server["tenant_id"] != project:
                return _fault(404, f"Instance {sid} could not be found.")
            if request.method == "GET":
                return JSONResponse({"server": self._view(server)})
            server["OS-EXT-STS:task_state"] = "deleting"
        self._later(self._delete, sid)
        return Response(status_code=204)

    def _flavors(self, request: Request) -> Response:
        if self._project(request) is None:
            return _fault(401, "The request you have made requires authentication.")
        return JSONResponse({"flavors": [self._flavor_view(n, i) for n, i in FLAVORS.items()]})

    def _flavor(self, request: Request) -> Response:
        if self._project(request) is None:
            return _fault(401, "The request you have made requires authentication.")
        fid = request.path_params["fid"]
        for name, i in FLAVORS.items():
            if i == fid:
                return JSONResponse({"flavor": self._flavor_view(name, i)})
        return _fault(404, f"Flavor {fid} could not be found.")

    def _images(self, request: Request) -> Response:
        if self._project(request) is None:
            return _fault(401, "The request you have made requires authentication.")
        return JSONResponse({"images": [self._image_view(n, i) for n, i in IMAGES.items()]})

    def _image(self, request: Request) -> Response:
        if self._project(request) is None:
            return _fault(401, "The request you have made requires authentication.")
        iid = request.path_params["iid"]
        for name, i in IMAGES.items():
            if i == iid:
                return JSONResponse({"image": self._image_view(name, i)})
        return _fault(404, "Image not found.")

    # -- what Nova does --------------------------------------------------------------------------

    def _boot(self, body: Any, project: str) -> Response:
        server = body.get("server") if isinstance(body, dict) else None
        if not isinstance(server, dict) or not server.get("name"):
            return _fault(400, "Invalid input for field/attribute server.")
        flavor, image = str(server.get("flavorRef") or ""), str(server.get("imageRef") or "")
        if flavor not in FLAVORS.values():
            return _fault(400, f"Flavor {flavor} could not be found.")
        if image not in IMAGES.values():
            return _fault(400, f"Image {image} could not be found.")
        meta = server.get("metadata") or {}
        if any(not isinstance(v, str) or len(k) > 255 or len(v) > 255 for k, v in meta.items()):
            return _fault(400, "Invalid input for field/attribute metadata.")
        ports = [n["port"] for n in server.get("networks") or [] if isinstance(n, dict) and n.get("port")]
        for port_id in ports:
            port = self.admin.network.find_port(port_id)
            if port is None:
                return _fault(400, f"Port id {port_id} could not be found.")
            if port.device_id:
                return _fault(409, f"Port {port_id} is still in use.")
        sid = str(uuid.uuid4())
        links = [{"rel": "self", "href": f"{self.url}/servers/{sid}"}]
        with self._lock:
            fault = self._faults.pop(0) if self._faults else None
            self.servers[sid] = {
                "id": sid, "name": server["name"], "status": "BUILD", "tenant_id": project, "user_id": "",
                "metadata": dict(meta), "flavor": {"id": flavor}, "image": {"id": image}, "ports": ports,
                "bound": [], "created": _now(), "updated": _now(), "links": links, "fault": None,
                "OS-EXT-STS:vm_state": "building", "OS-EXT-STS:task_state": "scheduling"}
        self._later(self._build, sid, fault)
        return JSONResponse({"server": {"id": sid, "links": links, "OS-DCF:diskConfig": "MANUAL",
                                        "security_groups": [{"name": "default"}],
                                        "adminPass": secrets.token_urlsafe(9)}}, status_code=202)

    def _build(self, sid: str, fault: str | None) -> None:
        time.sleep(BOOT_DELAY)
        server = self.servers[sid]
        host = self._place() if self.hosts else None
        server["host"] = host.name if host is not None else HOST
        if fault is None:
            try:
                for port_id in server["ports"]:
                    self.admin.network.update_port(port_id, device_id=sid, device_owner=OWNER,
                                                   binding_host_id=server["host"])
                    server["bound"].append(port_id)
                if host is not None and server["ports"]:
                    self._plug(host, sid, server["ports"][0])
                    server["plugged"] = server["ports"][0]
            except Exception as exc:  # noqa: BLE001 - a port gone meanwhile fails the boot, as in Nova
                fault = f"Build of instance {sid} aborted: {exc}"
                if host is not None and server["ports"]:
                    host.unplug(sid, server["ports"][0])
        with self._lock:
            if fault is None:
                server.update({"status": "ACTIVE", "OS-EXT-STS:vm_state": "active"})
            else:
                server.update({"status": "ERROR", "OS-EXT-STS:vm_state": "error",
                               "fault": {"code": 500, "message": fault, "created": _now()}})
            server.update({"OS-EXT-STS:task_state": None, "updated": _now()})

    def _place(self) -> ServerHost:
        """The next host in turn (Nova's scheduler, spreading)."""
        with self._lock:
            host = self.hosts[self._placed % len(self.hosts)]
            self._placed += 1
        return host

    def _plug(self, host: ServerHost, sid: str, port_id: str) -> None:
        """Plug the bound port on ``host``, then wait for Neutron to say it is ACTIVE."""
        port = self.admin.network.get_port(port_id)
        body = {"id": port.id, "network_id": port.network_id, "mac_address": port.mac_address,
                "fixed_ips": port.fixed_ips, "device_id": sid, "binding:vif_type": port.binding_vif_type,
                "binding:vif_details": port.binding_vif_details or {}}
        subnet = self.admin.network.get_subnet(port.fixed_ips[0]["subnet_id"])
        mtu = self.admin.network.get_network(port.network_id).mtu or 1500
        host.plug(sid, body, {"id": subnet.id, "cidr": subnet.cidr, "gateway_ip": subnet.gateway_ip}, mtu)
        deadline = time.monotonic() + VIF_PLUGGED_TIMEOUT
        while (status := self.admin.network.get_port(port_id).status) != "ACTIVE":
            if time.monotonic() > deadline:
                raise TimeoutError(f"port {port_id} still {status} after {VIF_PLUGGED_TIMEOUT:.0f}s: "
                                   "no network-vif-plugged event (did the dataplane claim it?)")
            time.sleep(0.2)

    def _delete(self, sid: str) -> None:
        server = self.servers[sid]
        if server.get("plugged"):
            next(h for h in self.hosts if h.name == server["host"]).unplug(sid, server["plugged"])
        for port_id in server["bound"]:
            port = self.admin.network.find_port(port_id)
            if port is not None and port.device_id == sid:
                self.admin.network.update_port(port_id, device_id="", device_owner="", binding_host_id="")
        with self._lock:
            self.servers.pop(sid, None)

    def _later(self, fn: Any, *args: Any) -> None:
        work = threading.Thread(target=fn, args=args, daemon=True)
        self._work = [w for w in self._work if w.is_alive()] + [work]
        work.start()

    # -- views -----------------------------------------------------------------------------------

    def _listed(self, request: Request, project: str) -> list[dict[str, Any]]:
        name, status = request.query_params.get("name"), request.query_params.get("status")
        with self._lock:
            return [s for s in self.servers.values() if s["tenant_id"] == project
                    and (name is None or re.search(name, s["name"])) and (status is None or s["status"] == status)]

    def _view(self, s: dict[str, Any]) -> dict[str, Any]:
        view = {k: v for k, v in s.items() if k not in ("ports", "bound", "fault", "host", "plugged")}
        view["OS-EXT-SRV-ATTR:host"] = s.get("host")
        view.update({"hostId": "", "addresses": {}, "accessIPv4": "", "accessIPv6": "", "key_name": None,
                     "flavor": {**s["flavor"], "links": []}, "image": {**s["image"], "links": []},
                     "OS-EXT-STS:power_state": 1 if s["status"] == "ACTIVE" else 0})
        if s["fault"] is not None:
            view["fault"] = s["fault"]
        return view

    def _flavor_view(self, name: str, fid: str) -> dict[str, Any]:
        return {"id": fid, "name": name, "ram": 512 * int(fid), "vcpus": int(fid), "disk": 1, "links": []}

    def _image_view(self, name: str, iid: str) -> dict[str, Any]:
        return {"id": iid, "name": name, "status": "ACTIVE", "minDisk": 0, "minRam": 0, "metadata": {},
                "links": []}


__all__ = ["FLAVORS", "HOST", "IMAGES", "OWNER", "NovaStandin", "ServerHost"]
