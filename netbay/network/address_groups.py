"""Neutron's ``address-group``: a named list of CIDRs that security group rules name as
their remote end (``remote_address_group_id``).

Addresses are kept normalized (``10.0.0.5/24`` is ``10.0.0.0/24``, as Neutron stores
them); ``add_addresses``/``remove_addresses`` change them in place and refuse what is
already there or missing, as Neutron does. The dataplane expands a rule naming a group
over the group's CIDRs (netbay/dataplane/realizers.py), so an address added or removed
is a set element added or removed.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from netbay.context import Context
from netbay.errors import BadRequest, Conflict, NotFound
from netbay.network.resource import Filter, Resource, to_int
from netbay.network.types import Body, Name, ProjectID, Text
from netbay.store.models import AddressGroup, SecurityGroupRule


class AddressGroupCreate(Body):
    name: Name = ""
    description: Text = ""
    addresses: list[Any] | None = None
    project_id: ProjectID | None = None
    tenant_id: ProjectID | None = None


class AddressGroupUpdate(Body):
    name: Name | None = None
    description: Text | None = None


def normalized(addresses: Any) -> list[str]:
    """neutron-lib's ``subnet_list`` validation, then Neutron's normalization."""
    if addresses is None:
        return []
    if not isinstance(addresses, list):
        raise BadRequest(f"Invalid input for addresses. Reason: '{addresses}' is not a list.")
    out = []
    for value in addresses:
        try:
            net = ipaddress.ip_network(str(value), strict=False)
        except ValueError:
            raise BadRequest(f"Invalid input for addresses. Reason: '{value}' is not a valid IP subnet.") from None
        if not isinstance(value, str) or "/" not in value:
            raise BadRequest(f"Invalid input for addresses. Reason: '{value}' isn't a recognized IP subnet cidr, "
                             f"'{value}/{net.max_prefixlen}' is recommended.")
        out.append(str(net))
    return list(dict.fromkeys(out))


def not_found(group_id: str) -> NotFound:
    return NotFound(f"Address group {group_id} could not be found.", kind="AddressGroupNotFound")


class AddressGroups(Resource):
    member = "address_group"
    collection = "address-groups"
    model = AddressGroup
    has_tags = False
    create_body = AddressGroupCreate
    update_body = AddressGroupUpdate
    readonly = {"id"}
    filters = {
        "name": Filter(AddressGroup.name),
        "description": Filter(AddressGroup.description),
        "project_id": Filter(AddressGroup.project_id),
        "tenant_id": Filter(AddressGroup.project_id),
        "revision_number": Filter(AddressGroup.revision_number, to_int),
    }

    def render(self, session: Session, obj: AddressGroup, tags: list[str]) -> dict[str, Any]:
        return {"id": obj.id, "name": obj.name, "description": obj.description, "project_id": obj.project_id,
                "tenant_id": obj.project_id, "addresses": sorted(obj.addresses or [])}

    def missing(self, obj_id: str) -> NotFound:
        return not_found(obj_id)

    def create(self, session: Session, ctx: Context, body: AddressGroupCreate) -> AddressGroup:
        given = body.given()
        project_id = self.owner_for_create(ctx, given)
        group = AddressGroup(project_id=project_id, name=body.name, description=body.description,
                             addresses=normalized(given.get("addresses")))
        session.add(group)
        session.flush()
        self.record(session, group, "create")
        return group

    def update(self, session: Session, ctx: Context, obj_id: str, body: AddressGroupUpdate) -> AddressGroup:
        group = self.get_owned(session, ctx, obj_id)
        for key, value in body.given().items():
            if value is not None:
                setattr(group, key, value)
        self.touch(group)
        self.record(session, group, "update")
        return group

    def delete(self, session: Session, ctx: Context, obj_id: str) -> None:
        group = self.get_owned(session, ctx, obj_id, "delete_address_group")
        if session.scalars(select(SecurityGroupRule.id)
                           .where(SecurityGroupRule.remote_address_group_id == group.id)).first():
            raise Conflict(f"Address group {group.id} is in use on one or more security group rules.",
                           kind="AddressGroupInUse")
        self.record(session, group, "delete", None)
        session.delete(group)
        session.flush()

    def change_addresses(self, session: Session, ctx: Context, obj_id: str, info: Any, *, add: bool
                         ) -> dict[str, Any]:
        """``add_addresses`` / ``remove_addresses`` with ``{"addresses": [...]}``."""
        if not isinstance(info, dict) or "addresses" not in info:
            raise BadRequest("Unable to find 'addresses' in request body")
        asked = normalized(info["addresses"])
        group = self.get_owned(session, ctx, obj_id)
        current = list(group.addresses or [])
        if add:
            there = [a for a in asked if a in current]
            if there:
                raise BadRequest(f"Addresses {there} already exist in the address group {group.id}.",
                                 kind="AddressesAlreadyExist")
            group.addresses = current + asked
        else:
            missing = [a for a in asked if a not in current]
            if missing:
                raise NotFound(f"Addresses {missing} not found in the address group {group.id}.",
                               kind="AddressesNotFound")
            group.addresses = [a for a in current if a not in asked]
        self.touch(group)
        self.record(session, group, "update")
        return {"address_group": self.for_caller(ctx, self.rendered(session, group))}


ADDRESS_GROUPS = AddressGroups()

__all__ = ["ADDRESS_GROUPS", "AddressGroups", "normalized"]
