"""The Zun-compatible container API v1 under ``/container`` (catalog type ``container``).

HTTP only: the rules are in :mod:`netbay.containers`. It reuses the Magnum API's
machinery (:mod:`netbay.api.containerinfra`): a mounted sub-application whose every
answer — unknown paths and unexpected failures included — is in the
``{"errors": [...]}`` format Zun shares with Magnum, and ``OpenStack-API-Version:
container 1.x`` negotiated as Zun does (1.1 when absent, 1.1–1.40 served, 406 else).

Routes, one module each: :mod:`.networks` (container networks),
:mod:`.lifecycle` (containers: create, list, show, ``PATCH``, delete, and the
actions start/stop/reboot/pause/unpause/kill/rebuild), :mod:`.attachments`
(``network_list``/``network_attach``/``network_detach``), :mod:`.operations`
(``execute``, ``logs``, ``top``, ``stats``, ``get_archive``/``put_archive``) and
:mod:`.records` (``container_actions``, ``hosts``, ``services``). Creates and actions
answer 202 at once; Docker is driven by :class:`netbay.containers.runner.Runner`.
"""

from __future__ import annotations

from fastapi import FastAPI, Request, Response

from netbay.api.container import attachments, lifecycle, networks, operations, records
from netbay.api.container.common import MAX_VERSION, MIN_VERSION, PREFIX, SERVICE
from netbay.api import versioned
from netbay.api.urls import public_root
from netbay.backends import open_backend
from netbay.containers.runner import Runner


# --- discovery -----------------------------------------------------------------------------------


def _mount_discovery(sub: FastAPI) -> None:
    versioned.mount_discovery(
        sub, prefix=PREFIX, name="OpenStack Zun API (netbay)",
        description="Zun-compatible containers on netbay networks, run by Docker on this machine.",
        media_type="application/vnd.openstack.zun.v1+json", collections=("containers", "networks", "hosts", "services"),
        low=MIN_VERSION, high=MAX_VERSION, route_name="container")


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
    versioned.install_errors(sub)
    _mount_discovery(sub)
    for routes in (networks, lifecycle, attachments, operations, records):
        routes.mount(sub)
    sub.add_middleware(versioned.Guard, service=SERVICE, min_version=MIN_VERSION, max_version=MAX_VERSION, vendor="zun")

    def bare(request: Request) -> Response:
        return Response(status_code=307, headers={"Location": f"{public_root(request)}{PREFIX}/"})

    app.add_api_route(PREFIX, bare, methods=["GET"], include_in_schema=False)
    app.mount(PREFIX, sub)
