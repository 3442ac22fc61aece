"""What the container API's route modules share: the runner and network of a request,
links, Zun's flags, state rules and policy refusals, the lookup of a container with
``all_projects``, and its action records."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

from fastapi import Request

from netbay.api.auth import context
from netbay.api import versioned
from netbay.api.urls import public_root
from netbay.containers import actions, containers
from netbay.containers.neutron import ZunNeutron
from netbay.containers.runner import Runner
from netbay.errors import BadRequest, Conflict, Forbidden
from netbay.store.models import Container

PREFIX = "/container"
SERVICE = "container"
MIN_VERSION = (1, 1)
MAX_VERSION = (1, 40)

# Zun's allowed states per action (zun/common/utils.VALID_STATES).
VALID_STATES = {
    "start": ("Created", "Stopped", "Error"),
    "stop": ("Running",),
    "reboot": ("Created", "Running", "Stopped", "Error"),
    "rebuild": ("Created", "Running", "Stopped", "Error"),
    "delete": ("Created", "Error", "Stopped"),
    "network_attach": ("Created", "Running", "Stopped"),
    "network_detach": ("Created", "Running", "Stopped"),
    "pause": ("Running",),
    "unpause": ("Paused",),
    "kill": ("Running",),
    "execute": ("Running",),
    "update": ("Created", "Running", "Stopped", "Paused"),
    "top": ("Running",),
    "stats": ("Running",),
    "logs": ("Created", "Error", "Paused", "Running", "Stopped", "Unknown"),
    "get_archive": ("Created", "Paused", "Running", "Stopped"),
    "put_archive": ("Created", "Paused", "Running", "Stopped"),
}
TRUE = ("true", "1", "yes", "on")
FALSE = ("false", "0", "no", "off")


def runner(request: Request) -> Runner:
    return request.app.state.container_runner


def neutron(request: Request) -> ZunNeutron:
    """The network backend (netbay's own or a cloud's Neutron) acting for the caller."""
    return ZunNeutron(runner(request).network, context(request))


def owners_neutron(request: Request, c: Container) -> ZunNeutron:
    """The backend acting for the container's own project (an admin may act on another's)."""
    ctx = context(request)
    return neutron(request) if c.project_id == ctx.project_id else runner(request).neutron(c.project_id)


def links(request: Request, collection: str, obj_id: str) -> list[dict[str, str]]:
    base = public_root(request) + PREFIX
    return [{"href": f"{base}/v1/{collection}/{obj_id}", "rel": "self"},
            {"href": f"{base}/{collection}/{obj_id}", "rel": "bookmark"}]


def flag(params: dict[str, str], name: str, default: str = "false") -> bool:
    """A boolean query parameter as Zun's ``boolean_extended`` takes it; 400 else."""
    value = params.get(name, default).lower()
    if value not in TRUE + FALSE:
        raise BadRequest(f"Invalid input for query parameter '{name}': '{value}' is not a boolean.")
    return value in TRUE


def check_state(c: Container, action: str) -> None:
    if c.task_state is not None and action != "delete" or c.status not in VALID_STATES[action]:
        state = c.task_state if c.task_state is not None and c.status in VALID_STATES[action] else c.status
        raise Conflict(f"Cannot {action} container {c.id} in {state} state.")


def policy(request: Request, rule: str) -> None:
    """Zun's 403 for an admin-only rule asked by a non-admin."""
    if not context(request).is_admin:
        raise Forbidden(f"Policy doesn't allow {rule} to be performed.")


def scoped(request: Request, params: dict[str, str], rule: str) -> None:
    """``?all_projects=`` on show or delete: the admin's rule ``rule`` (an admin finds every
    project's containers with or without it, as Zun's ``get_resource`` does)."""
    if flag(params, "all_projects"):
        policy(request, rule)


def record(request: Request, session: Any, c: Container, action: str) -> str:
    """Zun's action record of this request on ``c`` (finished by :func:`follow`)."""
    return actions.start(session, context(request), c.id, action, versioned.request_id(request))


def follow(request: Request, record_id: str, job: Future) -> None:
    actions.follow(request.app.state.store, record_id, job)


def get(session: Any, request: Request, ident: str, *, for_update: bool = False) -> Container:
    return containers.get(session, context(request), ident, for_update=for_update)
