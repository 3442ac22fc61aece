"""Port mirroring with Neutron's Tap-as-a-Service API (extension ``taas``).

A *tap service* names the port that receives copies; a *tap flow* names a source
port, the tap service and which half of the source's traffic to copy (``IN``: what
the port receives, ``OUT``: what it sends, ``BOTH``). Both live under
``/v2.0/taas/``. Ports are looked up as the caller sees them, so another project's
port is a ``PortNotFound`` (404), as Neutron's core plugin answers TaaS; a tap
service of another project is ``TapServiceNotFound``. Deleting a port takes its tap
services and tap flows along (TaaS's ``handle_delete_port``), each logged, so the
dataplane removes the mirrors. ``status`` is the dataplane's report: ``DOWN`` until
the agent has the copy running, then ``ACTIVE``.
"""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from netbay.context import Context
from netbay.errors import BadRequest, Forbidden, NotFound, not_found
from netbay.network.resource import Filter, Resource, standard, to_int
from netbay.network.types import ID, Body, Name, ProjectID, Text
from netbay.store.models import Port, TapFlow, TapService

DIRECTIONS = ("IN", "OUT", "BOTH")
STATUSES = {"ACTIVE", "DOWN", "ERROR", "PENDING_CREATE", "PENDING_DELETE"}
_UUID = re.compile(r"^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$")


class TapServiceCreate(Body):
    name: Name = ""
    description: Text = ""
    port_id: ID = None  # type: ignore[assignment]
    project_id: ProjectID | None = None
    tenant_id: ProjectID | None = None


class TapFlowCreate(Body):
    name: Name = ""
    description: Text = ""
    tap_service_id: ID = None  # type: ignore[assignment]
    source_port: ID = None  # type: ignore[assignment]
    direction: str = None  # type: ignore[assignment]
    project_id: ProjectID | None = None
    tenant_id: ProjectID | None = None


class TapUpdate(Body):
    name: Name | None = None
    description: Text | None = None


def _standard_filters(model: Any) -> dict[str, Filter]:
    return {
        "name": Filter(model.name), "description": Filter(model.description),
        "project_id": Filter(model.project_id), "tenant_id": Filter(model.project_id),
        "status": Filter(model.status), "revision_number": Filter(model.revision_number, to_int),
        "created_at": Filter(model.created_at), "updated_at": Filter(model.updated_at),
    }


class _Tap(Resource):
    """What both TaaS resources share: prefix, no tags, name/description updates."""

    path_prefix = "taas/"
    has_tags = False
    update_body = TapUpdate

    def update(self, session: Session, ctx: Context, obj_id: str, body: TapUpdate) -> Any:
        obj = self.get_owned(session, ctx, obj_id)
        for key, value in body.given().items():
            setattr(obj, key, value)
        self.touch(obj)
        self.record(session, obj, "update")
        return obj



class TapServices(_Tap):
    member = "tap_service"
    collection = "tap_services"
    model = TapService
    create_body = TapServiceCreate
    filters = {**_standard_filters(TapService), "port_id": Filter(TapService.port_id)}

    def missing(self, obj_id: str) -> NotFound:
        return NotFound(f"Tap Service  {obj_id} does not exist", kind="TapServiceNotFound")

    def render(self, session: Session, obj: TapService, tags: list[str]) -> dict[str, Any]:
        item = standard(obj, tags)
        item.pop("tags")
        return {**item, "port_id": obj.port_id, "status": obj.status}

    def create(self, session: Session, ctx: Context, body: TapServiceCreate) -> TapService:
        given = body.given()
        project_id = self.owner_for_create(ctx, given)
        port = _port(session, ctx, "port_id", given.get("port_id"))
        if port.project_id != project_id:
            raise _not_owner()
        tap = TapService(project_id=project_id, name=given.get("name", ""),
                         description=given.get("description", ""), port_id=port.id, status="DOWN")
        session.add(tap)
        session.flush()
        self.record(session, tap, "create")
        return tap

    def delete(self, session: Session, ctx: Context, obj_id: str) -> None:
        tap = self.get_owned(session, ctx, obj_id, f"delete_{self.member}")
        _delete_service(session, tap)


class TapFlows(_Tap):
    member = "tap_flow"
    collection = "tap_flows"
    model = TapFlow
    create_body = TapFlowCreate
    filters = {**_standard_filters(TapFlow), "tap_service_id": Filter(TapFlow.tap_service_id),
               "source_port": Filter(TapFlow.source_port), "direction": Filter(TapFlow.direction)}

    def missing(self, obj_id: str) -> NotFound:
        return NotFound(f"Tap Flow  {obj_id} does not exist", kind="TapFlowNotFound")

    def render(self, session: Session, obj: TapFlow, tags: list[str]) -> dict[str, Any]:
        item = standard(obj, tags)
        item.pop("tags")
        return {**item, "tap_service_id": obj.tap_service_id, "source_port": obj.source_port,
                "direction": obj.direction, "status": obj.status}

    def create(self, session: Session, ctx: Context, body: TapFlowCreate) -> TapFlow:
        given = body.given()
        project_id = self.owner_for_create(ctx, given)
        direction = given.get("direction")
        if direction is None:
            raise BadRequest("Failed to parse request. Required attribute 'direction' not specified")
        if direction not in DIRECTIONS:
            raise BadRequest(f"Invalid input for direction. Reason: '{direction}' is not in {list(DIRECTIONS)}.")
        service_id = _uuid("tap_service_id", given.get("tap_service_id"))
        service = session.get(TapService, service_id)   # TaaS looks the tap service up first
        if service is None or (not ctx.is_admin and service.project_id != ctx.project_id):
            raise TAP_SERVICES.missing(service_id)
        source = _port(session, ctx, "source_port", given.get("source_port"))
        if service.project_id != project_id:
            raise Forbidden("Specified Tap Service does not belong to the tenant",
                             kind="TapServiceNotBelongToTenant")
        if source.id == service.port_id:
            raise BadRequest(f"Invalid input for source_port. Reason: port {source.id} is the tap service's "
                             "own port; it cannot mirror into itself.")
        flow = TapFlow(project_id=project_id, name=given.get("name", ""), description=given.get("description", ""),
                       tap_service_id=service.id, source_port=source.id, direction=direction, status="DOWN")
        session.add(flow)
        session.flush()
        self.record(session, flow, "create")
        return flow

    def delete(self, session: Session, ctx: Context, obj_id: str) -> None:
        flow = self.get_owned(session, ctx, obj_id, f"delete_{self.member}")
        self.record(session, flow, "delete", None)
        session.delete(flow)
        session.flush()


TAP_SERVICES = TapServices()
TAP_FLOWS = TapFlows()


def forget_port(session: Session, port_id: str) -> None:
    """A port is going: its tap flows and the tap services on it go too, each logged."""
    for flow in session.scalars(select(TapFlow).where(TapFlow.source_port == port_id)):
        TAP_FLOWS.record(session, flow, "delete", None)
        session.delete(flow)
    for tap in session.scalars(select(TapService).where(TapService.port_id == port_id)):
        _delete_service(session, tap)
    session.flush()


def set_status(session: Session, kind: str, obj_id: str, status: str) -> bool:
    """The dataplane's report for a tap service or flow; False when nothing changed."""
    resource = TAP_SERVICES if kind == "tap_services" else TAP_FLOWS
    if status not in STATUSES:
        raise BadRequest(f"Invalid input for status. Reason: '{status}' is not in {sorted(STATUSES)}.")
    obj: Any = session.get(resource.model, obj_id, with_for_update=True)
    if obj is None or obj.status == status:
        return False
    obj.status = status
    resource.touch(obj)
    resource.record(session, obj, "update")
    return True


def _delete_service(session: Session, tap: TapService) -> None:
    """A tap service and its flows (TaaS deletes the flows first)."""
    for flow in session.scalars(select(TapFlow).where(TapFlow.tap_service_id == tap.id)):
        TAP_FLOWS.record(session, flow, "delete", None)
        session.delete(flow)
    session.flush()
    TAP_SERVICES.record(session, tap, "delete", None)
    session.delete(tap)
    session.flush()


def _uuid(attribute: str, value: Any) -> str:
    if value is None:
        raise BadRequest(f"Failed to parse request. Required attribute '{attribute}' not specified")
    if not isinstance(value, str) or not _UUID.match(value):
        raise BadRequest(f"Invalid input for {attribute}. Reason: '{value}' is not a valid UUID.")
    return value


def _port(session: Session, ctx: Context, attribute: str, value: Any) -> Port:
    """The port as the caller may see it: another project's port does not exist for them."""
    port_id = _uuid(attribute, value)
    port = session.get(Port, port_id)
    if port is None or (not ctx.is_admin and port.project_id != ctx.project_id):
        raise not_found("port", port_id)
    return port


def _not_owner() -> Forbidden:
    """Neutron's NotAuthorized (403): an admin naming a port of another project."""
    return Forbidden("The specified port does not belong to the tenant", kind="PortDoesNotBelongToTenant")

__all__ = ["DIRECTIONS", "TAP_FLOWS", "TAP_SERVICES", "TapFlows", "TapServices", "forget_port", "set_status"]
