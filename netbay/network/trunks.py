"""Trunks: a parent port carrying subports told apart by VLAN id (Neutron's ``trunk``).

kuryr's nested-VLAN mode gives a VM (here: a sandbox) one parent port and puts
each container on a subport: a VLAN device on the parent's interface, tagged
with the subport's ``segmentation_id``. Realizing that needs 802.1Q VLAN devices.
The API is complete whatever the host; where the kernel lacks VLANs (this
machine: ``netbay doctor`` lists ``vlan``) a trunk is ``DEGRADED`` and its
``status_reason`` names the missing feature, as a calico IP-in-IP request names
``ipip`` — never a silent ``ACTIVE``. netbay's dataplane does not yet tag frames
for subports, so even with VLANs present a trunk is not ``ACTIVE``.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from netbay.context import Context
from netbay.errors import BadRequest, Conflict, NotFound, invalid_operation, not_found
from netbay.network.resource import Filter, Resource, standard, to_bool, to_int
from netbay.network.types import ID, Body, Bool, Name, ProjectID, Tags, Text
from netbay.store.models import Port, SubPort, Trunk

SEGMENTATION_TYPES = ("vlan",)
VLAN_MIN, VLAN_MAX = 1, 4094
DEGRADED = "DEGRADED"

_lock = threading.Lock()
_vlan: tuple[bool, str] | None = None


def realization() -> tuple[str, str]:
    """(status, reason) of every trunk on this host; the kernel is probed once per process."""
    global _vlan
    with _lock:
        if _vlan is None:
            from netbay.dataplane import features

            found = features.detect(probe=os.geteuid() == 0, only=("vlan",))["vlan"]
            _vlan = (found.available, found.detail)
    available, detail = _vlan
    if not available:
        return DEGRADED, (f"not realized: subports need the kernel feature vlan (802.1Q VLANs), which this "
                          f"host's kernel lacks ({detail}); `netbay doctor` lists what the host offers")
    return DEGRADED, "not realized: netbay's dataplane does not tag subport traffic with VLANs yet"


class SubPortBody(Body):
    """A subport as asked for: any part may be missing (``validate_subports`` says which)."""

    port_id: ID | None = None
    segmentation_type: str | None = None
    segmentation_id: int | None = None


class TrunkCreate(Body):
    name: Name = ""
    description: Text = ""
    port_id: ID = None  # type: ignore[assignment]
    admin_state_up: Bool = True
    sub_ports: list[SubPortBody] = []
    project_id: ProjectID | None = None
    tenant_id: ProjectID | None = None
    tags: Tags | None = None


class TrunkUpdate(Body):
    name: Name | None = None
    description: Text | None = None
    admin_state_up: Bool | None = None


class Trunks(Resource):
    member = "trunk"
    collection = "trunks"
    model = Trunk
    create_body = TrunkCreate
    update_body = TrunkUpdate
    readonly = Resource.readonly | {"status_reason"}
    filters = {
        "name": Filter(Trunk.name),
        "description": Filter(Trunk.description),
        "project_id": Filter(Trunk.project_id),
        "tenant_id": Filter(Trunk.project_id),
        "port_id": Filter(Trunk.port_id),
        "admin_state_up": Filter(Trunk.admin_state_up, to_bool),
        "status": Filter(Trunk.status),
        "revision_number": Filter(Trunk.revision_number, to_int),
        "created_at": Filter(Trunk.created_at),
        "updated_at": Filter(Trunk.updated_at),
    }

    def render(self, session: Session, obj: Trunk, tags: list[str]) -> dict[str, Any]:
        status, reason = realization()
        return {
            **standard(obj, tags),
            "port_id": obj.port_id,
            "admin_state_up": obj.admin_state_up,
            "status": status,
            "status_reason": reason,
            "sub_ports": [render_subport(s) for s in obj.sub_ports],
        }

    def create(self, session: Session, ctx: Context, body: TrunkCreate) -> Trunk:
        given = body.given()
        tags = given.pop("tags", None) or []
        project_id = self.owner_for_create(ctx, given)
        port_id = given.get("port_id")
        if port_id is None:
            raise BadRequest("Failed to parse request. Required attribute 'port_id' not specified")
        validate_subports(body.sub_ports if "sub_ports" in given else [])
        parent = _visible_port(session, ctx, port_id)
        if session.scalar(select(Trunk.id).where(Trunk.port_id == parent.id)) is not None:
            raise Conflict(f"Port {parent.id} is in use by another trunk.", kind="TrunkPortInUse")
        holder = session.scalar(select(SubPort.trunk_id).where(SubPort.port_id == parent.id))
        if holder is not None:
            raise Conflict(f"Port {parent.id} is currently in use and is not eligible for use as a parent port.",
                           kind="ParentPortInUse")
        trunk = Trunk(project_id=project_id, name=given.get("name", ""), description=given.get("description", ""),
                      port_id=parent.id, admin_state_up=given.get("admin_state_up", True),
                      status=realization()[0])
        session.add(trunk)
        session.flush()
        self._add(session, ctx, trunk, body.sub_ports if "sub_ports" in given else [])
        if tags:
            self.set_tags(session, trunk, tags)
            trunk.revision_number = 0
        self.record(session, trunk, "create")
        return trunk

    def update(self, session: Session, ctx: Context, obj_id: str, body: TrunkUpdate) -> Trunk:
        trunk = self.get_owned(session, ctx, obj_id)
        for key, value in body.given().items():
            setattr(trunk, key, value)
        self.touch(trunk)
        self.record(session, trunk, "update")
        return trunk

    def delete(self, session: Session, ctx: Context, obj_id: str) -> None:
        trunk = self.get_owned(session, ctx, obj_id, f"delete_{self.member}")
        _refuse_disabled(trunk)  # Neutron's ``trunk_can_be_managed``
        self.record(session, trunk, "delete", None)
        session.delete(trunk)

    # -- subports ----------------------------------------------------------------------

    def add_subports(self, session: Session, ctx: Context, trunk_id: str, info: Any) -> dict[str, Any]:
        trunk = self._for_change(session, ctx, trunk_id)
        items = [_subport_body(item) for item in _sub_ports(info)]
        validate_subports(items)
        self._add(session, ctx, trunk, items)
        return self._changed(session, trunk)

    def remove_subports(self, session: Session, ctx: Context, trunk_id: str, info: Any) -> dict[str, Any]:
        trunk = self._for_change(session, ctx, trunk_id)
        current = {s.port_id: s for s in trunk.sub_ports}
        for item in _sub_ports(info):
            port_id = item.get("port_id") if isinstance(item, dict) else None
            if port_id not in current:
                raise NotFound(f"SubPort {port_id} on trunk {trunk.id} could not be found.", kind="SubPortNotFound")
            trunk.sub_ports.remove(current.pop(port_id))
        return self._changed(session, trunk)

    def get_subports(self, session: Session, ctx: Context, trunk_id: str) -> dict[str, Any]:
        trunk = self.get(session, ctx, trunk_id)
        return {"sub_ports": [render_subport(s) for s in trunk.sub_ports]}

    def _for_change(self, session: Session, ctx: Context, trunk_id: str) -> Trunk:
        trunk = self.get_owned(session, ctx, trunk_id)
        _refuse_disabled(trunk)
        return trunk

    def _changed(self, session: Session, trunk: Trunk) -> dict[str, Any]:
        session.flush()
        self.touch(trunk)
        self.record(session, trunk, "update")
        return self.rendered(session, trunk)

    def _add(self, session: Session, ctx: Context, trunk: Trunk, items: list[SubPortBody]) -> None:
        taken = {(s.segmentation_type, s.segmentation_id) for s in trunk.sub_ports}
        for item in items:
            _check_segmentation(item)
            port = _visible_port(session, ctx, item.port_id)
            if port.id == trunk.port_id or session.scalar(
                    select(Trunk.id).where(Trunk.port_id == port.id)) is not None:
                parent_of = trunk.id if port.id == trunk.port_id else session.scalar(
                    select(Trunk.id).where(Trunk.port_id == port.id))
                raise Conflict(f"Port {port.id} is currently a parent port for trunk {parent_of}.",
                               kind="PortInUseAsTrunkParent")
            holder = session.scalar(select(SubPort.trunk_id).where(SubPort.port_id == port.id))
            if holder is not None or any(s.port_id == port.id for s in trunk.sub_ports):
                raise Conflict(f"Port {port.id} is currently a subport for trunk {holder or trunk.id}.",
                               kind="PortInUseAsSubPort")
            key = (item.segmentation_type, item.segmentation_id)
            if key in taken:
                raise Conflict(f"segmentation_type {key[0]} and segmentation_id {key[1]} already in use on "
                               f"trunk {trunk.id}.", kind="DuplicateSubPort")
            taken.add(key)
            trunk.sub_ports.append(SubPort(port_id=port.id, trunk_id=trunk.id,
                                           segmentation_type=key[0], segmentation_id=key[1]))


def _refuse_disabled(trunk: Trunk) -> None:
    if not trunk.admin_state_up:
        raise Conflict(f"Trunk {trunk.id} is currently disabled.", kind="TrunkDisabled")


def validate_subports(items: list[SubPortBody]) -> None:
    """The request's own subports, checked before any is looked up (neutron-lib's
    ``validate_subports``): each names a port once, gives both segmentation details
    (or ``inherit``), and no two share a segmentation — all 400s."""
    port_ids: set[str] = set()
    taken: set[tuple[str, int]] = set()
    for item in items:
        if item.port_id is None:
            raise _invalid_subports("A valid port UUID must be specified")
        if item.port_id in port_ids:
            raise _invalid_subports(f"Non unique UUID for subport: '{item.port_id}'")
        port_ids.add(item.port_id)
        if item.segmentation_type == "inherit":
            continue
        given = {k for k in ("segmentation_type", "segmentation_id") if getattr(item, k) is not None}
        if len(given) == 1:
            raise _invalid_subports(f"Invalid subport details '{_subport_dict(item)}': missing segmentation "
                                    "information. Must specify both segmentation_id and segmentation_type")
        key = (item.segmentation_type, item.segmentation_id)
        if key in taken:
            raise _invalid_subports(f"Segmentation ID '{item.segmentation_id}' for '{item.port_id}' is not unique")
        if item.segmentation_id:
            taken.add(key)


def _subport_dict(item: SubPortBody) -> dict[str, Any]:
    return {k: v for k, v in item.model_dump().items() if v is not None}


def _invalid_subports(reason: str) -> BadRequest:
    return BadRequest(f"Invalid input for sub_ports. Reason: {reason}.", kind="InvalidInput")


def render_subport(sub: SubPort) -> dict[str, Any]:
    return {"port_id": sub.port_id, "segmentation_type": sub.segmentation_type,
            "segmentation_id": sub.segmentation_id}


def check_port_deletable(session: Session, port_id: str) -> None:
    """A trunk's parent port or a subport cannot be deleted (Neutron's 409s)."""
    trunk_id = session.scalar(select(Trunk.id).where(Trunk.port_id == port_id))
    if trunk_id is not None:
        raise Conflict(f"Port {port_id} is currently a parent port for trunk {trunk_id}.",
                       kind="PortInUseAsTrunkParent")
    trunk_id = session.scalar(select(SubPort.trunk_id).where(SubPort.port_id == port_id))
    if trunk_id is not None:
        raise Conflict(f"Port {port_id} is currently a subport for trunk {trunk_id}.", kind="PortInUseAsSubPort")


def _visible_port(session: Session, ctx: Context, port_id: Any) -> Port:
    port = session.get(Port, port_id) if isinstance(port_id, str) else None
    if port is None or (not ctx.is_admin and port.project_id != ctx.project_id):
        raise not_found("port", str(port_id))
    return port


def _sub_ports(info: Any) -> list[Any]:
    if not isinstance(info, dict) or "sub_ports" not in info:
        raise invalid_operation("Invalid data format for sub_ports")
    items = info["sub_ports"]
    if not isinstance(items, list):
        raise BadRequest(f"Invalid input for sub_ports. Reason: '{items}' is not a list.", kind="InvalidInput")
    return items


def _subport_body(item: Any) -> SubPortBody:
    if not isinstance(item, dict):
        raise BadRequest(f"Invalid input for sub_ports. Reason: '{item}' is not a dictionary.",
                         kind="InvalidInput")
    unknown = sorted(k for k in item if k not in SubPortBody.model_fields)
    if unknown:
        raise BadRequest(f"Invalid input for sub_ports. Reason: Unexpected keys supplied: {', '.join(unknown)}.",
                         kind="InvalidInput")
    seg_id = item.get("segmentation_id")
    if seg_id is not None and (isinstance(seg_id, bool) or not isinstance(seg_id, (int, str))
                               or not str(seg_id).isdigit()):
        raise BadRequest(f"Invalid input for sub_ports. Reason: '{seg_id}' is not an integer.",
                         kind="InvalidInput")
    return SubPortBody(port_id=item.get("port_id"), segmentation_type=item.get("segmentation_type"),
                       segmentation_id=int(seg_id) if seg_id is not None else None)


def _check_segmentation(item: SubPortBody) -> None:
    if item.port_id is None:
        raise BadRequest("Invalid input for sub_ports. Reason: Validation of dictionary's keys failed. "
                         "Expected keys: {'port_id'} Provided keys: set().", kind="InvalidInput")
    if item.segmentation_type is None or item.segmentation_id is None:
        raise invalid_operation(f"Invalid segmentation type or id: segmentation_type {item.segmentation_type} "
                                f"and segmentation_id {item.segmentation_id} are both needed")
    if item.segmentation_type not in SEGMENTATION_TYPES:
        raise BadRequest(f"Invalid input for sub_ports. Reason: '{item.segmentation_type}' is not in "
                         f"{list(SEGMENTATION_TYPES)}.", kind="InvalidInput")
    if not VLAN_MIN <= item.segmentation_id <= VLAN_MAX:
        raise invalid_operation(f"Segmentation ID {item.segmentation_id} is not in range {VLAN_MIN} through {VLAN_MAX}")


TRUNKS = Trunks()

__all__ = ["TRUNKS", "Trunks", "check_port_deletable", "realization", "render_subport"]
